"""Invariants of the scheduling cycle on random small clusters (issue 3), with hypothesis.

A cluster is drawn as a plain spec (so a shrunk failure reads as data), then
built into a Snapshot: the jobs drawn as "running" are first placed by an
allocate-only cycle (so the running state is one the scheduler could have
made), settled to Running, some lose a pod (stale gangs), and the pending
jobs are added. Then the full cycle runs and these must hold:

(a) an eviction is committed only for a job that is placed (bound or
    pipelined) in the same cycle; stale-gang evictions (``by`` None) excepted;
(b) a non-preemptible job's pod is never evicted, except by stale-gang
    eviction, which by design evicts *all* pods of a stale job;
(c) a queue within its deserved GPU quota before the cycle never loses pods
    to reclaim (checked for every queue on the victim's side of the tree);
(d) no GPU card over 100 %, no node's whole GPUs / CPU / memory over its
    allocatable, counting what holds resources now, and what will once the
    releasing pods are gone (bound + running + pipelined);
(f) bound and pipelined pods keep each queue within its GPU limit, and its
    non-preemptible work within its deserved quota (when it was before);
(e) applying the decisions as a cluster would (bound -> Running, evicted ->
    removed, pipelined -> Pending) converges within 10 cycles, and the cycle
    after a cycle with no decisions makes none.
"""

from __future__ import annotations

import os
from collections import defaultdict
from typing import Any

import pytest
from builders import job, node, queue, snapshot, task
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from kai_py.scheduler.actions.allocate import allocate
from kai_py.scheduler.actions.reclaim import split_paths
from kai_py.scheduler.cycle import Action, default_actions, open_session, run_cycle
from kai_py.scheduler.model import Snapshot, TaskStatus
from kai_py.scheduler.resources import EPS
from kai_py.scheduler.session import Decisions, Session

NOW = 10_000.0
GPU_MEM = 40_000

# ------------------------------------------------------------------ specs
# A task shape: (whole gpus, fraction, gpu-memory MiB, cpu millicores)
SHAPES = [
    (0, 0.0, 0, 2000),
    (1, 0.0, 0, 1000),
    (2, 0.0, 0, 1000),
    (0, 0.5, 0, 500),
    (0, 0.25, 0, 500),
    (0, 0.0, 10_000, 500),
]


@st.composite
def queue_specs(draw: st.DrawFn) -> list[dict[str, Any]]:
    quota = st.sampled_from([-1, 0, 0, 1, 2, 4])
    # mostly unlimited: a limit anywhere up the tree caps the whole subtree
    limit = st.sampled_from([-1, -1, -1, -1, -1, 0, 2, 4, 8])
    weight = st.sampled_from([0, 1, 1, 2])
    prio = st.sampled_from([50, 100, 100, 200])
    out: list[dict[str, Any]] = []
    n = 0

    def add(parent: str | None, depth: int, max_depth: int) -> str:
        nonlocal n
        name = f"q{n}"
        n += 1
        out.append(
            {
                "name": name,
                "parent": parent,
                "gpu": draw(quota),
                "gpu_limit": draw(limit),
                "gpu_weight": draw(weight),
                "priority": draw(prio),
                "created": float(n),
                "reclaim_min_runtime": draw(st.sampled_from([None, None, 50.0, 5000.0])),
                "preempt_min_runtime": draw(st.sampled_from([None, None, 50.0])),
                # CPU and memory deserve all the parent has: GPUs are what is contested
                "cpu": -1,
                "memory": -1,
            }
        )
        if depth < max_depth:
            for _ in range(draw(st.integers(1 if depth > 1 else 2, 3 if depth == 1 else 2))):
                add(name, depth + 1, max_depth)
        return name

    max_depth = draw(st.integers(2, 3))
    for _ in range(draw(st.integers(1, 2))):
        add(None, 1, max_depth)
    return out


@st.composite
def cluster_specs(draw: st.DrawFn, releasing: bool = False) -> dict[str, Any]:
    """``releasing``: some running jobs are being deleted at snapshot time."""
    nodes = [
        {
            # small nodes more often, so that the running jobs fill the cluster
            "gpus": draw(st.sampled_from([0, 1, 1, 2, 2, 3, 4, 8])),
            "cpu": draw(st.sampled_from([4000, 16_000])),
            "mem_label": draw(st.booleans()),
        }
        for _ in range(draw(st.sampled_from([1, 1, 2, 2, 3, 4, 5, 6])))
    ]
    queues = draw(queue_specs())
    parents = {q["parent"] for q in queues}
    leaves = [q["name"] for q in queues if q["name"] not in parents]
    # Sometimes one leaf runs everything and the others only wait: the reclaim case.
    hog = len(leaves) > 1 and draw(st.booleans())
    jobs = []
    for i in range(draw(st.integers(1, 14))):
        n_tasks = draw(st.integers(1, 4))
        priority = draw(st.sampled_from([50, 50, 75, 100, 125]))
        is_running = draw(st.booleans())
        if hog:
            where = leaves[0] if is_running else draw(st.sampled_from(leaves[1:]))
            if is_running:  # mostly preemptible, so that there is something to take back
                priority = draw(st.sampled_from([50, 50, 50, 125]))
        else:
            where = draw(st.sampled_from(leaves))
        jobs.append(
            {
                "name": f"j{i}",
                "queue": where,
                "tasks": n_tasks,
                "min_member": draw(st.integers(1, n_tasks)),
                # whole GPUs more often than the rest, so that clusters fill up
                "shape": draw(st.sampled_from([0, 1, 1, 1, 2, 2, 3, 4, 5])),
                "priority": priority,
                "preemptible": draw(st.sampled_from([None, None, True, False])),
                "created": float(draw(st.integers(0, 20))),
                "running": is_running,
                "start": NOW - draw(st.sampled_from([10, 100, 9000, 9000])),
                "drop": draw(st.sampled_from([False, False, False, True])),
                "grace": draw(st.sampled_from([60.0, 60.0, None])),
                "releasing": releasing and draw(st.sampled_from([False, False, True])),
            }
        )
    return {
        "nodes": nodes,
        "queues": queues,
        "jobs": jobs,
        "placement": draw(st.sampled_from(["binpack", "binpack", "spread"])),
    }


