"""Statement: allocate / pipeline / evict apply at once; rollback and commit are exact.

``state`` captures everything a Statement may touch (node totals, GPU groups,
the node index, task fields, queue totals), so a rollback is checked against
the full state, not a few fields.
"""

from __future__ import annotations

from typing import Any

import pytest
from builders import default_queues, job, node, running, snapshot, task
from hypothesis import given, settings
from hypothesis import strategies as st

from kai_py.scheduler.cycle import open_session
from kai_py.scheduler.model import TaskStatus
from kai_py.scheduler.session import Op, Session


def _r(x: Any) -> tuple[float, float, float]:
    return (round(x.cpu, 6), round(x.memory, 3), round(x.gpu, 9))


def state(s: Session) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for n in s.nodes.values():
        out[f"node/{n.name}"] = (
            _r(n.used),
            _r(n.releasing),
            _r(n.pipelined),
            tuple(
                sorted(
                    (
                        g.id,
                        round(g.used, 9),
                        round(g.releasing, 9),
                        round(g.pipelined, 9),
                        round(g.memory_mib, 6),
                        g.tasks,
                    )
                    for g in n.groups.values()
                )
            ),
            tuple(sorted(n.tasks)),
            (n.pods, n.pods_releasing, n.pods_pipelined),
        )
    out["index"] = (dict(s.index._bucket_of), sorted(s.index.releasing))
    for j in s.jobs.values():
        for t in j.tasks:
            out[f"task/{t.uid}"] = (t.status, t.node_name, t.gpu_groups, t.claim_now)
    for q in s.queues.values():
        out[f"queue/{q.name}"] = (_r(q.allocated), _r(q.allocated_non_preemptible))
    return out


def cluster() -> Session:
    """Two GPU nodes; a running whole-GPU job, a running shared pod, a non-preemptible
    running job, and pending whole, fractional and CPU-only pods."""
    nodes = [node("n1", gpus=4, cpu=16_000, gpu_memory_mib=40_000), node("n2", gpus=2)]
    jobs = [
        job("run", "a", [running("n1", gpu=1), running("n1", gpu=1)], priority=50),
        job("half", "a", [running("n1", fraction=0.5, groups=("0",))], priority=50),
        job("np", "b", [running("n2", gpu=1)], priority=125),
        job("pend", "b", [task(gpu=1), task(gpu=1)], priority=50),
        job("frac", "b", [task(fraction=0.25), task(gpu_memory_mib=10_000)], priority=50),
        job("cpu", "a", [task(cpu=2000)], priority=50),
    ]
    return open_session(snapshot(nodes, default_queues("a", "b"), jobs))


def jobs_by_name(s: Session) -> dict[str, Any]:
    return {j.name: j for j in s.jobs.values()}


def test_session_opens_with_running_pods_counted() -> None:
    s = cluster()
    n1 = s.nodes["n1"]
    # two whole GPUs plus one shared card
    assert n1.used.gpu == 3
    assert n1.groups["0"].used == 0.5
    assert s.queues["a"].allocated.gpu == 2.5
    assert s.queues["b"].allocated.gpu == 1
    assert s.queues["b"].allocated_non_preemptible.gpu == 1
    assert s.queues["root"].allocated.gpu == 3.5


def test_allocate_changes_node_queue_and_task() -> None:
    s = cluster()
    j = jobs_by_name(s)["pend"]
    t = j.tasks[0]
    stmt = s.statement()
    stmt.allocate(t, s.nodes["n2"], (), pipelined=False)
    assert t.status is TaskStatus.ALLOCATED and t.node_name == "n2"
    assert s.nodes["n2"].used.gpu == 2
    assert s.queues["b"].allocated.gpu == 2 and s.queues["root"].allocated.gpu == 4.5
    assert s.nodes["n2"].tasks[t.uid] is t


def test_allocate_fraction_joins_a_card_and_rollback_removes_it() -> None:
    s = cluster()
    before = state(s)
    frac = jobs_by_name(s)["frac"].tasks[0]
    stmt = s.statement()
    stmt.allocate(frac, s.nodes["n1"], ("0",), pipelined=False)
    assert s.nodes["n1"].groups["0"].used == pytest.approx(0.75)
    assert s.nodes["n1"].used.gpu == 3  # same card: no new whole device
    assert s.queues["b"].allocated.gpu == pytest.approx(1.25)
    second = jobs_by_name(s)["frac"].tasks[1]
    stmt.allocate(second, s.nodes["n1"], ("1",), pipelined=False)
    (fresh,) = second.gpu_groups  # a card no group sits on gets its own new name
    assert fresh != "1" and s.nodes["n1"].groups[fresh].used == pytest.approx(0.25)  # 10000 MiB
    assert s.nodes["n1"].used.gpu == 4  # a fresh card counts as a whole device
    stmt.rollback()
    assert state(s) == before


