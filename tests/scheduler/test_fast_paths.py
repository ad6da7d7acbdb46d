"""The hot paths written out for speed agree with the readable forms they replace.

queue_key, demand, next tasks, a task's shape and the picker's kept candidates are
each checked against a plain computation on varied inputs, so a later change to one
form that forgets the other shows here.
"""

from __future__ import annotations

import heapq
import random
from typing import Any

import pytest
from builders import job, node, queue, running, snapshot, task

from kai_py.scheduler.actions.common import demand, needed, next_tasks, next_tasks_of
from kai_py.scheduler.actions.evicting import victim_cost
from kai_py.scheduler.actions.victims import VictimPool
from kai_py.scheduler.cycle import open_session, run_cycle
from kai_py.scheduler.fairshare import allocatable_share, dominant_share
from kai_py.scheduler.model import (
    ALLOCATED,
    EVICTED,
    PENDING,
    RELEASING,
    RUNNING,
    Job,
    Queue,
    Shape,
    Task,
    Toleration,
)
from kai_py.scheduler.ordering import JobPicker, WeakerShare, queue_key
from kai_py.scheduler.resources import EPS, INF, RESOURCE_NAMES, Res
from kai_py.scheduler.session import Session


def readable_queue_key(q: Queue, extra: Res) -> tuple[object, ...]:
    """KAI's queue order as the docs state it, over the fairshare helpers."""
    return (
        all(q.allocated.get(r) > q.fair_share.get(r) + EPS for r in RESOURCE_NAMES),
        not (q.allocated + extra).fits_in(q.deserved),
        -q.priority,
        any(
            allocatable_share(q, r) <= EPS and q.allocated.get(r) + extra.get(r) > EPS
            for r in RESOURCE_NAMES
        ),
        dominant_share(q, extra),
        dominant_share(q),
        WeakerShare(q),
        q.created,
        q.name,
    )


def _value(rng: random.Random) -> float:
    return rng.choice((0.0, 0.5, 1.0, 2.0, 3.0, 8.0, 12.5, INF))


def _random_queue(rng: random.Random, name: str) -> Queue:
    q = queue(name, "root", priority=rng.choice((50, 100)), created=rng.random())
    for attr in ("allocated", "fair_share", "deserved", "limit"):
        values = [_value(rng) for _ in range(3)]
        if attr == "allocated":
            values = [v if v != INF else 1.0 for v in values]
        setattr(q, attr, Res(*values))
    return q


def test_queue_key_matches_the_readable_rules() -> None:
    rng = random.Random(7)
    for i in range(2000):
        q = _random_queue(rng, f"q{i}")
        extra = Res(
            rng.choice((0.0, 1.0, 4.0)), rng.choice((0.0, 1.0)), rng.choice((0.0, 1.0, 2.0))
        )
        fast, slow = queue_key(q, extra), readable_queue_key(q, extra)
        assert fast[:6] == slow[:6] and fast[7:] == slow[7:], (q, extra)
        assert fast[6].shares == WeakerShare(q).shares  # type: ignore[attr-defined]


def test_sorting_by_either_key_gives_the_same_order() -> None:
    rng = random.Random(11)
    for _ in range(200):
        qs = [_random_queue(rng, f"q{i}") for i in range(6)]
        extra = Res(0.0, 0.0, rng.choice((1.0, 2.0)))
        assert [q.name for q in sorted(qs, key=lambda q: queue_key(q, extra))] == [
            q.name for q in sorted(qs, key=lambda q: readable_queue_key(q, extra))
        ]


def _mixed_job(rng: random.Random, name: str) -> Job:
    tasks = []
    for t in range(rng.randint(1, 6)):
        if rng.random() < 0.3:
            tasks.append(running("n", gpu=1))
        else:
            tasks.append(
                task(
                    gpu=rng.choice((0, 1, 2)),
                    cpu=rng.choice((100, 200)),
                    name=f"{name}-{rng.randint(0, 3)}-{t}",
                    role=rng.choice(("worker", "master")),
                )
            )
        tasks[-1].created = rng.choice((0.0, 1.0))
    return job(name, "a", tasks, min_member=rng.randint(1, len(tasks)))


