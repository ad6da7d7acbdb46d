"""reclaim: take resources back from queues over their fair share (SEMANTICS.md section 3).

A job may reclaim when its queue, and every queue above it, stays within its
fair share after the job (non-preemptible jobs: within deserved quota).
Victims are preemptible running jobs of other queues that are above their
fair share, old enough for their queue's reclaimMinRuntime. Validation:
every queue on the victim's side of the tree (below the common ancestor)
stays at or above its fair share, and the reclaimer's side does not end up
more saturated than the victim's side.
"""

from __future__ import annotations

from collections.abc import Sequence

from kai_py.scheduler import reasons
from kai_py.scheduler.actions.common import demand, needed
from kai_py.scheduler.actions.evicting import (
    contested,
    old_enough,
    preemptors,
    saturation,
    victim_cost,
)
from kai_py.scheduler.actions.victims import Unit, VictimSearch, victim_units
from kai_py.scheduler.model import Job, Queue, TaskStatus
from kai_py.scheduler.placement import Placer
from kai_py.scheduler.reasons import Reason
from kai_py.scheduler.resources import EPS, Res, format_quantity
from kai_py.scheduler.session import Session


def split_paths(session: Session, a: str, b: str) -> tuple[list[Queue], list[Queue]]:
    """The queues of ``a``'s and ``b``'s branches below their lowest common ancestor."""
    up_a = session.ancestors(a)
    up_b = session.ancestors(b)
    names_b = {q.name for q in up_b}
    lca = next((q.name for q in up_a if q.name in names_b), None)
    side_a = [q for q in up_a[: [q.name for q in up_a].index(lca)]] if lca else up_a
    side_b = [q for q in up_b[: [q.name for q in up_b].index(lca)]] if lca else up_b
    return side_a, side_b


def within_share(session: Session, job: Job, queues: Sequence[Queue], amount: Res) -> Reason | None:
    """The reclaimer's queues must stay within fair share (non-preemptible: deserved quota).

    ``amount`` is already counted in ``allocated`` when called after placement.
    """
    for queue in queues:
        for res in contested(amount):
            after = queue.allocated.get(res)
            bound = queue.fair_share.get(res) if job.preemptible else queue.deserved.get(res)
            if after > bound + EPS:
                what = "fair share" if job.preemptible else "deserved quota"
                return Reason(
                    reasons.NO_RECLAIM,
                    f"Job {job.key} cannot reclaim resources: queue {queue.name} would have "
                    f"{format_quantity(res, after)}, above its {what} of "
                    f"{format_quantity(res, bound)}",
                    {"queue": queue.name, "resource": res, "after": after, "bound": bound},
                )
    return None


def reclaim(session: Session, placer: Placer) -> None:
    for job in preemptors(session):
        amount = demand(session, job, needed(job))
        leaf = session.queues[job.queue]
        leaf.allocated.add(amount)
        refusal = within_share(session, job, [leaf], amount)
        leaf.allocated.sub(amount)
        if refusal is not None:
            session.explain(job, refusal)
            continue
        resources = contested(amount)

        def eligible_job(victim: Job) -> bool:
            if victim.queue == job.queue or not victim.preemptible or victim.queue not in session.queues:
                return False
            _, theirs = split_paths(session, job.queue, victim.queue)
            return bool(theirs) and all(
                q.allocated.get(r) > q.fair_share.get(r) + EPS for q in theirs for r in resources
            )

        candidates = sorted((v for v in session.jobs.values() if eligible_job(v)), key=victim_cost)
        units = victim_units(
            candidates,
            lambda t: old_enough(session, t, session.jobs[t.job_uid].queue, "reclaim_min_runtime"),
        )
        if not units:
            session.explain(job, _nothing_to_reclaim(session, job))
            continue

        before: dict[int, float] = {}

        def admit(unit: Unit, job: Job = job) -> bool:
            # A queue gives up resources only while it is still above its fair share.
            _, theirs = split_paths(session, job.queue, unit.job.queue)
            if not theirs:
                return False
            before[id(unit)] = saturation(theirs[-1], resources)
            return all(q.allocated.get(r) > q.fair_share.get(r) + EPS for q in theirs for r in resources)

        def validate(chosen: Sequence[Unit], job: Job = job) -> bool:
            for unit in chosen:
                mine, theirs = split_paths(session, job.queue, unit.job.queue)
                if within_share(session, job, mine, amount) is not None:
                    return False
                # The reclaimer may not end up more saturated than its victim was.
                if mine and theirs and saturation(mine[-1], resources) > before[id(unit)] + EPS:
                    return False
            return True

        if not VictimSearch(session, placer, "reclaim", validate, admit=admit).run(job, units):
            session.explain(job, _nothing_to_reclaim(session, job))


def _nothing_to_reclaim(session: Session, job: Job) -> Reason:
    queue = session.queues[job.queue]
    return Reason(
        reasons.NO_RECLAIM,
        f"Job {job.key} cannot reclaim resources: no other queue is above its fair share by "
        f"enough preemptible work that has run its reclaimMinRuntime (queue {queue.name} has "
        f"{format_quantity('gpu', queue.allocated.gpu)} with a fair share of "
        f"{format_quantity('gpu', queue.fair_share.gpu)})",
        {"queue": queue.name},
    )


__all__ = ["TaskStatus", "reclaim"]