@st.composite
def reclaim_specs(draw: st.DrawFn) -> dict[str, Any]:
    """A full cluster run by one leaf, with the other leaves (siblings or cousins) waiting:
    the shape that makes reclaim (and its refusals) happen."""
    quota = st.sampled_from([-1, 0, 1, 2, 3])
    cousins = draw(st.booleans())
    queues: list[dict[str, Any]] = [{"name": "q0", "parent": None, "gpu": -1, "gpu_limit": -1}]
    parents = ["p1", "p2"] if cousins else ["q0"]
    if cousins:
        queues += [
            {"name": p, "parent": "q0", "gpu": draw(quota), "gpu_limit": -1} for p in parents
        ]
    leaves = [f"l{i}" for i in range(draw(st.integers(2, 4)))]
    for k, leaf in enumerate(leaves):
        queues.append(
            {
                "name": leaf,
                "parent": parents[k % len(parents)],
                "gpu": draw(quota),
                "gpu_limit": draw(st.sampled_from([-1, -1, -1, 4])),
                "gpu_weight": draw(st.sampled_from([0, 1, 1, 2])),
                "priority": draw(st.sampled_from([100, 100, 200])),
                "reclaim_min_runtime": draw(st.sampled_from([None, None, 5000.0])),
            }
        )
    for n, q in enumerate(queues):
        q.setdefault("gpu_weight", 1)
        q.setdefault("priority", 100)
        q.update(created=float(n), cpu=-1, memory=-1)
    gpus = [draw(st.integers(1, 4)) for _ in range(draw(st.integers(1, 3)))]
    jobs = []

    def add(queue_name: str, running: bool) -> None:
        n_tasks = draw(st.integers(1, 3))
        jobs.append(
            {
                "name": f"j{len(jobs)}",
                "queue": queue_name,
                "tasks": n_tasks,
                "min_member": draw(st.integers(1, n_tasks)),
                "shape": draw(st.sampled_from([1, 1, 2, 3])),
                "priority": draw(st.sampled_from([50, 50, 125])) if running else 50,
                "preemptible": None,
                "created": float(len(jobs)),
                "running": running,
                "start": NOW - draw(st.sampled_from([10, 9000, 9000])),
                "drop": False,
                "grace": 60.0,
            }
        )

    for _ in range(sum(gpus) + 1):
        add(leaves[0], True)
    for _ in range(draw(st.integers(1, 4))):
        add(draw(st.sampled_from(leaves[1:])), False)
    return {
        "nodes": [{"gpus": g, "cpu": 16_000, "mem_label": False} for g in gpus],
        "queues": queues,
        "jobs": jobs,
        "placement": "binpack",
    }


def _tasks(spec: dict[str, Any]) -> list[Any]:
    gpu, fraction, memory, cpu = SHAPES[spec["shape"]]
    return [
        task(
            f"{spec['name']}-{k}",
            gpu=gpu,
            fraction=fraction,
            gpu_memory_mib=memory,
            cpu=cpu,
            memory=1e9,
            created=spec["created"],
            role="master" if k == 0 and spec["tasks"] > 1 else "worker",
        )
        for k in range(spec["tasks"])
    ]


def _job(spec: dict[str, Any]) -> Any:
    return job(
        spec["name"],
        spec["queue"],
        _tasks(spec),
        priority=spec["priority"],
        preemptible=spec["preemptible"],
        min_member=spec["min_member"],
        created=spec["created"],
        staleness_grace=spec["grace"],
    )


def build(spec: dict[str, Any]) -> Snapshot:
    nodes = [
        node(
            f"n{i}",
            gpus=n["gpus"],
            cpu=n["cpu"],
            memory=64e9,
            gpu_memory_mib=GPU_MEM if n["mem_label"] else 0,
        )
        for i, n in enumerate(spec["nodes"])
    ]
    queues = [queue(**q) for q in spec["queues"]]
    first = [_job(j) for j in spec["jobs"] if j["running"]]
    snap = snapshot(nodes, queues, first, now=NOW, placement=spec["placement"])
    run_cycle(snap, [("allocate", allocate)])
    by_name = {j["name"]: j for j in spec["jobs"]}
    for j in first:
        js = by_name[j.name]
        for t in j.tasks:
            if t.status is TaskStatus.ALLOCATED:
                t.status, t.start_time, t.claim_now = TaskStatus.RUNNING, js["start"], True
            elif t.status is TaskStatus.PIPELINED:  # cannot happen without releasing pods
                t.status, t.node_name, t.gpu_groups = TaskStatus.PENDING, None, ()
        if js.get("releasing"):
            for t in j.tasks:
                if t.status is TaskStatus.RUNNING:
                    t.status = TaskStatus.RELEASING
        elif js["drop"]:
            live = [t for t in j.tasks if t.status is TaskStatus.RUNNING]
            if live:
                j.tasks.remove(live[-1])
                j.stale_since = NOW - 100
    snap.jobs.extend(_job(j) for j in spec["jobs"] if not j["running"])
    return snap


