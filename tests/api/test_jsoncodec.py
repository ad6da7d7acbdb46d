"""kai_py.api.jsoncodec: the fast codec takes what the standard library takes."""

from __future__ import annotations

import json
import math

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
