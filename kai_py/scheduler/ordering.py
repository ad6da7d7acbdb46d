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
import itertools
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from kai_py.scheduler.fairshare import allocatable_share
from kai_py.scheduler.model import PENDING, Job, Queue
from kai_py.scheduler.resources import EPS, INF, Res
from kai_py.scheduler.session import Session

JobKey = tuple[int, int, float, str]


def elastic_state(job: Job) -> int:
    placed, gang = job.placed, job.min_alive
    if placed < gang:
        return 0
    return 1 if placed == gang else 2


def job_key(job: Job) -> JobKey:
    return (-job.priority, elastic_state(job), job.created, job.uid)


def _allocatable(queue: Queue) -> tuple[float, float, float]:
    """A queue's allocatable shares (gpu, cpu, memory), as ``fairshare.allocatable_share``:
    min(max(deserved, fair share), limit), written out (what max and min return,
    without their calls)."""
    deserved, fair, limit = queue.deserved, queue.fair_share, queue.limit
    gpu = fair.gpu if fair.gpu > deserved.gpu else deserved.gpu
    cpu = fair.cpu if fair.cpu > deserved.cpu else deserved.cpu
    memory = fair.memory if fair.memory > deserved.memory else deserved.memory
    return (
        limit.gpu if limit.gpu < gpu else gpu,
        limit.cpu if limit.cpu < cpu else cpu,
        limit.memory if limit.memory < memory else memory,
    )


def _dominant(gpu: float, cpu: float, memory: float, shares: tuple[float, float, float]) -> float:
    """DRF over plain floats, as ``fairshare.dominant_share``: the largest fraction of
    its allocatable share held (INF for a share of nothing), unrolled over the three
    resources in the same order."""
    best = 0.0
    if gpu > EPS:
        share = shares[0]
        best = gpu / share if share > EPS else INF  # max(0.0, x) is x for x > 0
    if cpu > EPS:
        share = shares[1]
        fraction = cpu / share if share > EPS else INF
        if fraction > best:
            best = fraction
    if memory > EPS:
        share = shares[2]
        fraction = memory / share if share > EPS else INF
        if fraction > best:
            best = fraction
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
        """No larger in any resource and smaller in one (a plain loop: queue keys that
        tie up to here are compared by this, often)."""
        smaller = False
        for mine, theirs in zip(self.shares, other.shares, strict=True):
            if not mine <= theirs + EPS:
                return False
            if mine < theirs - EPS:
                smaller = True
        return smaller

    def __lt__(self, other: object) -> bool:
        return isinstance(other, WeakerShare) and self._weaker(other)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, WeakerShare) and not self._weaker(other) and not other._weaker(self)
        )

    def __hash__(self) -> int:
        return 0


#: Where ``queue_key`` keeps the DRF share with the job and without it (both floats):
#: quota per GPU model puts its own shares there (``gpumodels/drf.py``).
DOMINANT_WITH_JOB, DOMINANT_WITHOUT_JOB = 4, 5


def queue_key(queue: Queue, extra: Res) -> tuple[object, ...]:
    """KAI's queue order, smaller first, for ``queue`` judged with ``extra`` (its next job).

    Written over plain floats: it is computed thousands of times a cycle, and the
    ``Res`` temporaries and ``getattr`` lookups of the readable form cost most of it.
    """
    alloc, fair, deserved = queue.allocated, queue.fair_share, queue.deserved
    gpu, cpu, memory = alloc.gpu, alloc.cpu, alloc.memory
    with_gpu, with_cpu, with_memory = gpu + extra.gpu, cpu + extra.cpu, memory + extra.memory
    shares = _allocatable(queue)
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


def job_order_of(session: Session, job: Job) -> tuple[object, ...]:
    """The framework's job order for ``job``, memoised per job version: a job order looks
    at the job alone, and every picker of a cycle (three actions hand out every
    unplaced job) asks it again for jobs that did not change."""
    memo = session.memo.get("job-keys")
    if not isinstance(memo, dict):
        memo = session.memo["job-keys"] = {}
    cached = memo.get(job.uid)
    if cached is not None and cached[0] == job.version:
        key: tuple[object, ...] = cached[1]
        return key
    key = session.framework.job_order(job)
    memo[job.uid] = (job.version, key)
    return key


