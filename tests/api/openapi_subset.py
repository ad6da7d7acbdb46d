"""Test helpers: the structural-schema rules of apiextensions.k8s.io/v1, and a
validator for the part of OpenAPI v3 that kai-py's CRDs use.

Written from the Kubernetes documentation of structural schemas, so the CRD
tests check the generated files against the rules, not against the generator.
"""

from __future__ import annotations

import re
from typing import Any

# Inside anyOf / allOf / oneOf / not, a structural schema may only repeat value
# validations; these keys would make the schema non-structural there.
_FORBIDDEN_IN_JUNCTORS = {"type", "description", "default", "additionalProperties", "nullable"}
_JUNCTORS = ("anyOf", "allOf", "oneOf", "not")


def structural_problems(node: Any, path: str = "") -> list[str]:
    """Every rule of a structural schema that ``node`` breaks, with its path."""
    found: list[str] = []
    if not isinstance(node, dict):
        return [f"{path}: not a mapping"]
    if "$ref" in node:
        found.append(f"{path}: $ref is not allowed")
    if "title" in node:
        found.append(f"{path}: title is not allowed")
    int_or_string = node.get("x-kubernetes-int-or-string") is True
    preserve = node.get("x-kubernetes-preserve-unknown-fields") is True
    if "type" not in node and not int_or_string and not preserve:
        found.append(f"{path}: no type")
    if int_or_string:
        if "type" in node:
            found.append(f"{path}: int-or-string must not have a type")
        allowed = [{"type": "integer"}, {"type": "string"}]
        if "anyOf" in node and node["anyOf"] != allowed:
            found.append(f"{path}: int-or-string anyOf must be integer, string")
    if "properties" in node and "additionalProperties" in node:
        found.append(f"{path}: properties and additionalProperties together")
    if node.get("type") == "array" and "items" not in node:
        found.append(f"{path}: array without items")
    for name, sub in (node.get("properties") or {}).items():
        found += structural_problems(sub, f"{path}.{name}")
    if isinstance(node.get("additionalProperties"), dict):
        found += structural_problems(node["additionalProperties"], f"{path}.*")
    if "items" in node:
        found += structural_problems(node["items"], f"{path}[]")
    for junctor in _JUNCTORS:
        if junctor in node and not int_or_string:
            subs = node[junctor] if isinstance(node[junctor], list) else [node[junctor]]
            for sub in subs:
                bad = _FORBIDDEN_IN_JUNCTORS & set(sub)
                if bad:
                    found.append(f"{path}.{junctor}: {sorted(bad)} not allowed inside")
    if "default" in node:
        errors = validate(node["default"], {k: v for k, v in node.items() if k != "default"})
        if errors:
            found.append(f"{path}: default does not validate: {errors}")
    return found


def _type_ok(value: Any, type_: str) -> bool:
    if type_ == "string":
        return isinstance(value, str)
    if type_ == "boolean":
        return isinstance(value, bool)
    if type_ == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if type_ == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if type_ == "object":
        return isinstance(value, dict)
    if type_ == "array":
        return isinstance(value, list)
    raise AssertionError(f"unknown type {type_}")


def validate(value: Any, schema: dict[str, Any], path: str = "") -> list[str]:
    """Validation errors of ``value`` against ``schema`` (the API server's rules
    for the keywords kai-py uses; unknown fields are ignored, as pruning does)."""
    errors: list[str] = []
    if schema.get("x-kubernetes-int-or-string"):
        if not (isinstance(value, str) or _type_ok(value, "integer")):
            return [f"{path}: must be an integer or a string, got {value!r}"]
    elif "type" in schema and not _type_ok(value, schema["type"]):
        return [f"{path}: must be of type {schema['type']}, got {value!r}"]
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{path}: must be one of {schema['enum']}, got {value!r}")
    if isinstance(value, int | float) and not isinstance(value, bool):
        if "minimum" in schema:
            low = schema["minimum"]
            if value < low or (schema.get("exclusiveMinimum") and value == low):
                errors.append(f"{path}: below minimum {low}")
        if "maximum" in schema:
            high = schema["maximum"]
            if value > high or (schema.get("exclusiveMaximum") and value == high):
                errors.append(f"{path}: above maximum {high}")
    if isinstance(value, str):
        if "pattern" in schema and re.search(schema["pattern"], value) is None:
            errors.append(f"{path}: does not match {schema['pattern']}")
        if len(value) < schema.get("minLength", 0):
            errors.append(f"{path}: shorter than {schema['minLength']}")
    if isinstance(value, dict):
        for name in schema.get("required", []):
            if name not in value:
                errors.append(f"{path}.{name}: required")
        props = schema.get("properties", {})
        for name, sub in value.items():
            if name in props:
                errors += validate(sub, props[name], f"{path}.{name}")
            elif isinstance(schema.get("additionalProperties"), dict):
                errors += validate(sub, schema["additionalProperties"], f"{path}.{name}")
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            errors += validate(item, schema["items"], f"{path}[{i}]")
    if (
        "anyOf" in schema
        and not schema.get("x-kubernetes-int-or-string")
        and all(validate(value, opt, path) for opt in schema["anyOf"])
    ):
        errors.append(f"{path}: matches none of anyOf")
    if "not" in schema and not validate(value, schema["not"], path):
        errors.append(f"{path}: matches the forbidden `not` schema")
    return errors
