"""Structural OpenAPI v3 schemas of CRDs: defaulting, pruning and validation.

Messages follow the apiextensions-apiserver wording, so a 422 reads like a
real one (``spec.priority in body must be of type integer: "string"``).
Not covered: CEL rules (``x-kubernetes-validations``), ``format`` checks,
list-type/map-type uniqueness.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from kai_py.api.jsoncodec import copy as copy_json
from kai_py.emulator.storage.errors import FieldError

JSON = dict[str, Any]
Schema = Mapping[str, Any]

_ROOT_KEEP = ("apiVersion", "kind", "metadata")


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def default_and_prune(schema: Schema, obj: JSON) -> list[str]:
    """Drop unknown fields and fill defaults in place; returns the pruned paths."""
    pruned: list[str] = []
    _prune(schema, obj, "", pruned, root=True)
    _default(schema, obj, root=True)
    return pruned


def _prune(
    schema: Schema,
    value: Any,
    path: str,
    pruned: list[str],
    root: bool = False,
) -> None:
    if isinstance(value, dict):
        if schema.get("x-kubernetes-preserve-unknown-fields") and not schema.get("properties"):
            return
        props: Mapping[str, Any] = schema.get("properties") or {}
        additional = schema.get("additionalProperties")
        keep_unknown = bool(schema.get("x-kubernetes-preserve-unknown-fields"))
        embedded = bool(schema.get("x-kubernetes-embedded-resource"))
        for key in list(value):
            if (root or embedded) and key in _ROOT_KEEP:
                if key == "metadata" and isinstance(value[key], dict) and embedded:
                    pass
                continue
            sub = props.get(key)
            if sub is None and isinstance(additional, Mapping):
                sub = additional
            if sub is None:
                if keep_unknown or additional is True:
                    continue
                pruned.append(_join(path, key))
                del value[key]
                continue
            _prune(sub, value[key], _join(path, key), pruned)
    elif isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, Mapping):
            for i, item in enumerate(value):
                _prune(items, item, f"{path}[{i}]", pruned)


def _default(schema: Schema, value: Any, root: bool = False) -> None:
    if isinstance(value, dict):
        props: Mapping[str, Any] = schema.get("properties") or {}
        for key, sub in props.items():
            if root and key in _ROOT_KEEP:
                continue
            if (
                key not in value or (value[key] is None and not sub.get("nullable"))
            ) and "default" in sub:
                value[key] = copy_json(sub["default"])
            if key in value:
                _default(sub, value[key])
        additional = schema.get("additionalProperties")
        if isinstance(additional, Mapping):
            for key in value:
                if key not in props:
                    _default(additional, value[key])
    elif isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, Mapping):
            for item in value:
                _default(items, item)


def validate(schema: Schema, obj: JSON) -> list[FieldError]:
    errors: list[FieldError] = []
    _validate(schema, obj, "", errors, root=True)
    return errors


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _type_ok(want: str, value: Any) -> bool:
    if want == "object":
        return isinstance(value, dict)
    if want == "array":
        return isinstance(value, list)
    if want == "string":
        return isinstance(value, str)
    if want == "boolean":
        return isinstance(value, bool)
    if want == "integer":
        return (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, float) and value.is_integer()
        )
    if want == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    return True


@lru_cache(maxsize=512)
def _regex(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _validate(
    schema: Schema, value: Any, path: str, errors: list[FieldError], root: bool = False
) -> None:
    if value is None:
        if schema.get("nullable"):
            return
        want = schema.get("type")
        if want:
            errors.append(
                FieldError(
                    path,
                    "FieldValueTypeInvalid",
                    f'{path} in body must be of type {want}: "null"',
                    "null",
                )
            )
        return
    if schema.get("x-kubernetes-int-or-string"):
        if not (isinstance(value, str) or _type_ok("integer", value)):
            errors.append(
                FieldError(
                    path,
                    "FieldValueTypeInvalid",
                    f'{path} in body must be of type integer,string: "{_type_name(value)}"',
                    _type_name(value),
                )
            )
            return
    else:
        want = schema.get("type")
        if want and not _type_ok(want, value):
            actual = _type_name(value)
            errors.append(
                FieldError(
                    path,
                    "FieldValueTypeInvalid",
                    f'{path} in body must be of type {want}: "{actual}"',
                    actual,
                )
            )
            _check_not(schema, value, path, errors)
            return
    if "enum" in schema and value not in schema["enum"]:
        supported = ", ".join(_quote(v) for v in schema["enum"])
        errors.append(
            FieldError(path, "FieldValueNotSupported", f"supported values: {supported}", value)
        )
    if isinstance(value, int | float) and not isinstance(value, bool):
        _numeric(schema, value, path, errors)
    if isinstance(value, str):
        _string(schema, value, path, errors)
    if isinstance(value, list):
        _array(schema, value, path, errors)
    if isinstance(value, dict):
        _object(schema, value, path, errors, root)
    for sub in schema.get("allOf") or []:
        _validate(sub, value, path, errors)
    for combinator in ("anyOf", "oneOf"):
        options = schema.get(combinator)
        if options:
            passing = sum(1 for sub in options if not _errors_of(sub, value, path))
            if passing == 0 or (combinator == "oneOf" and passing > 1):
                word = "at least one" if combinator == "anyOf" else "one and only one"
                errors.append(
                    FieldError(
                        path,
                        "FieldValueInvalid",
                        f'"{path}" must validate {word} schema ({combinator})',
                        value,
                        has_value=False,
                    )
                )
    _check_not(schema, value, path, errors)


def _check_not(schema: Schema, value: Any, path: str, errors: list[FieldError]) -> None:
    """``not``: worded as kube-apiserver does, with no field path (``<nil>``) and value ``""``.

    The real server checks it even when the value has the wrong type (so a
    string under a numeric ``not`` fails it too); so does this.
    """
    not_schema = schema.get("not")
    if not_schema and not _errors_of(not_schema, value, path):
        errors.append(
            FieldError(
                "<nil>",
                "FieldValueInvalid",
                f'"{path}" must not validate the schema (not)',
                "",
            )
        )


def _errors_of(schema: Schema, value: Any, path: str) -> list[FieldError]:
    errs: list[FieldError] = []
    _validate(schema, value, path, errs)
    return errs


def _quote(v: Any) -> str:
    import json

    return json.dumps(v)


def _numeric(schema: Schema, value: float, path: str, errors: list[FieldError]) -> None:
    if "minimum" in schema:
        lo = schema["minimum"]
        if schema.get("exclusiveMinimum") and value <= lo:
            errors.append(
                FieldError(
                    path,
                    "FieldValueInvalid",
                    f"{path} in body should be greater than {_num(lo)}",
                    value,
                )
            )
        elif value < lo:
            errors.append(
                FieldError(
                    path,
                    "FieldValueInvalid",
                    f"{path} in body should be greater than or equal to {_num(lo)}",
                    value,
                )
            )
    if "maximum" in schema:
        hi = schema["maximum"]
        if schema.get("exclusiveMaximum") and value >= hi:
            errors.append(
                FieldError(
                    path,
                    "FieldValueInvalid",
                    f"{path} in body should be less than {_num(hi)}",
                    value,
                )
            )
        elif value > hi:
            errors.append(
                FieldError(
                    path,
                    "FieldValueInvalid",
                    f"{path} in body should be less than or equal to {_num(hi)}",
                    value,
                )
            )
    if schema.get("multipleOf"):
        m = schema["multipleOf"]
        if (value / m) != int(value / m):
            errors.append(
                FieldError(
                    path,
                    "FieldValueInvalid",
                    f"{path} in body should be a multiple of {_num(m)}",
                    value,
                )
            )


def _string(schema: Schema, value: str, path: str, errors: list[FieldError]) -> None:
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        errors.append(
            FieldError(
                path,
                "FieldValueTooLong",
                f"may not be more than {schema['maxLength']} bytes",
                value,
            )
        )
    if "minLength" in schema and len(value) < schema["minLength"]:
        errors.append(
            FieldError(
                path,
                "FieldValueInvalid",
                f"{path} in body should be at least {schema['minLength']} chars long",
                value,
            )
        )
    if "pattern" in schema and not _regex(schema["pattern"]).search(value):
        errors.append(
            FieldError(
                path,
                "FieldValueInvalid",
                f"{path} in body should match '{schema['pattern']}'",
                value,
            )
        )


def _array(schema: Schema, value: list[Any], path: str, errors: list[FieldError]) -> None:
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        errors.append(
            FieldError(
                path,
                "FieldValueTooMany",
                f"must have at most {schema['maxItems']} items",
                len(value),
            )
        )
    if "minItems" in schema and len(value) < schema["minItems"]:
        errors.append(
            FieldError(
                path,
                "FieldValueInvalid",
                f"{path} in body should have at least {schema['minItems']} items",
                len(value),  # a real kube-apiserver names the count as the value
            )
        )
    if schema.get("uniqueItems"):
        seen: list[Any] = []
        for i, item in enumerate(value):
            if item in seen:
                errors.append(FieldError(f"{path}[{i}]", "FieldValueDuplicate", "", item))
            seen.append(item)
    items = schema.get("items")
    if isinstance(items, Mapping):
        for i, item in enumerate(value):
            _validate(items, item, f"{path}[{i}]", errors)


def _object(schema: Schema, value: JSON, path: str, errors: list[FieldError], root: bool) -> None:
    props: Mapping[str, Any] = schema.get("properties") or {}
    for req in schema.get("required") or []:
        if req not in value:
            errors.append(FieldError(_join(path, req), "FieldValueRequired", ""))
    if "maxProperties" in schema and len(value) > schema["maxProperties"]:
        errors.append(
            FieldError(
                path,
                "FieldValueTooMany",
                f"must have at most {schema['maxProperties']} items",
                len(value),
            )
        )
    if "minProperties" in schema and len(value) < schema["minProperties"]:
        errors.append(
            FieldError(
                path,
                "FieldValueInvalid",
                f"{path} in body should have at least {schema['minProperties']} properties",
                value,
                has_value=False,
            )
        )
    additional = schema.get("additionalProperties")
    for key, item in value.items():
        if root and key in _ROOT_KEEP:
            continue
        sub = props.get(key)
        if sub is None and isinstance(additional, Mapping):
            sub = additional
        if sub is not None:
            _validate(sub, item, _join(path, key), errors)
