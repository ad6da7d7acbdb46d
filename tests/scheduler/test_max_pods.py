"""A node's pod limit (status.allocatable.pods): the scheduler places no more pods on a
node than its kubelet admits, counting them as kube-scheduler does: a releasing pod
holds its slot until it is gone, so only a pipelined task may count on that slot."""

from __future__ import annotations

import pytest
from builders import default_queues, job, node, running, snapshot, task

from kai_py.scheduler.cycle import open_session, run_cycle
from kai_py.scheduler.model import Node, Task
from kai_py.scheduler.placement import Placer
from kai_py.scheduler.reasons import POD_SCHEDULING_ERRORS

# A CPU-only, a whole-GPU and a shared-GPU pending pod: each takes another search path.
SHAPES = {
    "cpu": lambda: task("new", cpu=1000),
    "whole-gpu": lambda: task("new", gpu=1),
    "fraction": lambda: task("new", fraction=0.5),
}


def _full_node() -> tuple[Node, list[Task]]:
    """n1: room for many more pods by resources, but pods: 2 and two pods running."""
    n1 = node("n1", gpus=4, cpu=64_000, max_pods=2)
    return n1, [running("n1", cpu=1000, name="r1"), running("n1", cpu=1000, name="r2")]


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_node_with_pods_2_and_two_running_takes_no_third(shape: str) -> None:
    n1, pods = _full_node()
    new = SHAPES[shape]()
    jobs = [job("run", "a", pods), job("new", "a", [new])]
    decisions = run_cycle(snapshot([n1], default_queues("a"), jobs))
    assert decisions.binds == []
    (why,) = [r.message for r in decisions.reasons["job-new"] if r.code == POD_SCHEDULING_ERRORS]
    assert why.endswith("0/1 nodes are available: 1 Too many pods.")


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_the_node_with_a_slot_left_gets_the_pod(shape: str) -> None:
    n1, pods = _full_node()
    # Binpack prefers n1 (fuller). Two slots: a shared pod's fresh card brings a
    # reservation pod.
    n2 = node("n2", gpus=8, cpu=128_000, max_pods=2)
    new = SHAPES[shape]()
    jobs = [job("run", "a", pods), job("new", "a", [new])]
    decisions = run_cycle(snapshot([n1, n2], default_queues("a"), jobs))
    assert [(t.name, t.node_name) for t in decisions.binds] == [("new", "n2")]


def test_a_burst_fills_each_node_up_to_its_limit_and_no_further() -> None:
    nodes = [node("n1", cpu=64_000, max_pods=3), node("n2", cpu=64_000, max_pods=2)]
    jobs = [job(f"j{i}", "a", [task(f"p{i}", cpu=100)]) for i in range(8)]
    decisions = run_cycle(snapshot(nodes, default_queues("a"), jobs))
    placed = sorted(t.node_name or "" for t in decisions.binds)
    assert placed == ["n1", "n1", "n1", "n2", "n2"]


def test_eviction_frees_the_slot_for_a_pipelined_task_and_rollback_takes_it_back() -> None:
    n1, pods = _full_node()
    new = task("new", cpu=1000)
    session = open_session(
        snapshot([n1], default_queues("a"), [job("run", "a", pods), job("new", "a", [new])])
    )
    n1 = session.nodes["n1"]
    assert (n1.pods, n1.pods_releasing, n1.pods_pipelined) == (2, 0, 0)
    assert Placer(session).find(new) is None

    stmt = session.statement()
    stmt.evict(pods[0], "reclaim", None)
    assert (n1.pods, n1.pods_releasing) == (2, 1)  # still there until it is gone
    where = Placer(session).find(new)
    assert where is not None and where.node is n1 and where.pipelined
    stmt.allocate(new, n1, (), pipelined=True)
    assert n1.pods_pipelined == 1
    # The slot the evicted pod frees is promised: none is left, now or later.
    assert n1.pod_slots(False) == 0 and n1.pod_slots(True) == 0

    stmt.rollback()
    assert (n1.pods, n1.pods_releasing, n1.pods_pipelined) == (2, 0, 0)
    assert Placer(session).find(new) is None


def test_taking_back_a_placement_of_this_session_frees_its_slot_at_once() -> None:
    n1 = node("n1", cpu=64_000, max_pods=1)
    first, second = task("first", cpu=100), task("second", cpu=100)
    session = open_session(
        snapshot([n1], default_queues("a"), [job("a1", "a", [first]), job("a2", "a", [second])])
    )
    n1 = session.nodes["n1"]
    stmt = session.statement()
    stmt.allocate(first, n1, (), pipelined=False)
    assert n1.pods == 1 and Placer(session).find(second) is None
    stmt.evict(first, "preempt", None)  # it never started: pending again, nothing to wait for
    assert n1.pods == 0
    where = Placer(session).find(second)
    assert where is not None and not where.pipelined


def test_a_slot_promised_to_pipelined_tasks_is_not_free_now() -> None:
    """pods: 3, one pod staying and one leaving, two tasks pipelined onto the leaving
    one's resources: a third placed now would make four pods once it is gone."""
    n1 = node("n1", cpu=3000, max_pods=3)
    staying, leaving = running("n1", cpu=1000, name="s"), running("n1", cpu=2000, name="l")
    waiting = [task("w1", cpu=1000), task("w2", cpu=1000)]
    empty = task("empty", cpu=0, memory=0)  # fits now by resources: only the slot is missing
    jobs = [job("r", "a", [staying, leaving]), job("w", "a", waiting), job("e", "a", [empty])]
    session = open_session(snapshot([n1], default_queues("a"), jobs))
    n1 = session.nodes["n1"]
    stmt = session.statement()
    stmt.evict(leaving, "reclaim", None)
    for t in waiting:
        where = Placer(session).find(t)
        assert where is not None and where.pipelined
        stmt.allocate(t, where.node, (), pipelined=True)
    assert (n1.pods, n1.pods_releasing, n1.pods_pipelined) == (2, 1, 2)
    assert n1.pod_slots(False) == 0  # one slot free now, but promised
    assert Placer(session).find(empty) is None


def test_a_fresh_shared_card_needs_a_slot_for_its_reservation_pod() -> None:
    """n1 admits 3 pods and runs a half-GPU pod on card 0 (with card 0's reservation
    pod): a second half joins card 0 (one slot), a 0.75 would need a fresh card and
    so two slots."""
    n1 = node("n1", gpus=2, max_pods=3)
    half = running("n1", fraction=0.5, groups=["0"], name="half")
    join, fresh = task("join", fraction=0.5), task("fresh", fraction=0.75)
    jobs = [job("h", "a", [half]), job("j", "a", [join]), job("f", "a", [fresh])]
    session = open_session(snapshot([n1], default_queues("a"), jobs))
    assert session.nodes["n1"].pods == 2
    placer = Placer(session)
    assert placer.find(fresh) is None
    assert "1 Too many pods" in placer.explain(fresh)
    where = placer.find(join)
    assert where is not None and where.groups == ("0",)
    stmt = session.statement()
    stmt.allocate(join, where.node, where.groups, where.pipelined)
    assert session.nodes["n1"].pods == 3
    stmt.rollback()
    assert session.nodes["n1"].pods == 2