def test_evict_moves_resources_to_releasing_and_out_of_the_queue() -> None:
    s = cluster()
    victim = jobs_by_name(s)["run"].tasks[0]
    stmt = s.statement()
    stmt.evict(victim, "reclaim", None)
    n1 = s.nodes["n1"]
    assert victim.status is TaskStatus.EVICTED
    assert n1.used.gpu == 3 and n1.releasing.gpu == 1
    assert s.queues["a"].allocated.gpu == 1.5
    assert "n1" in s.index.releasing


def test_evicting_the_only_holder_of_a_shared_card_releases_the_device() -> None:
    s = cluster()
    half = jobs_by_name(s)["half"].tasks[0]
    stmt = s.statement()
    stmt.evict(half, "preempt", None)
    assert s.nodes["n1"].groups["0"].releasing == 0.5
    assert s.nodes["n1"].releasing.gpu == 1


def test_pipelined_allocation_claims_future_not_idle() -> None:
    s = cluster()
    jobs = jobs_by_name(s)
    stmt = s.statement()
    stmt.evict(jobs["np"].tasks[0], "reclaim", None)
    t = jobs["pend"].tasks[0]
    stmt.allocate(t, s.nodes["n2"], (), pipelined=True)
    n2 = s.nodes["n2"]
    assert t.status is TaskStatus.PIPELINED and not t.claim_now
    assert n2.used.gpu == 1 and n2.pipelined.gpu == 1 and n2.releasing.gpu == 1
    assert n2.free_gpus_future() == 1


def test_pipeline_turns_an_allocation_into_a_pipelined_one_and_back() -> None:
    s = cluster()
    t = jobs_by_name(s)["pend"].tasks[0]
    stmt = s.statement()
    stmt.allocate(t, s.nodes["n2"], (), pipelined=False)
    mid = state(s)
    cp = stmt.checkpoint()
    stmt.pipeline(t)
    assert t.status is TaskStatus.PIPELINED
    # a held-back allocation keeps the idle GPU it took (claim_now): nobody else gets it
    assert t.claim_now
    assert s.nodes["n2"].used.gpu == 2 and s.nodes["n2"].pipelined.gpu == 0
    stmt.rollback(cp)
    assert state(s) == mid


def test_full_rollback_restores_everything() -> None:
    s = cluster()
    before = state(s)
    jobs = jobs_by_name(s)
    stmt = s.statement()
    stmt.evict(jobs["run"].tasks[0], "reclaim", jobs["pend"])
    stmt.evict(jobs["half"].tasks[0], "reclaim", jobs["pend"])
    stmt.allocate(jobs["pend"].tasks[0], s.nodes["n1"], (), pipelined=True)
    stmt.allocate(jobs["pend"].tasks[1], s.nodes["n2"], (), pipelined=False)
    stmt.pipeline(jobs["pend"].tasks[1])
    stmt.allocate(jobs["frac"].tasks[0], s.nodes["n1"], ("0",), pipelined=True)
    stmt.allocate(jobs["cpu"].tasks[0], s.nodes["n2"], (), pipelined=False)
    assert state(s) != before
    stmt.rollback()
    assert state(s) == before
    assert stmt.log == []


def test_nested_checkpoints_restore_each_level() -> None:
    s = cluster()
    jobs = jobs_by_name(s)
    stmt = s.statement()
    s0 = state(s)
    stmt.evict(jobs["run"].tasks[0], "reclaim", None)
    cp1 = stmt.checkpoint()
    s1 = state(s)
    stmt.allocate(jobs["pend"].tasks[0], s.nodes["n1"], (), pipelined=True)
    stmt.evict(jobs["half"].tasks[0], "reclaim", None)
    cp2 = stmt.checkpoint()
    s2 = state(s)
    stmt.allocate(jobs["frac"].tasks[0], s.nodes["n1"], ("0",), pipelined=True)
    stmt.allocate(jobs["pend"].tasks[1], s.nodes["n2"], (), pipelined=False)
    stmt.rollback(cp2)
    assert state(s) == s2
    # and after rolling back, going forward again works
    stmt.allocate(jobs["cpu"].tasks[0], s.nodes["n2"], (), pipelined=False)
    stmt.rollback(cp2)
    assert state(s) == s2
    stmt.rollback(cp1)
    assert state(s) == s1
    stmt.rollback(0)
    assert state(s) == s0


