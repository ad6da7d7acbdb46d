"""Queue order and job order (docs/scheduling.md, "Allocate").

``JobPicker`` picks from the root down: at every level the child with the best
key wins, a parent being judged with the best job of its subtree. Siblings are
compared in order rather than kept in heaps, because the order is not a total
one (``WeakerShare`` ties) and allocations move totals; instead each queue's
candidate is kept until something under it changes, so a pick walks again only
the path of the queue that changed.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable, Iterable

from kai_py.scheduler.fairshare import allocatable_share
from kai_py.scheduler.model import PENDING, Job, Queue
from kai_py.scheduler.resources import EPS, INF, Res
from kai_py.scheduler.session import Session

JobKey = tuple[int, int, float, str]


def elastic_state(job: Job) -> int:
    placed = job.placed
    if placed < job.min_member:
        return 0
    return 1 if placed == job.min_member else 2


def job_key(job: Job) -> JobKey:
    return (-job.priority, elastic_state(job), job.created, job.uid)


def _allocatable(deserved: float, fair_share: float, limit: float) -> float:
    """A queue's allocatable share of one resource (``fairshare.allocatable_share``)."""
    return min(max(deserved, fair_share), limit)


def _dominant(gpu: float, cpu: float, memory: float, shares: tuple[float, float, float]) -> float:
    """DRF over plain floats, as ``fairshare.dominant_share`` (same order, same arithmetic)."""
    best = 0.0
    for used, share in ((gpu, shares[0]), (cpu, shares[1]), (memory, shares[2])):
        if used <= EPS:
            continue
        best = max(best, used / share if share > EPS else INF)
    return best


class WeakerShare:
    """Orders queues by allocatable share: the one smaller in at least one resource
    and in none larger goes first (a "weaker" queue); other pairs are equal."""

    __slots__ = ("_shares", "queue")

    def __init__(self, queue: Queue, shares: tuple[float, ...] | None = None) -> None:
        self.queue = queue
        self._shares = shares  # computed when a tie needs it, unless given

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


def queue_key(queue: Queue, extra: Res) -> tuple[object, ...]:
    """KAI's queue order, smaller first, for ``queue`` judged with ``extra`` (its next job).

    Written over plain floats: it is computed thousands of times a cycle, and the
    ``Res`` temporaries and ``getattr`` lookups of the readable form cost most of it.
    """
    alloc, fair, deserved, limit = queue.allocated, queue.fair_share, queue.deserved, queue.limit
    gpu, cpu, memory = alloc.gpu, alloc.cpu, alloc.memory
    with_gpu, with_cpu, with_memory = gpu + extra.gpu, cpu + extra.cpu, memory + extra.memory
    shares = (
        _allocatable(deserved.gpu, fair.gpu, limit.gpu),
        _allocatable(deserved.cpu, fair.cpu, limit.cpu),
        _allocatable(deserved.memory, fair.memory, limit.memory),
    )
    return (
        # Over its fair share in every resource (CPU, memory and GPU): last.
        gpu > fair.gpu + EPS and cpu > fair.cpu + EPS and memory > fair.memory + EPS,
        # Not within its deserved quota once the job is added.
        not (
            with_cpu <= deserved.cpu + EPS
            and with_memory <= deserved.memory + EPS
            and with_gpu <= deserved.gpu + EPS
        ),
        -queue.priority,
        # It would hold some of a resource of which its allocatable share is nothing.
        (shares[0] <= EPS and with_gpu > EPS)
        or (shares[1] <= EPS and with_cpu > EPS)
        or (shares[2] <= EPS and with_memory > EPS),
        _dominant(with_gpu, with_cpu, with_memory, shares),  # DRF with the job
        _dominant(gpu, cpu, memory, shares),  # then without it
        WeakerShare(queue, shares),
        queue.created,
        queue.name,
    )


class _KeyMemo:
    """A queue's keys at one version of its totals, by the demand judged with."""

    __slots__ = ("keys", "version")

    def __init__(self, version: int) -> None:
        self.version = version
        self.keys: dict[tuple[float, float, float], tuple[object, ...]] = {}


