"""What reclaim, preempt and consolidation share: which jobs may try, and the runtime guard."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from kai_py.scheduler.actions.allocate import gate, pending_jobs
from kai_py.scheduler.actions.common import demand
from kai_py.scheduler.model import ALLOCATED, PIPELINED, RUNNING, Job, Task
from kai_py.scheduler.ordering import JobPicker
from kai_py.scheduler.resources import EPS, INF, Res
from kai_py.scheduler.session import Session


def preemptors(session: Session, *, check_limit: bool = True) -> Iterator[Job]:
    """Pending jobs that allocate could not place, in queue and job order.

    A job within its preemption delay waits: it may take free resources, but
    not evict anyone yet.

    ``check_limit=False`` is for preempt, whose victims come from the same
    queue: swapping jobs can keep the queue within its limit, which is then
    checked on the outcome instead.
    """
    ready = [j for j in pending_jobs(session) if _may_try(session, j)]
    picker = JobPicker(session, ready, lambda j: demand(session, j))
    while (job := picker.pop()) is not None:
        # demand(session, job) is the next step's, needed(job) tasks (memoised per version).
        refusal = session.framework.check_capacity(session, job, demand(session, job), check_limit)
        if refusal is None:
            yield job


def _may_try(session: Session, job: Job) -> bool:
    """Allocate's gate lets it through and its preemption delay is over."""
    return gate(session, job) is None and not job.within_preemption_delay(session.now)


def unordered_preemptors(session: Session, *, check_limit: bool = True) -> list[Job] | None:
    """What ``preemptors`` hands out, in the session's job order instead of queue and job
    order, or None when the order could show in the decisions.

    Only for an action that changes nothing while it walks its jobs (no victim search
    can run: no pod holds resources, ``victims.any_held``). Which jobs the walk hands
    out then does not depend on its order: the gate and the capacity checks read
    task statuses and queue totals that stay as they are. All the action does is
    explain each job once, and the order of those explanations shows only in the
    order of ``Decisions.reasons``, where a job explained for the first time goes last.
    When every job that may try has a reason already (allocate explains each job it
    could not place), nothing shows the order, and the queue order, most of the
    walk's cost, is not computed.
    """
    reasons = session.decisions.reasons
    check = session.framework.check_capacity
    found: list[Job] = []
    for job in pending_jobs(session):
        if not _may_try(session, job):
            continue
        if job.uid not in reasons:
            return None
        if check(session, job, demand(session, job), check_limit) is None:
            found.append(job)
    return found


def inherited(session: Session, queue_name: str, attr: str) -> float:
    """A queue setting such as reclaimMinRuntime: the nearest queue up the tree that sets it."""
    for queue in session.ancestors(queue_name):
        value = getattr(queue, attr)
        if value is not None:
            return float(value)
    # No queue sets it: the shard's default (the Config has the same attribute names).
    return float(getattr(session.config, attr))


def old_enough(session: Session, task: Task, queue_name: str, attr: str) -> bool:
    minimum = inherited(session, queue_name, attr)
    if minimum <= 0:
        return True
    if task.start_time is None:
        return False
    return session.now - task.start_time >= minimum - EPS


def contested(amount: Res) -> tuple[str, ...]:
    """The resources a reclaim is about: GPUs for GPU jobs, else CPU and memory.

    Comparing every resource would block all reclaims, because CPU and memory
    fair shares are usually just "what is asked", which any eviction undercuts.
    """
    if amount.gpu > EPS:
        return ("gpu",)
    return tuple(r for r in ("cpu", "memory") if amount.get(r) > EPS) or ("cpu",)


def victim_cost(job: Job) -> tuple[int, float, float, str]:
    """Cheapest victim first: lowest priority, then the newest (least work lost); a job
    with pods placed in this cycle is the newest of all."""
    # One plain loop (asked for every job each time a victim pool is built): the
    # latest start, unless a pod was placed in this cycle. A start of 0 counts as 0.
    newest: float | None = None
    for task in job.tasks:
        status = task.status
        if status is ALLOCATED or status is PIPELINED:
            newest = INF
            break
        start = task.start_time
        if start is not None and (newest is None or (start or 0.0) > newest):
            newest = start or 0.0
    if newest is None:
        newest = 0.0
    return (job.priority, -newest, -job.created, job.name)


def protected_note(
    session: Session, queues: Iterable[str], attr: str, below_priority: int | None = None
) -> str:
    """ "; N pod(s) are protected by <setting>" for would-be victims too young to go.

    Counts the running preemptible pods of ``queues`` (of jobs below
    ``below_priority``, when given) that have not run their minimum runtime.
    """
    young = _young_by_queue(session, attr)
    if not young:
        return ""  # no queue sets the runtime, or no pod is protected by it
    count = 0
    example = ""
    for name in queues:
        for priority, text in young.get(name, []):
            if below_priority is None or priority < below_priority:
                count += 1
                example = example or text
    if not count:
        return ""
    return f"; {count} pod(s) are protected by {attr_word(attr)}{example}"


def _young_by_queue(session: Session, attr: str) -> dict[str, list[tuple[int, str]]]:
    key = ("young", attr)
    cached = session.memo.get(key)
    if isinstance(cached, dict):
        return cached
    found: dict[str, list[tuple[int, str]]] = {}
    if any(getattr(q, attr) for q in session.queues.values()):
        for job in session.jobs.values():
            if not job.preemptible:
                continue
            for task in job.tasks:
                if task.status is not RUNNING or old_enough(session, task, job.queue, attr):
                    continue
                minimum = inherited(session, job.queue, attr)
                age = session.now - task.start_time if task.start_time is not None else 0.0
                text = (
                    f" (e.g. {task.key} has run {age:g}s of the {minimum:g}s "
                    f"{attr_word(attr)} of queue {job.queue})"
                )
                found.setdefault(job.queue, []).append((job.priority, text))
    session.memo[key] = found
    return found


def attr_word(attr: str) -> str:
    return "reclaimMinRuntime" if attr == "reclaim_min_runtime" else "preemptMinRuntime"