class _KeyMemo:
    """A queue's keys at one version of its totals, by the demand judged with."""

    __slots__ = ("keys", "version")

    def __init__(self, version: int) -> None:
        self.version = version
        self.keys: dict[tuple[float, float, float], tuple[object, ...]] = {}


class _Pick:
    """A queue's candidate: the best job of its subtree (None: no job waits there), with
    what it was found under, and the queue's key judged with that job (computed only
    once the queue has a rival to be compared with)."""

    __slots__ = ("generation", "job", "job_version", "key", "queue", "version", "want")

    def __init__(
        self, queue: Queue, job: Job | None, generation: int, want: Res | None = None
    ) -> None:
        self.queue = queue
        self.version = queue.version
        self.generation = generation
        self.job = job
        self.job_version = 0 if job is None else job.version
        self.want = want  # the job's demand, once asked (a parent takes its child's)
        self.key: tuple[object, ...] | None = None


@dataclass(slots=True)
class _Scan:
    """One level of ``JobPicker._best`` in progress: siblings still to look at, the best
    so far, and the sibling whose own children are being scanned (``waiting``)."""

    names: Iterator[str]
    generation: int
    best: _Pick | None = None
    best_key: tuple[object, ...] | None = None
    waiting: str | None = None


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
        self._picks: dict[str, _Pick] = {}  # queue -> its candidate, while still valid
        # Queue keys by queue, for the whole session: the pickers of one session share them.
        memos = session.memo.get("queue-keys")
        if not isinstance(memos, dict):
            memos = session.memo["queue-keys"] = {}
        self._key_memos: dict[str, _KeyMemo] = memos
        # The built-in order reads of a queue only its allocated totals besides what is
        # fixed for a session (fair share, deserved quota, limit, priority, age, name):
        # its keys are memoised by those totals, which a scenario that evicts and rolls
        # back comes back to while the versions move on. Another order: per version.
        self._by_totals = session.framework.queue_order is queue_key
        by_totals = session.memo.get("queue-keys-by-totals")
        if not isinstance(by_totals, dict):
            by_totals = session.memo["queue-keys-by-totals"] = {}
        self._totals_memo: dict[tuple[object, ...], tuple[object, ...]] = by_totals
        self._line = line
        self._at: dict[str, int] = {}  # queue -> the next of its line's jobs to hand out
        self._mine: set[str] = set()  # jobs pushed (the line skips them)
        # Pushed in bulk: heapify per queue and count per queue, then up the tree once
        # (job keys are unique, so the order is that of pushing them one by one).
        queues = session.queues
        counts: dict[str, int] = {}
        for job in jobs:
            if job.queue not in queues:
                continue
            self._heaps.setdefault(job.queue, []).append((job_order_of(session, job), job))
            self._mine.add(job.uid)
            counts[job.queue] = counts.get(job.queue, 0) + 1
        for heap in self._heaps.values():
            heapq.heapify(heap)
        for name, count in counts.items():
            for queue in session.ancestors(name):
                self._pending[queue.name] = self._pending.get(queue.name, 0) + count

    def push(self, job: Job) -> None:
        if job.queue not in self.session.queues:
            return
        heapq.heappush(
            self._heaps.setdefault(job.queue, []), (job_order_of(self.session, job), job)
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

    def _key(self, pick: _Pick) -> tuple[object, ...]:
        """The queue's key with its candidate job, memoised per queue totals (or version)
        and demand (jobs in line often ask for the same, and a failed job changes
        nothing)."""
        if pick.key is None:
            assert pick.job is not None
            queue = pick.queue
            want = pick.want
            if want is None:
                want = pick.want = self.demand(pick.job)
            if self._by_totals:
                held = queue.allocated
                asked_at = (
                    queue.name,
                    held.cpu,
                    held.memory,
                    held.gpu,
                    want.cpu,
                    want.memory,
                    want.gpu,
                )
                key = self._totals_memo.get(asked_at)
                if key is None:
                    key = self._totals_memo[asked_at] = queue_key(queue, want)
                pick.key = key
                return key
            memo = self._key_memos.get(queue.name)
            if memo is None or memo.version != queue.version:
                memo = self._key_memos[queue.name] = _KeyMemo(queue.version)
            asked = (want.cpu, want.memory, want.gpu)
            key = memo.keys.get(asked)
            if key is None:
                key = memo.keys[asked] = self.session.framework.queue_order(queue, want)
            pick.key = key
        return pick.key

    def _fresh(self, name: str, found: _Pick | None) -> _Pick:
        """``name``'s candidate, found again: ``found``, its children's best (when a job
        waits in its subtree and it has children), else the head of its own jobs if
        one waits there (a job waits in a subtree: asked for every queue on the
        changed path of a pick)."""
        queue = self.session.queues[name]
        job: Job | None = None
        want: Res | None = None
        line = self._line
        if found is not None:
            job, want = found.job, found.want
        elif not queue.children and (
            self._pending.get(name) or (line is not None and name in line.subtrees)
        ):
            head = self._head(name)
            if head is not None:
                job = head[1]
        # Read after _head, which may have dropped finished jobs from the line.
        pick = _Pick(queue, job, -1 if self._line is None else self._line.generation, want)
        self._picks[name] = pick
        return pick

    def _best(self, names: Iterable[str]) -> _Pick | None:
        """The best candidate of ``names``: the first with the smallest key. A lone
        candidate needs no key. Kept candidates are checked inline: this loop runs
        for every sibling on the changed path of every pick.

        A stale candidate with children is their best, found first: the scans of the
        levels in progress are kept on a list (``_Scan``), not on the call stack, as a
        queue tree is user data and may be thousands of levels deep."""
        picks, pending, line, queues = self._picks, self._pending, self._line, self.session.queues
        stack = [_Scan(iter(names), -1 if line is None else line.generation)]
        found: _Pick | None = None  # the best of the scan that just ended
        while True:
            scan = stack[-1]
            if scan.waiting is not None:
                # Its children's scan has ended: its candidate is ``found``, looked at
                # next as a kept one (``_fresh`` keeps it).
                self._fresh(scan.waiting, found)
                scan.names = itertools.chain((scan.waiting,), scan.names)
                scan.waiting = None
                scan.generation = -1 if line is None else line.generation
            generation, best, best_key = scan.generation, scan.best, scan.best_key
            for name in scan.names:
                pick = picks.get(name)
                if (
                    pick is None
                    or pick.version != pick.queue.version
                    or pick.generation != generation
                    or (pick.job is not None and pick.job.version != pick.job_version)
                ):
                    if queues[name].children and (
                        pending.get(name) or (line is not None and name in line.subtrees)
                    ):  # its candidate is its children's best: scanned first
                        scan.waiting = name
                        break
                    pick = self._fresh(name, None)
                    generation = -1 if line is None else line.generation
                if pick.job is None:
                    continue
                if best is None:
                    best = pick
                    continue
                if best_key is None:
                    best_key = best.key if best.key is not None else self._key(best)
                key = pick.key if pick.key is not None else self._key(pick)
                if key < best_key:
                    best, best_key = pick, key
            scan.generation, scan.best, scan.best_key = generation, best, best_key
            if scan.waiting is not None:
                children = queues[scan.waiting].children
                stack.append(_Scan(iter(children), -1 if line is None else line.generation))
                continue
            stack.pop()
            found = best
            if not stack:
                return found

    def pop(self) -> Job | None:
        found = self._best(self.session.roots)
        if found is None:
            return None
        job = found.job
        assert job is not None
        heap = self._heaps.get(job.queue)
        mine = heap is not None and bool(heap) and heap[0][1] is job
        if heap is not None and mine:
            heapq.heappop(heap)
        else:
            self._at[job.queue] += 1  # one of the line's jobs
        pending, picks = self._pending, self._picks
        for queue in self.session.ancestors(job.queue):
            if mine:
                pending[queue.name] -= 1
            picks.pop(queue.name, None)
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
        # A plain loop: asked for every job in line in every scenario simulated, and
        # any() over a generator costs several times more for a job's few tasks.
        for task in job.tasks:  # noqa: SIM110
            if task.status is PENDING:
                return True
        return False

    def add(self, jobs: Iterable[Job]) -> None:
        queues = self.session.queues
        session = self.session
        for job in jobs:
            queue = queues.get(job.queue)
            if queue is None or queue.children or job.uid in self._known:
                continue
            if not self.pending(job):
                continue
            self._known.add(job.uid)
            entries = self.entries.setdefault(job.queue, [])
            key = job_order_of(session, job)
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
