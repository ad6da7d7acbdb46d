"""Work the actions skip when it cannot change a decision gives the same decisions.

Each shortcut is switched off (the slow path forced) and the whole cycle's decisions
(binds with their nodes and cards, pipelined pods, evictions, events, reasons, queue
figures) must be the same, on varied clusters where the shortcut is taken.
"""

from __future__ import annotations

import copy
import random

import pytest
from builders import job, node, queue, snapshot, task

from kai_py.scheduler import reasons
from kai_py.scheduler.actions import consolidation, preempt, reclaim
from kai_py.scheduler.cycle import run_cycle
from kai_py.scheduler.model import DEFAULT_ACTIONS, Job, Snapshot, TaskStatus
from kai_py.scheduler.session import Decisions


def canonical(d: Decisions) -> dict[str, object]:
    """Everything a cycle decided, in order, as plain values."""

    def placed(tasks: list) -> list[tuple[object, ...]]:  # type: ignore[type-arg]
        return [(t.uid, t.node_name, t.gpu_groups, t.status.name) for t in tasks]

    return {
        "binds": placed(d.binds),
        "pipelined": placed(d.pipelined),
        "evictions": [
            (e.task.uid, e.action, e.by.uid if e.by else None, e.message, e.moved_to)
            for e in d.evictions
        ],
        "events": [(e.kind, e.object, e.type, e.reason, e.message) for e in d.events],
        "reasons": [
            (uid, [(r.code, r.message, repr(r.details)) for r in why])
            for uid, why in d.reasons.items()
        ],
        "queues": [(name, repr(figures)) for name, figures in d.queues.items()],
        "stale": list(d.stale_since.items()),
        "pending": list(d.pending_reasons.items()),
    }


def _pending_only(seed: int) -> Snapshot:
    """A cluster with nothing running yet (a cold start): more pending work than room,
    of several priorities, gangs and elastic jobs, whole and shared GPUs, queues with
    and without quota and limits, preemptible and not."""
    rng = random.Random(seed)
    nodes = [node(f"n{i}", gpus=rng.choice((2, 4, 8))) for i in range(rng.randint(2, 8))]
    queues = [queue("dept", gpu=rng.choice((0, 8, -1)))]
    for i in range(4):
        queues.append(
            queue(
                f"q{i}",
                "dept",
                gpu=rng.choice((0, 2, 4, 8)),
                gpu_limit=rng.choice((-1, -1, 6)),
                priority=rng.choice((100, 120)),
                created=float(i),
                preempt_min_runtime=rng.choice((None, 30.0)),
            )
        )
    jobs: list[Job] = []
    for j in range(rng.randint(5, 25)):
        size = rng.choice((1, 1, 2, 3, 4))
        shared = rng.random() < 0.15
        tasks = [
            task(gpu=0 if shared else rng.choice((1, 1, 2, 4)), fraction=0.5 if shared else 0.0)
            for _ in range(size)
        ]
        jobs.append(
            job(
                f"j{j}",
                f"q{rng.randrange(4)}",
                tasks,
                priority=rng.choice((50, 75, 100, 125)),
                preemptible=rng.choice((None, None, True, False)),
                min_member=rng.choice((size, size, max(1, size - 1), 0)),
                created=float(j),
            )
        )
    return snapshot(nodes, queues, jobs)


