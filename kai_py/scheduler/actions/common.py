"""Placing the tasks of one job inside a Statement: shared by every action."""

from __future__ import annotations

from dataclasses import dataclass

from kai_py.scheduler.model import ALLOCATED, PENDING, PIPELINED, Job, Task
from kai_py.scheduler.placement import Placer
from kai_py.scheduler.resources import Res
from kai_py.scheduler.session import Session, Statement


def needed(job: Job) -> int:
    """How many tasks must be placed together now: the rest of the gang, or one more."""
    placed = job.placed
    return job.min_member - placed if placed < job.min_member else 1


def task_order(task: Task) -> tuple[int, int, int, float, str]:
    return task.order


def next_tasks(job: Job, count: int) -> list[Task]:
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
    ordered = sorted(job.tasks, key=task_order)
    session.memo[key] = ordered
    return ordered


def next_tasks_of(session: Session, job: Job, count: int) -> list[Task]:
    """``next_tasks``, from the session's sorted list: the sort is stable, so the
    pending tasks of the sorted whole are in the order of the sorted pending ones."""
    if count <= 0:
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
    if count is None:
        count = needed(job)  # one memo entry for the default step and the same count
    key = ("demand", job.uid, job.version, count)
    cached = session.memo.get(key)
    if isinstance(cached, Res):
        return cached
    total = Res()
    for task in next_tasks_of(session, job, count):
        total.add(session.task_res(task, None))
    session.memo[key] = total
    return total


@dataclass(slots=True)
class PlaceResult:
    ok: bool
    placed: int
    required: int
    failed_task: Task | None = None


def place_tasks(
    session: Session, stmt: Statement, placer: Placer, job: Job, count: int
) -> PlaceResult:
    """Place ``count`` pending tasks of ``job`` or none (the caller rolls back on failure)."""
    tasks = next_tasks_of(session, job, count)
    if len(tasks) < count:
        return PlaceResult(False, 0, count)
    placed: list[Task] = []
    for task in tasks:
        where = placer.find(task)
        if where is None:
            return PlaceResult(False, len(placed), count, task)
        stmt.allocate(task, where.node, where.groups, where.pipelined)
        placed.append(task)
    if any(t.status is PIPELINED for t in placed) or any(
        t.status is PIPELINED for t in job.tasks if t not in placed
    ):
        # A gang starts as a whole: if one task waits for released resources, all wait.
        for task in placed:
            if task.status is ALLOCATED:
                stmt.pipeline(task)
    return PlaceResult(True, len(placed), count)
