"""A node's pod limit: status.allocatable.pods is read, and every pod on the node takes
a slot once: the scheduler's own (as tasks), other schedulers' and reservation pods."""

from __future__ import annotations

from collections import Counter
from typing import Any

from kai_py.api import keys
from kai_py.scheduler.cycle import open_session, run_cycle
from kai_py.scheduler.model import NO_POD_LIMIT
from kai_py.state.cache import NODES, PODGROUPS, PODS, QUEUES, ClusterCache
from kai_py.state.convert import node_from_manifest

NOW = 1_800_000_000.0
Json = dict[str, Any]


def _node(name: str, allocatable: Json) -> Json:
    return {
        "metadata": {"name": name, "uid": name, "resourceVersion": "1"},
        "status": {"allocatable": allocatable},
    }


def _pod(
    name: str,
    namespace: str = "ns",
    *,
    scheduler: str = "default-scheduler",
    node: str = "n",
    requests: Json | None = None,
    labels: Json | None = None,
    annotations: Json | None = None,
    phase: str = "Running",
) -> Json:
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"{namespace}/{name}",
            "resourceVersion": "1",
            "labels": labels or {},
            "annotations": annotations or {},
        },
        "spec": {
            "schedulerName": scheduler,
            "nodeName": node,
            "containers": [{"name": "c", "resources": {"requests": requests or {"cpu": "1"}}}],
        },
        "status": {"phase": phase},
    }


def test_allocatable_pods_is_read_and_missing_means_no_limit() -> None:
    assert node_from_manifest(_node("n", {"cpu": "8", "pods": "110"})).max_pods == 110
    assert node_from_manifest(_node("n", {"cpu": "8"})).max_pods == NO_POD_LIMIT


def _cache(pods: str) -> ClusterCache:
    cache = ClusterCache()
    gpus = {"cpu": "64", "memory": "64Gi", "nvidia.com/gpu": "4"}
    cache.observe(NODES, "ADDED", _node("n", {**gpus, "pods": pods}))
    cache.observe(NODES, "ADDED", _node("bad", {**gpus, "pods": "-3"}))
    cache.observe(
        QUEUES,
        "ADDED",
        {
            "metadata": {"name": "q", "uid": "q", "resourceVersion": "1"},
            "spec": {
                "resources": {
                    r: {"quota": -1, "limit": -1, "overQuotaWeight": 1}
                    for r in ("gpu", "cpu", "memory")
                }
            },
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
    ours = {"scheduler": "kai-scheduler", "annotations": {"pod-group-name": "pg"}}
    # Ours: a shared pod on card group g1, running.
    cache.observe(
        PODS,
        "ADDED",
        _pod(
            "shared",
            scheduler="kai-scheduler",
            labels={keys.GPU_GROUP_LABEL: "g1"},
            annotations={"pod-group-name": "pg", keys.GPU_FRACTION_ANNOTATION: "0.5"},
        ),
    )
    # Other schedulers': one, and one whose requests do not parse (it still takes a slot).
    cache.observe(PODS, "ADDED", _pod("daemon"))
    cache.observe(PODS, "ADDED", _pod("odd", requests={"cpu": "lots"}))
    # Reservation pods: g1's card is counted by the shared pod, g2's by the reservation
    # pod itself; each is one pod on the node.
    for group in ("g1", "g2"):
        cache.observe(
            PODS,
            "ADDED",
            _pod(
                f"reserve-{group}",
                keys.RESERVATION_NAMESPACE,
                labels={keys.GPU_GROUP_LABEL: group},
                requests={"nvidia.com/gpu": "1"},
            ),
        )
    cache.observe(PODS, "ADDED", _pod("new", phase="Pending", node="", **ours))
    return cache


def test_other_schedulers_and_reservation_pods_take_slots_each_once() -> None:
    cache = _cache(pods="6")
    built = cache.view(NOW).build(NOW)
    (n,) = built.snapshot.nodes
    # 6 slots, less 3 pods the snapshot holds as others': 2 of other schedulers and the
    # reservation pod of g2, a card no pod of ours uses.
    assert n.max_pods == 3
    session = open_session(built.snapshot)
    # Ours: the shared pod, and its card g1's reservation pod, counted with the card.
    assert session.nodes["n"].pods == 2
    assert session.nodes["n"].pod_slots(False) == 1

    cache.observe(PODS, "DELETED", _pod("daemon"))
    (n,) = cache.view(NOW).build(NOW).snapshot.nodes
    assert n.max_pods == 4


def test_a_bad_pods_value_leaves_the_node_out_naming_field_and_value() -> None:
    built = _cache(pods="6").view(NOW).build(NOW)
    assert ("Node", "", "bad") in built.left_out
    (warning,) = [e for e in built.events if e.name == "bad"]
    assert warning.reason == "InvalidNode"
    assert "Node bad: status.allocatable.pods: must be a whole number of pods, got '-3'" in (
        warning.message
    )


def test_a_full_node_gets_no_pod_from_the_operator() -> None:
    decisions = run_cycle(_cache(pods="5").view(NOW).build(NOW).snapshot)
    assert decisions.binds == []
    decisions = run_cycle(_cache(pods="6").view(NOW).build(NOW).snapshot)
    assert [(t.name, t.node_name) for t in decisions.binds] == [("new", "n")]


def test_a_burst_of_3000_pods_fills_nodes_of_1200_pods_and_no_further() -> None:
    """The burst that once bound 3,000 pods to one node: CPU pods, binpack, nodes that
    admit 1,200 pods each (status.allocatable.pods), read from manifests as the
    operator reads them."""
    cache = ClusterCache()
    for name in ("n1", "n2"):
        cache.observe(NODES, "ADDED", _node(name, {"cpu": "1000", "memory": "4Ti", "pods": "1200"}))
    cache.observe(
        QUEUES,
        "ADDED",
        {
            "metadata": {"name": "q", "uid": "q", "resourceVersion": "1"},
            "spec": {
                "resources": {
                    r: {"quota": -1, "limit": -1, "overQuotaWeight": 1}
                    for r in ("gpu", "cpu", "memory")
                }
            },
        },
    )
    for i in range(3000):
        cache.observe(
            PODGROUPS,
            "ADDED",
            {
                "metadata": {"name": f"g{i}", "namespace": "ns", "uid": f"g{i}"},
                "spec": {"minMember": 1, "queue": "q"},
            },
        )
        cache.observe(
            PODS,
            "ADDED",
            _pod(
                f"p{i}",
                scheduler="kai-scheduler",
                node="",
                phase="Pending",
                requests={"cpu": "100m", "memory": "64Mi"},
                annotations={"pod-group-name": f"g{i}"},
            ),
        )
    decisions = run_cycle(cache.view(NOW).build(NOW).snapshot)
    per_node = Counter(t.node_name for t in decisions.binds)
    assert per_node == {"n1": 1200, "n2": 1200}
    assert len(decisions.pending_reasons) == 600
    assert all(
        "0/2 nodes are available: 2 Too many pods." in why
        for why in decisions.pending_reasons.values()
    )