def test_demand_and_next_tasks_match_a_fresh_sort() -> None:
    rng = random.Random(3)
    jobs = [_mixed_job(rng, f"j{i}") for i in range(60)]
    s = open_session(snapshot([node("n", gpus=64)], [queue("root"), queue("a", "root")], jobs))
    for j in s.jobs.values():
        for count in range(0, len(j.tasks) + 1):
            assert next_tasks_of(s, j, count) == next_tasks(j, count)
        want = Res()
        for t in next_tasks(j, needed(j)):
            want.add(s.task_res(t, None))
        assert demand(s, j) == want
        assert demand(s, j) is demand(s, j, needed(j))


def test_a_plain_task_has_the_shape_its_fields_make() -> None:
    plain = Task("u", "ns", "p", "j", Res(1, 1, 1))
    assert plain.shape is Shape.of(plain._make_shape())
    tolerant = Task("v", "ns", "p", "j", Res(1, 1, 1), tolerations=(Toleration("k"),))
    assert tolerant.shape is Shape.of(tolerant._make_shape())
    assert tolerant.shape is not plain.shape


def test_picker_with_kept_candidates_pops_as_a_full_walk() -> None:
    """Changes between pops must not leave a stale candidate: the popped job placed (the
    allocate loop) or other queues' pods evicted (what reclaim does between the jobs
    that ``preemptors`` hands out)."""
    rng = random.Random(5)
    qs = [queue("root"), queue("d1", "root"), queue("d2", "root")]
    qs += [queue(f"l{i}", "d1" if i % 2 else "d2", gpu=2, created=float(i)) for i in range(6)]
    jobs = [
        job(f"j{i}", f"l{rng.randrange(6)}", [task(gpu=rng.choice((1, 2)))], created=float(i))
        for i in range(40)
    ]
    jobs += [job(f"r{i}", f"l{i % 6}", [running("n", gpu=1)]) for i in range(24)]
    s = open_session(snapshot([node("n", gpus=200)], qs, jobs))
    pending = [j for j in s.jobs.values() if j.pending_tasks]
    picker = JobPicker(s, pending, lambda j: demand(s, j))
    while (picked := picker.pop()) is not None:
        expected = _full_walk(s, [j for j in pending if _waiting(j, picker)] + [picked])
        assert picked is expected
        stmt = s.statement()
        if rng.random() < 0.5:  # place it, as allocate would
            for t in picked.tasks:
                stmt.allocate(t, s.nodes["n"], (), False)
        else:  # evict a running pod of some queue, as a victim search would
            held = [t for j in s.jobs.values() for t in j.tasks if t.status.name == "RUNNING"]
            if held:
                stmt.evict(rng.choice(held), "reclaim", picked)
        stmt.commit()


def _waiting(j: Job, picker: JobPicker) -> bool:
    return any(j is entry[1] for heap in picker._heaps.values() for entry in heap)


def _full_walk(s: Session, jobs: list[Job]) -> Job:
    """The job a walk from the root with no kept state picks among ``jobs``: a picker of
    its own, with the session's memos (demands, keys) set aside meanwhile."""
    kept, s.memo = s.memo, {}
    try:
        fresh = JobPicker(s, jobs, lambda j: demand(s, j))
        found = fresh.pop()
    finally:
        s.memo = kept
    assert found is not None
    return found


def test_statuses_as_module_names_are_the_members() -> None:
    t = Task("u", "ns", "p", "j", Res())
    assert t.status is PENDING


def test_victims_in_queue_order_start_past_only_units_gone_for_good() -> None:
    """Each walk of ``units_in_queue_order`` starts past the units of earlier commits;
    it hands out what a walk from each queue's first unit does, while victims anywhere
    in the line are evicted and committed one after the other."""
    rng = random.Random(3)
    qs = [queue("root"), queue("d1", "root"), queue("d2", "root")]
    qs += [queue(f"l{i}", "d1" if i % 2 else "d2", gpu=2, created=float(i)) for i in range(4)]
    jobs = []
    for i in range(30):
        size = rng.choice((1, 1, 2, 3))
        pods = [running("n", gpu=1, start_time=float(rng.randrange(50))) for _ in range(size)]
        jobs.append(job(f"v{i}", f"l{i % 4}", pods, min_member=rng.randint(1, size)))
    s = open_session(snapshot([node("n", gpus=200)], qs, jobs))
    pool = VictimPool(s, "reclaim", s.jobs.values(), victim_cost, lambda t: True)
    names = sorted(pool.queues)
    while True:
        fast = list(pool.units_in_queue_order(s, names))
        start = {name: 0 for name in names if pool._in_order(name)}
        assert fast == list(pool._walk_in_queue_order(s, start, None))
        if not fast:
            break
        stmt = s.statement()
        # The first in line most often (what reclaim takes), sometimes one further on.
        unit = fast[0] if rng.random() < 0.6 else rng.choice(fast)
        for t in unit.tasks:
            if t.status is RUNNING:
                stmt.evict(t, "reclaim", None)
        stmt.commit()