# ------------------------------------------------------------- checkers
def check_capacity(snap: Snapshot) -> None:
    """(d): cards at most 100 %, nodes within allocatable, now and once releasing is gone."""
    nodes = {n.name: n for n in snap.nodes}
    now_statuses = {
        TaskStatus.RUNNING,
        TaskStatus.RELEASING,
        TaskStatus.ALLOCATED,
        TaskStatus.EVICTED,
    }
    later_statuses = {TaskStatus.RUNNING, TaskStatus.ALLOCATED, TaskStatus.PIPELINED}
    for label, statuses in (("now", now_statuses), ("later", later_statuses)):
        cpu: dict[str, float] = defaultdict(float)
        mem: dict[str, float] = defaultdict(float)
        whole: dict[str, float] = defaultdict(float)
        cards: dict[tuple[str, str], float] = defaultdict(float)
        for j in snap.jobs:
            for t in j.tasks:
                if t.status not in statuses or t.node_name is None:
                    continue
                n = nodes[t.node_name]
                cpu[n.name] += t.request.cpu
                mem[n.name] += t.request.memory
                if t.is_shared:
                    assert len(t.gpu_groups) == t.gpu_devices, t
                    for gid in t.gpu_groups:
                        cards[(n.name, gid)] += t.portion_on(n)
                else:
                    whole[n.name] += t.request.gpu
        for (name, gid), used in cards.items():
            assert used <= 1 + EPS, f"{label}: card {gid} of {name} at {used:.0%}"
        for n in snap.nodes:
            shared = sum(1 for (name, _) in cards if name == n.name)
            assert whole[n.name] + shared <= n.allocatable.gpu + EPS, (
                f"{label}: node {n.name} has {whole[n.name]} whole GPUs and {shared} shared "
                f"cards of {n.allocatable.gpu}"
            )
            assert cpu[n.name] <= n.allocatable.cpu + EPS, f"{label}: cpu over on {n.name}"
            assert mem[n.name] <= n.allocatable.memory + EPS, f"{label}: memory over on {n.name}"


def check_cycle(snap: Snapshot, actions: list[tuple[str, Action]] | None = None) -> Decisions:
    """Run one cycle on ``snap`` and check (a)-(d); return the decisions."""
    before = open_session(snap)  # the session's view before the cycle (resets itself again)
    alloc_before = {q.name: q.allocated.gpu for q in before.queues.values()}
    deserved = {q.name: q.deserved.gpu for q in before.queues.values()}
    # captured now: the cycle's own session resets the same Queue objects
    was = {
        q.name: (q.allocated.gpu, q.allocated_non_preemptible.gpu) for q in before.queues.values()
    }
    jobs = {j.uid: j for j in snap.jobs}
    d = run_cycle(snap, actions)
    placed_jobs = {t.job_uid for t in [*d.binds, *d.pipelined]}
    for ev in d.evictions:
        victim = jobs[ev.task.job_uid]
        if ev.by is None:
            assert ev.action == "stalegangeviction", ev
            continue
        assert ev.action != "stalegangeviction", ev
        # (a)
        assert ev.by.uid in placed_jobs, (
            f"{ev.task.key} evicted by {ev.action} for {ev.by.key}, which was not placed"
        )
        # (b)
        assert victim.preemptible, f"non-preemptible {ev.task.key} evicted by {ev.action}"
        # (c) a pod moved elsewhere (evicted and placed again) takes nothing from its queue
        if ev.action == "reclaim" and ev.moved_to is None:
            _, theirs = split_paths(before, ev.by.queue, victim.queue)
            for q in theirs:
                assert alloc_before[q.name] > deserved[q.name] + EPS, (
                    f"queue {q.name} within its deserved {deserved[q.name]} GPUs "
                    f"(allocated {alloc_before[q.name]}) lost {ev.task.key} to reclaim "
                    f"by {ev.by.key}"
                )
    check_capacity(snap)
    check_queues(before, snap, deserved, was)
    return d


def queue_gpus(before: Session, snap: Snapshot) -> tuple[dict[str, float], dict[str, float]]:
    """GPUs of each queue's subtree held by running, bound and pipelined pods (all, and
    non-preemptible only), as the queue will count them once the releasing pods are gone."""
    nodes = {n.name: n for n in snap.nodes}
    total: dict[str, float] = defaultdict(float)
    non_preemptible: dict[str, float] = defaultdict(float)
    placed = {TaskStatus.RUNNING, TaskStatus.ALLOCATED, TaskStatus.PIPELINED}
    for j in snap.jobs:
        for t in j.tasks:
            if t.status not in placed or t.node_name is None:
                continue
            gpu = t.gpu_on(nodes[t.node_name])
            for q in before.ancestors(j.queue):
                total[q.name] += gpu
                if not j.preemptible:
                    non_preemptible[q.name] += gpu
    return total, non_preemptible


def check_queues(
    before: Session,
    snap: Snapshot,
    deserved: dict[str, float],
    was: dict[str, tuple[float, float]],
) -> None:
    """(f): binds and pipelines keep every queue within its GPU limit, and non-preemptible
    work within deserved quota, when the queue was within them before the cycle."""
    total, non_preemptible = queue_gpus(before, snap)
    for q in before.queues.values():
        old_all, old_np = was[q.name]
        if old_all <= q.limit.gpu + EPS:
            assert total[q.name] <= q.limit.gpu + EPS, (
                f"queue {q.name} at {total[q.name]} GPUs, above its limit {q.limit.gpu}"
            )
        if old_np <= deserved[q.name] + EPS:
            assert non_preemptible[q.name] <= deserved[q.name] + EPS, (
                f"queue {q.name} runs {non_preemptible[q.name]} non-preemptible GPUs, above "
                f"its deserved {deserved[q.name]}"
            )


