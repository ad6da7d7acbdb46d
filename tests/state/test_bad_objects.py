"""One object the operator cannot read is left out with a Warning; the rest is scheduled.

``kai-py simulate`` refuses the same input as a whole (``InputError``): a file is fixed
and run again, a cluster is not stopped for one object.
"""

from __future__ import annotations

from typing import Any

import pytest

from kai_py.scheduler.cycle import run_cycle
from kai_py.state.builder import build
from kai_py.state.cache import NODES, PODGROUPS, PODS, PRIORITY_CLASSES, QUEUES, ClusterCache
from kai_py.state.documents import InputError

NOW = 1_800_000_000.0
Json = dict[str, Any]


def _node(name: str, gpus: str) -> Json:
    return {
        "metadata": {"name": name, "uid": name, "resourceVersion": "1"},
        "status": {"allocatable": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": gpus}},
    }


def _cache() -> ClusterCache:
    cache = ClusterCache()
    for name, gpus in (("good", "4"), ("weird", "lots")):
        cache.observe(NODES, "ADDED", _node(name, gpus))
    cache.observe(PRIORITY_CLASSES, "ADDED", {"metadata": {"name": "odd"}, "value": "high"})
    cache.observe(
        QUEUES,
        "ADDED",
        {
            "metadata": {"name": "q", "uid": "q", "resourceVersion": "1"},
            "spec": {"resources": {"gpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1}}},
        },
    )
    cache.observe(
        PODGROUPS,
        "ADDED",
        {
            "metadata": {"name": "pg", "namespace": "ns", "uid": "pg", "resourceVersion": "1"},
            "spec": {"minMember": 1, "queue": "q"},
        },
    )
    cache.observe(
        PODS,
        "ADDED",
        {
            "metadata": {
                "name": "p",
                "namespace": "ns",
                "uid": "p",
                "resourceVersion": "1",
                "annotations": {"pod-group-name": "pg"},
            },
            "spec": {
                "schedulerName": "kai-scheduler",
                "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
            },
            "status": {"phase": "Pending"},
        },
    )
    return cache


def test_the_operator_leaves_an_unreadable_node_and_priorityclass_out_and_schedules() -> None:
    view = _cache().view(NOW)
    built = view.build(NOW)
    assert [n.name for n in built.snapshot.nodes] == ["good"]
    assert sorted(built.left_out) == [("Node", "", "weird"), ("PriorityClass", "", "odd")]
    warnings = {(e.kind, e.name): e for e in built.events if e.type == "Warning"}
    node = warnings[("Node", "weird")]
    assert node.reason == "InvalidNode"
    assert "Node weird: status.allocatable.nvidia.com/gpu:" in node.message
    assert "'lots'" in node.message and node.message.endswith("it is left out")
    priority = warnings[("PriorityClass", "odd")]
    assert priority.reason == "InvalidPriorityClass"
    assert "value: must be an integer, got 'high'" in priority.message
    decisions = run_cycle(built.snapshot)
    assert [(t.name, t.node_name) for t in decisions.binds] == [("p", "good")]


def test_simulate_still_refuses_the_same_objects_as_a_whole() -> None:
    with pytest.raises(InputError) as raised:
        build(_cache().view(NOW).all_documents, NOW, workloads=False)
    text = str(raised.value)
    assert "Node weird: status.allocatable.nvidia.com/gpu:" in text
    assert "PriorityClass odd: value: must be an integer, got 'high'" in text


def test_a_queue_with_its_quota_above_its_limit_is_used_with_a_warning_on_it() -> None:
    cache = _cache()
    cache.observe(
        QUEUES,
        "MODIFIED",
        {
            "metadata": {"name": "q", "uid": "q", "resourceVersion": "2"},
            "spec": {"resources": {"gpu": {"quota": 8, "limit": 4, "overQuotaWeight": 1}}},
        },
    )
    built = cache.view(NOW).build(NOW)
    (warning,) = [e for e in built.events if e.reason == "QuotaAboveLimit"]
    assert (warning.kind, warning.name, warning.type) == ("Queue", "q", "Warning")
    assert "spec.resources.gpu.quota 8 is above spec.resources.gpu.limit 4" in warning.message
    assert [q.name for q in built.snapshot.queues] == ["q"]
    assert [(t.name, t.node_name) for t in run_cycle(built.snapshot).binds] == [("p", "good")]


def test_objects_of_the_wrong_shape_are_left_out_or_not_scheduled_and_the_rest_is() -> None:
    # A real API server refuses these shapes; one that got in must not stop the cycle.
    cache = _cache()
    for name, status in (
        ("words", {"allocatable": "lots"}),  # a string where the map of quantities belongs
        ("odd-conditions", {"allocatable": {"nvidia.com/gpu": "1"}, "conditions": ["Ready"]}),
    ):
        cache.observe(NODES, "ADDED", {**_node(name, "1"), "status": status})
    cache.observe(
        PODGROUPS,
        "ADDED",
        {
            "metadata": {"name": "pg2", "namespace": "ns", "uid": "pg2", "resourceVersion": "1"},
            "spec": {"minMember": 1, "queue": "q"},
        },
    )
    cache.observe(
        PODS,
        "ADDED",
        {
            "metadata": {
                "name": "p2",
                "namespace": "ns",
                "uid": "p2",
                "resourceVersion": "1",
                "annotations": {"pod-group-name": "pg2"},
            },
            "spec": {
                "schedulerName": "kai-scheduler",
                "tolerations": ["all"],
                "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
            },
            "status": {"phase": "Pending"},
        },
    )
    built = cache.view(NOW).build(NOW)
    assert [n.name for n in built.snapshot.nodes] == ["good"]
    warnings = {(e.reason, e.name): e.message for e in built.events if e.type == "Warning"}
    assert warnings[("InvalidNode", "words")] == (
        "Node words: status.allocatable: must be a map of resource quantities, got 'lots'; "
        "it is left out"
    )
    assert warnings[("InvalidNode", "odd-conditions")].startswith(
        "Node odd-conditions: cannot be read, a field has the wrong type (AttributeError: "
    )
    assert warnings[("InvalidPod", "p2")].startswith(
        "Pod ns/p2: cannot be read, a field has the wrong type (AttributeError: "
    )
    assert [(t.name, t.node_name) for t in run_cycle(built.snapshot).binds] == [("p", "good")]
