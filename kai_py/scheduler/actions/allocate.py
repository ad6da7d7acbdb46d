"""allocate: place ready pending jobs on free (or being-freed) resources.

Jobs come by queue order then job order. A gang needs the rest of its
minMember placed in one go; after that an elastic job grows one task per
turn and goes back in line, so one big elastic job cannot starve the rest.
"""

from __future__ import annotations

from kai_py.scheduler import reasons
from kai_py.scheduler.actions.common import demand, needed, place_tasks, topology_problem
from kai_py.scheduler.model import PENDING, RELEASING, Job, Task
from kai_py.scheduler.ordering import JobPicker
from kai_py.scheduler.placement import Placer
from kai_py.scheduler.reasons import Reason
from kai_py.scheduler.session import Session
from kai_py.scheduler.subgroups import tree
from kai_py.scheduler.tenancy import access


def gate(session: Session, job: Job) -> Reason | None:
    """Reasons a job is not even tried: bad input, no queue, not enough pods yet."""
    if job.errors:
        return Reason(reasons.INVALID_WORKLOAD, "; ".join(job.errors))
    queue = session.queues.get(job.queue)
    if queue is None or queue.children:
        return _bad_queue(job, queue is None)
    if session.tenancy:
        refused = tenancy_refusal(session, job)
        if refused is not None:
            return refused
    if job.subgroups is not None:
        missing = tree.not_ready(job)
        return None if missing is None else _subgroups_not_ready(job, missing)
    live = len(job.tasks)
    for task in job.tasks:  # pods being deleted do not count
        if task.status is RELEASING:
            live -= 1
    if live < job.min_alive:  # members that Succeeded count towards minMember
        return not_ready(job, live)
    if job.topology is not None:
        return topology_problem(session, job)
    return None


def not_ready(job: Job, live: int) -> Reason:
    """NotReady, in KAI's words first (tools match on them), then kai-py's detail: the
    pods that Succeeded (they count towards minMember) and what holds the gated ones.
    Built only for a job that is not ready: ``gate`` runs for every pending job."""
    gated = len(job.gated)
    message = (
        f"Job is not ready for scheduling. Waiting for {job.min_member} pods, "
        f"currently {live + gated} exist, {gated} are gated. Job {job.key} has {live} pods"
    )
    if job.succeeded:
        message += f" and {job.succeeded} that Succeeded"
    message += f" while minMember is {job.min_member}"
    if gated:
        held = "; ".join(f"{t.key} by {', '.join(t.gates)}" for t in job.gated)
        message += f"; {gated} more are held by scheduling gates: {held}"
    else:
        message += "; waiting for the rest of the gang to be created"
    return Reason(
        reasons.NOT_READY,
        message,
        {"pods": live, "gated": gated, "succeeded": job.succeeded, "minMember": job.min_member},
    )


def _subgroups_not_ready(job: Job, missing: str) -> Reason:
    """NotReady of a job with sub-groups: KAI's words per leaf short of pods first (tools
    match on them), then the level of the tree that cannot start."""
    gated = len(job.gated)
    message = "Job is not ready for scheduling."
    for leaf, least, have, leaf_gated in tree.unready_leaves(job):
        message += (
            f" Waiting for {least} pods for SubGroup {leaf}, currently {have} exist, "
            f"{leaf_gated} are gated."
        )
    message += f" Job {job.key}: {missing}"
    if gated:
        held = "; ".join(f"{t.key} by {', '.join(t.gates)}" for t in job.gated)
        message += f"; {gated} more are held by scheduling gates: {held}"
    else:
        message += "; waiting for the rest of its pods to be created"
    return Reason(reasons.NOT_READY, message, {"pods": len(job.tasks), "gated": gated})


def subgroup_message(job: Job, counts: tree.Counts, failed: Task | None, detail: str) -> str:
    """Why a job with sub-groups did not fit: the sub-group it failed in, with the pods it
    needs and those that fit (``counts``: its placed pods per leaf with the attempt's)."""
    groups = job.subgroups
    assert groups is not None
    leaf = tree.leaf_name(groups, failed) if failed is not None else None
    if leaf is not None and counts.get(leaf, 0) >= groups.groups[leaf].min_member:
        return (
            f"Elastic sub-group {leaf} of job {job.key} runs {counts.get(leaf, 0)} pods "
            f"(minMember {groups.groups[leaf].min_member}); its other pods do not fit: {detail}"
        )
    if leaf is not None:
        what = f"subgroup {leaf} needs {groups.groups[leaf].min_member} pods, {counts.get(leaf, 0)} fit"
    else:
        what = tree.shortfall(job, counts)
    return f"Job {job.key} cannot start as a whole: {what}: {detail}"