def _units_from_the_start(pool: VictimPool, names: list[str], keep: Any) -> list[object]:
    """``VictimPool.units`` as a merge of every queue's whole lists (before the walks
    started past the units gone for good)."""
    found: list[object] = []
    for table in (pool._surplus, pool._gangs):
        lists = [table[q] for q in names if q in table]
        for _, _, unit in heapq.merge(*lists, key=lambda e: (e[0], e[1])):
            if any(t.status is RUNNING for t in unit.tasks) and (keep is None or keep(unit.job)):
                found.append(unit)
    return found


def test_victims_cheapest_first_start_past_only_units_gone_for_good() -> None:
    """Each ``units`` walk (preempt, consolidation) hands out what a merge of every
    queue's whole lists does, while victims anywhere in the line are evicted and
    committed, a search's tentative evictions are rolled back, and placed jobs are
    taken in again."""
    rng = random.Random(5)
    qs = [queue("root"), *(queue(f"l{i}", "root", gpu=2, created=float(i)) for i in range(3))]
    jobs = []
    for i in range(36):
        size = rng.choice((1, 1, 2, 3))
        pods = [running("n", gpu=1, start_time=float(rng.randrange(50))) for _ in range(size)]
        jobs.append(
            job(f"v{i}", f"l{i % 3}", pods, min_member=rng.randint(1, size), priority=i % 4)
        )
    s = open_session(snapshot([node("n", gpus=200)], qs, jobs))
    pool = VictimPool(s, "preempt", s.jobs.values(), victim_cost, lambda t: True)
    names = sorted(pool.queues)
    rounds = 0
    while True:
        keep = (lambda j: j.priority < 3) if rounds % 2 else None
        walk = pool.units(names, keep)
        # A search opens its statement after the walk starts: what it evicts and rolls
        # back is not gone.
        tentative = s.statement()
        expected = _units_from_the_start(pool, names, keep)
        if expected:
            for t in rng.choice(expected).tasks:  # type: ignore[attr-defined]
                if t.status is RUNNING:
                    tentative.evict(t, "preempt", None)
        assert list(walk) == _units_from_the_start(pool, names, keep)
        tentative.rollback()
        fast = list(pool.units(names, keep))
        assert fast == expected
        if not fast:
            break
        stmt = s.statement()
        unit = fast[0] if rng.random() < 0.6 else rng.choice(fast)
        for t in unit.tasks:  # type: ignore[attr-defined]
            if t.status is RUNNING:
                stmt.evict(t, "preempt", None)
        stmt.commit()
        if rounds % 5 == 4:
            pool.refresh(list(s.jobs.values()))  # lists rebuilt: nothing known gone
        rounds += 1
    assert rounds > 20


def _replayed_set_up(session: Session) -> None:
    """Set-up as the per-task calls make it: every total zeroed, then each task of each
    job added with _node_add / _queue_add / _queue_request, in the session's order."""
    for q in session.queues.values():
        q.allocated, q.allocated_non_preemptible, q.request = Res(), Res(), Res()
    for n in session.nodes.values():
        n.used, n.releasing, n.pipelined, n.groups, n.tasks = Res(), Res(), Res(), {}, {}
    for j in session.jobs.values():
        for t in j.tasks:
            if t.status is PENDING:
                if not j.errors:
                    session._queue_request(j, t, None)
                continue
            where = session.nodes.get(t.node_name) if t.node_name else None
            if t.status.holds_resources and where is not None:
                session._node_add(where, t)
                if t.status is RUNNING:
                    session._queue_add(j, t.gpu_on(where), t)
                    session._queue_request(j, t, where)


