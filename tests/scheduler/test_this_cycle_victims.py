"""Placements made earlier in the same cycle can be victims, as in KAI.

A pod that allocate bound or pipelined a moment ago holds its resources for
the rest of the cycle and counts for its queue; reclaim and preempt may take
it back like a running pod. Since it was never started, taking it back only
undoes the placement: the pod is pending again, neither bound nor evicted.

kai-py does not do this by default (``victims.THIS_CYCLE_VICTIMS``: on a busy cycle
fruitless searches over this cycle's placements spend the search budget); these tests
turn it on, and the last one shows the default.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from builders import job, node, queue, running, snapshot, task

from kai_py.scheduler.actions import victims
from kai_py.scheduler.cycle import run_cycle
from kai_py.scheduler.model import Job, TaskStatus
from kai_py.scheduler.session import Decisions


@pytest.fixture(autouse=True)
def this_cycle_victims(request: pytest.FixtureRequest) -> Iterator[None]:
    if request.node.name.startswith("test_by_default"):
        yield
        return
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(victims, "THIS_CYCLE_VICTIMS", True)
        yield


def _names(tasks: object) -> set[str]:
    return {t.name for t in tasks}  # type: ignore[attr-defined]


def _evicted(d: Decisions) -> set[str]:
    return {e.task.name for e in d.evictions}


def test_reclaim_takes_back_a_pod_allocate_bound_in_the_same_cycle() -> None:
    # n1 has two cards: a-old runs on one; a-new takes the other in allocate, because
    # b-big (two cards, queue b within its quota) does not fit at that point.
    a_old = job("a-old", "a", [running("n1", gpu=1, name="a-old-0")])
    a_new = job("a-new", "a", [task(gpu=1, name="a-new-0")], created=5.0)
    b_big = job("b-big", "b", [task(gpu=1, name="b-0"), task(gpu=1, name="b-1")], priority=50)
    snap = snapshot([node("n1", gpus=2)], [queue("a"), queue("b", gpu=2)], [a_old, a_new, b_big])
    d = run_cycle(snap)
    assert _names(d.pipelined) == {"b-0", "b-1"}
    assert {t.node_name for t in d.pipelined} == {"n1"}
    # The running pod is evicted; the pod placed in this cycle simply stays pending.
    assert _evicted(d) == {"a-old-0"}
    assert "a-new-0" not in _names(d.binds)
    new_task = a_new.tasks[0]
    assert new_task.status is TaskStatus.PENDING and new_task.node_name is None
    # Queue a holds nothing any more; b holds its two cards (pipelined).
    assert d.queues["a"].allocated.gpu == 0
    assert d.queues["b"].allocated.gpu == 2


def test_reclaim_takes_back_a_pod_pipelined_in_the_same_cycle() -> None:
    # One card of n1 is being released; allocate pipelines a-new there.
    leaving = job("leaving", "a", [running("n1", gpu=1, name="leaving-0")])
    leaving.tasks[0].status = TaskStatus.RELEASING
    a_old = job("a-old", "a", [running("n1", gpu=1, name="a-old-0")])
    a_new = job("a-new", "a", [task(gpu=1, name="a-new-0")], created=5.0)
    b_big = job("b-big", "b", [task(gpu=1, name="b-0"), task(gpu=1, name="b-1")])
    snap = snapshot(
        [node("n1", gpus=2)], [queue("a"), queue("b", gpu=2)], [leaving, a_old, a_new, b_big]
    )
    d = run_cycle(snap)
    assert _names(d.pipelined) == {"b-0", "b-1"}
    assert _evicted(d) == {"a-old-0"}
    # The pipelined pod went back to pending: no longer promised the releasing card.
    assert a_new.tasks[0].status is TaskStatus.PENDING
    assert "a-new-0" not in _names(d.pipelined) | _names(d.binds)


def _two_queue_cluster(new_priority: int) -> tuple[Job, Job, Decisions]:
    a_new = job("a-new", "a", [task(gpu=1, name="a-new-0")], priority=new_priority)
    a_high = job("a-high", "a", [task(gpu=2, name="a-high-0")], priority=new_priority + 10)
    snap = snapshot(
        [node("n1", gpus=2), node("n2", gpus=1)],
        [queue("a", gpu=3)],
        [
            job("a-run", "a", [running("n1", gpu=1, name="a-run-0")], priority=new_priority),
            a_new,
            a_high,
        ],
    )
    return a_new, a_high, run_cycle(snap)


def test_preempt_takes_back_a_lower_priority_pod_placed_this_cycle() -> None:
    # a-high (two cards on one node) comes first but does not fit: n1 has one free
    # card, n2 one. allocate then gives a-new n1's free card (binpack). preempt lets
    # a-high take n1 back from a-new (placed this cycle) and a-run (running).
    _, _, d = _two_queue_cluster(new_priority=40)
    assert {t.name: t.node_name for t in d.pipelined} == {"a-high-0": "n1"}
    assert _evicted(d) == {"a-run-0"}
    # Placed again with the victims in job order, a-new (ahead in job order) takes n2's
    # free card: it is bound there, not where allocate first put it; a-run finds no
    # room and is evicted.
    assert {t.name: t.node_name for t in d.binds} == {"a-new-0": "n2"}
    assert [e.moved_to for e in d.evictions] == [None]


def test_by_default_only_running_pods_are_victims() -> None:
    # The known difference: without this cycle's placements as victims, b-big finds
    # one running pod to take and not enough room; a-new keeps its card.
    assert not victims.THIS_CYCLE_VICTIMS
    a_old = job("a-old", "a", [running("n1", gpu=1, name="a-old-0")])
    a_new = job("a-new", "a", [task(gpu=1, name="a-new-0")], created=5.0)
    b_big = job("b-big", "b", [task(gpu=1, name="b-0"), task(gpu=1, name="b-1")])
    snap = snapshot([node("n1", gpus=2)], [queue("a"), queue("b", gpu=2)], [a_old, a_new, b_big])
    d = run_cycle(snap)
    assert _names(d.binds) == {"a-new-0"}
    assert d.evictions == [] and d.pipelined == []