def settle(snap: Snapshot, d: Decisions, recreate: bool = False) -> None:
    """Apply the decisions as a cluster would."""
    for job_ in snap.jobs:
        if job_.uid in d.stale_since:
            job_.stale_since = d.stale_since[job_.uid]
        kept = []
        for t in job_.tasks:
            if t.status is TaskStatus.ALLOCATED:
                t.status, t.start_time = TaskStatus.RUNNING, snap.now
            elif t.status is TaskStatus.PIPELINED:
                # As kai-py simulate writes it back: a pod that waited for freed
                # resources is nominated to that node (status.nominatedNodeName).
                t.nominated_node = None if t.claim_now else t.node_name
                t.status, t.node_name, t.gpu_groups = TaskStatus.PENDING, None, ()
            elif t.status is TaskStatus.RELEASING:
                continue  # deleted by now
            elif t.status is TaskStatus.EVICTED:
                if recreate:
                    t.status, t.node_name, t.gpu_groups, t.start_time = (
                        TaskStatus.PENDING,
                        None,
                        (),
                        None,
                    )
                    kept.append(t)
                continue
            t.claim_now = True
            kept.append(t)
        job_.tasks = kept


def decided(d: Decisions) -> bool:
    return bool(d.binds or d.pipelined or d.evictions)


def converge(
    snap: Snapshot,
    recreate: bool = False,
    limit: int = 10,
    actions: list[tuple[str, Action]] | None = None,
) -> int:
    """(e): cycles until one decides nothing; the next one must decide nothing too."""
    for cycle in range(1, limit + 1):
        d = check_cycle(snap, actions)
        settle(snap, d, recreate)
        if not decided(d):
            again = check_cycle(snap, actions)
            assert not decided(again), "a cycle after a quiet cycle made decisions"
            return cycle
    raise AssertionError(f"no convergence within {limit} cycles")


# The default run is derandomized (the same 150 examples every time), so that a bug the
# search has not met yet cannot turn the suite red at random. KAI_PY_EXAMPLES=5000 runs a
# longer, random hunt (that is how the regressions at the end of this file were found).
_HUNT = os.environ.get("KAI_PY_EXAMPLES")
FAST = settings(
    max_examples=int(_HUNT or "150"),
    deadline=None,
    derandomize=_HUNT is None,
    suppress_health_check=[HealthCheck.too_slow],
)
# For a property that is expected to fail on a known bug: no shrinking (it would take a
# minute) unless hunting.
KNOWN_FAILING = settings(
    FAST, phases=tuple(Phase) if _HUNT else (Phase.explicit, Phase.reuse, Phase.generate)
)


@FAST
@given(cluster_specs())
def test_one_cycle_invariants(spec: dict[str, Any]) -> None:
    snap = build(spec)
    check_capacity(snap)  # the drawn state itself is sane
    check_cycle(snap)


@FAST
@given(cluster_specs())
def test_converges_without_flapping(spec: dict[str, Any]) -> None:
    converge(build(spec))


NO_CONSOLIDATION = [(n, a) for n, a in default_actions() if n != "consolidation"]


@FAST
@given(cluster_specs())
def test_converges_when_evicted_pods_come_back(spec: dict[str, Any]) -> None:
    """Like a Job controller recreating evicted pods: no ping-pong between queues or
    priorities. Consolidation is left out here: with it, this finds the livelock kept
    below as test_consolidation_livelock_when_moved_pods_are_recreated."""
    converge(build(spec), recreate=True, actions=NO_CONSOLIDATION)


def test_builder_makes_running_state() -> None:
    spec = {
        "nodes": [{"gpus": 2, "cpu": 16_000, "mem_label": True}],
        "queues": [
            {
                "name": "q0",
                "parent": None,
                "gpu": 0,
                "gpu_limit": -1,
                "gpu_weight": 1,
                "priority": 100,
                "created": 0.0,
            },
            {
                "name": "q1",
                "parent": "q0",
                "gpu": 1,
                "gpu_limit": -1,
                "gpu_weight": 1,
                "priority": 100,
                "created": 1.0,
            },
        ],
        "jobs": [
            {
                "name": "r",
                "queue": "q1",
                "tasks": 2,
                "min_member": 2,
                "shape": 1,
                "priority": 50,
                "preemptible": None,
                "created": 0.0,
                "running": True,
                "start": NOW - 100,
                "drop": False,
                "grace": 60.0,
            },
            {
                "name": "p",
                "queue": "q1",
                "tasks": 1,
                "min_member": 1,
                "shape": 1,
                "priority": 50,
                "preemptible": None,
                "created": 1.0,
                "running": False,
                "start": NOW,
                "drop": False,
                "grace": 60.0,
            },
        ],
        "placement": "binpack",
    }
    snap = build(spec)
    statuses = {t.name: t.status for j in snap.jobs for t in j.tasks}
    assert statuses == {
        "r-0": TaskStatus.RUNNING,
        "r-1": TaskStatus.RUNNING,
        "p-0": TaskStatus.PENDING,
    }
    assert converge(snap) == 1


def test_checker_catches_an_overfull_card() -> None:
    """The capacity checker itself can fail."""
    snap = snapshot(
        [node("n", gpus=1)],
        [queue("q")],
        [
            job(
                "a",
                "q",
                [task(fraction=0.75, status=TaskStatus.RUNNING, node_name="n", groups=("0",))],
            ),
            job(
                "b",
                "q",
                [task(fraction=0.5, status=TaskStatus.RUNNING, node_name="n", groups=("0",))],
            ),
        ],
    )
    with pytest.raises(AssertionError, match="card 0 of n"):
        check_capacity(snap)


