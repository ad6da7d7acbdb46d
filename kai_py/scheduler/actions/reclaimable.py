"""Who may lose resources to a reclaim, and when a reclaim is acceptable (KAI's rules).

Queues are compared at the level where the reclaimer's and the victim's
branches part (the children of their lowest common ancestor). A quota of -1
(unlimited) is never exceeded.

Victim eligibility (before a scenario is tried):
- if the reclaiming queue would go above its deserved quota, the victim's
  queue must be above its allocatable share (the larger of deserved quota and
  fair share, capped by its limit) in at least one of CPU, memory and GPU;
- otherwise it is enough that the victim's queue is above its deserved quota
  in a resource the reclaimer asks for, or at it in all of them.

A scenario (its victims that are evicted, not moved) is acceptable when each
victim's queue, with what is left after the victims before it, is above its
allocatable share in a resource, or above its deserved quota in a resource
while the reclaimer stays within its own; and the reclaiming queue, at every
level, does not end above its fair share and at least as saturated as a
sibling it takes from (saturation: allocated / fair share).
"""

from __future__ import annotations

from collections.abc import Sequence

from kai_py.scheduler.model import Job, Queue
from kai_py.scheduler.resources import EPS, INF, Res
from kai_py.scheduler.session import Session

RESOURCES = ("gpu", "cpu", "memory")


def deserved(queue: Queue, res: str) -> float:
    return INF if queue.quota.get(res) == INF else queue.deserved.get(res)


def allocatable(queue: Queue, res: str) -> float:
    if queue.quota.get(res) == INF:
        return queue.limit.get(res)
    return min(max(queue.deserved.get(res), queue.fair_share.get(res)), queue.limit.get(res))


def over_allocatable(queue: Queue, amounts: Res) -> bool:
    return any(amounts.get(r) > allocatable(queue, r) + EPS for r in RESOURCES)


def over_deserved(queue: Queue, amounts: Res) -> bool:
    return any(amounts.get(r) > deserved(queue, r) + EPS for r in RESOURCES)


def within_deserved(queue: Queue, amounts: Res) -> bool:
    return not over_deserved(queue, amounts)


def leveled(session: Session, mine: str, theirs: str) -> tuple[Queue, Queue]:
    """The two queues, one per branch, just below the lowest common ancestor."""
    up_mine = list(reversed(session.ancestors(mine)))
    up_theirs = list(reversed(session.ancestors(theirs)))
    pair = (up_mine[0], up_theirs[0])
    for a, b in zip(up_mine, up_theirs, strict=False):
        pair = (a, b)
        if a is not b:
            break
    return pair


def involved(amount: Res) -> set[str]:
    return {r for r in RESOURCES if amount.get(r) > EPS}


class Reclaimable:
    """KAI's reclaim rules for one reclaimer asking for ``amount``.

    The queue figures are taken when it is made, before any scenario of this
    reclaimer is applied: the remaining shares start from them.
    """

    def __init__(self, session: Session, job: Job, amount: Res) -> None:
        self.session = session
        self.job = job
        self.amount = amount
        self._before = {name: q.allocated.copy() for name, q in session.queues.items()}
        self._non_preemptible = {
            name: q.allocated_non_preemptible.copy() for name, q in session.queues.items()
        }

    def before(self, queue: Queue) -> Res:
        return self._before[queue.name]

    def reclaimer_within_deserved(self, queue: Queue) -> bool:
        return within_deserved(queue, self.before(queue) + self.amount)

    def may_be_victim(self, victim_queue: str) -> bool:
        mine, theirs = leveled(self.session, self.job.queue, victim_queue)
        if mine is theirs:
            return False
        if not self._below_is_over_deserved(victim_queue, theirs):
            return False
        if not self.reclaimer_within_deserved(mine):
            return over_allocatable(theirs, self.before(theirs))
        under = False
        for res in involved(self.amount):
            bound = deserved(theirs, res)
            if bound == INF:
                continue
            held = self.before(theirs).get(res)
            if held > bound + EPS:
                return True
            if held < bound - EPS:
                under = True
        return not under

    def _below_is_over_deserved(self, victim_queue: str, top: Queue) -> bool:
        """kai-py keeps one rule more than KAI: a queue below the compared level that is
        within its deserved quota keeps its pods (its parent being over does not make
        it give up what it was promised)."""
        for queue in self.session.ancestors(victim_queue):
            if queue is top:
                return True
            if not over_deserved(queue, self.before(queue)):
                return False
        return True

    def acceptable(self, victims: Sequence[tuple[Job, Res]]) -> bool:
        """``victims``: each victim job with what it really gives up (moves excluded)."""
        if not victims:
            return True
        remaining: dict[str, Res] = {}
        taken_from: dict[str, set[str]] = {}
        for job, freed in victims:
            mine, theirs = leveled(self.session, self.job.queue, job.queue)
            left = remaining.setdefault(theirs.name, self.before(theirs).copy())
            fits = over_allocatable(theirs, left) or (
                self.reclaimer_within_deserved(mine) and over_deserved(theirs, left)
            )
            if not fits:
                return False
            for queue in self.session.ancestors(job.queue):
                rest = remaining.setdefault(queue.name, self.before(queue).copy())
                rest.sub(freed)
                taken_from.setdefault(queue.name, set()).update(involved(freed))
        return self._within_boundaries(remaining, taken_from)

    def _within_boundaries(
        self, remaining: dict[str, Res], taken_from: dict[str, set[str]]
    ) -> bool:
        mine_resources = involved(self.amount)
        for queue in self.session.ancestors(self.job.queue):
            after = remaining.get(queue.name, self.before(queue)) + self.amount
            for name, left in remaining.items():
                sibling = self.session.queues[name]
                if sibling is queue or sibling.parent != queue.parent:
                    continue
                for res in taken_from.get(name, set()) | mine_resources:
                    if _more_saturated(res, after, queue, left, sibling):
                        return False
            if not self.job.preemptible:
                held = self._non_preemptible[queue.name] + self.amount
                if over_deserved(queue, held):
                    return False
        return True


def _more_saturated(res: str, mine: Res, queue: Queue, theirs: Res, sibling: Queue) -> bool:
    """The reclaimer ends above its fair share and at least as saturated as the sibling."""
    fair_mine, fair_theirs = queue.fair_share.get(res), sibling.fair_share.get(res)
    if fair_mine == INF and fair_theirs == INF:
        return False
    ratio_mine = _ratio(mine.get(res), fair_mine)
    ratio_theirs = _ratio(theirs.get(res), fair_theirs)
    return ratio_mine > 1 + EPS and fair_theirs > EPS and ratio_mine >= ratio_theirs - EPS


def _ratio(allocated: float, fair: float) -> float:
    if fair <= EPS:
        return INF if allocated > EPS else 0.0
    if fair == INF:
        return 0.0
    return allocated / fair
