"""A reclaim scenario is simulated in the normal queue and job order (rule 1).

After the victims are tentatively evicted, the preemptor and the victims are
placed again in the order allocate would serve them, with every pending job
taking its place in line: a job waiting ahead of the preemptor in its queue
shapes that queue's turn. A victim whose turn comes first takes its place back,
and the scenario counts only if the preemptor still fits. That keeps a reclaim
from happening when the next cycle's allocate would hand the freed resources
straight back to the victim's replacement.
"""

from __future__ import annotations

import pytest
from builders import job, node, queue, running, snapshot, task

from kai_py.scheduler.cycle import run_cycle
from kai_py.scheduler.model import Job, Snapshot


def _cluster(with_big_job_ahead: bool) -> tuple[Snapshot, dict[str, Job]]:
    # n1's two cards are held by queue a (deserved 0, queue priority 200); queue b
    # (deserved 1 card, priority 100) has p, one card. No CPU or memory is asked, so
    # only the cards decide.
    def gpu_task(**kw: object) -> object:
        return task(cpu=0, memory=0, **kw)  # type: ignore[arg-type]

    jobs = {
        "v": job("v", "a", [running("n1", gpu=1, cpu=0, memory=0, start_time=20.0)]),
        "w": job("w", "a", [running("n1", gpu=1, cpu=0, memory=0, start_time=10.0)]),
        "p": job("p", "b", [gpu_task(gpu=1, name="p-0")], priority=50, created=5.0),
    }
    if with_big_job_ahead:
        # Ahead of p in job order (higher priority), asks for more than the cluster has.
        jobs["y"] = job("y", "b", [gpu_task(gpu=4, name="y-0")], priority=60, created=1.0)
    snap = snapshot(
        [node("n1", gpus=2)],
        [queue("a", priority=200), queue("b", gpu=1, priority=100)],
        list(jobs.values()),
    )
    return snap, jobs


def test_reclaim_when_the_preemptor_is_served_before_its_victims() -> None:
    # Queue b, within its deserved quota with p, comes before queue a (over its
    # quota): p is placed first in the simulation and the reclaim stands.
    snap, _ = _cluster(with_big_job_ahead=False)
    d = run_cycle(snap)
    assert [t.name for t in d.pipelined] == ["p-0"]
    assert len(d.evictions) == 1


@pytest.mark.parametrize("consolidating_reclaim", [True, False])
def test_a_pending_job_ahead_of_the_preemptor_lets_the_victims_come_first(
    consolidating_reclaim: bool,
) -> None:
    # y waits ahead of p in queue b and takes b over its deserved quota: queue a, of
    # higher priority, is then served first, so each victim takes its card back
    # before p's turn. No scenario leaves p a card: nothing is evicted. The order
    # holds whether moved victims count as freeing resources or not.
    snap, jobs = _cluster(with_big_job_ahead=True)
    snap.config.allow_consolidating_reclaim = consolidating_reclaim
    d = run_cycle(snap)
    assert d.evictions == []
    assert d.pipelined == [] and d.binds == []
    codes = [r.code for r in d.reasons[jobs["p"].uid]]
    assert "CannotReclaim" in codes
