"""Pods made from one template share the parse of their spec, never its objects, and
a bad spec is reported for every pod that has it."""

from __future__ import annotations

from typing import Any

import pytest

from kai_py.api.objects import WorkloadError
from kai_py.scheduler.model import TaskStatus
from kai_py.state.convert import task_from_pod


def _pod(name: str, node: str | None = None, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
        "nodeSelector": {"pool": "a"},
        "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
        **spec,
    }
    if node:
        body["nodeName"] = node
    return {"metadata": {"name": name, "namespace": "ns", "uid": name}, "spec": body}


def _task(pod: dict[str, Any]) -> Any:
    status = TaskStatus.RUNNING if pod["spec"].get("nodeName") else TaskStatus.PENDING
    return task_from_pod(pod, "job", status, 0.0)


def test_pods_of_one_template_get_equal_parts_of_their_own() -> None:
    a, b = _task(_pod("a", "node-1")), _task(_pod("b", "node-2"))
    assert (a.request.gpu, b.request.gpu) == (1.0, 1.0)
    assert a.node_selector == b.node_selector == {"pool": "a"}
    assert a.tolerations == b.tolerations and len(a.tolerations) == 1
    assert (a.node_name, b.node_name) == ("node-1", "node-2")
    a.request.add(a.request)  # a Task's request and selector are its own
    a.node_selector["pool"] = "changed"
    c = _task(_pod("c"))
    assert (b.request.gpu, c.request.gpu) == (1.0, 1.0)
    assert b.node_selector == c.node_selector == {"pool": "a"}


@pytest.mark.parametrize(
    ("field", "value", "check"),
    [
        ("nodeSelector", {"pool": "b"}, lambda t: t.node_selector == {"pool": "b"}),
        ("tolerations", [], lambda t: t.tolerations == ()),
        (
            "containers",
            [{"name": "main", "resources": {"requests": {"cpu": "2"}}}],
            lambda t: (t.request.cpu, t.request.gpu) == (2000.0, 0.0),
        ),
        (
            "affinity",
            {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": "k", "operator": "Exists"}]}
                        ]
                    }
                }
            },
            lambda t: len(t.affinity) == 1,
        ),
    ],
)
def test_a_spec_that_differs_in_one_field_is_parsed_on_its_own(
    field: str, value: Any, check: Any
) -> None:
    _task(_pod("template"))
    assert check(_task(_pod("other", **{field: value})))


def test_a_bad_spec_is_reported_for_each_pod_that_has_it() -> None:
    bad = [{"name": "main", "resources": {"limits": {"cpu": "lots"}}}]
    for name in ("first", "second"):
        with pytest.raises(WorkloadError) as caught:
            _task(_pod(name, containers=bad))
        assert f"ns/{name}" in str(caught.value) and "'lots'" in str(caught.value)
