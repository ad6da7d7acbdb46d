"""Node pools: a scheduler shard decides its pool's pods on its pool's nodes only.

The cache is fed every object (as ``simulate`` files and unfiltered watches are), so
these tests hold whatever the API server's label selectors let through."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import REGISTRY

from kai_py import metrics
from kai_py.api import keys
from kai_py.scheduler.cycle import run_cycle
from kai_py.scheduler.session import Decisions, Eviction
from kai_py.state.cache import BINDREQUESTS, NODES, PODGROUPS, PODS, QUEUES, ClusterCache
from kai_py.state.partition import Partition
from kai_py.writes.writer import EventRecorder, plan

NOW = 1_800_000_000.0
POOL = keys.NODE_POOL_LABEL
Json = dict[str, Any]


def _labels(pool: str | None) -> Json:
    return {POOL: pool} if pool is not None else {}


def _node(name: str, pool: str | None) -> Json:
    return {
        "metadata": {"name": name, "uid": name, "resourceVersion": "1", "labels": _labels(pool)},
        "status": {"allocatable": {"cpu": "64", "memory": "64Gi", "pods": "110"}},
    }


def _group(name: str, pool: str | None) -> Json:
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"pg-{name}",
            "resourceVersion": "1",
            "labels": _labels(pool),
        },
        "spec": {"minMember": 1, "queue": "q"},
    }


def _pod(name: str, group: str, pool: str | None = None, node: str = "") -> Json:
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"uid-{name}",
            "resourceVersion": "1",
            "creationTimestamp": "2027-01-15T08:00:00Z",
            "labels": _labels(pool),
            "annotations": {keys.POD_GROUP_ANNOTATION: group},
        },
        "spec": {
            "schedulerName": keys.DEFAULT_SCHEDULER_NAME,
            **({"nodeName": node} if node else {}),
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
        },
        "status": {"phase": "Running" if node else "Pending"},
    }


QUEUE: Json = {
    "metadata": {"name": "q", "uid": "q", "resourceVersion": "1"},
    "spec": {
        "resources": {
            r: {"quota": -1, "limit": -1, "overQuotaWeight": 1} for r in ("cpu", "gpu", "memory")
        }
    },
}

#: Three pools: "a", "b" and the unlabelled nodes (the default shard's).
NODES_BY_POOL = {"a": ("a1", "a2"), "b": ("b1",), "": ("d1",)}


def _cluster(partition: Partition) -> ClusterCache:
    cache = ClusterCache(partition=partition)
    for pool, names in NODES_BY_POOL.items():
        for name in names:
            cache.observe(NODES, "ADDED", _node(name, pool or None))
    cache.observe(QUEUES, "ADDED", QUEUE)
    for pool in ("a", "b", None):
        cache.observe(PODGROUPS, "ADDED", _group(f"g-{pool or 'default'}", pool))
    # A pod's pool is its own label, else its PodGroup's (the pod-grouper copies the
    # top owner's label to the PodGroup, not to the pods).
    cache.observe(PODS, "ADDED", _pod("labelled-a", "g-a", "a"))
    cache.observe(PODS, "ADDED", _pod("unlabelled-of-a", "g-a"))
    cache.observe(PODS, "ADDED", _pod("labelled-b", "g-b", "b"))
    cache.observe(PODS, "ADDED", _pod("unlabelled-of-b", "g-b"))
    cache.observe(PODS, "ADDED", _pod("plain", "g-default"))
    # Running pods of each pool on its nodes: only the pool's shard counts them.
    cache.observe(PODS, "ADDED", _pod("running-b", "g-b", node="b1"))
    return cache


EXPECTED = {
    "a": {"labelled-a", "unlabelled-of-a"},
    "b": {"labelled-b", "unlabelled-of-b"},
    "": {"plain"},
}


@pytest.mark.parametrize("pool", ["a", "b", ""])
def test_a_shard_binds_only_its_pools_pods_and_only_into_its_pools_nodes(pool: str) -> None:
    cache = _cluster(Partition(POOL, pool))
    view = cache.view(NOW)
    built = view.build(NOW)
    assert {n.name for n in built.snapshot.nodes} == set(NODES_BY_POOL[pool])
    decisions = run_cycle(built.snapshot)
    bound = {t.name: t.node_name for t in decisions.binds}
    assert set(bound) == EXPECTED[pool]
    assert set(bound.values()) <= set(NODES_BY_POOL[pool])
    # Another pool's pods are that pool's shard's to decide and to report: no Event here.
    assert not [e for e in built.events if e.name.startswith(("labelled", "unlabelled"))], [
        e for e in built.events
    ]
    writes = plan(view, built, decisions, NOW, EventRecorder(), cache)
    binds = [w.body for w in writes if w.what.startswith("bind ")]
    assert binds and all(Partition(POOL, pool).holds(b["metadata"]["labels"]) for b in binds if b)


def test_the_issues_pod_of_pool_b_is_not_placed_on_the_only_node_of_pool_a() -> None:
    """Issue 31: a pod labelled pool-b ran on the only node, labelled pool-a."""
    for pool in ("", "pool-a", "pool-b"):
        cache = ClusterCache(partition=Partition(POOL, pool))
        cache.observe(NODES, "ADDED", _node("n", "pool-a"))
        cache.observe(QUEUES, "ADDED", QUEUE)
        cache.observe(PODGROUPS, "ADDED", _group("g", "pool-b"))
        cache.observe(PODS, "ADDED", _pod("p", "g", "pool-b"))
        decisions = run_cycle(cache.view(NOW).build(NOW).snapshot)
        assert not decisions.binds, pool


def test_the_default_shard_reports_a_missing_podgroup_but_not_another_pools() -> None:
    cache = ClusterCache(partition=Partition(POOL, ""))
    cache.observe(NODES, "ADDED", _node("d1", None))
    cache.observe(QUEUES, "ADDED", QUEUE)
    cache.observe(PODGROUPS, "ADDED", _group("g-a", "a"))
    cache.observe(NODES, "ADDED", _node("a1", "a"))
    cache.observe(PODS, "ADDED", _pod("of-a", "g-a"))
    cache.observe(PODS, "ADDED", _pod("running-of-a", "g-a", node="a1"))
    cache.observe(PODS, "ADDED", _pod("orphan", "gone"))
    cache.observe(PODS, "ADDED", _pod("orphan-running", "gone", node="gone-node"))
    later = NOW + 3600
    built = cache.view(later).build(later)
    assert sorted((e.name, e.reason) for e in built.events) == [
        ("orphan", "PodGroupNotFound"),
        ("orphan-running", "NodeNotFound"),  # reported, as before pools
    ]


def test_relabelled_objects_leave_the_pool() -> None:
    cache = ClusterCache(partition=Partition(POOL, "a"))
    cache.observe(NODES, "ADDED", _node("a1", "a"))
    moved = _node("a1", "b")
    moved["metadata"]["resourceVersion"] = "2"
    cache.observe(NODES, "MODIFIED", moved)
    assert not cache.objects[NODES]
    request = _bindrequest("p", "b1", "b")
    cache.observe(BINDREQUESTS, "ADDED", request)
    assert not cache.objects[BINDREQUESTS]


def _bindrequest(pod: str, node: str, pool: str) -> Json:
    body = {
        "apiVersion": "scheduling.run.ai/v1alpha2",
        "kind": "BindRequest",
        "metadata": {
            "name": pod,
            "namespace": "ns",
            "uid": f"br-{pod}",
            "resourceVersion": "1",
            "labels": {"selected-node": node, POOL: pool},
        },
        "spec": {"podName": pod, "selectedNode": node},
    }
    return body


def test_partition_selectors_are_kais() -> None:
    assert Partition(POOL, "a").selector() == f"{POOL}=a"
    assert Partition(POOL, "").selector() == f"!{POOL}"
    assert Partition(POOL, "").name == "default"
    assert Partition(POOL, "").labels() == {}


def test_status_names_the_pool_and_only_the_default_shard_writes_queue_status() -> None:
    for pool, queue_writes in (("a", 0), ("", 1)):
        cache = _cluster(Partition(POOL, pool))
        # Too big for any node: the PodGroup's condition says why, on this pool.
        big = _pod("huge", f"g-{pool or 'default'}", pool or None)
        big["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "1000"
        cache.observe(PODS, "ADDED", big)
        view = cache.view(NOW)
        built = view.build(NOW)
        decisions = run_cycle(built.snapshot)
        writes = plan(view, built, decisions, NOW, EventRecorder(), cache)
        conditions = [
            c
            for w in writes
            if w.what.startswith("PodGroup ") and w.body
            for c in (w.body.get("status") or {}).get("schedulingConditions") or []
        ]
        assert conditions and {c["nodePool"] for c in conditions} == {pool or "default"}
        assert len([w for w in writes if w.what.startswith("Queue ")]) == queue_writes


def test_the_evicted_pods_metric_names_the_shards_pool() -> None:
    cache = _cluster(Partition(POOL, "b"))
    built = cache.view(NOW).build(NOW)
    (running,) = [t for j in built.snapshot.jobs for t in j.tasks if t.name == "running-b"]
    decisions = Decisions(evictions=[Eviction(running, "preempt", None, "test")])
    labels = {"podgroup": "g-b", "namespace": "ns", "uid": running.job_uid, "action": "preempt"}

    def count(pool: str) -> float:
        value = REGISTRY.get_sample_value(
            "kai_pod_group_evicted_pods_total", {**labels, "nodepool": pool}
        )
        return value or 0.0

    before = count("b")
    metrics.record_decisions(decisions, built.snapshot, [], cache.partition.name)
    assert count("b") == before + 1


def test_a_named_shard_keeps_no_pod_of_another_pools_node_and_relists_joining_nodes() -> None:
    cache = ClusterCache(partition=Partition(POOL, "a"))
    cache.observe(NODES, "ADDED", _node("a1", "a"))
    daemon = _pod("daemon-b1", "none", node="b1")
    daemon["spec"]["schedulerName"] = "default-scheduler"
    cache.observe(PODS, "ADDED", daemon)  # another scheduler's, on pool b's node
    cache.observe(PODS, "ADDED", _pod("ours-b1", "g-b", node="b1"))  # ours, on pool b's
    cache.observe(PODS, "ADDED", {**_pod("daemon-a1", "none", node="a1")})
    assert set(cache.foreign_pods.pods_per_node()) == set()  # ours on a1: not foreign
    assert [k[1] for k in cache.objects[PODS]] == ["daemon-a1"]
    assert not cache.new_nodes  # the pods are not listed yet: their LIST brings them all
    cache.mark_warm(PODS)
    cache.observe(NODES, "ADDED", _node("a2", "a"))  # joins after the pods' LIST
    assert cache.new_nodes == {"a2"}  # the loop lists a2's pods again
    # The default shard keeps what it always kept.
    default = ClusterCache(partition=Partition(POOL, ""))
    default.observe(PODS, "ADDED", daemon)
    assert default.foreign_pods.pods_per_node() == {"b1": 1}