@FAST
@given(reclaim_specs())
def test_reclaim_invariants(spec: dict[str, Any]) -> None:
    """(a)-(f) and convergence on clusters built for reclaim."""
    converge(build(spec))


# ------------------------------------------------------- with releasing pods
@FAST
@given(cluster_specs(releasing=True))
def test_one_cycle_invariants_with_releasing_pods(spec: dict[str, Any]) -> None:
    snap = build(spec)
    check_capacity(snap)
    check_cycle(snap)


@KNOWN_FAILING
@given(cluster_specs(releasing=True))
def test_converges_with_releasing_pods(spec: dict[str, Any]) -> None:
    converge(build(spec))


# ------------------------------------------------------ shrunk regressions
def test_fraction_is_not_bound_on_a_card_promised_to_a_pipelined_pod() -> None:
    snap = snapshot(
        [node("n", gpus=1)],
        [queue("root"), queue("a", "root")],
        [
            job("old", "a", [task(gpu=1, status=TaskStatus.RELEASING, node_name="n")]),
            job("p1", "a", [task("p1", fraction=0.5)], created=1),
            job("p2", "a", [task("p2", fraction=0.5)], created=2),
        ],
    )
    d = run_cycle(snap)
    # the card is busy until "old" is gone: both may only be pipelined
    assert [t.name for t in d.binds] == []
    assert sorted(t.name for t in d.pipelined) == ["p1", "p2"]


def test_gang_on_a_releasing_card_does_not_overcount_the_node() -> None:
    from kai_py.scheduler.actions.common import place_tasks
    from kai_py.scheduler.placement import Placer

    snap = snapshot(
        [node("n", gpus=1)],
        [queue("root"), queue("a", "root")],
        [
            job("old", "a", [task(gpu=1, status=TaskStatus.RELEASING, node_name="n")]),
            job("gang", "a", [task(fraction=0.5), task(fraction=0.5)]),
        ],
    )
    s = open_session(snap)
    gang = next(j for j in s.jobs.values() if j.name == "gang")
    stmt = s.statement()
    assert place_tasks(s, stmt, Placer(s), gang, 2).ok
    assert all(t.status is TaskStatus.PIPELINED for t in gang.tasks)
    assert s.nodes["n"].used.gpu <= 1
    assert all(not t.claim_now for t in gang.tasks)


def test_preempted_whole_gpu_makes_room_for_a_fraction_gang() -> None:
    """The shrunk case that found the bug above, through whole cycles: it must converge
    and never bind onto the busy card."""
    spec = {
        "nodes": [
            {"gpus": 0, "cpu": 4000, "mem_label": False},
            {"gpus": 1, "cpu": 4000, "mem_label": False},
        ],
        "queues": [
            {
                "name": "q0",
                "parent": None,
                "gpu": -1,
                "gpu_limit": -1,
                "gpu_weight": 0,
                "priority": 50,
                "created": 1.0,
            },
            {
                "name": "q2",
                "parent": "q0",
                "gpu": -1,
                "gpu_limit": -1,
                "gpu_weight": 0,
                "priority": 50,
                "created": 3.0,
            },
        ],
        "jobs": [
            {
                "name": "j0",
                "queue": "q2",
                "tasks": 2,
                "min_member": 2,
                "shape": 3,
                "priority": 75,
                "preemptible": None,
                "created": 0.0,
                "running": False,
                "start": NOW - 10,
                "drop": False,
                "grace": 60.0,
            },
            {
                "name": "j4",
                "queue": "q2",
                "tasks": 1,
                "min_member": 1,
                "shape": 1,
                "priority": 50,
                "preemptible": None,
                "created": 0.0,
                "running": True,
                "start": NOW - 10,
                "drop": False,
                "grace": 60.0,
            },
        ],
        "placement": "binpack",
    }
    snap = build(spec)
    d = check_cycle(snap)
    assert [(e.task.name, e.action) for e in d.evictions] == [("j4-0", "preempt")]
    assert sorted(t.name for t in d.pipelined) == ["j0-0", "j0-1"]
    settle(snap, d, recreate=True)
    assert converge(snap, recreate=True, actions=NO_CONSOLIDATION) <= 3


CONSOLIDATION_LIVELOCK = {
    "nodes": [
        {"gpus": 0, "cpu": 4000, "mem_label": False},
        {"gpus": 1, "cpu": 4000, "mem_label": False},
        {"gpus": 2, "cpu": 4000, "mem_label": False},
    ],
    "queues": [
        {
            "name": "q0",
            "parent": None,
            "gpu": -1,
            "gpu_limit": -1,
            "gpu_weight": 0,
            "priority": 50,
            "created": 1.0,
        },
        {
            "name": "q1",
            "parent": "q0",
            "gpu": -1,
            "gpu_limit": -1,
            "gpu_weight": 0,
            "priority": 50,
            "created": 2.0,
        },
        {
            "name": "q2",
            "parent": "q0",
            "gpu": -1,
            "gpu_limit": -1,
            "gpu_weight": 0,
            "priority": 50,
            "created": 3.0,
        },
    ],
    "jobs": [
        *(
            {
                "name": f"j{i}",
                "queue": "q1",
                "tasks": 1,
                "min_member": 1,
                "shape": 0,
                "priority": 50,
                "preemptible": None,
                "created": 0.0,
                "running": False,
                "start": NOW - 10,
                "drop": False,
                "grace": 60.0,
            }
            for i in range(5)
        ),
        {
            "name": "j5",
            "queue": "q2",
            "tasks": 3,
            "min_member": 1,
            "shape": 3,
            "priority": 50,
            "preemptible": None,
            "created": 0.0,
            "running": False,
            "start": NOW - 10,
            "drop": False,
            "grace": 60.0,
        },
    ],
    "placement": "binpack",
}


