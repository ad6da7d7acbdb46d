"""Placing the tasks of one job inside a Statement: shared by every action."""

from __future__ import annotations

import operator
from dataclasses import dataclass

from kai_py.scheduler import reasons
from kai_py.scheduler.model import ALLOCATED, PENDING, PIPELINED, Job, Task, quota_gpus
from kai_py.scheduler.placement import Placer
from kai_py.scheduler.reasons import Reason
from kai_py.scheduler.resources import Res
from kai_py.scheduler.session import Session, Statement
from kai_py.scheduler.subgroups import tree
from kai_py.scheduler.topology import domains
from kai_py.scheduler.topology.constraint import resolve


def needed(job: Job) -> int:
    """How many tasks must be placed together now: the rest of the gang, or one more
    (a job with sub-groups: what its tree needs next, ``tree.next_step``)."""
    if job.subgroups is not None:
        return tree.next_step(job)[1]
    placed, gang = job.placed, job.min_alive
    return gang - placed if placed < gang else 1


def task_order(task: Task) -> tuple[int, int, int, float, str]:
    return task.order


_ORDER = operator.attrgetter("order")


def next_tasks(job: Job, count: int) -> list[Task]:
    if job.subgroups is not None:  # the tree says which pods, not only how many
        return tree.next_step(job)[0][:count]
    pending = [t for t in job.tasks if t.status is PENDING]
    pending.sort(key=task_order)
    return pending[:count]


def _in_order(session: Session, job: Job) -> list[Task]:
    """All of ``job``'s tasks in placing order. What the order looks at is fixed once a
    task is built, so this is sorted once a session instead of at every step."""
    key = ("in-order", job.uid, len(job.tasks))
    cached = session.memo.get(key)
    if isinstance(cached, list):
        return cached
    # attrgetter: the sort calls the property from C, without a frame of our own.
    ordered = sorted(job.tasks, key=_ORDER) if len(job.tasks) > 1 else list(job.tasks)
    session.memo[key] = ordered
    return ordered


def next_tasks_of(session: Session, job: Job, count: int) -> list[Task]:
    """``next_tasks``, from the session's sorted list: the sort is stable, so the
    pending tasks of the sorted whole are in the order of the sorted pending ones."""
    if count <= 0 or job.subgroups is not None:
        return next_tasks(job, count)
    found: list[Task] = []
    for task in _in_order(session, job):
        if task.status is PENDING:
            found.append(task)
            if len(found) == count:
                break
    return found


def demand(session: Session, job: Job, count: int | None = None) -> Res:
    """What the next ``count`` tasks (default: the next step) of ``job`` ask for."""
    step: tuple[object, ...] | None = None
    if count is None:
        # The default step has an entry of its own, so that a hit needs no count of the
        # placed tasks; a miss fills the explicit count's entry too.
        step = ("demand-step", job.uid, job.version)
        cached = session.memo.get(step)
        if isinstance(cached, Res):
            return cached
        count = needed(job)
    key = ("demand", job.uid, job.version, count)
    cached = session.memo.get(key)
    if isinstance(cached, Res):
        if step is not None:
            session.memo[step] = cached
        return cached
    # Summed in floats, in the order Res.add would (no Res per task); a whole-GPU
    # task's GPUs are its request (what session.task_gpu says, without its calls).
    cpu = memory = gpu = 0.0
    for task in next_tasks_of(session, job, count):
        request = task.request
        cpu += request.cpu
        memory += request.memory
        if task.gpu_fraction > 0 or task.gpu_memory_mib > 0:
            gpu += session.task_gpu(task, None)
        else:
            gpu += request.gpu
            if task.extended is not None:
                gpu += quota_gpus(task.extended)
    total = Res(cpu, memory, gpu)
    session.memo[key] = total
    if step is not None:
        session.memo[step] = total
    return total


@dataclass(slots=True)
class PlaceResult:
    ok: bool
    placed: int
    required: int
    failed_task: Task | None = None
    #: Why the gang found no place, when that is not one task's fit (its topology).
    reason: Reason | None = None


def topology_problem(session: Session, job: Job) -> Reason | None:
    """Why ``job``'s topology constraint cannot be applied (it then waits), or None."""
    if job.topology is None:
        return None
    levels = resolve(job.topology, session.snapshot.topologies)
    if isinstance(levels, str):
        where = f"{job.source}: " if job.source else ""
        return Reason(
            reasons.POD_SCHEDULING_ERRORS,
            f"{where}PodGroup {job.key}: {levels}",
            {"topology": job.topology.topology},
        )
    return None


def place_tasks(
    session: Session, stmt: Statement, placer: Placer, job: Job, count: int
) -> PlaceResult:
    """Place ``count`` pending tasks of ``job`` or none (the caller rolls back on failure)."""
    tasks = next_tasks_of(session, job, count)
    # Nothing to place (a job with sub-groups whose pending pods no sub-group takes now)
    # is no success: no victim may be taken for it.
    if len(tasks) < count or count <= 0:
        return PlaceResult(False, 0, count)
    if job.topology is not None:
        return _place_in_topology(session, stmt, placer, job, tasks, count)
    return _place(stmt, placer, job, tasks, count)


def _place_in_topology(
    session: Session, stmt: Statement, placer: Placer, job: Job, tasks: list[Task], count: int
) -> PlaceResult:
    """The gang in the first of its topology domains that takes all of it (see
    kai_py/scheduler/topology/domains.py for the order); never across a required one."""
    assert job.topology is not None
    levels = resolve(job.topology, session.snapshot.topologies)
    if isinstance(levels, str):
        return PlaceResult(False, 0, count, reason=topology_problem(session, job))
    found = domains.plan(session, job, tasks, levels)
    mark = stmt.checkpoint()
    last: PlaceResult | None = None
    for key in found.ordered():
        domain = found.domain(key)
        placer.within(domain.nodes, found.rank(domain, levels.preferred))
        try:
            last = _place(stmt, placer, job, tasks, count)
        finally:
            placer.within(None)
        if last.ok:
            session.topology_domains[job.uid] = (
                f"{domains.describe(levels.topology, domain)} of topology {levels.topology.name}"
            )
            return last
        stmt.rollback(mark)
    if last is None:
        return PlaceResult(False, 0, count, reason=found.refusal())
    return last


def _place(stmt: Statement, placer: Placer, job: Job, tasks: list[Task], count: int) -> PlaceResult:
    placed: list[Task] = []
    for task in tasks:
        where = placer.find(task)
        if where is None:
            return PlaceResult(False, len(placed), count, task)
        stmt.allocate(task, where.node, where.groups, where.pipelined)
        placed.append(task)
    # The placed tasks are some of the job's, so this asks whether any task of the job,
    # placed now or before, waits for released resources (a plain loop, for every job).
    for other in job.tasks:
        if other.status is PIPELINED:
            # A gang starts as a whole: if one task waits for released resources, all wait.
            for task in placed:
                if task.status is ALLOCATED:
                    stmt.pipeline(task)
            break
    return PlaceResult(True, len(placed), count)
