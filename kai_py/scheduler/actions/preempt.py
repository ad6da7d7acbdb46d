"""preempt: inside one queue, evict strictly lower-priority preemptible jobs."""

from __future__ import annotations

from functools import partial

from kai_py.scheduler import reasons
from kai_py.scheduler.actions.allocate import pending_jobs
from kai_py.scheduler.actions.common import demand
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
    held,
    stopped_note,
)
from kai_py.scheduler.model import Job, Task
from kai_py.scheduler.ordering import PendingLine
from kai_py.scheduler.placement import Placer
from kai_py.scheduler.quota import first_limit_passed
from kai_py.scheduler.reasons import Reason
from kai_py.scheduler.resources import Res, format_quantity
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
            session.explain(job, _why_not(job, True, _limit_note(session, job, False) + note))
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
            session.explain(job, _why_not(job, True, _limit_note(session, job) + note))
            continue
        if budget.exhausted:  # it will not search
            limit = _limit_note(session, job)
            session.explain(job, _why_not(job, True, limit + note + stopped_note(0)))
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
        limit = _limit_note(session, job)
        session.explain(job, _why_not(job, True, limit + note + capped_note(search)))


def _limit_note(session: Session, job: Job, searchable: bool = True) -> str:
    """When a limit up the tree binds: how much must be freed under it, and how much the
    job's lower-priority preemptible jobs hold (what preempt may take), with numbers.
    ``searchable`` False: no pod holds anything (``any_held``), so they hold nothing."""
    passed = first_limit_passed(session, job, demand(session, job))
    if passed is None:
        return ""
    queue, res, want = passed
    limit = queue.limit.get(res)
    need = queue.allocated.get(res) + want - limit
    theirs = _lower_held(session, job).get(res) if searchable else 0.0
    return (
        f": queue {queue.name} needs {format_quantity(res, need)} freed to stay within its "
        f"limit of {format_quantity(res, limit)}, and they hold {format_quantity(res, theirs)}"
    )


def _lower_held(session: Session, job: Job) -> Res:
    """What the running pods of the lower-priority preemptible jobs of ``job``'s queue
    hold (only asked when explaining a failure; kept per queue, priority and commits)."""
    key = ("lower-held", job.queue, job.priority, len(session.committed))
    found = session.memo.get(key)
    if isinstance(found, Res):
        return found
    total = Res()
    for other in session.jobs.values():
        if other.queue != job.queue or not other.preemptible or other.priority >= job.priority:
            continue
        for task in other.tasks:
            if held(task):
                total.add(session.task_res(task, session.nodes.get(task.node_name or "")))
    session.memo[key] = total
    return total


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
