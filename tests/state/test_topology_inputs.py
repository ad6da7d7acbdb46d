"""Topology objects through the operator's cache into the snapshot, and a PodGroup's
spec.topologyConstraint onto its job: a gang placed within its rack, a broken
Topology left out with a Warning, and the job whose constraint names it waiting."""

from __future__ import annotations

from typing import Any

from kai_py.scheduler.cycle import run_cycle
from kai_py.scheduler.model import Topology, TopologyConstraint
from kai_py.state.cache import NODES, PODGROUPS, PODS, QUEUES, TOPOLOGIES, ClusterCache

NOW = 1_800_000_000.0
Json = dict[str, Any]


def _node(name: str, rack: str, gpus: str) -> Json:
    return {
        "metadata": {
            "name": name,
            "uid": name,
            "resourceVersion": "1",
            "labels": {"example.com/rack": rack},
        },
        "status": {"allocatable": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": gpus}},
    }


def _topology(name: str, levels: list[Json]) -> Json:
    return {
        "metadata": {"name": name, "uid": name, "resourceVersion": "1"},
        "spec": {"levels": levels},
    }


def _cache(topology: str) -> ClusterCache:
    cache = ClusterCache()
    # r1 has 3 GPUs on two nodes, r2 has 2: binpack alone would start on the fuller n3.
    for name, rack, gpus in (
        ("n1", "r1", "2"),
        ("n2", "r1", "1"),
        ("n3", "r2", "1"),
        ("n4", "r2", "1"),
    ):
        cache.observe(NODES, "ADDED", _node(name, rack, gpus))
    cache.observe(
        TOPOLOGIES,
        "ADDED",
        _topology("network", [{"nodeLabel": "example.com/rack", "alias": "rack"}]),
    )
    cache.observe(
        TOPOLOGIES, "ADDED", _topology("broken", [{"nodeLabel": "a"}, {"nodeLabel": "a"}])
    )
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
            "spec": {
                "minMember": 3,
                "queue": "q",
                "topologyConstraint": {"topology": topology, "requiredTopologyLevel": "rack"},
            },
        },
    )
    for i in range(3):
        cache.observe(
            PODS,
            "ADDED",
            {
                "metadata": {
                    "name": f"p{i}",
                    "namespace": "ns",
                    "uid": f"p{i}",
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


def test_the_cache_reads_topologies_and_the_gang_stays_in_one_rack() -> None:
    built = _cache("network").view(NOW).build(NOW)
    assert built.snapshot.topologies == {
        "network": Topology("network", ("example.com/rack",), ("rack",))
    }
    (job,) = built.snapshot.jobs
    assert job.topology == TopologyConstraint("network", "rack", None)
    assert ("Topology", "", "broken") in built.left_out
    (warning,) = [e for e in built.events if e.name == "broken"]
    assert warning.reason == "InvalidTopology" and warning.type == "Warning"
    assert "spec.levels[1].nodeLabel: 'a' is also levels[0].nodeLabel" in warning.message
    decisions = run_cycle(built.snapshot)
    assert sorted(t.node_name or "" for t in decisions.binds) == ["n1", "n1", "n2"]
    domain = [e for e in decisions.events if e.reason == "TopologyDomain"]
    assert [e.message for e in domain] == [
        "PodGroup ns/pg: 3 pods placed in rack r1 of topology network"
    ]


def test_a_constraint_on_a_topology_left_out_waits_with_a_warning() -> None:
    built = _cache("broken").view(NOW).build(NOW)
    (warning,) = [e for e in built.events if e.reason == "TopologyNotApplied"]
    assert (warning.kind, warning.namespace, warning.name) == ("PodGroup", "ns", "pg")
    assert (
        "spec.topologyConstraint.topology: Topology 'broken' is invalid and not used "
        "(its InvalidTopology Event says why); the job waits until it is fixed" in warning.message
    )
    decisions = run_cycle(built.snapshot)
    assert decisions.binds == []
    (reason,) = decisions.reasons["pg"]
    assert reason.code == "PodSchedulingErrors"
    assert "Topology 'broken' does not exist" in reason.message


def test_a_level_without_a_topology_and_a_backoff_are_said_not_applied_on_the_podgroup() -> None:
    cache = _cache("")
    cache.observe(
        PODGROUPS,
        "MODIFIED",
        {
            "metadata": {"name": "pg", "namespace": "ns", "uid": "pg", "resourceVersion": "2"},
            "spec": {
                "minMember": 3,
                "queue": "q",
                "schedulingBackoff": 1,
                "topologyConstraint": {"requiredTopologyLevel": "rack"},
            },
        },
    )
    built = cache.view(NOW).build(NOW)
    (job,) = built.snapshot.jobs
    assert job.topology is None
    said = [(e.kind, e.namespace, e.name, e.type) for e in built.events if e.reason == "NotApplied"]
    assert said == [("PodGroup", "ns", "pg", "Warning")] * 2
    messages = [e.message for e in built.events if e.reason == "NotApplied"]
    assert any(
        "spec.topologyConstraint names a level ('rack') but no topology: it is not applied; "
        "set spec.topologyConstraint.topology to the Topology's name" in m
        for m in messages
    )
    assert any("spec.schedulingBackoff is not applied by kai-py" in m for m in messages)
