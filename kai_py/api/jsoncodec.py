"""JSON for the hot paths: watch events and API answers, in the operator and the emulator.

``orjson`` encodes several times and decodes about twice as fast as the standard
library (bench/e2e.py: serializing answers and events was 7 % of the emulated API
server's CPU, parsing them 9 % of the operator's, encoding its request bodies 3 %).
What it refuses and the standard library takes (integers beyond 64 bits, keys that
are not strings, NaN when decoding) falls back to ``json``, so both accept the same
inputs.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import orjson


def dumps(value: Any, default: Callable[[Any], Any] | None = None) -> bytes:
    """Compact JSON as UTF-8 bytes; ``default`` turns what JSON has no type for into
    what it has (as ``json.dumps``'s). NaN and infinities, which no API server
    takes, come out as null (the standard library writes ``NaN``, which is not JSON)."""
    try:
        return orjson.dumps(value, default=default)
    except TypeError:
        return json.dumps(value, separators=(",", ":"), default=default).encode()


def key(value: Any) -> bytes:
    """The JSON of ``value`` as a key to keep in a memo. orjson's answer holds a 4 KiB
    buffer whatever its length (measured: 4,098 bytes kept for 308 of JSON), which a
    memo of 10,000 keys turns into 40 MB; the copy is its length. Raises TypeError for
    what orjson refuses (the caller keys such values otherwise)."""
    return bytes(memoryview(orjson.dumps(value)))


def loads(raw: bytes | str) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(raw)


#: Leaves the walk in ``copy`` keeps as they are, without a call per leaf.
_SCALARS = frozenset({str, int, float, bool, type(None)})


def copy(value: Any) -> Any:
    """A deep copy of JSON-shaped data, in plain dicts and lists. Dicts and lists go
    through orjson and back, about twice as fast as a walk in Python at a pod's size
    (copies were 17 % of the emulated API server's CPU in bench/e2e.py). What orjson
    refuses (integers beyond 64 bits, keys that are not strings, other mappings such
    as Kopf's read-only bodies) is walked instead, so every input is copied. The one
    difference: NaN and the infinities come back as null, and no API server stores
    them."""
    if type(value) is dict or type(value) is list:
        try:
            return orjson.loads(orjson.dumps(value))
        except TypeError:  # orjson.JSONEncodeError
            pass
    return _walk(value)


def _walk(value: Any) -> Any:
    kind = type(value)
    if kind is dict:
        return {k: v if type(v) in _SCALARS else _walk(v) for k, v in value.items()}
    if kind is list:
        return [v if type(v) in _SCALARS else _walk(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _walk(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_walk(v) for v in value]
    return value
