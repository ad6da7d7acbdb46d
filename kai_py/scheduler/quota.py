"""Queue capacity checks done before a job is placed: limits and non-preemptible quota."""

from __future__ import annotations

from collections.abc import Iterator

from kai_py.scheduler import reasons
from kai_py.scheduler.model import Job, Queue
from kai_py.scheduler.reasons import Reason
from kai_py.scheduler.resources import EPS, RESOURCE_NAMES, Res, format_quantity
from kai_py.scheduler.session import Session


def queue_details(session: Session, name: str) -> dict[str, object]:
    q = session.queues[name]
    return {
        "name": q.name,
        "deserved": q.deserved.as_dict(),
        "fairShare": q.fair_share.as_dict(),
        "allocated": q.allocated.as_dict(),
        "limit": q.limit.as_dict(),
        "requested": q.request.as_dict(),
    }


def _asks(session: Session, job: Job, demand: Res) -> Iterator[tuple[Queue, str, float]]:
    """(queue, resource, amount) for each resource the step asks for, up the tree."""
    for queue in session.ancestors(job.queue):
        for res in RESOURCE_NAMES:
            want = demand.get(res)
            if want > EPS:
                yield queue, res, want


def check_limit(session: Session, job: Job, demand: Res, check_limit: bool = True) -> Reason | None:
    """OverLimit for the first queue up the tree whose limit the next step would pass."""
    if not check_limit:
        return None
    # Checked for every job tried, so the common case (no limit passed) is plain
    # arithmetic; the generator and getattr lookups of ``_asks`` only find the reason.
    gpu, cpu, memory = demand.gpu, demand.cpu, demand.memory
    for queue in session.ancestors(job.queue):
        held, bound = queue.allocated, queue.limit
        if (
            (gpu > EPS and held.gpu + gpu > bound.gpu + EPS)
            or (cpu > EPS and held.cpu + cpu > bound.cpu + EPS)
            or (memory > EPS and held.memory + memory > bound.memory + EPS)
        ):
            break
    else:
        return None
    passed = first_limit_passed(session, job, demand)
    if passed is None:
        return None
    queue, res, want = passed
    has = queue.allocated.get(res)
    limit = queue.limit.get(res)
    return Reason(
        reasons.OVER_LIMIT,
        f"Queue {queue.name} would use {format_quantity(res, has + want)}, above its "
        f"limit of {format_quantity(res, limit)}: it has "
        f"{format_quantity(res, has)} and job {job.key} asks for "
        f"{format_quantity(res, want)}",
        {"resource": res, "queueDetails": queue_details(session, queue.name)},
    )


def first_limit_passed(session: Session, job: Job, demand: Res) -> tuple[Queue, str, float] | None:
    """(queue, resource, amount asked) for the first queue up the tree, and resource,
    whose limit the next step would pass."""
    for queue, res, want in _asks(session, job, demand):
        if queue.allocated.get(res) + want > queue.limit.get(res) + EPS:
            return queue, res, want
    return None


def check_non_preemptible_quota(
    session: Session, job: Job, demand: Res, check_limit: bool = True
) -> Reason | None:
    """NonPreemptibleOverQuota: non-preemptible work may only use deserved quota."""
    if job.preemptible:
        return None
    for queue, res, want in _asks(session, job, demand):
        held = queue.allocated_non_preemptible.get(res)
        deserved = queue.deserved.get(res)
        if held + want > deserved + EPS:
            return Reason(
                reasons.NON_PREEMPTIBLE_OVER_QUOTA,
                f"Non-preemptible job {job.key} asks for {format_quantity(res, want)}, "
                f"but queue {queue.name} already runs "
                f"{format_quantity(res, held)} of non-preemptible work out of a deserved "
                f"quota of {format_quantity(res, deserved)}; non-preemptible jobs may "
                f"only use deserved quota (make the job preemptible to use idle "
                f"resources over quota)",
                {"resource": res, "queueDetails": queue_details(session, queue.name)},
            )
    return None


def limit_reclaim_may_free(session: Session, job: Job, demand: Res) -> Queue | None:
    """For reclaim, whose victims are in other queues: when the next step passes the
    limit of a queue above the job's own, the lowest such queue, if the preemptible work
    of the other queues below every limit passed could make room under it (evicting it
    frees room there, as a same-queue victim does for preempt). None when the job's own
    queue's limit is passed (reclaim takes nothing from it), or when that work is too
    little even if all of it went: then the limit refuses the job, as in allocate."""
    leaf = session.queues[job.queue]
    lowest: Queue | None = None
    for queue in session.ancestors(job.queue):
        for res in RESOURCE_NAMES:
            want = demand.get(res)
            if want <= EPS:
                continue
            over = queue.allocated.get(res) + want - queue.limit.get(res)
            if over <= EPS:
                continue
            if queue is leaf:
                return None
            # What the rest of the subtree holds that a reclaim may take (a victim is
            # preemptible and never in the reclaimer's own queue).
            others = (
                queue.allocated.get(res)
                - queue.allocated_non_preemptible.get(res)
                - leaf.allocated.get(res)
                + leaf.allocated_non_preemptible.get(res)
            )
            if others < over - EPS:
                return None
            if lowest is None:
                lowest = queue
    return lowest
