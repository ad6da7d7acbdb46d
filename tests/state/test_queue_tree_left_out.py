"""The operator's view of a queue tree: a broken or too deep part is left out with a
Warning, the queues whose tree is fine keep scheduling (``cache.usable_queues``)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from kai_py.api.queue import MAX_QUEUE_DEPTH
from kai_py.scheduler.cycle import run_cycle
from kai_py.state.builder import build
from kai_py.state.cache import NODES, PODGROUPS, PODS, QUEUES, ClusterCache
from kai_py.state.documents import Document, InputError
from kai_py.writes.writer import EventRecorder, plan

NOW = 1_800_000_000.0
Json = dict[str, Any]


def _queue(name: str, parent: str | None) -> Json:
    spec: Json = {"resources": {"gpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1}}}
    if parent:
        spec["parentQueue"] = parent
    return {"metadata": {"name": name, "uid": name, "resourceVersion": "1"}, "spec": spec}


def _cache(queues: list[Json], pods_in: list[str]) -> ClusterCache:
    cache = ClusterCache()
    cache.observe(
        NODES,
        "ADDED",
        {
            "metadata": {"name": "n1", "uid": "n1", "resourceVersion": "1"},
            "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "nvidia.com/gpu": "8"}},
        },
    )
    for q in queues:
        cache.observe(QUEUES, "ADDED", q)
    for queue in pods_in:
        cache.observe(
            PODGROUPS,
            "ADDED",
            {
                "metadata": {
                    "name": f"pg-{queue}",
                    "namespace": "ns",
                    "uid": f"pg-{queue}",
                    "resourceVersion": "1",
                },
                "spec": {"minMember": 1, "queue": queue},
            },
        )
        cache.observe(
            PODS,
            "ADDED",
            {
                "metadata": {
                    "name": f"p-{queue}",
                    "namespace": "ns",
                    "uid": f"p-{queue}",
                    "resourceVersion": "1",
                    "annotations": {"pod-group-name": f"pg-{queue}"},
                },
                "spec": {
                    "schedulerName": "kai-scheduler",
                    "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
                },
                "status": {"phase": "Pending"},
            },
        )
    return cache


def _chain(depth: int, top: str = "level-1") -> list[Json]:
    """level-1 (a root) down to level-<depth>."""
    return [_queue(top, None)] + [
        _queue(f"level-{i}", f"level-{i - 1}") for i in range(2, depth + 1)
    ]


def _bound(cache: ClusterCache) -> tuple[list[str], dict[str, str]]:
    view = cache.view(NOW)
    built = view.build(NOW)
    decisions = run_cycle(built.snapshot)
    plan(view, built, decisions, NOW, EventRecorder(), cache)  # writes for every queue
    warnings = {
        e.name: e.message
        for e in [*view.events, *built.events]
        if e.kind == "Queue" and e.reason == "InvalidQueue"
    }
    return sorted(t.name for t in decisions.binds), warnings


def test_a_queue_under_a_parent_loop_is_left_out_and_the_rest_schedules() -> None:
    queues = [
        _queue("root", None),
        _queue("fine", "root"),
        _queue("a", "b"),
        _queue("b", "a"),
        _queue("under-loop", "a"),
    ]
    bound, warnings = _bound(_cache(queues, ["fine", "under-loop"]))
    assert bound == ["p-fine"]
    assert "parents form a cycle: a -> b -> a" in warnings["a"]
    assert "spec.parentQueue: queue 'a' does not exist or is not used" in warnings["under-loop"]


def test_queues_deeper_than_the_limit_are_left_out_and_the_rest_schedules() -> None:
    depth = MAX_QUEUE_DEPTH + 3
    cache = _cache(_chain(depth), [f"level-{MAX_QUEUE_DEPTH}", f"level-{depth}"])
    bound, warnings = _bound(cache)
    assert bound == [f"p-level-{MAX_QUEUE_DEPTH}"]
    # The first queue too deep says why; those under it, that their parent is not used.
    assert sorted(warnings) == [f"level-{i}" for i in range(MAX_QUEUE_DEPTH + 1, depth + 1)]
    first = warnings[f"level-{MAX_QUEUE_DEPTH + 1}"]
    assert f"level {MAX_QUEUE_DEPTH + 1} of the queue tree" in first
    assert f"at most {MAX_QUEUE_DEPTH} levels" in first
    assert "does not exist or is not used" in warnings[f"level-{depth}"]


def test_a_5000_deep_chain_from_the_leaf_up_is_sorted_out_in_linear_time() -> None:
    # Cached leaf first: each level's parent is seen after it (a walk per pass was quadratic).
    queues = list(reversed(_chain(5_000)))
    started = time.perf_counter()
    bound, warnings = _bound(_cache(queues, [f"level-{MAX_QUEUE_DEPTH}", "level-5000"]))
    assert time.perf_counter() - started < 5.0
    assert bound == [f"p-level-{MAX_QUEUE_DEPTH}"]
    assert len(warnings) == 5_000 - MAX_QUEUE_DEPTH


def test_simulate_refuses_a_5000_deep_tree_naming_the_first_queue_too_deep() -> None:
    docs = [
        Document("tree.yaml", {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", **q})
        for q in _chain(5_000)
    ]
    with pytest.raises(InputError) as raised:
        build(docs, NOW)
    level = MAX_QUEUE_DEPTH + 1
    assert raised.value.problems == [
        f"tree.yaml: Queue level-{level}: spec.parentQueue: 'level-{level - 1}' makes Queue "
        f"level-{level} level {level} of the queue tree; kai-py takes queue trees at most "
        f"{MAX_QUEUE_DEPTH} levels deep (a root queue is level 1)"
    ]