def _bad_queue(job: Job, missing: bool) -> Reason:
    """QueueDoesNotExist: no such queue, or a parent queue (the message is only built
    here: gate runs for every pending job in each of four actions)."""
    where = f"{job.source}: " if job.source else ""
    if missing:
        return Reason(
            reasons.QUEUE_DOES_NOT_EXIST,
            f"{where}PodGroup {job.key}: spec.queue: queue {job.queue!r} does not exist "
            f"(QueueDoesNotExist); create it or name an existing leaf queue",
            {"queue": job.queue},
        )
    return Reason(
        reasons.QUEUE_DOES_NOT_EXIST,
        f"{where}PodGroup {job.key}: spec.queue: queue {job.queue!r} is a parent queue; "
        f"only leaf queues hold jobs",
        {"queue": job.queue},
    )


def tenancy_refusal(session: Session, job: Job) -> Reason | None:
    """A job whose namespace may not use its queue, or whose priority class the queue
    does not allow, stays pending: the webhook refuses both, but a pod or PodGroup made
    while it was down (or before the Queue's lists were set) is still held here."""
    chain = [(q.name, q.tenancy) for q in session.ancestors(job.queue)]
    why = access.job_refusal(chain, job.queue, job.namespace, job.priority_class)
    if why is None:
        return None
    where = f"{job.source}: " if job.source else ""
    return Reason(access.NOT_ALLOWED, f"{where}PodGroup {job.key}: {why}")


def has_pending(job: Job) -> bool:
    # A plain loop: any() over a generator costs twice as much here, for every job.
    for task in job.tasks:  # noqa: SIM110
        if task.status is PENDING:
            return True
    return False


def pending_jobs(session: Session) -> list[Job]:
    """The jobs with a pending task now, in the session's job order."""
    return [job for job in session.pending_at_start if has_pending(job)]


def gang_message(job: Job, found: int, required: int, detail: str) -> str:
    if required == 1 and len(job.tasks) == 1:
        return f"Pod {job.tasks[0].key} cannot be scheduled: {detail}"
    if job.placed >= job.min_alive:
        pending = sum(1 for t in job.tasks if t.status is PENDING)
        return (
            f"Elastic job {job.key} runs {job.placed} pods (minMember {job.min_member}); "
            f"its {pending} other pods do not fit: {detail}"
        )
    return (
        f"Resources were found for {found} pods while {required} are required for gang "
        f"scheduling of job {job.key}: {detail}"
    )


def _nominated(job: Job) -> bool:
    """A pending pod of the job was pipelined to a node last cycle (a plain loop: asked
    of every job)."""
    for task in job.tasks:  # noqa: SIM110
        if task.status is PENDING and task.nominated_node:
            return True
    return False


def allocate(session: Session, placer: Placer) -> None:
    ready = []
    for job in pending_jobs(session):
        refusal = gate(session, job)
        if refusal is not None:
            session.explain(job, refusal)
        else:
            ready.append(job)
    for job in session.gated_at_start:
        if not has_pending(job):  # only gated pods: not among the pending jobs above
            refusal = gate(session, job)
            if refusal is not None:
                session.explain(job, refusal)
    # Jobs pipelined last cycle first: what was freed for them (often by evicting
    # someone) must not go to whoever comes first in queue order, or evictions repeat.
    nominated = [j for j in ready if _nominated(j)]
    # The line is told once, by the first allocate of a cycle: a job in it once, where
    # it was first taken up (an elastic job that grows goes back in line, not again).
    order = session.decisions.order if not session.decisions.order else None
    taken: set[str] = set()
    for job in sorted(nominated, key=session.framework.job_order):
        if order is not None:
            order.append(job.uid)
            taken.add(job.uid)
        count = needed(job)
        if count == 0:
            continue
        if session.framework.check_capacity(session, job, demand(session, job, count)) is not None:
            continue
        stmt = session.statement()
        if place_tasks(session, stmt, placer, job, count).ok:
            stmt.commit()
        else:
            stmt.rollback()
    ready = [j for j in ready if has_pending(j)]
    picker = JobPicker(session, ready, lambda j: demand(session, j))
    while (picked := picker.pop()) is not None:
        job = picked
        if order is not None and job.uid not in taken:
            order.append(job.uid)
            taken.add(job.uid)
        count = needed(job)
        if count == 0:  # a job with sub-groups whose pending pods no sub-group takes now
            continue
        refusal = session.framework.check_capacity(session, job, demand(session, job, count))
        if refusal is not None:
            session.explain(job, refusal)
            continue
        stmt = session.statement()
        result = place_tasks(session, stmt, placer, job, count)
        if not result.ok:
            # A job with sub-groups is told what fit of the sub-group it failed in:
            # counted before the roll-back undoes the attempt.
            placed = tree.count(job, tree.is_placed) if job.subgroups is not None else None
            stmt.rollback()
            if result.reason is not None:
                session.explain(job, result.reason)
                continue
            detail = placer.explain(result.failed_task) if result.failed_task else "not enough pods"
            if placed is not None:
                message = subgroup_message(job, placed, result.failed_task, detail)
            else:
                message = gang_message(job, result.placed, result.required, detail)
            session.explain(
                job,
                Reason(
                    reasons.POD_SCHEDULING_ERRORS,
                    message,
                    {"found": result.placed, "required": result.required},
                ),
            )
            continue
        stmt.commit()
        if has_pending(job):
            picker.push(job)
