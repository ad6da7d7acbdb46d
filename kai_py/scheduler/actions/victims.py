"""The victim search shared by reclaim, preempt and consolidation.

Victims are added one unit at a time, cheapest first: the surplus pods of
elastic jobs (in the reverse of the order their pods are placed in: workers before
masters, lowest task-priority and newest first), then whole gangs (a
gang that would fall below minMember goes as a whole). The preemptor is placed
on what the victims release after each added unit for the first few scenarios,
then at growing steps (1, 2, 4... more units); once a first scenario failed, only
counts of victims that could make room for it at all (checked per node, without
simulating) are tried. When a scenario works and the action's validator agrees,
the search goes back to the first count of units that works, units on nodes the
preemptor does not use are put back together, then the others one by one, and
the smallest scenario found is kept. The scenarios of one preemptor and the
victim pods one action simulates are capped (``MAX_SCENARIOS``,
``ACTION_BUDGET``).
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Final

from kai_py.scheduler.actions.common import demand, needed, next_tasks, place_tasks
from kai_py.scheduler.model import (
    ALLOCATED,
    PIPELINED,
    RUNNING,
    Job,
    Node,
    Queue,
    SubGroups,
    Task,
    TaskStatus,
    Unit,
)
from kai_py.scheduler.ordering import JobPicker, PendingLine
from kai_py.scheduler.placement import Placement, Placer, fit_key
from kai_py.scheduler.resources import EPS, Res
from kai_py.scheduler.session import Op, Session, Statement
from kai_py.scheduler.subgroups import tree
from kai_py.scheduler.topology import domains

Validator = Callable[[Sequence[Unit]], bool]


def always(_: Sequence[Unit]) -> bool:
    """The validator of actions whose candidates are already all acceptable."""
    return True


#: Whether pods placed (bound or pipelined) earlier in the cycle may be victims, as in
#: KAI. Off: with the search bounded it no longer takes minutes, but on a busy cycle
#: (bench/cycle.py) a few pending jobs whose searches over this cycle's placements all
#: fail in simulation spend the whole ``ACTION_BUDGET``, the cycle takes 2.5 times as
#: long, and the hundreds of preemptors after them are told the search stopped, the
#: same ones in every cycle. Running pods only, until such searches are cheap to refuse.
THIS_CYCLE_VICTIMS = False


def held(task: Task) -> bool:
    """The pod holds resources a victim search may take back: it runs (or, with
    ``THIS_CYCLE_VICTIMS``, it was placed earlier in this cycle)."""
    if THIS_CYCLE_VICTIMS:
        return task.status.is_placed
    return task.status is TaskStatus.RUNNING


def any_held(session: Session) -> bool:
    """Whether any pod of the session holds resources a victim search could take back.

    When none does, every ``VictimPool`` of the action is empty and stays so (a pool
    takes in a job only after a search of its succeeded, which needs a victim), so no
    search can evict anything: an action may skip its searches, and say only what
    a search with no victims would have said. A plain loop that stops at the first
    such pod: on a cluster with running pods it stops at once. Only commits change
    which pods hold resources (an action starts with no statement open), so the answer
    is kept per count of committed operations.
    """
    key = ("any-held", len(session.committed))
    known = session.memo.get(key)
    if isinstance(known, bool):
        return known
    found = False
    for job in session.jobs.values():
        for task in job.tasks:
            status = task.status  # held(task), inlined: asked of every pod
            if status is RUNNING or (
                THIS_CYCLE_VICTIMS and (status is ALLOCATED or status is PIPELINED)
            ):
                found = True
                break
        if found:
            break
    session.memo[key] = found
    return found


def job_units(job: Job, eligible: Callable[[Task], bool]) -> tuple[list[Unit], Unit | None]:
    """A job's surplus pods (one unit each; for a job with sub-groups, the steps that keep
    every sub-group at its minimum) and its gang unit (all its placed pods).

    The gang unit holds every placed pod, so taking it never leaves part of a
    gang behind; a protected pod (too young) keeps the whole gang safe.
    """
    # The reverse of the placement order: the last pod placed is the first to go
    # (pods placed in this cycle before running ones).
    running = sorted(
        (t for t in job.tasks if held(t)),
        key=lambda t: (t.status is not TaskStatus.RUNNING, t.order),
        reverse=True,
    )
    if not running:
        return [], None
    surplus: list[Unit] = []
    if job.subgroups is not None:
        # Only what leaves every sub-group at its minimum: one elastic extra at a time,
        # or a whole sub-group its parent can do without; the rest goes as one gang.
        # Each step is decided with the earlier ones gone, so a unit holds them too: a
        # search that puts an earlier unit back must not keep a later one alone.
        taken: list[Task] = []
        for step in tree.eviction_steps(job, running):
            if not all(eligible(t) for t in step):
                break
            taken = taken + step
            surplus.append(Unit(job, taken))
    else:
        for task in running[: max(0, len(running) - job.min_member)]:
            if not eligible(task):
                break
            surplus.append(Unit(job, [task]))
    gang = Unit(job, running) if all(eligible(t) for t in running) else None
    return surplus, gang


class VictimPool:
    """The possible victims of one action, by queue, cheapest first, built once.

    Units of victims already evicted are skipped when read, so the pool stays
    valid while the action commits evictions.
    """

    def __init__(
        self,
        session: Session,
        action: str,
        jobs: Iterable[Job],
        cost: Callable[[Job], tuple[object, ...]],
        eligible: Callable[[Task], bool],
    ) -> None:
        self._session = session
        self._action = action
        self._cost = cost
        self._eligible = eligible
        self._surplus: dict[str, list[tuple[tuple[object, ...], int, Unit]]] = {}
        self._gangs: dict[str, list[tuple[tuple[object, ...], int, Unit]]] = {}
        self._ordered: dict[str, list[Unit]] = {}
        # queue -> how many of the first units of _in_order(queue) are gone for good
        # (see units_in_queue_order)
        self._gone: dict[str, int] = {}
        # (table, queue) -> the same for one list of _surplus or _gangs (see units)
        self._gone_entries: dict[tuple[str, str], int] = {}
        self._covered: dict[str, frozenset[str]] = {}  # job uid -> the pods its units hold
        may = session.framework.may_be_victim
        ordered = sorted((j for j in jobs if may(session, j, action)), key=cost)
        self._seq = len(ordered)
        for seq, job in enumerate(ordered):
            extra, gang = job_units(job, eligible)
            key = cost(job)
            for unit in extra:
                self._surplus.setdefault(job.queue, []).append((key, seq, unit))
            if gang is not None:
                self._gangs.setdefault(job.queue, []).append((key, seq, gang))
            self._covered[job.uid] = frozenset(t.uid for t in job.tasks if held(t))

    def refresh(self, jobs: Iterable[Job]) -> None:
        """Take in what ``jobs`` placed since the pool was built (a preemptor placed by
        this action may be a later preemptor's victim, as pods placed earlier are)."""
        session = self._session
        for job in jobs:
            now = frozenset(t.uid for t in job.tasks if held(t))
            if not now or now <= self._covered.get(job.uid, frozenset()):
                continue
            if not session.framework.may_be_victim(session, job, self._action):
                continue
            self._covered[job.uid] = now
            for table in (self._surplus, self._gangs):
                entries = table.get(job.queue)
                if entries:
                    entries[:] = [e for e in entries if e[2].job is not job]
            extra, gang = job_units(job, self._eligible)
            key = self._cost(job)
            self._seq += 1
            for unit in [*extra, gang]:
                if unit is None:
                    continue
                table = self._gangs if unit is gang else self._surplus
                bisect.insort(
                    table.setdefault(job.queue, []),
                    (key, self._seq, unit),
                    key=lambda e: (e[0], e[1]),
                )
            self._ordered.pop(job.queue, None)
            self._gone.pop(job.queue, None)
            self._gone_entries.pop(("surplus", job.queue), None)
            self._gone_entries.pop(("gangs", job.queue), None)

    @property
    def queues(self) -> set[str]:
        return set(self._surplus) | set(self._gangs)

    def units(
        self, queues: Iterable[str], keep: Callable[[Job], bool] | None = None
    ) -> Iterator[Unit]:
        """Victims of ``queues``, cheapest first across them: elastic surplus, then gangs.

        To be called with no statement open (as a search starts), as
        ``units_in_queue_order``: each queue's list is read from past the units known
        to be gone for good, instead of passing over every victim the action evicted
        so far again (a preempt of n one-pod victims cost n squared: 11.7 s for 4,000
        in bench/cycle.py). The starts are found here, before the search opens its
        statements; the walk itself is lazy.
        """
        names = list(queues)
        parts = [
            [
                itertools.islice(table[q], self._past_gone(kind, q, table[q]), None)
                for q in names
                if q in table
            ]
            for kind, table in (("surplus", self._surplus), ("gangs", self._gangs))
        ]
        return self._merged(parts, keep)

    @staticmethod
    def _merged(
        parts: Sequence[Sequence[Iterable[tuple[tuple[object, ...], int, Unit]]]],
        keep: Callable[[Job], bool] | None,
    ) -> Iterator[Unit]:
        for lists in parts:
            for _, _, unit in heapq.merge(*lists, key=lambda e: (e[0], e[1])):
                if _live(unit) and (keep is None or keep(unit.job)):
                    yield unit

    def _past_gone(
        self, kind: str, queue: str, entries: list[tuple[tuple[object, ...], int, Unit]]
    ) -> int:
        """How many of the first ``entries`` are gone for good (see
        ``units_in_queue_order`` for why a unit not live with no statement open is)."""
        if THIS_CYCLE_VICTIMS:
            return 0
        at = self._gone_entries.get((kind, queue), 0)
        while at < len(entries) and not _live(entries[at][2]):
            at += 1
        self._gone_entries[(kind, queue)] = at
        return at

    def units_in_queue_order(
        self, session: Session, queues: Iterable[str], keep: Callable[[Job], bool] | None = None
    ) -> Iterator[Unit]:
        """Victims queue by queue in the reverse of queue order, re-evaluated as victims
        are taken: the queue that allocate would serve last (above its fair share, above
        its deserved quota, lower priority, larger share once the victim is gone) gives
        first; inside a queue, the cheapest first. In a tree, each level picks the child
        whose next victim puts it last.

        To be called with no statement open (as a search starts): each walk starts
        past the units known to be gone for good, instead of passing over every victim
        the action evicted so far again (which made a reclaim of n one-pod victims cost
        n squared). With no statement open, a unit with no pod holding resources has
        only committed evictions (or never held any); such pods never hold resources
        again in the session (an evicted running pod stays evicted), unless pods placed
        in this cycle are victims (``THIS_CYCLE_VICTIMS``: one taken back is pending,
        and may be placed again), when nothing is kept. The walk would have passed
        over those units anyway: they are not live.
        """
        position: dict[str, int] = {}
        for name in queues:
            units = self._in_order(name)
            if units:
                gone = 0
                if not THIS_CYCLE_VICTIMS:
                    gone = self._gone.get(name, 0)
                    while gone < len(units) and not _live(units[gone]):
                        gone += 1
                    self._gone[name] = gone
                position[name] = gone
        return self._walk_in_queue_order(session, position, keep)

    def _walk_in_queue_order(
        self, session: Session, position: dict[str, int], keep: Callable[[Job], bool] | None
    ) -> Iterator[Unit]:
        memo = _LineMemo()
        while True:
            nexts: dict[str, Unit] = {}
            for name in list(position):
                units, at = self._in_order(name), position[name]
                while at < len(units) and not (
                    _live(units[at]) and (keep is None or keep(units[at].job))
                ):
                    at += 1
                position[name] = at
                if at < len(units):
                    nexts[name] = units[at]
                else:
                    del position[name]
            if not nexts:
                return
            leaf = _last_in_line(session, nexts, memo)
            position[leaf] += 1
            yield nexts[leaf]

    def _in_order(self, queue: str) -> list[Unit]:
        """A queue's units, cheapest first: its elastic surplus, then its gangs."""
        found = self._ordered.get(queue)
        if found is None:
            found = self._ordered[queue] = [
                u for table in (self._surplus, self._gangs) for _, _, u in table.get(queue, [])
            ]
        return found


class _LineMemo:
    """What one walk of ``units_in_queue_order`` has computed: each waiting unit's
    resources (its pods stay put while it waits: only units already handed out are
    evicted) and each queue's key for a unit, while the queue's figures stay the same
    (only the queue whose victim was taken changes, with its ancestors)."""

    __slots__ = ("freed", "keys")

    def __init__(self) -> None:
        self.freed: dict[int, Res] = {}
        self.keys: dict[str, tuple[int, Unit, tuple[object, ...]]] = {}


def _last_in_line(session: Session, pending: dict[str, Unit], memo: _LineMemo) -> str:
    """The leaf queue whose next victim comes from the queue allocate would serve last."""
    subtree: dict[str, list[str]] = {}
    for leaf in pending:
        for queue in session.ancestors(leaf):
            subtree.setdefault(queue.name, []).append(leaf)

    def freed(unit: Unit) -> Res:
        found = memo.freed.get(id(unit))
        if found is None:
            found = memo.freed[id(unit)] = Res()
            for task in unit.tasks:
                if held(task):
                    found.sub(session.task_res(task, session.nodes.get(task.node_name or "")))
        return found

    def order(queue: Queue, unit: Unit) -> tuple[object, ...]:
        known = memo.keys.get(queue.name)
        if known is not None and known[0] == queue.version and known[1] is unit:
            return known[2]
        key = session.framework.queue_order(queue, freed(unit))
        memo.keys[queue.name] = (queue.version, unit, key)
        return key

    def pick(names: list[str]) -> str:
        best: tuple[tuple[object, ...], str] | None = None
        for name in names:
            queue = session.queues[name]
            leaf = name if name in pending else pick([c for c in queue.children if c in subtree])
            key = order(queue, pending[leaf])
            if best is None or best[0] < key:
                best = (key, leaf)
        assert best is not None
        return best[1]

    roots = [r for r in session.roots if r in subtree]
    return pick(roots)


def _free(session: Session) -> Res:
    """What the whole cluster has free, counting what is being released as free (an
    upper bound of what any placement can use)."""
    total = Res()
    for node in session.nodes.values():
        a, u, r = node.allocatable, node.used, node.releasing
        total.cpu += max(0.0, a.cpu - u.cpu + r.cpu)
        total.memory += max(0.0, a.memory - u.memory + r.memory)
        total.gpu += max(0.0, a.gpu - u.gpu + r.gpu)
    return total


def _live(unit: Unit) -> bool:
    return any(held(t) for t in unit.tasks)


#: The most scenarios one preemptor's search simulates (KAI bounds its search by time,
#: which a pure scheduler has not). With placements at growing steps a fruitless search
#: over n victims needs about LINEAR_STEPS + log2(n); the cap matters for pruning a
#: large scenario (the victims left then are not all needed, but the scenario works).
MAX_SCENARIOS = 64

# How a preemptor's search ended, in the words of KAI's scenario search metrics: a
# solution; the search stopped at its limit (KAI's limit is a deadline, kai-py's a
# count of scenarios and of simulated evictions); no more scenarios to try; not
# started, the budget being spent.
SOLVED: Final = "solved"
STOPPED: Final = "deadline_exhausted"
EXHAUSTED: Final = "generators_exhausted"
NOT_ATTEMPTED: Final = "not_attempted"

#: The first scenarios of a search add one unit each (as KAI does); only then do the
#: steps grow. A scenario may work only in a narrow range of victims (the reclaim
#: rules refuse taking a queue below its share), which growing steps could jump over:
#: small searches, the usual ones, stay exact.
LINEAR_STEPS = 8

#: The victim pods one action may simulate in all (each simulation places its victims
#: again, in queue order, at some 100-250 microseconds a pod on a busy 2-core machine):
#: a few seconds. 1,000 one-pod reclaims take about 3,000. Past it the action's
#: remaining preemptors are not searched in this cycle and are told so; KAI bounds an
#: action's search by time (5 minutes by default) the same way.
ACTION_BUDGET = 10_000


class SearchBudget:
    """What is left of an action's ``ACTION_BUDGET``. One preemptor may spend at most a
    tenth of it, so that a few fruitless searches over many victims do not leave
    nothing for the preemptors after them."""

    def __init__(self, pods: int | None = None) -> None:
        self.left = ACTION_BUDGET if pods is None else pods
        self.share = max(1, self.left // 10)
        self._start = self.left

    def begin(self) -> None:
        """A preemptor's search starts."""
        self._start = self.left

    @property
    def spent(self) -> bool:
        return self.exhausted or self._start - self.left >= self.share

    @property
    def exhausted(self) -> bool:
        """Nothing left for any preemptor of the action."""
        return self.left <= 0


def capped_note(search: VictimSearch) -> str:
    """What a preemptor's explanation adds when its search was cut short."""
    return stopped_note(search.scenarios) if search.capped else ""


def stopped_note(scenarios: int) -> str:
    return (
        f"; the victim search stopped after {scenarios} scenario(s), at the limit "
        f"of what one cycle searches (later cycles search again)"
    )


class Fruitless:
    """Preemptors whose search found nothing in this action, by what the search reads
    of them: their queue, priority, preemptibility, and the pods they place next. A
    preemptor like one of these is not searched again while nothing was committed
    since (same cluster, same victims, same queue figures): the search would end the
    same way. The pending jobs of its queue between the two must be alike too (the
    simulation judges a queue's turn by its next pending job)."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self._failed: dict[tuple[object, ...], tuple[int, Job]] = {}

    def _key(self, job: Job) -> tuple[object, ...] | None:
        if any(t.status.is_placed or t.status is TaskStatus.RUNNING for t in job.tasks):
            return None  # its own pods change what it may take and where it starts
        shapes: list[object] = []
        for task in next_tasks(job, needed(job)):
            if task.pin is not None or task.pod_affinity:
                return None  # where they fit depends on which pods are where
            shapes.append((*fit_key(task), task.nominated_node))
        return (job.queue, job.priority, job.preemptible, tuple(shapes))

    def known(self, job: Job, line: PendingLine | None) -> bool:
        """A preemptor like one whose search failed, with nothing committed since."""
        key = self._key(job)
        if key is None:
            return False
        found = self._failed.get(key)
        if found is None or found[0] != len(self.session.committed):
            return False
        return line is None or self._alike_between(line, found[1], job, key)

    def add(self, job: Job) -> None:
        key = self._key(job)
        if key is not None:
            self._failed[key] = (len(self.session.committed), job)

    def _alike_between(
        self, line: PendingLine, first: Job, job: Job, key: tuple[object, ...]
    ) -> bool:
        order = self.session.framework.job_order
        low, high = order(first), order(job)
        for entry_key, other in line.entries.get(job.queue, []):
            if not low < entry_key < high:
                continue
            if line.pending(other) and self._key(other) != key:
                return False
        return True


class _Slots:
    """Whether the preemptor's whole-GPU pods could each find a node with their cards
    free or being freed: for each size r asked for, the pods asking at least r are no
    more than the sum over nodes of (GPUs free in the future) // r. A necessary
    condition (each such pod takes r of its node's cards), so a scenario it rules out
    could not have worked; kept up to date from the nodes victims leave."""

    def __init__(self, session: Session, tasks: Sequence[Task]) -> None:
        self.session = session
        sizes = [t.request.gpu for t in tasks if not t.is_shared and t.request.gpu > EPS]
        self.need = {r: sum(1 for x in sizes if x >= r - EPS) for r in set(sizes)}
        self.have = {r: _slots_now(session, r) for r in self.need}
        self.free: dict[str, float] = {}  # nodes victims left, by GPUs free then

    def leaving(self, node: Node | None) -> None:
        """Note a node's free GPUs before a victim leaves it."""
        if node is not None and self.need and node.name not in self.free:
            self.free[node.name] = node.free_gpus_future()

    def update(self, node: Node | None) -> None:
        """Count again a node a victim just left."""
        if node is None or not self.need:
            return
        before, after = self.free[node.name], node.free_gpus_future()
        for r in self.need:
            self.have[r] += _pods_of(after, r) - _pods_of(before, r)
        self.free[node.name] = after

    def enough(self) -> bool:
        return all(self.have[r] >= n for r, n in self.need.items())


def _pods_of(free: float, size: float) -> int:
    return max(0, math.floor((free + EPS) / size))


def _slots_now(session: Session, size: float) -> int:
    """Sum over nodes of how many pods of ``size`` GPUs their future free cards hold."""
    return sum(_pods_of(n.free_gpus_future(), size) for n in session.nodes.values())


class VictimSearch:
    def __init__(
        self,
        session: Session,
        placer: Placer,
        action: str,
        validate: Validator,
        *,
        replace_victims: bool = False,
        moved_give_nothing: bool = False,  # allowConsolidatingReclaim: a moved victim frees nothing
        max_victims: int | None = None,
        admit: Callable[[Unit], bool] | None = None,
        line: PendingLine | None = None,
        budget: SearchBudget | None = None,
    ) -> None:
        self.session = session
        self.placer = placer
        self.action = action
        self.validate = validate
        self.replace_victims = replace_victims
        self.moved_give_nothing = moved_give_nothing
        self.max_victims = max_victims
        self.admit = admit
        self.line = line
        self.budget = budget if budget is not None else SearchBudget()
        self.scenarios = 0  # simulated by the last run
        self.capped = False  # the last run stopped at MAX_SCENARIOS or its budget
        self.counts = session.decisions.searches

    def run(self, preemptor: Job, units: Iterable[Unit]) -> bool:
        """Evict the cheapest set of units that lets ``preemptor`` run; commit it or nothing.

        Shortcuts that never change the outcome of a search that would succeed: a
        preemptor that asks for GPUs passes over victims that hold no GPU (evicting
        them frees no card for it); after a first scenario failed, the preemptor is
        only placed again once what is free plus what the victims chosen so far hold
        adds up to what it asks for, and its whole-GPU pods could each find a node
        with that many cards free or being freed (``_Slots``).

        Placing it after every added unit made a fruitless search cost the square of
        the victims (each simulation moves every victim chosen so far); after
        ``LINEAR_STEPS`` scenarios the steps grow (1, 2, 4... more units), which
        makes that about twice the victims. When a step works, the counts in between
        are searched by halves for the first that works (the count one unit at a
        time finds, whenever adding a victim never makes a scenario fail).
        """
        session = self.session
        stmt = session.statement()
        chosen: list[Unit] = []
        evicted = 0
        self.scenarios = 0
        self.capped = False
        self.budget.begin()
        action, counts = self.action, self.counts
        counts.acted_on[action] += 1
        # The preemptor may spend less than its share: the action's budget is low.
        reduced = self.budget.left < self.budget.share
        if self.budget.spent:
            self.capped = True
            counts.jobs[action, NOT_ATTEMPTED, reduced] += 1
            return False
        tasks = next_tasks(preemptor, needed(preemptor))
        wanted = demand(session, preemptor, needed(preemptor)).copy()
        gpu_only = wanted.gpu > EPS
        if any(t.is_shared for t in tasks):
            wanted.gpu = 0.0  # a portion of a card in use is free but not counted below
        # Free resources plus the chosen victims', and the per-node check: computed once a
        # first scenario failed (a walk over every node, which most searches, ending
        # at their first scenario, are spared).
        room: Res | None = None
        slots: _Slots | None = None
        ruled_out = 0  # the most units with which the preemptor could not fit at all
        failed = 0  # the most units with which a scenario was tried and failed
        next_try = 0  # the number of units at which the preemptor is placed next
        step, tries = 1, 0
        found = 0
        for unit in units:
            if not _live(unit) or (self.admit is not None and not self.admit(unit)):
                continue
            live = [t for t in unit.tasks if held(t)]
            if gpu_only and not any(session.task_res(t, None).gpu > EPS for t in live):
                continue
            if self.max_victims is not None and evicted + len(live) > self.max_victims:
                break
            chosen.append(unit)
            evicted += len(live)
            for task in live:
                node = session.nodes.get(task.node_name or "")
                if room is not None and slots is not None:
                    freed = session.task_res(task, node)
                    if task.is_shared:
                        freed.gpu = float(task.gpu_devices)  # its cards may become whole
                    room.add(freed)
                    slots.leaving(node)
                stmt.evict(task, self.action, preemptor)
                if slots is not None:
                    slots.update(node)
            if (
                room is not None
                and slots is not None
                and (not wanted.fits_in(room) or not slots.enough())
            ):
                ruled_out = len(chosen)
                counts.filtered[action] += 1
                continue  # not enough yet, wherever it is: add the next victim
            if len(chosen) < next_try:
                continue
            if self._attempt(stmt, preemptor, chosen):
                found = len(chosen)
                break
            failed, next_try = len(chosen), len(chosen) + step
            if room is None:
                room = _free(session)  # the victims so far count as being released
                slots = _Slots(session, tasks)
            tries += 1
            if tries >= LINEAR_STEPS:
                step *= 2
            if self.scenarios >= MAX_SCENARIOS or self.budget.spent:
                self.capped = True
                break
        if not found and not self.capped:
            # The pool is exhausted (or the victims at their limit): the whole set is
            # tried if a step passed over it.
            last = len(chosen)
            if failed < last and ruled_out < last and self._attempt(stmt, preemptor, chosen):
                found = last
        stmt.rollback(0)
        if not found:
            if self.capped and self.budget.exhausted:
                counts.exhausted[action] += 1
            counts.jobs[action, STOPPED if self.capped else EXHAUSTED, reduced] += 1
            return False
        counts.jobs[action, SOLVED, reduced] += 1
        # The first count that works after the last one that failed, by halves.
        low, high = max(failed, ruled_out), found
        while high - low > 1 and not self._enough():
            middle = (low + high) // 2
            works = self._scenario(stmt, preemptor, chosen[:middle])
            stmt.rollback(0)
            if works:
                high = middle
            else:
                low = middle
        del chosen[high:]
        self._prune(stmt, preemptor, chosen)
        if self.line is not None:
            # Pods taken back from this cycle's placements wait in line again.
            session_jobs = session.jobs
            self.line.add(session_jobs[r.task.job_uid] for r in stmt.log if r.unplaced)
        stmt.commit()
        return True

    def _enough(self) -> bool:
        """Refining a scenario that works stops at the caps (it works as it is)."""
        return self.scenarios >= MAX_SCENARIOS or self.budget.spent

    def _attempt(self, stmt: Statement, preemptor: Job, chosen: Sequence[Unit]) -> bool:
        """Try the units evicted in ``stmt``; undo the attempt's placements if it fails."""
        self.scenarios += 1
        self.counts.simulated[self.action] += 1
        mark = stmt.checkpoint()
        self.budget.left -= mark  # every record so far is a victim's eviction
        if self._try(stmt, preemptor, chosen):
            return True
        stmt.rollback(mark)
        return False

    def _scenario(self, stmt: Statement, preemptor: Job, units: Sequence[Unit]) -> bool:
        self.scenarios += 1
        self.counts.simulated[self.action] += 1
        for unit in units:
            for task in unit.tasks:
                if held(task):
                    stmt.evict(task, self.action, preemptor)
        self.budget.left -= len(stmt.log)
        return self._try(stmt, preemptor, units)

    def _prune(self, stmt: Statement, preemptor: Job, chosen: list[Unit]) -> None:
        """Drop units the preemptor turned out not to need; leave the best scenario applied.

        First, by node: the units with no pod on a node the preemptor is placed on
        go back together, when the scenario still works without them (usually the
        case: what the preemptor needs is where it runs). Then one by one, the
        dearest (added last) first, so cheap victims are kept and dear ones spared;
        past ``MAX_SCENARIOS`` the rest are kept.
        """
        if len(chosen) > 2:
            applied = self._scenario(stmt, preemptor, chosen)
            assert applied, "a scenario that worked must work again"
            mine = {
                rec.node.name
                for rec in stmt.log
                if rec.op is Op.ALLOCATE
                and rec.node is not None
                and rec.task.job_uid == preemptor.uid
            }
            stmt.rollback(0)
            near = [u for u in chosen[:-1] if any(t.node_name in mine for t in u.tasks if held(t))]
            near.append(chosen[-1])  # the unit that made it work stays, as below
            if len(near) < len(chosen):
                if self._scenario(stmt, preemptor, near):
                    chosen[:] = near
                stmt.rollback(0)
        index = len(chosen) - 2  # the last unit added is the one that made it work
        while index >= 0 and not self._enough():
            trial = chosen[:index] + chosen[index + 1 :]
            if self._scenario(stmt, preemptor, trial):
                chosen[:] = trial
            index -= 1
            stmt.rollback(0)
        applied = self._scenario(stmt, preemptor, chosen)
        assert applied, "a scenario that worked must work again"

    def _try(self, stmt: Statement, preemptor: Job, units: Sequence[Unit]) -> bool:
        if not self.replace_victims:
            if not self._simulate(stmt, preemptor, units):
                return False
        else:
            result = place_tasks(self.session, stmt, self.placer, preemptor, needed(preemptor))
            if not result.ok:
                return False
            if not self._replace(stmt):
                return False
        s = self.session
        real = self._really_evicted(stmt, units) if self.moved_give_nothing else list(units)
        if self.validate(real) and s.framework.validate(s, preemptor, real, self.action):
            return True
        self.counts.rejected[self.action] += 1
        return False

    @staticmethod
    def _really_evicted(stmt: Statement, units: Sequence[Unit]) -> list[Unit]:
        """The victims as they give resources up: pods moved elsewhere (or, placed in this
        cycle, placed again) do not count."""
        moved = {
            rec.task.uid.removesuffix(MOVED_SUFFIX)
            for rec in stmt.log
            if rec.op is Op.ALLOCATE and rec.task.shadow
        }
        evicted = {rec.task.uid for rec in stmt.log if rec.op is Op.EVICT}
        real: list[Unit] = []
        for unit in units:
            gone = [
                t
                for t in unit.tasks
                if t.uid in evicted and t.uid not in moved and not t.status.is_placed
            ]
            if gone:
                real.append(Unit(unit.job, gone))
        return real

    def _simulate(self, stmt: Statement, preemptor: Job, units: Sequence[Unit]) -> bool:
        """Place the preemptor and the victims again, in queue and job order.

        A victim whose turn comes first may take its resources back (then the
        preemptor may no longer fit: the scenario fails); one that fits anywhere
        after the preemptor is moved there instead of only evicted.
        """
        evicted: dict[str, list[Task]] = {}
        unplaced: set[str] = set()  # pods placed earlier in this cycle: pending again
        for rec in stmt.log:
            if rec.op is Op.EVICT:
                evicted.setdefault(rec.task.job_uid, []).append(rec.task)
                if rec.unplaced:
                    unplaced.add(rec.task.uid)
        jobs = {u.job.uid: u.job for u in units if u.job.uid in evicted}
        session = self.session

        def want(job: Job) -> Res:
            if job is preemptor:
                return demand(session, job, needed(job))
            if job.uid not in evicted:
                return demand(session, job)
            total = Res()
            for task in evicted[job.uid]:
                total.add(session.task_res(task, None))
            return total

        # Every pending job takes its place in line (it shapes its queue's turn) but
        # is not placed: only the preemptor and the victims are.
        check = session.framework.check_capacity
        waiting = {preemptor.uid, *jobs}
        picker = JobPicker(session, [preemptor, *jobs.values()], want, self.line)
        while waiting and (job := picker.pop()) is not None:
            if job.uid not in waiting:
                continue
            waiting.discard(job.uid)
            if job is preemptor:
                if not place_tasks(session, stmt, self.placer, preemptor, needed(preemptor)).ok:
                    return False
                # The scenario counts now; the others in line only set the order in
                # which the victims left try to move, which kai-py takes without them
                # (otherwise every pending job would be walked for each scenario).
                picker.drop_line()
                continue
            # The gang's missing part moves as a whole or not at all; an elastic
            # job's surplus moves pod by pod while there is room.
            gang = max(0, job.min_alive - job.placed)
            mark = stmt.checkpoint()
            again: list[Task] = []
            for index, task in enumerate(sorted(evicted[job.uid], key=lambda t: t.order)):
                # A pod placed earlier in this cycle is placed again; a running one
                # moves (a shadow holds its new place, as releasing resources do).
                replaced = task.uid in unplaced
                target = task if replaced else shadow_of(task)
                where = self._find(job, target, task.node_name, task)
                # A victim comes back only within its queues' limits (allocate's
                # capacity check): one that would pass a limit stays evicted, so what it
                # frees counts for the preemptor (a same-queue preemptor, or one under a
                # common parent, whose limit is what binds).
                if (
                    where is None
                    or check(session, job, session.task_res(target, where.node), True) is not None
                ):
                    if index < gang:
                        stmt.rollback(mark)
                        again = []
                    break
                stmt.allocate(target, where.node, where.groups, where.pipelined or not replaced)
                if replaced:
                    again.append(task)
            _start_together(stmt, again)
        return True

    def _find(
        self, job: Job, task: Task, was_on: str | None, victim: Task | None = None
    ) -> Placement | None:
        """A new place for a victim's pod: within its required topology domain, if it
        has one (a move never takes a gang out of it), and within those of its
        sub-group and the sub-groups above it (read from ``victim``, the pod itself: a
        shadow that holds its new place has no labels)."""
        home = domains.home_nodes(self.session, job, was_on) if job.topology is not None else None
        groups = job.subgroups
        if groups is not None and groups.constrained and was_on is not None:
            home = self._subgroup_home(groups, victim or task, was_on, home)
        if home is None:
            return self.placer.find(task)
        self.placer.within(home)
        try:
            return self.placer.find(task)
        finally:
            self.placer.within(None)

    def _subgroup_home(
        self, groups: SubGroups, task: Task, was_on: str, home: list[Node] | None
    ) -> list[Node] | None:
        """``home`` narrowed to the required domain (around ``was_on``) of each of the
        pod's sub-groups, from its leaf up, that has one."""
        name = tree.leaf_name(groups, task)
        while name is not None:
            group = groups.groups[name]
            if group.topology is not None:
                nodes = domains.required_domain(self.session, group.topology, was_on)
                if nodes is not None:
                    if home is not None:
                        keep = {n.name for n in home}
                        nodes = [n for n in nodes if n.name in keep]
                    home = nodes
            name = group.parent
        return home

    def _replace(self, stmt: Statement) -> bool:
        """Find every victim of this scenario a new place (held by a shadow task; a pod
        placed earlier in this cycle is simply placed again)."""
        again: list[Task] = []
        for rec in [rec for rec in stmt.log if rec.op is Op.EVICT]:
            task = rec.task if rec.unplaced else shadow_of(rec.task)
            job = self.session.jobs[task.job_uid]
            where = self._find(job, task, rec.node.name if rec.node is not None else None, rec.task)
            if where is None:
                return False
            stmt.allocate(task, where.node, where.groups, where.pipelined)
            if rec.unplaced:
                again.append(task)
        _start_together(stmt, again)
        return True


MOVED_SUFFIX = "~moved"


def _start_together(stmt: Statement, tasks: Sequence[Task]) -> None:
    """Pods of one cycle placed again: if one of a job's waits for released resources,
    its others placed now wait too (a gang starts as a whole)."""
    by_job: dict[str, list[Task]] = {}
    for task in tasks:
        by_job.setdefault(task.job_uid, []).append(task)
    for job_uid, placed in by_job.items():
        job = stmt.session.jobs[job_uid]
        if any(t.status is TaskStatus.PIPELINED for t in job.tasks):
            for task in placed:
                if task.status is TaskStatus.ALLOCATED:
                    stmt.pipeline(task)


def shadow_of(task: Task) -> Task:
    return Task(
        uid=f"{task.uid}{MOVED_SUFFIX}",
        namespace=task.namespace,
        name=task.name,
        job_uid=task.job_uid,
        request=task.request,
        extended=task.extended,  # its new place must hold these too
        gpu_fraction=task.gpu_fraction,
        gpu_memory_mib=task.gpu_memory_mib,
        gpu_devices=task.gpu_devices,
        node_selector=task.node_selector,
        affinity=task.affinity,
        tolerations=task.tolerations,
        created=task.created,
        role=task.role,
        task_priority=task.task_priority,
        shadow=True,
        pin=task.pin,  # a moved pinned pod may only land on its own cards
        policy=task.policy,  # and is placed by its own node and card policies
    )
