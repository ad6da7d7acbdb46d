"""Decode Kubernetes' protobuf encoding of built-in kinds into their JSON form.

Typed Go clients (client-go 0.35+ by default, kubectl's generators, ``kubectl
drain``, ``kubectl auth``) send ``application/vnd.kubernetes.protobuf``
bodies, and the real API server takes them for every built-in kind. The
field table ``protobuf_schema.json`` covers every GA kind of k8s.io/api; it
is generated from the Go types by ``scripts/k8sproto`` (``go run . schema``,
see there), so a field is read as the API server's own decoder reads it and
then written out as its JSON encoder would: JSON names, inlined embedded
structs, Time/MicroTime/Duration/Quantity/IntOrString in their string forms,
bytes in base64, raw extensions as the JSON (or nested object) they carry, and
a zero value dropped only where the Go JSON form omits it (a non-pointer
``omitempty`` field: Go writes those to protobuf even when empty, while a
pointer field that is present with a zero value, like ``replicas: 0``, stays;
a zero Time is null, or left out where it is ``omitzero``).
Responses are always JSON (clients accept it).
"""

from __future__ import annotations

import base64
import json
import struct
from datetime import UTC, datetime, timedelta
from functools import cache
from importlib import resources
from typing import Any, NamedTuple

JSON = dict[str, Any]
MAGIC = b"k8s\x00"

#: Unix seconds of Go's zero time.Time, which is how an unset non-pointer Time is written.
_GO_ZERO_TIME = -62135596800
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class ProtobufError(ValueError):
    pass


class _Field(NamedTuple):
    name: str
    type: str
    repeated: bool
    is_map: bool
    pointer: bool
    omitempty: bool
    omitzero: bool
    inline: bool
    message: str


class _Schema(NamedTuple):
    version: str
    #: "apiVersion Kind" -> message name
    kinds: dict[str, str]
    messages: dict[str, dict[int, _Field]]


@cache
def _schema() -> _Schema:
    raw = json.loads(
        resources.files(__package__).joinpath("protobuf_schema.json").read_text(encoding="utf-8")
    )
    messages = {
        name: {
            int(number): _Field(
                name=f[0],
                type=f[1],
                repeated="r" in f[2],
                is_map="m" in f[2],
                pointer="p" in f[2],
                omitempty="o" in f[2],
                omitzero="z" in f[2],
                inline="i" in f[2],
                message=f[3] if len(f) > 3 else "",
            )
            for number, f in fields.items()
        }
        for name, fields in raw["messages"].items()
    }
    return _Schema(raw["version"], raw["kinds"], messages)


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
    end = len(buf)
    while pos < end:
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
        if pos > end:
            raise ProtobufError("truncated field")
        out.append((number, wire, value))
    return out


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _go_duration(nanos: int) -> str:
    """Go's ``time.Duration.String()``: ``1h2m3.5s``, ``1.5ms``, ``0s``."""
    if nanos == 0:
        return "0s"
    sign, n = ("-", -nanos) if nanos < 0 else ("", nanos)
    if n < 1_000_000_000:
        for unit, size in (("ms", 1_000_000), ("µs", 1_000), ("ns", 1)):
            if n >= size:
                return sign + _trim(n, size) + unit
    hours, rest = divmod(n, 3_600_000_000_000)
    minutes, rest = divmod(rest, 60_000_000_000)
    text = _trim(rest, 1_000_000_000) + "s"
    if hours:
        return f"{sign}{hours}h{minutes}m{text}"
    if minutes:
        return f"{sign}{minutes}m{text}"
    return sign + text


def _trim(n: int, size: int) -> str:
    whole, frac = divmod(n, size)
    if not frac:
        return str(whole)
    digits = len(str(size)) - 1
    return f"{whole}.{str(frac).rjust(digits, '0').rstrip('0')}"