def _totals(session: Session) -> list[object]:
    figures: list[object] = []
    for q in session.queues.values():
        for r in (q.allocated, q.allocated_non_preemptible, q.request):
            figures.append((q.name, r.cpu, r.memory, r.gpu))
    for n in session.nodes.values():
        for r in (n.used, n.releasing, n.pipelined):
            figures.append((n.name, r.cpu, r.memory, r.gpu))
        figures.append((n.name, sorted(n.tasks)))
        groups = n.groups.values()
        figures.append(
            (n.name, sorted((g.id, g.used, g.releasing, g.memory_mib, g.tasks) for g in groups))
        )
    return figures


def test_written_out_set_up_makes_the_totals_of_the_per_task_calls() -> None:
    """Session set-up is written out for running and pending tasks; its figures must be
    the very floats the per-task calls give (same additions, same order), over
    releasing, allocated, shared, errored, non-preemptible and off-cluster tasks."""
    rng = random.Random(11)
    statuses = (PENDING, RUNNING, RUNNING, RUNNING, RELEASING, ALLOCATED, EVICTED)
    for _ in range(60):
        nodes = [node(f"n{i}", gpus=8, gpu_memory_mib=40960) for i in range(4)]
        queues = [queue("root"), queue("a", "root"), queue("b", "root"), queue("a1", "a")]
        jobs: list[Job] = []
        for j in range(rng.randint(1, 8)):
            tasks = []
            for _t in range(rng.randint(1, 5)):
                status = rng.choice(statuses)
                kind = rng.choice(("whole", "whole", "fraction", "memory"))
                where = (
                    None if status is PENDING else rng.choice([n.name for n in nodes] + ["gone"])
                )
                t = task(
                    status=status,
                    node_name=where,
                    gpu=rng.choice((1.0, 2.0)) if kind == "whole" else 0.0,
                    cpu=rng.choice((100.0, 250.0, 1000.0)),
                    fraction=0.3 if kind == "fraction" else 0.0,
                    gpu_memory_mib=7000.0 if kind == "memory" else 0.0,
                    groups=(f"g{rng.randint(0, 2)}",)
                    if kind != "whole" and where and rng.random() < 0.7
                    else (),
                )
                t.stuck = rng.random() < 0.1
                tasks.append(t)
            made = job(f"j{j}", rng.choice(("a", "b", "a1")), tasks, priority=rng.choice((50, 150)))
            if rng.random() < 0.1:
                made.errors.append("bad pod")
            jobs.append(made)
        s = open_session(snapshot(nodes, queues, jobs))
        written_out = _totals(s)
        _replayed_set_up(s)
        assert written_out == _totals(s)
        assert any(q.allocated.gpu for q in s.queues.values()) or not any(
            t.status is RUNNING and t.node_name != "gone" for j in jobs for t in j.tasks
        )


@pytest.mark.interpreted
def test_pending_jobs_from_those_pending_at_set_up_are_those_a_full_scan_finds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``pending_jobs`` looks only at the jobs pending at set-up (a task becomes pending
    again only by an undo): in every action of full cycles that allocate, reclaim,
    preempt, consolidate and undo, it must give what a scan of every job gives."""
    from kai_py.scheduler.actions import allocate, evicting, preempt, reclaim

    asked: list[int] = []
    from_set_up = allocate.pending_jobs

    def checked(session: Session) -> list[Job]:
        found = from_set_up(session)
        assert found == [j for j in session.jobs.values() if allocate.has_pending(j)]
        asked.append(len(found))
        return found

    for module in (allocate, evicting, preempt, reclaim):
        monkeypatch.setattr(module, "pending_jobs", checked)
    rng = random.Random(5)
    for _ in range(40):
        nodes = [node(f"n{i}", gpus=4) for i in range(3)]
        queues = [queue("root"), queue("a", "root", gpu=6), queue("b", "root", gpu=6)]
        jobs: list[Job] = []
        for j in range(rng.randint(2, 9)):
            tasks = [
                running(rng.choice([n.name for n in nodes]), gpu=1.0)
                if rng.random() < 0.5
                else task(gpu=rng.choice((1.0, 2.0)))
                for _t in range(rng.randint(1, 4))
            ]
            jobs.append(
                job(
                    f"j{j}",
                    rng.choice(("a", "b")),
                    tasks,
                    priority=rng.choice((50, 50, 150)),
                    min_member=rng.randint(1, len(tasks)),
                )
            )
        run_cycle(snapshot(nodes, queues, jobs))
    assert sum(asked) > 100  # the actions did ask, with pending jobs to give
