"""A bind that timed out on a node (the reservation pod never reported its card: the
kubelet starts nothing) makes the cache mark that node avoided for
BIND_TIMEOUT_AVOID_SECONDS, so the scheduler tries it last; an older one, or a
failure for another reason, does not."""

from __future__ import annotations

import time
from typing import Any

from kai_py.scheduler.cycle import run_cycle
from kai_py.scheduler.model import Node
from kai_py.state.cache import (
    BIND_TIMEOUT_AVOID_SECONDS,
    BINDREQUESTS,
    NODES,
    PODGROUPS,
    PODS,
    QUEUES,
    ClusterCache,
)

FAILED_AT = 1_800_000_000.0  # 2027-01-15 08:00:00 UTC
TIMEOUT = (
    "ReservationTimeout: reservation pod kai-resource-reservation/gpu-reservation-n1-x "
    "did not report its GPU within 40s"
)
Json = dict[str, Any]


def _node(name: str) -> Json:
    return {
        "metadata": {"name": name, "uid": name, "resourceVersion": "1"},
        "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "nvidia.com/gpu": "8"}},
    }


def _bindrequest(name: str, node: str, phase: str, reason: str, version: str = "5") -> Json:
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": f"br-{name}", "resourceVersion": version},
        "spec": {
            "podName": name,
            "selectedNode": node,
            "receivedResourceType": "Fraction",
            "selectedGPUGroups": ["g1"],
        },
        "status": {"phase": phase, "reason": reason, "failedAttempts": 3},
    }


def _cache(reason: str = TIMEOUT, phase: str = "Failed") -> ClusterCache:
    cache = ClusterCache(clock=lambda: FAILED_AT)
    for name in ("n1", "n2"):
        cache.observe(NODES, "ADDED", _node(name))
    cache.observe(BINDREQUESTS, "MODIFIED", _bindrequest("gone", "n1", phase, reason))
    return cache


def _avoided(cache: ClusterCache, now: float) -> dict[str, str | None]:
    return {n.name: n.avoided for n in cache.view(now=now).build(now).snapshot.nodes}


def test_a_failed_bind_that_timed_out_makes_its_node_avoided_for_the_window() -> None:
    cache = _cache()
    until = time.strftime("%H:%M:%S", time.gmtime(FAILED_AT + BIND_TIMEOUT_AVOID_SECONDS))
    assert _avoided(cache, FAILED_AT + 10) == {
        "n1": f"node n1 is avoided until {until} UTC: a bind there timed out",
        "n2": None,
    }
    # The scheduler deletes the Failed request: the node stays avoided all the same.
    cache.observe(BINDREQUESTS, "DELETED", _bindrequest("gone", "n1", "Failed", TIMEOUT))
    assert _avoided(cache, FAILED_AT + BIND_TIMEOUT_AVOID_SECONDS - 1)["n1"] is not None
    # An idle cluster is decided again when the window ends.
    assert cache.view(now=FAILED_AT + 10).wake_at == FAILED_AT + BIND_TIMEOUT_AVOID_SECONDS


def test_an_older_timeout_avoids_nothing() -> None:
    cache = _cache()
    assert _avoided(cache, FAILED_AT + BIND_TIMEOUT_AVOID_SECONDS) == {"n1": None, "n2": None}
    assert cache.bind_timeouts == {}  # forgotten, not kept forever


def test_an_attempt_that_timed_out_and_will_be_retried_counts_too() -> None:
    # Other pods are kept off the node during the retries (3 x 40 s) as well.
    assert _avoided(_cache(phase="Pending"), FAILED_AT + 10)["n1"] is not None


def test_a_bind_that_failed_for_another_reason_avoids_nothing() -> None:
    cache = _cache(reason="API error 403 Forbidden: pods is forbidden")
    assert _avoided(cache, FAILED_AT + 10) == {"n1": None, "n2": None}


def test_a_pending_pod_goes_to_the_other_node() -> None:
    cache = _cache()
    cache.observe(
        QUEUES,
        "ADDED",
        {
            "apiVersion": "scheduling.run.ai/v2",
            "kind": "Queue",
            "metadata": {"name": "q", "uid": "uq", "resourceVersion": "2"},
            "spec": {"resources": {"gpu": {"quota": 8, "limit": -1, "overQuotaWeight": 1}}},
        },
    )
    cache.observe(
        PODGROUPS,
        "ADDED",
        {
            "apiVersion": "scheduling.run.ai/v2alpha2",
            "kind": "PodGroup",
            "metadata": {"name": "pg", "namespace": "ns", "uid": "pg", "resourceVersion": "3"},
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
                "resourceVersion": "4",
                "annotations": {"pod-group-name": "pg", "gpu-fraction": "0.5"},
                "creationTimestamp": "2026-01-01T00:00:00Z",
            },
            "spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "c"}]},
            "status": {"phase": "Pending"},
        },
    )
    now = FAILED_AT + 10
    snapshot = cache.view(now=now).build(now).snapshot
    nodes: dict[str, Node] = {n.name: n for n in snapshot.nodes}
    decisions = run_cycle(snapshot)
    (bound,) = decisions.binds
    assert bound.node_name == "n2"  # n1 would win the tie by name
    (event,) = [e for e in decisions.events if e.reason == "Scheduled"]
    assert nodes["n1"].avoided is not None and nodes["n1"].avoided in event.message
