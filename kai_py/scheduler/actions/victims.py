"""The victim search shared by reclaim, preempt and consolidation.

Victims are added one unit at a time, cheapest first: the surplus pods of
elastic jobs (workers before masters, newest first), then whole gangs (a
gang that would fall below minMember goes as a whole). After each addition
the preemptor is placed on what the victims release; if that works and the
action's validator agrees, units that turn out not to be needed are put
back one by one, and the smallest scenario found is kept.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from kai_py.scheduler.actions.common import needed, place_tasks
from kai_py.scheduler.model import Job, Task, TaskStatus
from kai_py.scheduler.placement import Placer
from kai_py.scheduler.session import Op, Session, Statement


@dataclass(slots=True, eq=False)
class Unit:
    job: Job
    tasks: list[Task]


Validator = Callable[[Sequence[Unit]], bool]


def always(_: Sequence[Unit]) -> bool:
    """The validator of actions whose candidates are already all acceptable."""
    return True


def _eviction_order(task: Task) -> tuple[bool, float, str]:
    return (task.role == "master", -(task.start_time or 0.0), task.name)


def job_units(job: Job, eligible: Callable[[Task], bool]) -> tuple[list[Unit], Unit | None]:
    """A job's surplus pods (one unit each) and its gang unit (all its running pods).

    The gang unit holds every running pod, so taking it never leaves part of a
    gang behind; a protected pod (too young) keeps the whole gang safe.
    """
    running = sorted((t for t in job.tasks if t.status is TaskStatus.RUNNING), key=_eviction_order)
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
        self._surplus: dict[str, list[tuple[tuple[object, ...], int, Unit]]] = {}
        self._gangs: dict[str, list[tuple[tuple[object, ...], int, Unit]]] = {}
        may = session.framework.may_be_victim
        ordered = sorted((j for j in jobs if may(session, j, action)), key=cost)
        for seq, job in enumerate(ordered):
            extra, gang = job_units(job, eligible)
            key = cost(job)
            for unit in extra:
                self._surplus.setdefault(job.queue, []).append((key, seq, unit))
            if gang is not None:
                self._gangs.setdefault(job.queue, []).append((key, seq, gang))

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


def _live(unit: Unit) -> bool:
    return any(t.status is TaskStatus.RUNNING for t in unit.tasks)


class VictimSearch:
    def __init__(
        self,
        session: Session,
        placer: Placer,
        action: str,
        validate: Validator,
        *,
        replace_victims: bool = False,
        max_victims: int | None = None,
        admit: Callable[[Unit], bool] | None = None,
    ) -> None:
        self.session = session
        self.placer = placer
        self.action = action
        self.validate = validate
        self.replace_victims = replace_victims
        self.max_victims = max_victims
        self.admit = admit

    def run(self, preemptor: Job, units: Iterable[Unit]) -> bool:
        """Evict the cheapest set of units that lets ``preemptor`` run; commit it or nothing."""
        stmt = self.session.statement()
        chosen: list[Unit] = []
        evicted = 0
        for unit in units:
            if not _live(unit) or (self.admit is not None and not self.admit(unit)):
                continue
            live = [t for t in unit.tasks if t.status is TaskStatus.RUNNING]
            if self.max_victims is not None and evicted + len(live) > self.max_victims:
                break
            chosen.append(unit)
            evicted += len(live)
            for task in live:
                stmt.evict(task, self.action, preemptor)
            mark = stmt.checkpoint()
            if self._try(stmt, preemptor, chosen):
                stmt.rollback(0)
                self._prune(stmt, preemptor, chosen)
                stmt.commit()
                return True
            stmt.rollback(mark)
        stmt.rollback(0)
        return False

    def _scenario(self, stmt: Statement, preemptor: Job, units: Sequence[Unit]) -> bool:
        for unit in units:
            for task in unit.tasks:
                if task.status is TaskStatus.RUNNING:
                    stmt.evict(task, self.action, preemptor)
        return self._try(stmt, preemptor, units)

    def _prune(self, stmt: Statement, preemptor: Job, chosen: list[Unit]) -> None:
        """Drop units the preemptor turned out not to need; leave the best scenario applied."""
        index = 0
        while index < len(chosen) - 1:
            trial = chosen[:index] + chosen[index + 1 :]
            if self._scenario(stmt, preemptor, trial):
                chosen[:] = trial
            else:
                index += 1
            stmt.rollback(0)
        applied = self._scenario(stmt, preemptor, chosen)
        assert applied, "a scenario that worked must work again"

    def _try(self, stmt: Statement, preemptor: Job, units: Sequence[Unit]) -> bool:
        result = place_tasks(self.session, stmt, self.placer, preemptor, needed(preemptor))
        if not result.ok:
            return False
        if self.replace_victims and not self._replace(stmt):
            return False
        s = self.session
        return self.validate(units) and s.framework.validate(s, preemptor, units, self.action)

    def _replace(self, stmt: Statement) -> bool:
        """Find every victim of this scenario a new place (held by a shadow task)."""
        for task in [rec.task for rec in stmt.log if rec.op is Op.EVICT]:
            shadow = shadow_of(task)
            where = self.placer.find(shadow)
            if where is None:
                return False
            stmt.allocate(shadow, where.node, where.groups, where.pipelined)
        return True


def shadow_of(task: Task) -> Task:
    return Task(
        uid=f"{task.uid}~moved",
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
        shadow=True,
        pin=task.pin,  # a moved pinned pod may only land on its own cards
    )
