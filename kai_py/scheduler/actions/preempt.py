"""preempt: inside one queue, evict strictly lower-priority preemptible jobs."""

from __future__ import annotations

from functools import partial

from kai_py.scheduler import reasons
from kai_py.scheduler.actions.allocate import pending_jobs
from kai_py.scheduler.actions.evicting import (
    old_enough,
    preemptors,
    protected_note,
    unordered_preemptors,
    victim_cost,
)
from kai_py.scheduler.actions.victims import (
    Fruitless,
    SearchBudget,
    VictimPool,
    VictimSearch,
    always,
    any_held,
    capped_note,
    stopped_note,
)
from kai_py.scheduler.model import Job, Task
from kai_py.scheduler.ordering import PendingLine
from kai_py.scheduler.placement import Placer
from kai_py.scheduler.reasons import Reason
from kai_py.scheduler.session import Session


def _old_enough(session: Session, queue: str, task: Task) -> bool:
    return old_enough(session, task, queue, "preempt_min_runtime")


def preempt(session: Session, placer: Placer) -> None:
    pools: dict[str, VictimPool] = {}
    line: PendingLine | None = None
    budget = SearchBudget()
    fruitless = Fruitless(session)
    lowest: dict[str, int] = {}  # the lowest priority of a preemptible job, per queue
    for v in session.jobs.values():
        if v.preemptible:
            lowest[v.queue] = min(v.priority, lowest.get(v.queue, v.priority))
    # No pod holds resources a search could take: each search would find no victim
    # and say so with no note of a cap (the budget is only spent by simulating
    # victims); neither pools nor the line are built.
    searchable = any_held(session)
    jobs = None if searchable else unordered_preemptors(session, check_limit=False)
    for job in preemptors(session, check_limit=False) if jobs is None else jobs:
        if lowest.get(job.queue, job.priority) >= job.priority:
            session.explain(job, _why_not(job, False))
            continue
        note = protected_note(session, [job.queue], "preempt_min_runtime", job.priority)
        if not searchable:
            session.explain(job, _why_not(job, True, note))
            continue
        pool = pools.get(job.queue)
        if pool is None:
            pool = pools[job.queue] = VictimPool(
                session,
                "preempt",
                (v for v in session.jobs.values() if v.queue == job.queue),
                victim_cost,
                partial(_old_enough, session, job.queue),
            )
        if line is None:
            line = PendingLine(session, pending_jobs(session))
        if fruitless.known(job, line):
            session.explain(job, _why_not(job, True, note))
            continue
        if budget.exhausted:  # it will not search
            session.explain(job, _why_not(job, True, note + stopped_note(0)))
            continue
        units = pool.units([job.queue], keep=lambda v, job=job: v.priority < job.priority)  # type: ignore[misc]
        search = VictimSearch(
            session,
            placer,
            "preempt",
            always,
            moved_give_nothing=session.config.allow_consolidating_reclaim,
            line=line,
            budget=budget,
        )
        if search.run(job, units):
            pool.refresh([job])
            continue
        if not search.capped:
            fruitless.add(job)
        session.explain(job, _why_not(job, True, note + capped_note(search)))


def _why_not(job: Job, had_candidates: bool, note: str = "") -> Reason:
    if not had_candidates:
        text = (
            f"Job {job.key} (priority {job.priority}) cannot preempt: queue {job.queue} runs no "
            f"preemptible job of lower priority"
        )
    else:
        text = (
            f"Job {job.key} (priority {job.priority}) cannot preempt: evicting the lower-priority "
            f"preemptible jobs of queue {job.queue} would not free enough resources{note}"
        )
    return Reason(reasons.NO_PREEMPT, text, {"priority": job.priority, "queue": job.queue})
