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
    protected_note,
    saturation,
    victim_cost,
)
from kai_py.scheduler.actions.victims import Unit, VictimPool, VictimSearch
from kai_py.scheduler.model import Job, Queue
from kai_py.scheduler.placement import Placer
from kai_py.scheduler.reasons import Reason
from kai_py.scheduler.resources import EPS, Res, format_quantity
from kai_py.scheduler.session import Session


def split_paths(session: Session, a: str, b: str) -> tuple[list[Queue], list[Queue]]:
    """The queues of ``a``'s and ``b``'s branches below their lowest common ancestor."""
    key = ("split", a, b)
    cached = session.memo.get(key)
    if cached is not None:
        return cached  # type: ignore[return-value]
    result = _split_paths(session, a, b)
    session.memo[key] = result
    return result


def _split_paths(session: Session, a: str, b: str) -> tuple[list[Queue], list[Queue]]:
    up_a = session.ancestors(a)
    up_b = session.ancestors(b)
    names_b = {q.name for q in up_b}
    lca = next((q.name for q in up_a if q.name in names_b), None)
    side_a = [q for q in up_a[: [q.name for q in up_a].index(lca)]] if lca else up_a
    side_b = [q for q in up_b[: [q.name for q in up_b].index(lca)]] if lca else up_b
    return side_a, side_b


def within_share(
    session: Session, job: Job, queues: Sequence[Queue], amount: Res, bound_by: str = "fair_share"
) -> Reason | None:
    """The reclaimer's queues must stay within ``bound_by`` (fair share or deserved quota).

    ``amount`` is already counted in ``allocated`` when this is called.
    """
    for queue in queues:
        for res in contested(amount):
            after = queue.allocated.get(res)
            bound = getattr(queue, bound_by).get(res)
            if after > bound + EPS:
                what = "fair share" if bound_by == "fair_share" else "deserved quota"
                return Reason(
                    reasons.NO_RECLAIM,
                    f"Job {job.key} cannot reclaim resources: queue {queue.name} would have "
                    f"{format_quantity(res, after)}, above its {what} of "
                    f"{format_quantity(res, bound)}",
                    {"queue": queue.name, "resource": res, "after": after, "bound": bound},
                )
    return None


def _above(queues: Sequence[Queue], bound_by: str, resources: tuple[str, ...]) -> bool:
    """Every queue is above its bound with what it held before this cycle.

    What allocate placed this cycle does not count: a queue within its quota
    when the cycle began must not lose a running pod because it was just given
    idle resources elsewhere.
    """
    return bool(queues) and all(
        q.allocated.get(r) - q.added.get(r) > getattr(q, bound_by).get(r) + EPS
        for q in queues
        for r in resources
    )


class _Reclaim:
    """One of the two ways KAI lets a queue take resources back.

    ``fair_share``: the reclaimer's branch stays within its fair share, each
    victim's branch is above its fair share when its victim is taken, and the
    reclaimer does not end up more saturated than the victim's branch was.
    ``deserved``: the reclaimer's branch stays within its deserved quota and
    each victim's branch is above its deserved quota (a queue always gets its
    quota back). Non-preemptible reclaimers only have the second way.
    """

    def __init__(self, session: Session, job: Job, amount: Res, way: str) -> None:
        self.session = session
        self.job = job
        self.amount = amount
        self.way = way
        self.resources = contested(amount)
        self.saturation_before: dict[int, float] = {}

    def admit(self, unit: Unit) -> bool:
        _, theirs = split_paths(self.session, self.job.queue, unit.job.queue)
        if not _above(theirs, self.way, self.resources):
            return False
        self.saturation_before[id(unit)] = saturation(theirs[-1], self.resources)
        return True

    def validate(self, chosen: Sequence[Unit]) -> bool:
        for unit in chosen:
            mine, theirs = split_paths(self.session, self.job.queue, unit.job.queue)
            if within_share(self.session, self.job, mine, self.amount, self.way) is not None:
                return False
            if self.way == "fair_share" and mine and theirs:
                before = self.saturation_before.get(id(unit), 0.0)
                if saturation(mine[-1], self.resources) > before + EPS:
                    return False
        return True


WAYS = ("fair_share", "deserved")


def reclaim(session: Session, placer: Placer) -> None:
    pool: VictimPool | None = None
    for job in preemptors(session):
        amount = demand(session, job, needed(job))
        leaf = session.queues[job.queue]
        leaf.allocated.add(amount)
        # A non-preemptible job's own quota was checked before (NonPreemptibleOverQuota);
        # here both kinds of job compare their queue's whole allocation.
        why_not = {way: within_share(session, job, [leaf], amount, way) for way in WAYS}
        leaf.allocated.sub(amount)
        ways = [way for way, refusal in why_not.items() if refusal is None]
        if not ways:
            refusal = why_not["fair_share"]
            assert refusal is not None
            session.explain(job, refusal)
            continue
        if pool is None:
            pool = VictimPool(
                session,
                "reclaim",
                session.jobs.values(),
                victim_cost,
                lambda t: old_enough(
                    session, t, session.jobs[t.job_uid].queue, "reclaim_min_runtime"
                ),
            )
        if not any(_reclaim_one_way(session, placer, pool, job, amount, way) for way in ways):
            session.explain(job, _nothing_to_reclaim(session, job))


def _reclaim_one_way(
    session: Session, placer: Placer, pool: VictimPool, job: Job, amount: Res, way: str
) -> bool:
    plan = _Reclaim(session, job, amount, way)
    queues = [
        q
        for q in pool.queues
        if q != job.queue and _above(split_paths(session, job.queue, q)[1], way, plan.resources)
    ]
    if not queues:
        return False
    search = VictimSearch(
        session,
        placer,
        "reclaim",
        plan.validate,
        admit=plan.admit,
        move_victims=session.config.allow_consolidating_reclaim,
    )
    return search.run(job, pool.units(queues))


def _nothing_to_reclaim(session: Session, job: Job) -> Reason:
    queue = session.queues[job.queue]
    others = (q for q in session.queues if q != job.queue)
    note = protected_note(session, others, "reclaim_min_runtime")
    return Reason(
        reasons.NO_RECLAIM,
        f"Job {job.key} cannot reclaim resources: no other queue is above its fair share "
        f"(or its deserved quota) by enough preemptible work (queue {queue.name} has "
        f"{format_quantity('gpu', queue.allocated.gpu)} with a fair share of "
        f"{format_quantity('gpu', queue.fair_share.gpu)}){note}",
        {"queue": queue.name},
    )