class _Pick:
    """A queue's candidate: the best job of its subtree, and the queue's key judged
    with that job (computed only once the queue has a rival to be compared with)."""

    __slots__ = ("job", "job_version", "key", "queue")

    def __init__(self, queue: Queue, job: Job) -> None:
        self.queue = queue
        self.job = job
        self.job_version = job.version
        self.key: tuple[object, ...] | None = None


class JobPicker:
    """Hands out the next job to try, by queue order then job order.

    ``line``, when given, adds the session's other pending jobs: they take their
    place in line (a queue is judged by its next job, whichever that is) and are
    handed out like the others; the caller decides what to do with them.

    Each queue's candidate is kept until something under it changes: its
    ``version`` (bumped up the tree by every change of a total), the line's
    ``generation``, its candidate job's ``version``, or a push or pop below it. A
    pick then walks again only the path of the queue that changed, still comparing
    siblings in order with the same keys, so the result is that of a full walk.
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
        # queue -> (its version, the line's generation, its candidate)
        self._picks: dict[str, tuple[int, int, _Pick | None]] = {}
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
            self._picks.pop(queue.name, None)

    def drop_line(self) -> None:
        """From now on hand out only the jobs pushed."""
        self._line = None
        self._picks.clear()

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

    def _key(self, pick: _Pick) -> tuple[object, ...]:
        """The queue's key with its candidate job, memoised per queue version and demand
        (jobs in line often ask for the same, and a failed job changes nothing)."""
        if pick.key is None:
            queue = pick.queue
            want = self.demand(pick.job)
            memo_key = ("queue-key", queue.name)
            memo = self.session.memo.get(memo_key)
            if not isinstance(memo, _KeyMemo) or memo.version != queue.version:
                memo = self.session.memo[memo_key] = _KeyMemo(queue.version)
            asked = (want.cpu, want.memory, want.gpu)
            key = memo.keys.get(asked)
            if key is None:
                key = memo.keys[asked] = self.session.framework.queue_order(queue, want)
            pick.key = key
        return pick.key

    def _pick(self, name: str) -> _Pick | None:
        """``name``'s candidate: from the cache while nothing under it changed."""
        queue = self.session.queues[name]
        generation = -1 if self._line is None else self._line.generation
        cached = self._picks.get(name)
        if cached is not None and cached[0] == queue.version and cached[1] == generation:
            pick = cached[2]
            if pick is None or pick.job.version == pick.job_version:
                return pick
        pick = None
        if self._waiting(name):
            if queue.children:
                found = self._best(queue.children)
                if found is not None:
                    pick = _Pick(queue, found.job)
            else:
                head = self._head(name)
                if head is not None:
                    pick = _Pick(queue, head[1])
        # _head may have dropped finished jobs from the line (a new generation).
        generation = -1 if self._line is None else self._line.generation
        self._picks[name] = (queue.version, generation, pick)
        return pick

    def _best(self, names: Iterable[str]) -> _Pick | None:
        """The best candidate of ``names``: the first with the smallest key. A lone
        candidate needs no key."""
        best: _Pick | None = None
        rivals = False
        for name in names:
            pick = self._pick(name)
            if pick is None:
                continue
            if best is None:
                best = pick
                continue
            if not rivals:
                self._key(best)
                rivals = True
            if self._key(pick) < self._key(best):
                best = pick
        return best

    def pop(self) -> Job | None:
        found = self._best(self.session.roots)
        if found is None:
            return None
        job = found.job
        heap = self._heaps.get(job.queue)
        if heap and heap[0][1] is job:
            heapq.heappop(heap)
            for queue in self.session.ancestors(job.queue):
                self._pending[queue.name] -= 1
        else:
            self._at[job.queue] += 1  # one of the line's jobs
        for queue in self.session.ancestors(job.queue):
            self._picks.pop(queue.name, None)
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
        # Bumped whenever the entries change, so pickers drop the candidates they kept.
        self.generation = 0
        self.add(jobs)

    @staticmethod
    def pending(job: Job) -> bool:
        return any(t.status is PENDING for t in job.tasks)

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
            self.generation += 1
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
            self.generation += 1
        return 0
