"""Decode the Kubernetes protobuf encoding for the few kinds kubectl sends that way.

kubectl's typed generators (``kubectl create namespace|configmap|secret|
serviceaccount|priorityclass``), ``kubectl drain`` (Eviction) and ``kubectl
auth can-i|whoami`` (SelfSubjectAccessReview, SelfSubjectReview) send
``application/vnd.kubernetes.protobuf`` bodies and no server-side fallback
to JSON exists, so the emulator decodes these kinds to their JSON form.
The field numbers are those of the kinds' ``generated.proto``. Other kinds
get 415 Unsupported Media Type. Responses are always JSON (clients accept it).
"""

from __future__ import annotations

import base64
from typing import Any

JSON = dict[str, Any]
MAGIC = b"k8s\x00"


class ProtobufError(ValueError):
    pass


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise ProtobufError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def _fields(buf: bytes) -> list[tuple[int, int, Any]]:
    """(field number, wire type, value) for each field of one message."""
    out: list[tuple[int, int, Any]] = []
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        value: Any
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 1:
            value, pos = buf[pos : pos + 8], pos + 8
        elif wire == 2:
            length, pos = _varint(buf, pos)
            value, pos = buf[pos : pos + length], pos + length
        elif wire == 5:
            value, pos = buf[pos : pos + 4], pos + 4
        else:
            raise ProtobufError(f"unsupported wire type {wire}")
        out.append((number, wire, value))
    return out


# A schema maps a field number to (JSON name, type[, sub-schema]); types:
# str, bytes (base64 in JSON), int, sint (two's complement int64), bool, msg,
# map (string->string), mapbytes (string->bytes), strs (repeated string),
# msgs (repeated message), time (meta.v1.Time).
Schema = dict[int, tuple[Any, ...]]

_OWNER_REF: Schema = {
    1: ("kind", "str"),
    3: ("name", "str"),
    4: ("uid", "str"),
    5: ("apiVersion", "str"),
    6: ("controller", "bool"),
    7: ("blockOwnerDeletion", "bool"),
}
_OBJECT_META: Schema = {
    1: ("name", "str"),
    2: ("generateName", "str"),
    3: ("namespace", "str"),
    5: ("uid", "str"),
    6: ("resourceVersion", "str"),
    7: ("generation", "int"),
    10: ("deletionGracePeriodSeconds", "int"),
    11: ("labels", "map"),
    12: ("annotations", "map"),
    13: ("ownerReferences", "msgs", _OWNER_REF),
    14: ("finalizers", "strs"),
}
_PRECONDITIONS: Schema = {1: ("uid", "str"), 2: ("resourceVersion", "str")}
_DELETE_OPTIONS: Schema = {
    1: ("gracePeriodSeconds", "sint"),
    2: ("preconditions", "msg", _PRECONDITIONS),
    3: ("orphanDependents", "bool"),
    4: ("propagationPolicy", "str"),
    5: ("dryRun", "strs"),
}
_NAME_REF: Schema = {1: ("name", "str")}
_OBJECT_REF: Schema = {
    1: ("kind", "str"),
    2: ("namespace", "str"),
    3: ("name", "str"),
    4: ("uid", "str"),
    5: ("apiVersion", "str"),
    6: ("resourceVersion", "str"),
    7: ("fieldPath", "str"),
}

_RESOURCE_ATTRIBUTES: Schema = {
    1: ("namespace", "str"),
    2: ("verb", "str"),
    3: ("group", "str"),
    4: ("version", "str"),
    5: ("resource", "str"),
    6: ("subresource", "str"),
    7: ("name", "str"),
}
_NON_RESOURCE_ATTRIBUTES: Schema = {1: ("path", "str"), 2: ("verb", "str")}
_SSAR_SPEC: Schema = {
    1: ("resourceAttributes", "msg", _RESOURCE_ATTRIBUTES),
    2: ("nonResourceAttributes", "msg", _NON_RESOURCE_ATTRIBUTES),
}

