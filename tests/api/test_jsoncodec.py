"""kai_py.api.jsoncodec: the fast codec takes what the standard library takes."""

from __future__ import annotations

import json
import math
from collections import OrderedDict
from types import MappingProxyType
from typing import Any

from kai_py.api import jsoncodec


def test_round_trip_is_the_standard_librarys() -> None:
    obj = {
        "metadata": {"name": "p", "labels": {"ü": "ünïcode"}, "resourceVersion": "12"},
        "spec": {"containers": [{"name": "m", "resources": {"limits": {"gpu": "1"}}}]},
        "status": {"phase": "Running", "ready": True, "restarts": 0, "ratio": 0.5, "none": None},
    }
    raw = jsoncodec.dumps(obj)
    assert raw == json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()
    assert json.loads(raw) == obj and jsoncodec.loads(raw) == obj
    assert jsoncodec.loads(raw.decode()) == obj


def test_what_orjson_refuses_falls_back_to_json() -> None:
    assert jsoncodec.dumps({1: "x"}) == b'{"1":"x"}'  # a key that is not a string
    assert json.loads(jsoncodec.dumps({"big": 2**70})) == {"big": 2**70}
    assert math.isnan(jsoncodec.loads(b'{"a": NaN}')["a"])
    try:
        jsoncodec.loads(b'{"a": ')
    except ValueError:
        pass
    else:
        raise AssertionError("invalid JSON must raise ValueError")


def test_default_turns_other_types_into_json_on_both_paths() -> None:
    class Model:
        def to_dict(self) -> dict[str, object]:
            return {"kind": "Binding"}

    def plain(value: object) -> object:
        if isinstance(value, Model):
            return value.to_dict()
        raise TypeError(f"cannot send {type(value).__name__}")

    assert jsoncodec.dumps({"body": Model()}, default=plain) == b'{"body":{"kind":"Binding"}}'
    # A key orjson refuses sends the value through the standard library's default too.
    assert jsoncodec.dumps({1: Model()}, default=plain) == b'{"1":{"kind":"Binding"}}'
    try:
        jsoncodec.dumps({"x": object()}, default=plain)
    except TypeError as exc:
        assert "cannot send object" in str(exc)
    else:
        raise AssertionError("what default refuses must raise TypeError")


def test_nan_is_sent_as_null_not_as_the_invalid_token() -> None:
    assert jsoncodec.dumps({"x": float("nan"), "y": float("inf")}) == b'{"x":null,"y":null}'


# ---- copy: the deep copy of the emulator's store and the operator's cache


def _pod() -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "labels": {"a": "b"}, "generation": 3},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"cpu": 0.5}}}]},
        "status": {"conditions": [{"type": "Ready", "status": "True", "x": None}]},
    }


def _shares_nothing(a: Any, b: Any) -> bool:
    """No dict or list of ``a`` is also in ``b``."""
    if isinstance(a, dict):
        return a is not b and all(_shares_nothing(v, b[k]) for k, v in a.items())
    if isinstance(a, list):
        return a is not b and all(_shares_nothing(x, y) for x, y in zip(a, b, strict=True))
    return True


def test_a_copy_is_equal_and_shares_no_container() -> None:
    pod = _pod()
    copy = jsoncodec.copy(pod)
    assert copy == pod and _shares_nothing(pod, copy)
    copy["spec"]["containers"][0]["name"] = "changed"
    assert pod["spec"]["containers"][0]["name"] == "c"


def test_what_orjson_refuses_is_still_copied() -> None:
    # integers beyond 64 bits and keys that are not strings take the walk
    for value in ({"n": 2**70, "l": [{"k": 1}]}, {1: {"a": [1]}}, [{"big": -(2**65)}]):
        copy = jsoncodec.copy(value)
        assert copy == value and _shares_nothing(value, copy)


def test_other_mappings_and_tuples_come_back_as_plain_dicts_and_lists() -> None:
    view = MappingProxyType({"a": OrderedDict(b=(1, {"c": 2}))})  # read-only, as Kopf's
    copy = jsoncodec.copy(view)
    assert copy == {"a": {"b": [1, {"c": 2}]}}
    assert type(copy) is dict and type(copy["a"]) is dict and type(copy["a"]["b"]) is list


def test_key_order_and_scalars_are_kept() -> None:
    value = {"z": 1, "a": 2.5, "m": True, "n": None, "s": "é"}
    copy = jsoncodec.copy(value)
    assert list(copy) == ["z", "a", "m", "n", "s"] and copy == value
    assert type(copy["a"]) is float and type(copy["m"]) is bool
    assert jsoncodec.copy("text") == "text" and jsoncodec.copy(None) is None


def test_a_key_is_the_json_and_keeps_no_more_than_its_length() -> None:
    import tracemalloc

    value = [{"name": "p", "labels": {"a": "b" * 300}}, {"minMember": 2}]
    key = jsoncodec.key(value)
    assert key == jsoncodec.dumps(value) and json.loads(key) == value
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = [jsoncodec.key(value) for _ in range(200)]
        per_key = (tracemalloc.get_traced_memory()[0] - before) / len(kept)
    finally:
        tracemalloc.stop()
    assert per_key < len(key) + 128, per_key  # orjson's own answer keeps 4 KiB
    try:
        jsoncodec.key({1: "not a string key"})
    except TypeError:
        pass
    else:
        raise AssertionError("a key of what orjson refuses must raise TypeError")