def test_consolidation_converges_when_moved_pods_are_not_recreated() -> None:
    snap = build(CONSOLIDATION_LIVELOCK)
    assert converge(snap) <= 4


def test_consolidation_livelock_when_moved_pods_are_recreated() -> None:
    converge(build(CONSOLIDATION_LIVELOCK), recreate=True)


# Found by KAI_PY_EXAMPLES=4000: allocate gives q3 (deserved 1, allocated 1) a second GPU
# (j0-0) in the same cycle, which puts q3 over its fair share; reclaim then evicts q3's
# *running* j4-0 for q1's j3. q3 ends the cycle with 1 GPU again, but a pod that had been
# running is killed while a fresh pod of the same queue is bound in its place.
RECLAIM_FROM_WITHIN_DESERVED = {
    "nodes": [
        {"gpus": 0, "cpu": 4000, "mem_label": False},
        {"gpus": 2, "cpu": 4000, "mem_label": False},
    ],
    "queues": [
        {
            "name": "q0",
            "parent": None,
            "gpu": -1,
            "gpu_limit": -1,
            "gpu_weight": 0,
            "priority": 50,
            "created": 1.0,
            "reclaim_min_runtime": None,
            "preempt_min_runtime": None,
        },
        {
            "name": "q1",
            "parent": "q0",
            "gpu": -1,
            "gpu_limit": -1,
            "gpu_weight": 0,
            "priority": 50,
            "created": 2.0,
            "reclaim_min_runtime": None,
            "preempt_min_runtime": None,
        },
        {
            "name": "q2",
            "parent": "q0",
            "gpu": -1,
            "gpu_limit": -1,
            "gpu_weight": 0,
            "priority": 50,
            "created": 3.0,
            "reclaim_min_runtime": None,
            "preempt_min_runtime": None,
        },
        {
            "name": "q3",
            "parent": "q0",
            "gpu": 1,
            "gpu_limit": -1,
            "gpu_weight": 0,
            "priority": 50,
            "created": 4.0,
            "reclaim_min_runtime": None,
            "preempt_min_runtime": None,
        },
    ],
    "jobs": [
        {
            "name": "j0",
            "queue": "q3",
            "tasks": 2,
            "min_member": 1,
            "shape": 1,
            "priority": 50,
            "preemptible": None,
            "created": 0.0,
            "running": False,
            "start": 9990.0,
            "drop": False,
            "grace": 60.0,
            "releasing": False,
        },
        {
            "name": "j1",
            "queue": "q1",
            "tasks": 2,
            "min_member": 2,
            "shape": 0,
            "priority": 50,
            "preemptible": None,
            "created": 0.0,
            "running": False,
            "start": 9990.0,
            "drop": False,
            "grace": 60.0,
            "releasing": False,
        },
        {
            "name": "j2",
            "queue": "q1",
            "tasks": 1,
            "min_member": 1,
            "shape": 0,
            "priority": 50,
            "preemptible": None,
            "created": 0.0,
            "running": False,
            "start": 9990.0,
            "drop": False,
            "grace": 60.0,
            "releasing": False,
        },
        {
            "name": "j3",
            "queue": "q1",
            "tasks": 1,
            "min_member": 1,
            "shape": 1,
            "priority": 50,
            "preemptible": None,
            "created": 0.0,
            "running": False,
            "start": 9990.0,
            "drop": False,
            "grace": 60.0,
            "releasing": False,
        },
        {
            "name": "j4",
            "queue": "q3",
            "tasks": 1,
            "min_member": 1,
            "shape": 1,
            "priority": 50,
            "preemptible": None,
            "created": 0.0,
            "running": True,
            "start": 9990.0,
            "drop": False,
            "grace": 60.0,
            "releasing": False,
        },
    ],
    "placement": "binpack",
}


def test_queue_within_deserved_keeps_its_running_pods() -> None:
    check_cycle(build(RECLAIM_FROM_WITHIN_DESERVED))


