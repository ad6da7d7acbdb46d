"""Each pending PodGroup's place in line (``status.queuePosition``), and its write bound."""

from __future__ import annotations

from typing import Any

from kai_py.scheduler.cycle import run_cycle
from kai_py.state.cache import NODES, PODGROUPS, PODS, PRIORITY_CLASSES, QUEUES, ClusterCache
from kai_py.writes.positions import EXACT_HEAD, step
from kai_py.writes.writer import EventRecorder, Write, plan

NOW = 1_800_000_000.0


def _queue(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.run.ai/v2",
        "kind": "Queue",
        "metadata": {"name": name, "uid": f"uq-{name}"},
        "spec": {"resources": {"gpu": {"quota": 1, "limit": -1, "overQuotaWeight": 1}}},
    }


def _group(name: str, queue: str, minute: int, priority: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"minMember": 1, "queue": queue}
    if priority:
        spec["priorityClassName"] = priority
    return {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"ug-{name}",
            "resourceVersion": "1",
            "creationTimestamp": f"2026-01-01T00:{minute:02d}:00Z",
        },
        "spec": spec,
    }


def _pod(name: str, minute: int, gpus: int = 2) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"u-{name}",
            "resourceVersion": "1",
            "annotations": {"pod-group-name": name},
            "creationTimestamp": f"2026-01-01T00:{minute:02d}:00Z",
        },
        "spec": {
            "schedulerName": "kai-scheduler",
            "containers": [
                {"name": "c", "image": "i", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
            ],
        },
        "status": {"phase": "Pending"},
    }


def _cache(jobs: list[tuple[str, str, str | None]]) -> ClusterCache:
    """One 1-GPU node and jobs of 2 GPUs each (none ever fits): all stay in line."""
    cache = ClusterCache()
    cache.observe(
        NODES,
        None,
        {
            "metadata": {"name": "n1", "uid": "n1"},
            "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "1"}},
        },
    )
    cache.observe(
        PRIORITY_CLASSES,
        None,
        {"metadata": {"name": "high", "uid": "pc-high"}, "value": 200},
    )
    for name in sorted({q for _, q, _ in jobs}):
        cache.observe(QUEUES, None, _queue(name))
    for minute, (name, queue, priority) in enumerate(jobs):
        cache.observe(PODGROUPS, None, _group(name, queue, minute, priority))
        cache.observe(PODS, "ADDED", _pod(name, minute))
    return cache


def _plan(cache: ClusterCache) -> list[Write]:
    view = cache.view(NOW)
    built = view.build(NOW)
    return plan(view, built, run_cycle(built.snapshot), NOW, EventRecorder(), cache)


def _status_writes(writes: list[Write]) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for w in writes:
        if w.what.startswith("PodGroup ") and w.what.endswith(" status"):
            name = w.what.split()[1].split("/")[1]
            assert name not in found, f"two status writes for {name} in one cycle"
            assert w.body is not None
            found[name] = w.body["status"]
    return found


def _store(cache: ClusterCache, writes: list[Write], version: int) -> None:
    """What the API server keeps of the status writes (merge patches)."""
    for name, status in _status_writes(writes).items():
        stored = cache.get(PODGROUPS, "ns", name) or {}
        merged = {**(stored.get("status") or {}), **status}
        merged = {k: v for k, v in merged.items() if v is not None}
        cache.observe(
            PODGROUPS,
            "MODIFIED",
            {
                **stored,
                "metadata": {**stored["metadata"], "resourceVersion": str(version)},
                "status": merged,
            },
        )


def test_pending_groups_are_told_their_place_in_their_queue_and_in_the_cluster() -> None:
    cache = _cache(
        [
            ("a1", "team-a", None),
            ("b1", "team-b", None),
            ("a2", "team-a", None),
            ("a3", "team-a", "high"),
        ]
    )
    statuses = _status_writes(_plan(cache))
    where = {name: s["queuePosition"] for name, s in statuses.items()}
    # team-a's line: a3 (higher priority) first, then a1, a2 by age. The two queues
    # take turns in the cluster's order (equal quotas, nothing allocated).
    assert where["a3"]["inQueue"] == 1 and where["a3"]["higherPriorityAhead"] == 0
    assert where["a1"]["inQueue"] == 2 and where["a1"]["higherPriorityAhead"] == 1
    assert where["a2"]["inQueue"] == 3 and where["a2"]["higherPriorityAhead"] == 1
    assert where["b1"] == {
        "inQueue": 1,
        "inCluster": where["b1"]["inCluster"],
        "higherPriorityAhead": 0,
    }
    assert sorted(p["inCluster"] for p in where.values()) == [1, 2, 3, 4]
    assert where["a3"]["inCluster"] < where["a1"]["inCluster"] < where["a2"]["inCluster"]


def test_no_position_write_when_nothing_changed_and_at_most_one_per_cycle() -> None:
    cache = _cache([(f"j{i:02d}", "team-a", None) for i in range(30)])
    first = _plan(cache)
    assert len(_status_writes(first)) == 30  # one each, position and conditions together
    _store(cache, first, 2)
    assert _status_writes(_plan(cache)) == {}  # nothing moved: nothing written


def test_a_position_is_rewritten_only_when_it_moves_by_a_step() -> None:
    jobs = [(f"j{i:02d}", "team-a", None) for i in range(30)]
    cache = _cache(jobs)
    _store(cache, _plan(cache), 2)
    # A high-priority job joins the head: everyone moves back by one. Only those where
    # a move of 1 is a step (positions 1 to 19) and the newcomer are written.
    cache.observe(PODGROUPS, None, _group("urgent", "team-a", 59, "high"))
    cache.observe(PODS, "ADDED", _pod("urgent", 59))
    written = _status_writes(_plan(cache))
    assert written["urgent"]["queuePosition"]["inQueue"] == 1
    moved = sorted(name for name in written if name != "urgent")
    assert moved == [f"j{i:02d}" for i in range(19)]
    assert written["j00"]["queuePosition"]["inQueue"] == 2
    assert written["j18"]["queuePosition"]["inQueue"] == 20
    assert (step(EXACT_HEAD), step(19), step(20), step(30)) == (1, 1, 2, 3)
    _store(cache, _plan(cache), 3)
    # Two more join ahead: j29, still stored at 30, is now 33: a move of 3 is a step there.
    for i, name in enumerate(("urgent2", "urgent3")):
        cache.observe(PODGROUPS, None, _group(name, "team-a", 57 + i, "high"))
        cache.observe(PODS, "ADDED", _pod(name, 57 + i))
    again = _status_writes(_plan(cache))
    assert "j29" in again and again["j29"]["queuePosition"]["inQueue"] == 33


def test_a_group_that_leaves_the_line_loses_its_position() -> None:
    cache = _cache([("big", "team-a", None)])
    _store(cache, _plan(cache), 2)
    stored = cache.get(PODGROUPS, "ns", "big") or {}
    assert stored["status"]["queuePosition"]["inQueue"] == 1
    # Its pod now asks for one GPU and is bound: it is no longer in line.
    cache.observe(
        PODS,
        "MODIFIED",
        {
            **_pod("big", 0, gpus=1),
            "metadata": {**_pod("big", 0)["metadata"], "resourceVersion": "3"},
        },
    )
    written = _status_writes(_plan(cache))
    assert written["big"]["queuePosition"] is None
