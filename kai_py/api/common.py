"""Shared pieces of the CRD models: the base classes, object metadata, field
types with their CRD schema, and errors that name the object and the field.

Conventions of every model here:

- Python attributes are snake_case; the wire names are the camelCase aliases
  KAI uses. Both are accepted on input; output always uses the aliases.
- Unknown fields are ignored, as the API server prunes them from a
  structural CRD, so a newer KAI manifest still loads.
- ``to_manifest()`` leaves out fields that are None, so an unset optional
  field stays unset on a round trip.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Annotated, Any, ClassVar, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    ValidationError,
    WithJsonSchema,
    model_serializer,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

from kai_py.api.durations import DURATION_PATTERN, parse_duration
from kai_py.api.quantities import QUANTITY_PATTERN, format_quantity, parse_quantity

# A key the CRD generator strips: the field has a Python default but the CRD
# must not default it on the server (see docs/api.md for each such field).
NO_SERVER_DEFAULT: str = "x-kai-py-no-server-default"


class FieldValueError(ValueError):
    """A validation failure inside a model validator, for a field below it.

    Pydantic reports model-level errors at the model's own location; the
    ``path`` lets the message still point at the offending field.
    """

    def __init__(self, path: str, message: str) -> None:
        super().__init__(message)
        self.path = path


class ManifestError(ValueError):
    """A manifest that does not match its CRD. ``problems`` holds one
    ``(field path, message)`` pair per fault; ``str()`` names the object."""

    def __init__(self, kind: str, name: str, problems: list[tuple[str, str]]) -> None:
        self.kind = kind
        self.name = name
        self.problems = problems
        lines = [
            f'{kind} "{name}": {path}: {msg}' if path else f'{kind} "{name}": {msg}'
            for path, msg in problems
        ]
        super().__init__("\n".join(lines))


def _loc_to_path(loc: tuple[int | str, ...]) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif "." in part or "/" in part:
            # Label and annotation keys contain dots: quote them like kubectl does.
            path += f'["{part}"]'
        else:
            path += f".{part}" if path else part
    return path


def _problems(exc: ValidationError) -> list[tuple[str, str]]:
    problems = []
    for err in exc.errors():
        path = _loc_to_path(tuple(err["loc"]))
        cause = (err.get("ctx") or {}).get("error")
        if isinstance(cause, FieldValueError):
            path = f"{path}.{cause.path}" if path else cause.path
            message = str(cause)
        elif err["type"] == "value_error" and isinstance(cause, ValueError):
            message = str(cause)
        elif err["type"] == "missing":
            message = "required field is missing"
        else:
            message = err["msg"]
            value = err.get("input")
            if not isinstance(value, dict | list) and "got" not in message:
                message += f", got {value!r}"
        problems.append((path, message))
    return problems


def _number_out(value: float) -> int | float:
    # Go writes a float64 of 2.0 as 2; do the same so manifests round-trip cleanly.
    return int(value) if float(value).is_integer() else value


# A float that serialises like Go's float64 (integral values as integers).
Number = Annotated[float, PlainSerializer(_number_out, return_type=int | float)]


def _check_int32(value: int) -> int:
    if not -(2**31) <= value < 2**31:
        raise ValueError(f"must fit in 32 bits, got {value}")
    return value


# Go's int32; the range is checked here and stated as `format: int32` in the CRD.
_INT32_SCHEMA: dict[str, Any] = {"format": "int32"}
Int32 = Annotated[int, AfterValidator(_check_int32), Field(json_schema_extra=_INT32_SCHEMA)]
# The bound comes before the validator so that it stays a `minimum` in the schema
# (and inside the type, as pydantic ignores `Field(ge=...)` on an `X | None` field).
NonNegativeInt32 = Annotated[
    int, Field(ge=0), AfterValidator(_check_int32), Field(json_schema_extra=_INT32_SCHEMA)
]
PositiveInt32 = Annotated[
    int, Field(ge=1), AfterValidator(_check_int32), Field(json_schema_extra=_INT32_SCHEMA)
]


def _check_duration(value: Any) -> Any:
    parse_duration(value)  # raises ValueError naming the expected form, also for non-strings
    return value


# A Go duration string, kept as written so manifests round-trip unchanged.
Duration = Annotated[
    str,
    BeforeValidator(_check_duration),
    Field(json_schema_extra={"pattern": DURATION_PATTERN}),
]


def _check_non_negative_duration(value: str) -> str:
    if parse_duration(value) < 0:
        raise ValueError(f"must not be negative, got {value!r}")
    return value


NonNegativeDuration = Annotated[Duration, AfterValidator(_check_non_negative_duration)]


def _quantity_in(value: Any) -> int | str:
    if isinstance(value, bool):
        raise PydanticCustomError("quantity", "must be a quantity, got {value!r}", {"value": value})
    if isinstance(value, float):
        return format_quantity(value)
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        parse_quantity(value)  # raises ValueError with the expected form
        return value
    raise PydanticCustomError("quantity", "must be a quantity, got {value!r}", {"value": value})


INT_OR_STRING_QUANTITY: dict[str, Any] = {
    "anyOf": [{"type": "integer"}, {"type": "string"}],
    "pattern": QUANTITY_PATTERN,
    "x-kubernetes-int-or-string": True,
}

# A resource.Quantity value (int-or-string on the wire).
Quantity = Annotated[
    int | str, BeforeValidator(_quantity_in), WithJsonSchema(INT_OR_STRING_QUANTITY)
]

# Resource name -> quantity, as in KAI's status maps.
ResourceMap = dict[str, Quantity]


class KubeModel(BaseModel):
    """Base of every nested model: camelCase aliases, unknown fields dropped."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="ignore",
    )


