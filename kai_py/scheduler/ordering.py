"""Queue order and job order (docs/scheduling.md, "Allocate").

``JobPicker`` walks the queue tree from the root each time: at every level
the child with the best key wins, a parent being judged with the best job of
its subtree. With tens of queues that is a few dozen key computations per
pick, cheaper than keeping heaps consistent while allocations move totals.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable, Iterable

from kai_py.scheduler.fairshare import allocatable_share, dominant_share
from kai_py.scheduler.model import Job, Queue, TaskStatus
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
    """Hands out the next job to try, by queue order then job order.

    ``line``, when given, adds the session's other pending jobs: they take their
    place in line (a queue is judged by its next job, whichever that is) and are
    handed out like the others; the caller decides what to do with them.
    """

    def __init__(
        self,
        session: Session,
        jobs: Iterable[Job],
        demand: Callable[[Job], Res],
        line: PendingLine | None = None,
    ) -> None:
        self.session = session
        self.demand = demand
        self._heaps: dict[str, list[tuple[tuple[object, ...], Job]]] = {}
        self._pending: dict[str, int] = {}  # queue -> jobs waiting in its subtree
        self._keys: dict[str, tuple[int, Job, int, tuple[object, ...]]] = {}
        self._line = line
        self._at: dict[str, int] = {}  # queue -> the next of its line's jobs to hand out
        self._mine: set[str] = set()  # jobs pushed (the line skips them)
        for job in jobs:
            self.push(job)

    def push(self, job: Job) -> None:
        if job.queue not in self.session.queues:
            return
        heapq.heappush(
            self._heaps.setdefault(job.queue, []), (self.session.framework.job_order(job), job)
        )
        self._mine.add(job.uid)
        for queue in self.session.ancestors(job.queue):
            self._pending[queue.name] = self._pending.get(queue.name, 0) + 1

    def drop_line(self) -> None:
        """From now on hand out only the jobs pushed."""
        self._line = None

    def _line_head(self, name: str) -> tuple[tuple[object, ...], Job] | None:
        line = self._line
        if line is None:
            return None
        entries = line.entries.get(name)
        if not entries:
            return None
        at = self._at.get(name)
        if at is None:
            at = line.front(name)
        while at < len(entries):
            job = entries[at][1]
            if job.uid not in self._mine and line.pending(job):
                break
            at += 1
        self._at[name] = at
        return entries[at] if at < len(entries) else None

    def _head(self, name: str) -> tuple[tuple[object, ...], Job] | None:
        heap = self._heaps.get(name)
        mine = heap[0] if heap else None
        if self._line is None or name not in self._line.entries:
            return mine
        other = self._line_head(name)
        if mine is None or (other is not None and other[0] < mine[0]):
            return other
        return mine

    def _waiting(self, name: str) -> bool:
        if self._pending.get(name):
            return True
        return self._line is not None and name in self._line.subtrees

    def _best(self, names: Iterable[str]) -> tuple[Queue, Job] | None:
        best: tuple[tuple[object, ...], Queue, Job] | None = None
        queues = self.session.queues
        for name in names:
            if not self._waiting(name):
                continue
            queue = queues[name]
            if queue.children:
                found = self._best(queue.children)
                if found is None:
                    continue
                job = found[1]
            else:
                head = self._head(name)
                if head is None:
                    continue
                job = head[1]
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
        heap = self._heaps.get(job.queue)
        if heap and heap[0][1] is job:
            heapq.heappop(heap)
            for queue in self.session.ancestors(job.queue):
                self._pending[queue.name] -= 1
        else:
            self._at[job.queue] += 1  # one of the line's jobs
        return job


class PendingLine:
    """The session's pending jobs per leaf queue, in job order: the others in line when
    a scenario is simulated. Built once per action; a job that stops being pending is
    skipped (and dropped for good once it reaches the front), one that is pending
    again is added back with ``add``."""

    def __init__(self, session: Session, jobs: Iterable[Job]) -> None:
        self.session = session
        self.entries: dict[str, list[tuple[tuple[object, ...], Job]]] = {}
        self.subtrees: set[str] = set()  # queues with a pending job in their subtree
        self._known: set[str] = set()
        self.add(jobs)

    @staticmethod
    def pending(job: Job) -> bool:
        return any(t.status is TaskStatus.PENDING for t in job.tasks)

    def add(self, jobs: Iterable[Job]) -> None:
        queues = self.session.queues
        order = self.session.framework.job_order
        for job in jobs:
            queue = queues.get(job.queue)
            if queue is None or queue.children or job.uid in self._known:
                continue
            if not self.pending(job):
                continue
            self._known.add(job.uid)
            entries = self.entries.setdefault(job.queue, [])
            key = order(job)
            entries.insert(bisect.bisect(entries, key, key=lambda e: e[0]), (key, job))
            for up in self.session.ancestors(job.queue):
                self.subtrees.add(up.name)

    def front(self, name: str) -> int:
        """Drop the jobs at the front of ``name``'s line that are no longer pending."""
        entries = self.entries[name]
        gone = 0
        while gone < len(entries) and not self.pending(entries[gone][1]):
            self._known.discard(entries[gone][1].uid)
            gone += 1
        if gone:
            del entries[:gone]
        return 0
