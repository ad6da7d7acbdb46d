"""The JSONPath subset that printer columns use, as `kubectl get` relies on it."""

from __future__ import annotations

from kai_py.emulator.apiserver.tables import jsonpath


def test_escaped_dots_and_slashes_in_a_field() -> None:
    queue = {"status": {"allocated": {"nvidia.com/gpu": "12.5", "cpu": 0}}}
    assert jsonpath(queue, r".status.allocated.nvidia\.com/gpu") == ["12.5"]
    assert jsonpath(queue, ".status.allocated.nvidia.com/gpu") == []  # unescaped dots are steps


def test_indexes_wildcards_filters_and_quoted_keys() -> None:
    obj = {
        "a": {"b": [1, 2]},
        "conditions": [{"type": "Ready", "status": "True"}, {"type": "X", "status": "False"}],
        "labels": {"kai.scheduler/queue": "q"},
    }
    assert jsonpath(obj, ".a.b[1]") == [2]
    assert jsonpath(obj, ".a.b[*]") == [1, 2]
    assert jsonpath(obj, '.conditions[?(@.type=="Ready")].status') == ["True"]
    assert jsonpath(obj, ".labels['kai.scheduler/queue']") == ["q"]
    assert jsonpath(obj, ".missing.field") == []
