"""The emulator's matchConditions: the CEL subset kai-py's chart and tests use."""

from __future__ import annotations

from typing import Any

import pytest

from kai_py.emulator.apiserver.matchconditions import MatchConditionError, evaluate

OURS = 'has(object.spec.schedulerName) && object.spec.schedulerName == "kai-scheduler"'


def _pod(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": "team-a"}, "spec": spec}


@pytest.mark.parametrize(
    ("expression", "obj", "expected"),
    [
        (OURS, _pod(schedulerName="kai-scheduler"), True),
        (OURS, _pod(schedulerName="default-scheduler"), False),
        # false && error is false (CEL): has() guards the field that is not there
        (OURS, _pod(), False),
        ('object.metadata.namespace in ["team-a", "b"]', _pod(), True),
        ("!(object.metadata.name == 'p') || true", _pod(), True),
        ('object.spec.schedulerName != "x" || object.nope == 1', _pod(schedulerName="y"), True),
        ("oldObject == null", _pod(), True),
    ],
)
def test_conditions(expression: str, obj: dict[str, Any], expected: bool) -> None:
    assert evaluate(expression, {"object": obj, "oldObject": None, "request": {}}) is expected


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ('object.spec.schedulerName == "x"', "no such key"),
        ("size(object.spec) > 1", "cannot read ' > 1'"),
        ("authorizer.allowed", "undeclared reference to 'authorizer'"),
        ('object.metadata.name == "p" && 1', "needs booleans"),
        ('"just a string"', "not a boolean"),
    ],
)
def test_errors_are_errors_not_false(expression: str, message: str) -> None:
    with pytest.raises(MatchConditionError) as err:
        evaluate(expression, {"object": _pod(), "oldObject": None, "request": {}})
    assert message in str(err.value)