class OwnerReference(KubeModel):
    """An entry of metadata.ownerReferences."""

    api_version: str
    kind: str
    name: str
    uid: str = ""
    controller: bool | None = None
    block_owner_deletion: bool | None = None


class ObjectMeta(KubeModel):
    """The subset of metadata that kai-py reads; every other key is kept as is."""

    model_config = ConfigDict(extra="allow")

    name: str = ""
    namespace: str | None = None
    uid: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    owner_references: list[OwnerReference] = Field(default_factory=list)
    creation_timestamp: datetime | None = None
    resource_version: str | None = None
    generation: int | None = None

    @model_serializer(mode="wrap")
    def _drop_empty(self, handler: Any) -> dict[str, Any]:
        # kubectl shows no `labels: {}`; neither should a manifest we write.
        data: dict[str, Any] = handler(self)
        return {k: v for k, v in data.items() if v not in ({}, [], None)}


class Condition(KubeModel):
    """A standard status condition (type, status, reason, message, times)."""

    type: str
    status: str
    reason: str | None = None
    message: str | None = None
    last_transition_time: datetime | None = None
    last_probe_time: datetime | None = None


class KubeObject(KubeModel):
    """A top-level custom resource: apiVersion, kind, metadata, spec, status."""

    KIND: ClassVar[str]
    API_VERSION: ClassVar[str]
    NAMESPACED: ClassVar[bool]

    api_version: str = ""
    kind: str = ""
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)

    @model_validator(mode="before")
    @classmethod
    def _fill_type_meta(cls, data: Any) -> Any:
        # Objects built in Python need not repeat apiVersion and kind.
        if isinstance(data, Mapping):
            data = dict(data)
            data.setdefault("apiVersion", cls.API_VERSION)
            data.setdefault("kind", cls.KIND)
        return data

    @model_validator(mode="after")
    def _check_type_meta(self) -> Self:
        if self.api_version != self.API_VERSION:
            raise FieldValueError(
                "apiVersion", f"must be {self.API_VERSION}, got {self.api_version!r}"
            )
        if self.kind != self.KIND:
            raise FieldValueError("kind", f"must be {self.KIND}, got {self.kind!r}")
        return self

    @property
    def ref(self) -> str:
        """How messages name this object: ``name`` or ``namespace/name``."""
        return object_ref(self.metadata.namespace, self.metadata.name)

    @classmethod
    def from_manifest(cls, manifest: Mapping[str, Any]) -> Self:
        """Parse a manifest (a dict as read from YAML or the API).

        Raises ManifestError naming the object and each faulty field.
        """
        if not isinstance(manifest, Mapping):
            raise ManifestError(cls.KIND, "?", [("", f"must be a mapping, got {manifest!r}")])
        meta = manifest.get("metadata")
        meta = meta if isinstance(meta, Mapping) else {}
        name = object_ref(meta.get("namespace"), str(meta.get("name") or "?"))
        if not meta.get("name"):
            raise ManifestError(cls.KIND, name, [("metadata.name", "required field is missing")])
        try:
            return cls.model_validate(manifest)
        except ValidationError as exc:
            raise ManifestError(cls.KIND, name, _problems(exc)) from None

    def to_manifest(self) -> dict[str, Any]:
        """The manifest as the API server would store it (camelCase, JSON types)."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


def object_ref(namespace: str | None, name: str) -> str:
    """``namespace/name`` for namespaced objects, ``name`` for cluster-scoped ones."""
    return f"{namespace}/{name}" if namespace else name