@pytest.mark.parametrize("seed", range(40))
def test_actions_with_no_pod_to_take_decide_as_their_searches_would(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    snap = _pending_only(seed)
    again = copy.deepcopy(snap)  # the same pods, uids and all
    fast = canonical(run_cycle(snap))
    with monkeypatch.context() as m:
        for module in (consolidation, reclaim, preempt):
            m.setattr(module, "any_held", lambda _session: True)
        slow = canonical(run_cycle(again))
    assert fast == slow


@pytest.mark.parametrize("actions", [DEFAULT_ACTIONS, ("reclaim", "preempt")])
@pytest.mark.parametrize("seed", range(40))
def test_walks_in_any_order_when_the_order_shows_nowhere_decide_as_in_queue_order(
    seed: int, actions: tuple[str, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without allocate before them, no job has a reason yet: the walks keep their order."""
    snap = _pending_only(seed)
    snap.config.actions = actions
    again = copy.deepcopy(snap)
    fast = canonical(run_cycle(snap))
    with monkeypatch.context() as m:
        m.setattr(preempt, "unordered_preemptors", lambda *_, **__: None)
        m.setattr(reclaim, "_unordered", lambda _session: None)
        slow = canonical(run_cycle(again))
    assert fast == slow


@pytest.mark.interpreted
def test_the_unordered_walks_are_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    taken: list[str] = []
    for module, name in ((preempt, "unordered_preemptors"), (reclaim, "_unordered")):
        original = getattr(module, name)

        def spy(*args: object, _original: object = original, **kw: object) -> object:
            found = _original(*args, **kw)  # type: ignore[operator]
            taken.append("unordered" if found else "ordered")
            return found

        monkeypatch.setattr(module, name, spy)
    for seed in range(40):
        run_cycle(_pending_only(seed))
    assert taken.count("unordered") > 40 and "ordered" in taken


def test_the_inputs_reach_the_explanations_of_reclaim_and_preempt() -> None:
    """The clusters above do take the shortcuts: jobs that may reclaim or preempt
    (candidates of lower priority wait in their queue) are told why they did not."""
    said: set[str] = set()
    for seed in range(40):
        d = run_cycle(_pending_only(seed))
        for why in d.reasons.values():
            for r in why:
                if r.code == reasons.NO_RECLAIM and "no other queue" in r.message:
                    said.add("reclaim")
                if r.code == reasons.NO_PREEMPT and "would not free" in r.message:
                    said.add("preempt")
    assert said == {"reclaim", "preempt"}


def test_reclaim_keeps_its_order_when_the_share_check_would_move_a_total() -> None:
    """Adding a step to a queue's total and taking it off again may not give back the
    same float; the totals then depend on the order of the jobs, which is kept."""
    from kai_py.scheduler.actions.allocate import allocate
    from kai_py.scheduler.cycle import open_session
    from kai_py.scheduler.placement import Placer

    for seed in range(40):
        session = open_session(_pending_only(seed))
        allocate(session, Placer(session))
        jobs = reclaim._unordered(session)
        if jobs:
            break
    assert jobs
    waiting = jobs[0]
    session.queues[waiting.queue].allocated.cpu += 0.1  # (x + 0.1) + 1000 - 1000 moves
    assert reclaim._unordered(session) is None


def test_stale_gang_eviction_answers_for_every_job_as_the_rule_says() -> None:
    """The loop passes over jobs with nothing running before counting their pods; it
    still says of each job whether it is stale, as the plain rule does."""
    rng = random.Random(8)
    for _ in range(30):
        jobs: list[Job] = []
        for j in range(12):
            pods = [
                task(
                    gpu=1,
                    status=rng.choice(
                        (TaskStatus.PENDING, TaskStatus.RUNNING, TaskStatus.RELEASING)
                    ),
                    node_name="n",
                    start_time=0.0,
                )
                for _ in range(rng.randint(1, 4))
            ]
            for pod in pods:
                if pod.status is TaskStatus.PENDING:
                    pod.node_name = None
            jobs.append(
                job(
                    f"g{j}",
                    "q",
                    pods,
                    min_member=rng.randint(1, 5),
                    stale_since=rng.choice((None, 900.0)),
                    staleness_grace=1e9,
                )
            )
        snap = snapshot([node("n", gpus=64)], [queue("q")], jobs)
        snap.config.actions = ("stalegangeviction",)
        d = run_cycle(snap)
        expected: dict[str, float | None] = {}
        for j in jobs:
            running = any(t.status is TaskStatus.RUNNING for t in j.tasks)
            active = sum(t.status in (TaskStatus.RUNNING, TaskStatus.RELEASING) for t in j.tasks)
            stale = running and active < j.min_member and not j.succeeded
            expected[j.uid] = (j.stale_since or snap.now) if stale else None
        assert d.stale_since == expected
