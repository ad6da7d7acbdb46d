"""Placing the tasks of one job inside a Statement: shared by every action."""

from __future__ import annotations

import operator
from dataclasses import dataclass, field

from kai_py.scheduler import reasons
from kai_py.scheduler.model import (
    ALLOCATED,
    PENDING,
    PIPELINED,
    Job,
    Node,
    SubGroups,
    Task,
    Topology,
    quota_gpus,
)
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
    if job.subgroups is not None and job.subgroups.constrained:
        return _Tree(session, stmt, placer, job, job.subgroups, count).place(tasks)
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


@dataclass(slots=True)
class _Bound:
    """The domain a sub-group's pods must stay in: the one its nearest constrained
    ancestor (or the PodGroup) got, with the order of its nodes."""

    topology: Topology
    key: tuple[int, tuple[str, ...]]
    nodes: list[Node]
    rank: dict[str, int]
    names: set[str] | None = None  # its nodes by name, when a narrower set was cut from it


@dataclass(slots=True)
class _Tree:
    """One step of a job whose sub-groups have topology constraints, placed down its
    tree as KAI does: each constrained level (the PodGroup, then each sub-group with
    pods in the step, in sub-group order) tries its domains, fullest first, inside the
    domain of the level above; the first domain in which all of its members place is
    kept. A member that fails fails its parent's domain (no other domain is tried for
    the members placed before it)."""

    session: Session
    stmt: Statement
    placer: Placer
    job: Job
    groups: SubGroups
    count: int
    failed: PlaceResult | None = None
    chosen: list[str] = field(default_factory=list)

    def place(self, tasks: list[Task]) -> PlaceResult:
        if not self.group(None, tasks, None):
            return self.failed or PlaceResult(False, 0, self.count)
        # A gang starts as a whole: if one of its pods waits for released resources, all do.
        if any(t.status is PIPELINED for t in self.job.tasks):
            for task in tasks:
                if task.status is ALLOCATED:
                    self.stmt.pipeline(task)
        if self.chosen:
            self.session.topology_domains[self.job.uid] = "; ".join(self.chosen)
        return PlaceResult(True, len(tasks), self.count)

    def _fail(self, result: PlaceResult) -> bool:
        self.failed = result
        return False

    def group(self, name: str | None, tasks: list[Task], bound: _Bound | None) -> bool:
        """Place ``tasks`` of sub-group ``name`` (None: the PodGroup) inside ``bound``, in
        one domain of its own constraint when it has one."""
        job, session = self.job, self.session
        if name is None:
            constraint, at, subject = job.topology, "spec.topologyConstraint", f"job {job.key}"
        else:
            group = self.groups.groups[name]
            constraint = group.topology
            at = f"spec.subGroups[{group.index}].topologyConstraint"
            subject = f"subgroup {name} of job {job.key}"
        if constraint is None:
            return self.members(name, tasks, bound)
        levels = resolve(constraint, session.snapshot.topologies, at)
        if isinstance(levels, str):
            where = f"{job.source}: " if job.source else ""
            reason = Reason(
                reasons.POD_SCHEDULING_ERRORS,
                f"{where}PodGroup {job.key}: {levels}",
                {"topology": constraint.topology, "subgroup": name},
            )
            return self._fail(PlaceResult(False, 0, self.count, reason=reason))
        same = bound is not None and bound.topology is levels.topology and bound.names is None
        running = None if name is None else self._running(name)
        found = domains.plan(
            session, job, tasks, levels, running, bound.key if same and bound else (-1, ()), subject
        )
        mark = self.stmt.checkpoint()
        tried = False
        for key in found.ordered():
            tried = True
            domain = found.domain(key)
            nodes, names = domain.nodes, None
            if bound is not None and not same:  # another topology: only the nodes of both
                allowed = bound.names or {n.name for n in bound.nodes}
                nodes = [n for n in nodes if n.name in allowed]
                names = {n.name for n in nodes}
            inner = _Bound(
                levels.topology, key, nodes, found.rank(domain, levels.preferred), names
            )
            kept = len(self.chosen)
            if self.members(name, tasks, inner):
                where = domains.describe(levels.topology, domain)
                said = f"{where} of topology {levels.topology.name}"
                self.chosen.insert(kept, said if name is None else f"subgroup {name}: {said}")
                return True
            del self.chosen[kept:]
            self.stmt.rollback(mark)
        if not tried:
            return self._fail(PlaceResult(False, 0, self.count, reason=found.refusal()))
        return False

    def members(self, name: str | None, tasks: list[Task], bound: _Bound | None) -> bool:
        groups = self.groups
        if name is not None and not groups.groups[name].children:
            return self.leaf(tasks, bound)
        by_child: dict[str, list[Task]] = {}
        for task in tasks:
            leaf = tree.leaf_name(groups, task)
            if leaf is None:
                continue
            child = leaf
            while groups.groups[child].parent != name:
                parent = groups.groups[child].parent
                assert parent is not None
                child = parent
            by_child.setdefault(child, []).append(task)
        counts = tree.count(self.job, tree.is_placed)
        for child in tree.ordered(groups, name, counts):
            mine = by_child.get(child)
            if mine and not self.group(child, mine, bound):
                return False
        return True

    def leaf(self, tasks: list[Task], bound: _Bound | None) -> bool:
        placer = self.placer
        if bound is not None:
            placer.within(bound.nodes, bound.rank)
        try:
            result = _place(self.stmt, placer, self.job, tasks, len(tasks))
        finally:
            if bound is not None:
                placer.within(None)
        if not result.ok:
            return self._fail(PlaceResult(False, result.placed, self.count, result.failed_task))
        return True

    def _running(self, name: str) -> list[Task]:
        """The job's pods in sub-group ``name`` or below it."""
        groups, found = self.groups, []
        for task in self.job.tasks:
            at = tree.leaf_name(groups, task)
            while at is not None and at != name:
                at = groups.groups[at].parent
            if at == name:
                found.append(task)
        return found