def test_commit_keeps_the_state_and_records_the_operations() -> None:
    s = cluster()
    jobs = jobs_by_name(s)
    stmt = s.statement()
    stmt.evict(jobs["run"].tasks[0], "reclaim", jobs["pend"])
    stmt.allocate(jobs["pend"].tasks[0], s.nodes["n1"], (), pipelined=True)
    assert stmt.has_evictions
    after = state(s)
    stmt.commit()
    assert state(s) == after
    assert stmt.log == [] and not stmt.has_evictions
    assert [r.op for r in s.committed] == [Op.EVICT, Op.ALLOCATE]
    assert s.committed[0].by is jobs["pend"] and s.committed[0].action == "reclaim"
    # a rollback after commit undoes nothing
    stmt.rollback()
    assert state(s) == after


def test_two_statements_rollback_of_the_second_keeps_the_first() -> None:
    s = cluster()
    jobs = jobs_by_name(s)
    first = s.statement()
    first.allocate(jobs["pend"].tasks[0], s.nodes["n2"], (), pipelined=False)
    first.commit()
    kept = state(s)
    second = s.statement()
    second.allocate(jobs["pend"].tasks[1], s.nodes["n1"], (), pipelined=False)
    second.evict(jobs["run"].tasks[1], "preempt", None)
    second.rollback()
    assert state(s) == kept


def test_non_preemptible_totals_follow_evictions() -> None:
    s = cluster()
    stmt = s.statement()
    stmt.evict(jobs_by_name(s)["np"].tasks[0], "stalegangeviction", None)
    assert s.queues["b"].allocated_non_preemptible.gpu == 0
    stmt.rollback()
    assert s.queues["b"].allocated_non_preemptible.gpu == 1


def test_evicting_a_pod_placed_in_this_session_makes_it_pending_again() -> None:
    s = cluster()
    before = state(s)
    stmt = s.statement()
    pend = jobs_by_name(s)["pend"].tasks[0]
    stmt.allocate(pend, s.nodes["n2"], (), pipelined=False)
    placed = state(s)
    stmt.evict(pend, "reclaim", None)
    assert pend.status is TaskStatus.PENDING and pend.node_name is None
    assert stmt.log[-1].unplaced
    # Nothing is being released: the placement is simply undone.
    assert state(s) == before
    stmt.rollback(1)
    assert state(s) == placed
    frac = jobs_by_name(s)["frac"].tasks[0]
    stmt.allocate(frac, s.nodes["n1"], ("0",), pipelined=True)
    stmt.pipeline(pend)
    placed = state(s)
    stmt.evict(frac, "reclaim", None)
    stmt.evict(pend, "reclaim", None)
    stmt.rollback(3)
    assert state(s) == placed


# ---------------------------------------------------------------- property
OPS = st.lists(
    st.tuples(
        st.sampled_from(["alloc", "pipe_alloc", "evict", "take_back", "pipeline", "cp", "rb"]),
        st.integers(0, 50),
    ),
    max_size=25,
)


@settings(max_examples=150, deadline=None)
@given(OPS)
def test_random_operation_sequences_roll_back_exactly(ops: list[tuple[str, int]]) -> None:
    """Any sequence of operations and nested rollbacks leaves exactly the checkpointed state."""
    s = cluster()
    stmt = s.statement()
    marks: list[tuple[int, dict[str, Any]]] = [(0, state(s))]
    all_tasks = [t for j in s.jobs.values() for t in j.tasks]
    nodes = list(s.nodes.values())
    for op, k in ops:
        if op in ("alloc", "pipe_alloc"):
            pending = [t for t in all_tasks if t.status is TaskStatus.PENDING]
            if not pending:
                continue
            t = pending[k % len(pending)]
            n = nodes[k % len(nodes)]
            groups = (str(k % 3),) if t.is_shared else ()
            if t.gpu_memory_mib and n.gpu_memory_mib <= 0:
                continue
            stmt.allocate(t, n, groups, pipelined=op == "pipe_alloc")
        elif op == "evict":
            live = [t for t in all_tasks if t.status is TaskStatus.RUNNING]
            if live:
                stmt.evict(live[k % len(live)], "reclaim", None)
        elif op == "take_back":
            placed = [
                t for t in all_tasks if t.status in (TaskStatus.ALLOCATED, TaskStatus.PIPELINED)
            ]
            if placed:
                stmt.evict(placed[k % len(placed)], "reclaim", None)
        elif op == "pipeline":
            allocated = [t for t in all_tasks if t.status is TaskStatus.ALLOCATED]
            if allocated:
                stmt.pipeline(allocated[k % len(allocated)])
        elif op == "cp":
            marks.append((stmt.checkpoint(), state(s)))
        elif op == "rb" and len(marks) > 1:
            i = k % (len(marks) - 1) + 1
            cp, expected = marks[i]
            del marks[i + 1 :]  # later checkpoints are gone with the rollback
            stmt.rollback(cp)
            assert state(s) == expected
    for cp, expected in reversed(marks):
        stmt.rollback(cp)
        assert state(s) == expected
