"""The victim search shared by reclaim, preempt and consolidation.

Victims are added one unit at a time, cheapest first: the surplus pods of
elastic jobs (in the reverse of the order their pods are placed in: workers before
masters, lowest task-priority and newest first), then whole gangs (a
gang that would fall below minMember goes as a whole). After each addition
the preemptor is placed on what the victims release; if that works and the
action's validator agrees, units that turn out not to be needed are put
back one by one, and the smallest scenario found is kept.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from kai_py.scheduler.actions.common import demand, needed, next_tasks, place_tasks
from kai_py.scheduler.model import Job, Task, TaskStatus
from kai_py.scheduler.ordering import JobPicker, PendingLine
from kai_py.scheduler.placement import Placer
from kai_py.scheduler.resources import EPS, Res
from kai_py.scheduler.session import Op, Session, Statement


@dataclass(slots=True, eq=False)
class Unit:
    job: Job
    tasks: list[Task]


Validator = Callable[[Sequence[Unit]], bool]


def always(_: Sequence[Unit]) -> bool:
    """The validator of actions whose candidates are already all acceptable."""
    return True


#: Whether pods placed (bound or pipelined) earlier in the cycle may be victims, as in
#: KAI. Off: with them, a busy cycle's victim search (which adds victims one at a time,
#: wherever they run, and simulates each step) grows from milliseconds to minutes on
#: bench/cycle.py. The search must first add victims node by node.
THIS_CYCLE_VICTIMS = False


def held(task: Task) -> bool:
    """The pod holds resources a victim search may take back: it runs (or, with
    ``THIS_CYCLE_VICTIMS``, it was placed earlier in this cycle)."""
    if THIS_CYCLE_VICTIMS:
        return task.status.is_placed
    return task.status is TaskStatus.RUNNING


def job_units(job: Job, eligible: Callable[[Task], bool]) -> tuple[list[Unit], Unit | None]:
    """A job's surplus pods (one unit each) and its gang unit (all its placed pods).

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

    @property
    def queues(self) -> set[str]:
        return set(self._surplus) | set(self._gangs)

    def units(
        self, queues: Iterable[str], keep: Callable[[Job], bool] | None = None
    ) -> Iterator[Unit]:
        names = list(queues)
        for table in (self._surplus, self._gangs):
            lists = [table[q] for q in names if q in table]
            for _, _, unit in heapq.merge(*lists, key=lambda e: (e[0], e[1])):
                if _live(unit) and (keep is None or keep(unit.job)):
                    yield unit

    def units_in_queue_order(
        self, session: Session, queues: Iterable[str], keep: Callable[[Job], bool] | None = None
    ) -> Iterator[Unit]:
        """Victims queue by queue in the reverse of queue order, re-evaluated as victims
        are taken: the queue that allocate would serve last (above its fair share, above
        its deserved quota, lower priority, larger share once the victim is gone) gives
        first; inside a queue, the cheapest first. In a tree, each level picks the child
        whose next victim puts it last."""
        position: dict[str, int] = {}
        for name in queues:
            if self._in_order(name):
                position[name] = 0
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
            leaf = _last_in_line(session, nexts)
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


def _last_in_line(session: Session, pending: dict[str, Unit]) -> str:
    """The leaf queue whose next victim comes from the queue allocate would serve last."""
    subtree: dict[str, list[str]] = {}
    for leaf in pending:
        for queue in session.ancestors(leaf):
            subtree.setdefault(queue.name, []).append(leaf)

    def freed(unit: Unit) -> Res:
        total = Res()
        for task in unit.tasks:
            if held(task):
                total.sub(session.task_res(task, session.nodes.get(task.node_name or "")))
        return total

    def pick(names: list[str]) -> str:
        best: tuple[tuple[object, ...], str] | None = None
        for name in names:
            queue = session.queues[name]
            leaf = name if name in pending else pick([c for c in queue.children if c in subtree])
            key = session.framework.queue_order(queue, freed(pending[leaf]))
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

    def run(self, preemptor: Job, units: Iterable[Unit]) -> bool:
        """Evict the cheapest set of units that lets ``preemptor`` run; commit it or nothing.

        Two shortcuts that never change the outcome of a search that would
        succeed: a preemptor that asks for GPUs passes over victims that hold no
        GPU (evicting them frees no card for it), and the preemptor is only placed
        once the victims chosen so far, with what is free already, add up to what
        it asks for (before that, the placement cannot work).
        """
        session = self.session
        stmt = session.statement()
        chosen: list[Unit] = []
        evicted = 0
        wanted = demand(session, preemptor, needed(preemptor)).copy()
        gpu_only = wanted.gpu > EPS
        if any(t.is_shared for t in next_tasks(preemptor, needed(preemptor))):
            wanted.gpu = 0.0  # a portion of a card in use is free but not counted below
        room: Res | None = None  # free + chosen victims, once a first placement failed
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
                if room is not None:
                    freed = session.task_res(task, session.nodes.get(task.node_name or ""))
                    if task.is_shared:
                        freed.gpu = float(task.gpu_devices)  # its cards may become whole
                    room.add(freed)
                stmt.evict(task, self.action, preemptor)
            if room is not None and not wanted.fits_in(room):
                continue  # not enough yet, wherever it is: add the next victim
            mark = stmt.checkpoint()
            if self._try(stmt, preemptor, chosen):
                stmt.rollback(0)
                self._prune(stmt, preemptor, chosen)
                if self.line is not None:
                    # Pods taken back from this cycle's placements wait in line again.
                    session_jobs = session.jobs
                    self.line.add(session_jobs[r.task.job_uid] for r in stmt.log if r.unplaced)
                stmt.commit()
                return True
            stmt.rollback(mark)
            if room is None:
                room = _free(session)  # the victims so far count as being released
        stmt.rollback(0)
        return False

    def _scenario(self, stmt: Statement, preemptor: Job, units: Sequence[Unit]) -> bool:
        for unit in units:
            for task in unit.tasks:
                if held(task):
                    stmt.evict(task, self.action, preemptor)
        return self._try(stmt, preemptor, units)

    def _prune(self, stmt: Statement, preemptor: Job, chosen: list[Unit]) -> None:
        """Drop units the preemptor turned out not to need; leave the best scenario applied.

        The dearest units (added last) are tried first, so cheap victims are kept
        and dear ones spared.
        """
        index = len(chosen) - 2  # the last unit added is the one that made it work
        while index >= 0:
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
        return self.validate(real) and s.framework.validate(s, preemptor, real, self.action)

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
            gang = max(0, job.min_member - job.placed)
            mark = stmt.checkpoint()
            again: list[Task] = []
            for index, task in enumerate(sorted(evicted[job.uid], key=lambda t: t.order)):
                # A pod placed earlier in this cycle is placed again; a running one
                # moves (a shadow holds its new place, as releasing resources do).
                replaced = task.uid in unplaced
                target = task if replaced else shadow_of(task)
                where = self.placer.find(target)
                if where is None:
                    if index < gang:
                        stmt.rollback(mark)
                        again = []
                    break
                stmt.allocate(target, where.node, where.groups, where.pipelined or not replaced)
                if replaced:
                    again.append(task)
            _start_together(stmt, again)
        return True

    def _replace(self, stmt: Statement) -> bool:
        """Find every victim of this scenario a new place (held by a shadow task; a pod
        placed earlier in this cycle is simply placed again)."""
        again: list[Task] = []
        for rec in [rec for rec in stmt.log if rec.op is Op.EVICT]:
            task = rec.task if rec.unplaced else shadow_of(rec.task)
            where = self.placer.find(task)
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
    )