#: (apiVersion, kind) -> schema of the object.
KINDS: dict[tuple[str, str], Schema] = {
    ("v1", "Namespace"): {
        1: ("metadata", "msg", _OBJECT_META),
        2: ("spec", "msg", {1: ("finalizers", "strs")}),
        3: ("status", "msg", {1: ("phase", "str")}),
    },
    ("v1", "ConfigMap"): {
        1: ("metadata", "msg", _OBJECT_META),
        2: ("data", "map"),
        3: ("binaryData", "mapbytes"),
        4: ("immutable", "bool"),
    },
    ("v1", "Secret"): {
        1: ("metadata", "msg", _OBJECT_META),
        2: ("data", "mapbytes"),
        3: ("type", "str"),
        4: ("stringData", "map"),
        5: ("immutable", "bool"),
    },
    ("v1", "ServiceAccount"): {
        1: ("metadata", "msg", _OBJECT_META),
        2: ("secrets", "msgs", _OBJECT_REF),
        3: ("imagePullSecrets", "msgs", _NAME_REF),
        4: ("automountServiceAccountToken", "bool"),
    },
    ("scheduling.k8s.io/v1", "PriorityClass"): {
        1: ("metadata", "msg", _OBJECT_META),
        2: ("value", "sint"),
        3: ("globalDefault", "bool"),
        4: ("description", "str"),
        5: ("preemptionPolicy", "str"),
    },
    ("policy/v1", "Eviction"): {
        1: ("metadata", "msg", _OBJECT_META),
        2: ("deleteOptions", "msg", _DELETE_OPTIONS),
    },
    ("authorization.k8s.io/v1", "SelfSubjectAccessReview"): {
        1: ("metadata", "msg", _OBJECT_META),
        2: ("spec", "msg", _SSAR_SPEC),
    },
    ("authentication.k8s.io/v1", "SelfSubjectReview"): {1: ("metadata", "msg", _OBJECT_META)},
    ("meta.k8s.io/v1", "DeleteOptions"): _DELETE_OPTIONS,
    ("v1", "DeleteOptions"): _DELETE_OPTIONS,
}


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _decode(buf: bytes, schema: Schema) -> JSON:
    out: JSON = {}
    for number, _wire, value in _fields(buf):
        spec = schema.get(number)
        if spec is None:
            continue  # a field we do not model: dropped, like an unknown JSON field
        name, kind = spec[0], spec[1]
        if kind == "str":
            out[name] = value.decode()
        elif kind == "bytes":
            out[name] = base64.b64encode(value).decode()
        elif kind in ("int", "sint"):
            out[name] = _signed(value)
        elif kind == "bool":
            out[name] = bool(value)
        elif kind == "msg":
            out[name] = _decode(value, spec[2])
        elif kind == "msgs":
            out.setdefault(name, []).append(_decode(value, spec[2]))
        elif kind == "strs":
            out.setdefault(name, []).append(value.decode())
        elif kind in ("map", "mapbytes"):
            entry = {n: v for n, _w, v in _fields(value)}
            key = entry.get(1, b"").decode()
            raw = entry.get(2, b"")
            out.setdefault(name, {})[key] = (
                base64.b64encode(raw).decode() if kind == "mapbytes" else raw.decode()
            )
    return out


def decode(body: bytes) -> JSON:
    """A JSON object from a ``k8s\\x00``-prefixed protobuf body; ProtobufError if unknown."""
    if not body.startswith(MAGIC):
        raise ProtobufError("missing the k8s protobuf prefix")
    envelope = {n: v for n, _w, v in _fields(body[len(MAGIC) :])}
    type_meta = {n: v.decode() for n, _w, v in _fields(envelope.get(1, b""))}
    api_version, kind = type_meta.get(1, ""), type_meta.get(2, "")
    schema = KINDS.get((api_version, kind))
    if schema is None:
        raise ProtobufError(f"protobuf decoding of {api_version} {kind} is not supported")
    obj = _decode(envelope.get(2, b""), schema)
    obj["apiVersion"], obj["kind"] = api_version, kind
    return obj