# Found by test_reclaim_invariants: l1 reclaims one GPU at a time for its elastic j11;
# the pipelined pod goes back to Pending, and next cycle l0's own pending elastic pods
# (j6, j7, ...) take the freed GPU first, because l1 is judged by its best job, the
# 3-GPU gang j12 that fits nowhere. One eviction per cycle, never settling.
RECLAIM_FLAPPING = {
    "nodes": [
        {"gpus": 1, "cpu": 16000, "mem_label": False},
        {"gpus": 4, "cpu": 16000, "mem_label": False},
        {"gpus": 4, "cpu": 16000, "mem_label": False},
    ],
    "queues": [
        {
            "name": "q0",
            "parent": None,
            "gpu": -1,
            "gpu_limit": -1,
            "gpu_weight": 1,
            "priority": 100,
            "created": 0.0,
            "cpu": -1,
            "memory": -1,
        },
        {
            "name": "l0",
            "parent": "q0",
            "gpu": 0,
            "gpu_limit": -1,
            "gpu_weight": 1,
            "priority": 100,
            "reclaim_min_runtime": None,
            "created": 1.0,
            "cpu": -1,
            "memory": -1,
        },
        {
            "name": "l1",
            "parent": "q0",
            "gpu": 0,
            "gpu_limit": -1,
            "gpu_weight": 1,
            "priority": 100,
            "reclaim_min_runtime": None,
            "created": 2.0,
            "cpu": -1,
            "memory": -1,
        },
    ],
    "jobs": [
        {
            "name": "j0",
            "queue": "l0",
            "tasks": 2,
            "min_member": 1,
            "shape": 1,
            "priority": 50,
            "preemptible": None,
            "created": 0.0,
            "running": True,
            "start": 9990.0,
            "drop": False,
            "grace": 60.0,
        },
        {
            "name": "j1",
            "queue": "l0",
            "tasks": 1,
            "min_member": 1,
            "shape": 1,
            "priority": 50,
            "preemptible": None,
            "created": 1.0,
            "running": True,
            "start": 9990.0,
            "drop": False,
            "grace": 60.0,
        },
        {
            "name": "j2",
            "queue": "l0",
            "tasks": 1,
            "min_member": 1,
            "shape": 1,
            "priority": 50,
            "preemptible": None,
            "created": 2.0,
            "running": True,
            "start": 9990.0,
            "drop": False,
            "grace": 60.0,
        },
        {
            "name": "j3",
            "queue": "l0",
            "tasks": 1,
            "min_member": 1,
            "shape": 1,
            "priority": 50,
            "preemptible": None,
            "created": 3.0,
            "running": True,
            "start": 9990.0,
            "drop": False,
            "grace": 60.0,
        },
        {
            "name": "j4",
            "queue": "l0",
            "tasks": 1,
            "min_member": 1,
            "shape": 1,
            "priority": 50,
            "preemptible": None,
            "created": 4.0,
            "running": True,
            "start": 9990.0,
            "drop": False,
            "grace": 60.0,
        },
        {
            "name": "j5",
            "queue": "l0",
            "tasks": 1,
            "min_member": 1,
            "shape": 1,
            "priority": 50,
            "preemptible": None,
            "created": 5.0,
            "running": True,
            "start": 9990.0,
            "drop": False,
            "grace": 60.0,
        },
        {
            "name": "j6",
            "queue": "l0",
            "tasks": 3,
            "min_member": 1,
            "shape": 1,
            "priority": 50,
            "preemptible": None,
            "created": 6.0,
            "running": True,
            "start": 9990.0,
            "drop": False,
            "grace": 60.0,
        },
        {
            "name": "j7",
            "queue": "l0",
            "tasks": 2,
            "min_member": 1,
            "shape": 1,
            "priority": 50,
            "preemptible": None,
            "created": 7.0,
            "running": True,
            "start": 9990.0,
            "drop": False,
            "grace": 60.0,
        },
        {
            "name": "j8",
            "queue": "l0",
            "tasks": 1,
            "min_member": 1,
            "shape": 1,
            "priority": 50,
            "preemptible": None,
            "created": 8.0,
            "running": True,
            "start": 9990.0,
            "drop": False,
            "grace": 60.0,
        },
        {
            "name": "j9",
            "queue": "l0",
            "tasks": 2,
            "min_member": 1,
            "shape": 1,
            "priority": 50,
            "preemptible": None,
            "created": 9.0,
            "running": True,
            "start": 9990.0,
            "drop": False,
            "grace": 60.0,
        },
        {
            "name": "j10",
            "queue": "l1",
            "tasks": 1,
            "min_member": 1,
            "shape": 1,
            "priority": 50,
            "preemptible": None,
            "created": 10.0,
            "running": False,
            "start": 9990.0,
            "drop": False,
            "grace": 60.0,
        },
        {
            "name": "j11",
            "queue": "l1",
            "tasks": 3,
            "min_member": 1,
            "shape": 1,
            "priority": 50,
            "preemptible": None,
            "created": 11.0,
            "running": False,
            "start": 9990.0,
            "drop": False,
            "grace": 60.0,
        },
        {
            "name": "j12",
            "queue": "l1",
            "tasks": 3,
            "min_member": 3,
            "shape": 1,
            "priority": 50,
            "preemptible": None,
            "created": 12.0,
            "running": False,
            "start": 9990.0,
            "drop": False,
            "grace": 60.0,
        },
    ],
    "placement": "binpack",
}


def test_reclaim_does_not_flap_against_the_victims_pending_pods() -> None:
    converge(build(RECLAIM_FLAPPING))