def _time(buf: bytes, micro: bool) -> str | None:
    if not buf:
        return None  # how Go writes its zero time, which its JSON writes as null
    parts = {n: v for n, _w, v in _fields(buf)}
    # A Time keeps whole seconds only (the API server drops nanos so protobuf and
    # JSON writers store the same value); a MicroTime keeps microseconds.
    seconds, nanos = _signed(parts.get(1, 0)), parts.get(2, 0) if micro else 0
    if seconds == _GO_ZERO_TIME and not nanos:
        return None
    moment = _EPOCH + timedelta(seconds=seconds, microseconds=nanos // 1000)
    if micro:
        return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _raw_json(raw: bytes) -> Any:
    if raw.startswith(MAGIC):
        return decode(raw)
    try:
        return json.loads(raw.decode())
    except ValueError as exc:
        raise ProtobufError(f"an embedded object is neither protobuf nor JSON: {exc}") from None


_ZERO = {"string": "", "bytes": "", "int": 0, "uint": 0, "bool": False, "double": 0.0, "float": 0.0}


def _value(field: _Field, wire: int, value: Any) -> Any:
    kind = field.type
    if kind == "string":
        return value.decode()
    if kind == "int":
        return _signed(value)
    if kind == "msg":
        return _decode(value, field.message)
    if kind == "bool":
        return bool(value)
    if kind == "quantity":
        return {n: v for n, _w, v in _fields(value)}.get(1, b"0").decode()
    if kind == "time" or kind == "microtime":
        return _time(value, micro=kind == "microtime")
    if kind == "bytes":
        return base64.b64encode(value).decode()
    if kind == "uint":
        return value
    if kind == "intorstring":
        parts = {n: v for n, _w, v in _fields(value)}
        if parts.get(1, 0) == 1:
            return parts.get(3, b"").decode()
        return _signed(parts.get(2, 0))
    if kind == "raw" or kind == "fieldsv1":
        raw = {n: v for n, _w, v in _fields(value)}.get(1)
        return None if raw is None else _raw_json(raw)
    if kind == "strings":
        return [v.decode() for n, _w, v in _fields(value) if n == 1]
    if kind == "duration":
        return _go_duration(_signed({n: v for n, _w, v in _fields(value)}.get(1, 0)))
    if kind == "double":
        return struct.unpack("<d", value)[0]
    if kind == "float":
        return struct.unpack("<f", value)[0]
    if kind == "unknown":
        return _unknown(value)
    raise ProtobufError(f"field {field.name}: unknown type {kind}")


def _decode(buf: bytes, message: str) -> JSON:
    fields = _schema().messages[message]
    out: JSON = {}
    for number, wire, value in _fields(buf):
        field = fields.get(number)
        if field is None:
            continue  # a field this API version does not have: dropped, as Go's decoder does
        if field.is_map:
            entry = {n: (w, v) for n, w, v in _fields(value)}
            key = entry[1][1].decode() if 1 in entry else ""
            if 2 in entry:
                item = _value(field, *entry[2])
            elif field.type in _ZERO:
                item = _ZERO[field.type]  # an entry without a value holds the zero value
            else:
                item = _value(field, 2, b"")
            out.setdefault(field.name, {})[key] = item
        elif field.repeated:
            items = out.setdefault(field.name, [])
            if wire == 2 and field.type in ("int", "uint", "bool"):
                pos = 0  # a packed run of varints
                while pos < len(value):
                    item, pos = _varint(value, pos)
                    items.append(bool(item) if field.type == "bool" else _value(field, 0, item))
            else:
                items.append(_value(field, wire, value))
        elif field.inline:
            out.update(_value(field, wire, value))
        else:
            item = _value(field, wire, value)
            # A zero Time (None) stays, as Go's JSON writes it (null), unless omitzero.
            if (item is None and field.omitzero) or (
                field.omitempty
                and not field.pointer
                and field.type in _ZERO
                and item == _ZERO[field.type]
            ):
                out.pop(field.name, None)
                continue
            out[field.name] = item
    return out


def _unknown(body: bytes) -> JSON:
    envelope = {n: v for n, _w, v in _fields(body)}
    type_meta = {n: v.decode() for n, _w, v in _fields(envelope.get(1, b""))}
    api_version, kind = type_meta.get(1, ""), type_meta.get(2, "")
    encoding = envelope.get(3, b"").decode()
    if encoding:
        raise ProtobufError(
            f"content encoding {encoding!r} of {api_version} {kind} is not supported"
        )
    message = _schema().kinds.get(f"{api_version} {kind}")
    if message is None:
        raise ProtobufError(f"protobuf decoding of {api_version} {kind} is not supported")
    obj = _decode(envelope.get(2, b""), message)
    return {"apiVersion": api_version, "kind": kind, **obj}


def decode(body: bytes) -> JSON:
    """A JSON object from a ``k8s\\x00``-prefixed protobuf body; ProtobufError if unknown."""
    if not body.startswith(MAGIC):
        raise ProtobufError("missing the k8s protobuf prefix")
    try:
        return _unknown(body[len(MAGIC) :])
    except ProtobufError:
        raise
    except (TypeError, ValueError, IndexError, KeyError, struct.error) as exc:
        # A field whose wire type does not match its schema, bad UTF-8, ...: the
        # client's fault (400/415), never a server error.
        raise ProtobufError(f"malformed protobuf body: {exc!r}") from None
