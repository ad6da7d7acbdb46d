"""Queue order and job order (docs/scheduling.md, "Allocate").

``JobPicker`` walks the queue tree from the root each time: at every level
the child with the best key wins, a parent being judged with the best job of
its subtree. With tens of queues that is a few dozen key computations per
pick, cheaper than keeping heaps consistent while allocations move totals.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable

from kai_py.scheduler.fairshare import allocatable_share, dominant_share
from kai_py.scheduler.model import Job, Queue
from kai_py.scheduler.resources import EPS, Res
from kai_py.scheduler.session import Session

JobKey = tuple[int, int, float, str]


def elastic_state(job: Job) -> int:
    placed = job.placed
    if placed < job.min_member:
        return 0
    return 1 if placed == job.min_member else 2


def job_key(job: Job) -> JobKey:
    return (-job.priority, elastic_state(job), job.created, job.uid)


def over_fair_share(queue: Queue) -> bool:
    """Above its fair share in every resource (CPU, memory and GPU), as KAI's queue order."""
    return all(
        queue.allocated.get(r) > queue.fair_share.get(r) + EPS for r in ("gpu", "cpu", "memory")
    )


def uses_zero_share(queue: Queue, extra: Res) -> bool:
    """It would hold some of a resource of which its allocatable share is nothing."""
    return any(
        allocatable_share(queue, r) <= EPS and queue.allocated.get(r) + extra.get(r) > EPS
        for r in ("gpu", "cpu", "memory")
    )


class WeakerShare:
    """Orders queues by allocatable share: the one smaller in at least one resource
    and in none larger goes first (a "weaker" queue); other pairs are equal."""

    __slots__ = ("_shares", "queue")

    def __init__(self, queue: Queue) -> None:
        self.queue = queue
        self._shares: tuple[float, ...] | None = None  # computed when a tie needs it

    @property
    def shares(self) -> tuple[float, ...]:
        if self._shares is None:
            self._shares = tuple(allocatable_share(self.queue, r) for r in ("gpu", "cpu", "memory"))
        return self._shares

    def _weaker(self, other: WeakerShare) -> bool:
        pairs = list(zip(self.shares, other.shares, strict=True))
        return all(a <= b + EPS for a, b in pairs) and any(a < b - EPS for a, b in pairs)

    def __lt__(self, other: object) -> bool:
        return isinstance(other, WeakerShare) and self._weaker(other)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, WeakerShare) and not self._weaker(other) and not other._weaker(self)
        )

    def __hash__(self) -> int:
        return 0


def within_deserved(queue: Queue, extra: Res) -> bool:
    return (queue.allocated + extra).fits_in(queue.deserved)


def queue_key(queue: Queue, extra: Res) -> tuple[object, ...]:
    return (
        over_fair_share(queue),
        not within_deserved(queue, extra),
        -queue.priority,
        uses_zero_share(queue, extra),
        dominant_share(queue, extra),
        dominant_share(queue),
        WeakerShare(queue),
        queue.created,
        queue.name,
    )


class JobPicker:
    """Hands out the next job to try, by queue order then job order."""

    def __init__(
        self,
        session: Session,
        jobs: Iterable[Job],
        demand: Callable[[Job], Res],
    ) -> None:
        self.session = session
        self.demand = demand
        self._heaps: dict[str, list[tuple[tuple[object, ...], Job]]] = {}
        self._pending: dict[str, int] = {}  # queue -> jobs waiting in its subtree
        self._keys: dict[str, tuple[int, Job, int, tuple[object, ...]]] = {}
        for job in jobs:
            self.push(job)

    def push(self, job: Job) -> None:
        if job.queue not in self.session.queues:
            return
        heapq.heappush(
            self._heaps.setdefault(job.queue, []), (self.session.framework.job_order(job), job)
        )
        for queue in self.session.ancestors(job.queue):
            self._pending[queue.name] = self._pending.get(queue.name, 0) + 1

    def _best(self, names: Iterable[str]) -> tuple[Queue, Job] | None:
        best: tuple[tuple[object, ...], Queue, Job] | None = None
        queues = self.session.queues
        for name in names:
            if not self._pending.get(name):
                continue
            queue = queues[name]
            if queue.children:
                found = self._best(queue.children)
                if found is None:
                    continue
                job = found[1]
            else:
                job = self._heaps[name][0][1]
            memo = self._keys.get(name)
            if (
                memo is not None
                and memo[0] == queue.version
                and memo[1] is job
                and memo[2] == job.version
            ):
                key = memo[3]
            else:
                key = self.session.framework.queue_order(queue, self.demand(job))
                self._keys[name] = (queue.version, job, job.version, key)
            if best is None or key < best[0]:
                best = (key, queue, job)
        return None if best is None else (best[1], best[2])

    def pop(self) -> Job | None:
        found = self._best(self.session.roots)
        if found is None:
            return None
        job = found[1]
        heapq.heappop(self._heaps[job.queue])
        for queue in self.session.ancestors(job.queue):
            self._pending[queue.name] -= 1
        return job