# Found by test_reclaim_invariants, same bug as
# test_fraction_is_not_bound_on_a_card_promised_to_a_pipelined_pod, through reclaim:
# j10 (0.5 GPU) is pipelined onto a card freed by evicting j8; then reclaim evicts j7 for
# j11, but j11 is *bound* onto j10's promised card, still held by j8 (and j7 dies for nothing).
RECLAIM_BINDS_ON_BUSY_CARD = {
    "nodes": [
        {"gpus": 1, "cpu": 16000, "mem_label": False},
        {"gpus": 4, "cpu": 16000, "mem_label": False},
        {"gpus": 4, "cpu": 16000, "mem_label": False},
    ],
    "queues": [
        {
            "name": "q0",
            "parent": None,
            "gpu": -1,
            "gpu_limit": -1,
            "gpu_weight": 1,
            "priority": 100,
            "created": 0.0,
            "cpu": -1,
            "memory": -1,
        },
        {
            "name": "l0",
            "parent": "q0",
            "gpu": 0,
            "gpu_limit": -1,
            "gpu_weight": 0,
            "priority": 100,
            "reclaim_min_runtime": None,
            "created": 1.0,
            "cpu": -1,
            "memory": -1,
        },
        {
            "name": "l1",
            "parent": "q0",
            "gpu": -1,
            "gpu_limit": -1,
            "gpu_weight": 0,
            "priority": 100,
            "reclaim_min_runtime": None,
            "created": 2.0,
            "cpu": -1,
            "memory": -1,
        },
    ],
    "jobs": [
        {
            "name": "j0",
            "queue": "l0",
            "tasks": 1,
            "min_member": 1,
            "shape": 1,
            "priority": 50,
            "preemptible": None,
            "created": 0.0,
            "running": True,
            "start": 9990.0,
            "drop": False,
            "grace": 60.0,
        },
        {
            "name": "j1",
            "queue": "l0",
            "tasks": 1,
            "min_member": 1,
            "shape": 1,
            "priority": 50,
            "preemptible": None,
            "created": 1.0,
            "running": True,
            "start": 9990.0,
            "drop": False,
            "grace": 60.0,
        },
        {
            "name": "j2",
            "queue": "l0",
            "tasks": 1,
            "min_member": 1,
            "shape": 1,
            "priority": 50,
            "preemptible": None,
            "created": 2.0,
            "running": True,
            "start": 9990.0,
            "drop": False,
            "grace": 60.0,
        },
        {
            "name": "j3",
            "queue": "l0",
            "tasks": 1,
            "min_member": 1,
            "shape": 1,
            "priority": 50,
            "preemptible": None,
            "created": 3.0,
            "running": True,
            "start": 9990.0,
            "drop": False,
            "grace": 60.0,
        },
        {
            "name": "j4",
            "queue": "l0",
            "tasks": 1,
            "min_member": 1,
            "shape": 1,
            "priority": 50,
            "preemptible": None,
            "created": 4.0,
            "running": True,
            "start": 9990.0,
            "drop": False,
            "grace": 60.0,
        },
        {
            "name": "j5",
            "queue": "l0",
            "tasks": 1,
            "min_member": 1,
            "shape": 1,
            "priority": 50,
            "preemptible": None,
            "created": 5.0,
            "running": True,
            "start": 9990.0,
            "drop": False,
            "grace": 60.0,
        },
        {
            "name": "j6",
            "queue": "l0",
            "tasks": 1,
            "min_member": 1,
            "shape": 1,
            "priority": 50,
            "preemptible": None,
            "created": 6.0,
            "running": True,
            "start": 9990.0,
            "drop": False,
            "grace": 60.0,
        },
        {
            "name": "j7",
            "queue": "l0",
            "tasks": 1,
            "min_member": 1,
            "shape": 1,
            "priority": 50,
            "preemptible": None,
            "created": 7.0,
            "running": True,
            "start": 9990.0,
            "drop": False,
            "grace": 60.0,
        },
        {
            "name": "j8",
            "queue": "l0",
            "tasks": 1,
            "min_member": 1,
            "shape": 1,
            "priority": 50,
            "preemptible": None,
            "created": 8.0,
            "running": True,
            "start": 9990.0,
            "drop": False,
            "grace": 60.0,
        },
        {
            "name": "j9",
            "queue": "l0",
            "tasks": 1,
            "min_member": 1,
            "shape": 1,
            "priority": 50,
            "preemptible": None,
            "created": 9.0,
            "running": True,
            "start": 9990.0,
            "drop": False,
            "grace": 60.0,
        },
        {
            "name": "j10",
            "queue": "l1",
            "tasks": 1,
            "min_member": 1,
            "shape": 3,
            "priority": 50,
            "preemptible": None,
            "created": 10.0,
            "running": False,
            "start": 9990.0,
            "drop": False,
            "grace": 60.0,
        },
        {
            "name": "j11",
            "queue": "l1",
            "tasks": 1,
            "min_member": 1,
            "shape": 3,
            "priority": 50,
            "preemptible": None,
            "created": 11.0,
            "running": False,
            "start": 9990.0,
            "drop": False,
            "grace": 60.0,
        },
    ],
    "placement": "binpack",
}


def test_reclaim_never_binds_onto_a_busy_card() -> None:
    check_cycle(build(RECLAIM_BINDS_ON_BUSY_CARD))


# Found by test_converges_with_releasing_pods: the only card of n3 is shared by j1, which
# is being deleted. j0 (a whole GPU) is pipelined onto that card; then j2 (0.5) is *bound*
# onto the same card, although it is promised to j0. Once j1 is gone, n3 holds j2 and the
# promise to j0 at the same time: 2 cards on a 1-GPU node.
PROMISED_WHOLE_CARD = {
    "nodes": [{"gpus": 1, "cpu": 4000, "mem_label": False}],
    "queues": [
        {"name": "q0", "parent": None, "gpu": -1, "cpu": -1, "memory": -1},
        {"name": "q1", "parent": "q0", "gpu": -1, "cpu": -1, "memory": -1},
    ],
    "jobs": [
        {
            "name": "j0",
            "queue": "q1",
            "tasks": 1,
            "min_member": 1,
            "shape": 1,
            "priority": 50,
            "preemptible": None,
            "created": 0.0,
            "running": False,
            "start": NOW - 10,
            "drop": False,
            "grace": 60.0,
        },
        {
            "name": "j1",
            "queue": "q1",
            "tasks": 1,
            "min_member": 1,
            "shape": 3,
            "priority": 50,
            "preemptible": None,
            "created": 0.0,
            "running": True,
            "start": NOW - 10,
            "drop": False,
            "grace": 60.0,
            "releasing": True,
        },
        {
            "name": "j2",
            "queue": "q1",
            "tasks": 1,
            "min_member": 1,
            "shape": 3,
            "priority": 50,
            "preemptible": None,
            "created": 0.0,
            "running": False,
            "start": NOW - 10,
            "drop": False,
            "grace": 60.0,
        },
    ],
    "placement": "binpack",
}


def test_fraction_does_not_take_a_card_promised_to_a_whole_gpu_pod() -> None:
    snap = build(PROMISED_WHOLE_CARD)
    d = run_cycle(snap)
    assert [t.name for t in d.pipelined] == ["j0-0"]
    check_capacity(snap)
