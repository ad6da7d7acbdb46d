"""A scheduling session over one snapshot, and the Statement that changes it.

The session owns the working state (node usage, GPU groups, queue totals).
Every change goes through a Statement, which applies it at once and keeps an
undo record, so an action can try a scenario, ``rollback`` to a checkpoint
and try the next one without copying anything. Only committed operations
become decisions.
"""

from __future__ import annotations

import enum
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from kai_py.api.keys import QUEUE_ADMISSION_GATE
from kai_py.scheduler import pinning
from kai_py.scheduler.fairshare import compute_fair_shares
from kai_py.scheduler.model import (
    ALLOCATED,
    EVICTED,
    PENDING,
    PIPELINED,
    RELEASING,
    RUNNING,
    GpuGroup,
    Job,
    Node,
    Queue,
    Snapshot,
    Task,
    TaskStatus,
    new_group_id,
    quota_gpus,
)
from kai_py.scheduler.nodeindex import NodeIndex
from kai_py.scheduler.predicates import role_capacity
from kai_py.scheduler.reasons import Reason
from kai_py.scheduler.resources import Res
from kai_py.scheduler.subgroups import tree as subgroup_tree
from kai_py.scheduler.tenancy import access

if TYPE_CHECKING:
    from kai_py.scheduler.framework import Framework


#: Statuses of pods placed in this session: evicting one only undoes its placement.
PLACED_THIS_SESSION = frozenset({ALLOCATED, PIPELINED})


class Op(enum.Enum):
    ALLOCATE = "allocate"
    PIPELINE = "pipeline"  # turn an allocation of this statement into a pipelined one
    EVICT = "evict"


# As module names for the statement's hot paths (an Enum class lookup is slow; see
# model.PENDING).
_ALLOCATE: Final = Op.ALLOCATE
_PIPELINE: Final = Op.PIPELINE
_EVICT: Final = Op.EVICT


@dataclass(slots=True)
class Record:
    op: Op
    task: Task
    node: Node | None = None
    action: str = ""
    by: Job | None = None
    prev_status: TaskStatus = PENDING
    # An eviction of a pod placed earlier in this session: where it was (it is pending again).
    prev_groups: tuple[str, ...] = ()
    prev_uuids: tuple[str, ...] = ()
    prev_claim_now: bool = True

    @property
    def unplaced(self) -> bool:
        """An eviction that only took back a placement of this session (never started)."""
        status = self.prev_status  # PLACED_THIS_SESSION, without hashing an Enum member
        return self.op is _EVICT and (status is ALLOCATED or status is PIPELINED)


@dataclass(slots=True)
class Eviction:
    task: Task
    action: str
    by: Job | None
    message: str
    # A move: the node where the session placed the pod again (its controller's
    # replacement goes there, pipelined); None = evicted only.
    moved_to: str | None = None


@dataclass(slots=True)
class Event:
    kind: str  # Pod, PodGroup, Queue
    namespace: str
    name: str
    type: str  # Normal, Warning
    reason: str
    message: str

    @property
    def object(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name


@dataclass(slots=True)
class Decisions:
    """What a session decided: the only thing that leaves the scheduler."""

    binds: list[Task] = field(default_factory=list)
    pipelined: list[Task] = field(default_factory=list)
    evictions: list[Eviction] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    reasons: dict[str, list[Reason]] = field(default_factory=dict)  # job uid -> why not
    queues: dict[str, QueueFigures] = field(default_factory=dict)
    # job uid -> since when it has run below minMember (None: it is not stale)
    stale_since: dict[str, float | None] = field(default_factory=dict)
    # "namespace/name" of a pending pod -> its job's whole reason (the pod's condition
    # says it in full; the pod's event may only point to the PodGroup)
    pending_reasons: dict[str, str] = field(default_factory=dict)
    searches: SearchCounts = field(default_factory=lambda: SearchCounts())
    # Job uids in the order the (first) allocate action took them up: the line the
    # pending jobs stand in, which the controllers write as each PodGroup's position.
    order: list[str] = field(default_factory=list)
    # Pods whose queue-admission gate is to be lifted (``scheduler/admission``), a gang's together
    ungated: list[Task] = field(default_factory=list)


@dataclass(slots=True)
class SearchCounts:
    """What the victim searches of a session did, counted for KAI's scheduler metrics
    (the operator exports them; the scheduler only counts, it has no clock)."""

    acted_on: Counter[str] = field(default_factory=Counter)  # action -> jobs searched for
    simulated: Counter[str] = field(default_factory=Counter)  # action -> scenarios simulated
    # action -> scenarios ruled out without a simulation (too little freed yet)
    filtered: Counter[str] = field(default_factory=Counter)
    rejected: Counter[str] = field(default_factory=Counter)  # action -> refused by a validator
    # (action, result, reduced budget) -> searches; results as KAI names them
    jobs: Counter[tuple[str, str, bool]] = field(default_factory=Counter)
    exhausted: Counter[str] = field(default_factory=Counter)  # action -> budget ran out


@dataclass(slots=True, frozen=True)
class QueueFigures:
    """A queue's totals at the end of a session: what its status shows."""

    deserved: Res
    fair_share: Res
    allocated: Res
    allocated_non_preemptible: Res
    requested: Res
    # GPUs held per model, for a queue with spec.gpuModels (docs/quota-per-model.md)
    gpu_models: dict[str, float] | None = None


class Session:
    def __init__(self, snapshot: Snapshot, framework: Framework) -> None:
        self.snapshot = snapshot
        self.now = snapshot.now
        self.config = snapshot.config
        self.framework = framework
        self.nodes: dict[str, Node] = {n.name: n for n in snapshot.nodes}
        self.queues: dict[str, Queue] = {q.name: q for q in snapshot.queues}
        #: Some queue limits its namespaces, priority classes or cards (``tenancy/``):
        #: without one, no job pays for the checks.
        self.tenancy = any(q.tenancy is not None for q in snapshot.queues)
        self.jobs: dict[str, Job] = {j.uid: j for j in snapshot.jobs}
        self.committed: list[Record] = []
        self.decisions = Decisions()
        #: Task uid -> what an avoided node (``Node.avoided``) had to do with where the
        #: placer put it (passed over, or used as nothing else fits), for its Event.
        self.passed_over: dict[str, str] = {}
        #: Job uid -> the topology domain its gang was last placed in, for its Event.
        self.topology_domains: dict[str, str] = {}
        #: Every change of a node after set-up, in order, once a topology view asks for
        #: them (kai_py/scheduler/topology/domains.py keeps its domains' totals from it).
        self.changed_nodes: list[Node] | None = None
        # Bumped whenever resources are freed, so cached "does not fit" answers expire.
        self.release_generation = 0
        # Per-session memo of derived values, keyed with the versions they depend on.
        self.memo: dict[object, object] = {}
        self._ancestors: dict[str, list[Queue]] = {}
        self.max_gpu_memory = max((n.gpu_memory_mib for n in self.nodes.values()), default=0.0)
        self._indexing = False  # the index is built once set-up has placed the running pods
        # The jobs with a pending task at set-up, in job order. A task is pending in a
        # session only if it was at set-up (an undo is the only way back to pending), so
        # the jobs pending at any point are among these: the actions ask for them without
        # looking at every job's tasks (``pending_jobs``).
        self.pending_at_start: list[Job] = []
        # The jobs with pods held by scheduling gates (``Job.gated``): told why they wait.
        self.gated_at_start: list[Job] = []
        # Steps of jobs with sub-groups kept from earlier sessions are not trusted: a job
        # may come back with its pods changed and its version not.
        subgroup_tree.forget()
        self._reset_state()
        self.index = NodeIndex(list(self.nodes.values()))
        self._indexing = True
        self.roots = [q.name for q in snapshot.queues if q.parent is None]
        self.total = Res()
        config = snapshot.config
        for node in self.nodes.values():
            if node.ready:
                if config.restrict_node_scheduling:
                    self.total.add(role_capacity(node, config))
                else:
                    self.total.add(node.allocatable)
        compute_fair_shares(self.queues, self.roots, self.total, config.k_value)

    # ----------------------------------------------------------- set-up
    def _reset_state(self) -> None:
        for queue in self.queues.values():
            queue.allocated = Res()
            queue.allocated_non_preemptible = Res()
            queue.request = Res()
            queue.deserved = Res()
            queue.fair_share = Res()
            queue.added = Res()
            queue.children = []
        for queue in self.queues.values():
            if queue.parent is not None and queue.parent in self.queues:
                self.queues[queue.parent].children.append(queue.name)
        for node in self.nodes.values():
            node.used, node.releasing, node.pipelined = Res(), Res(), Res()
            node.pods = node.pods_releasing = node.pods_pipelined = 0
            node.extended_used = node.extended_releasing = node.extended_pipelined = None
            node.groups = {}
            node.tasks = {}
        # Every task of every job passes here once per cycle (41,000 running pods at
        # 4,000 nodes): _node_add, _queue_add and _queue_request are written out for
        # the usual task (running or pending, no shared card). Each total still gets
        # the same additions in the same order as those calls would make, so the
        # floats are the same; a test compares the two.
        nodes = self.nodes
        pending_at_start = self.pending_at_start
        pending_at_start.clear()  # filled below, as every other total is
        self.gated_at_start = [job for job in self.jobs.values() if job.gated]
        tenancy = self.tenancy
        for job in self.jobs.values():
            chain = self.ancestors(job.queue)
            counts = not job.errors
            if tenancy and counts:
                # A job its queue does not take (``tenancy/``) is held, and its request
                # must not raise the queue's demand, hence fair share, either.
                rule_chain = [(q.name, q.tenancy) for q in chain]
                why = access.job_refusal(rule_chain, job.queue, job.namespace, job.priority_class)
                counts = why is None
            non_preemptible = not job.preemptible
            pending = False
            for task in job.tasks:
                task.claim_now = True
                status = task.status
                request = task.request
                if status is PENDING:  # most tasks: no node to look up
                    if not pending:
                        pending = True
                        pending_at_start.append(job)
                    if counts:
                        if task.gpu_fraction > 0 or task.gpu_memory_mib > 0:
                            gpu = self.task_gpu(task, None)
                        else:
                            gpu = request.gpu
                            if task.extended is not None:
                                gpu += quota_gpus(task.extended)
                        cpu, memory = request.cpu, request.memory
                        for queue in chain:
                            total = queue.request
                            total.cpu += cpu
                            total.memory += memory
                            total.gpu += gpu
                    continue
                where = nodes.get(task.node_name) if task.node_name else None
                if where is None or not status.holds_resources:
                    continue
                if status is not RUNNING or task.gpu_groups:
                    # Releasing, allocated or on a shared card: the general path. Only
                    # running pods count for their queue (releasing ones hold their node).
                    self._node_add(where, task)
                    if status is RUNNING:
                        self._queue_add(job, task.gpu_on(where), task)
                        self._queue_request(job, task, where)
                    continue
                cpu, memory = request.cpu, request.memory
                if task.gpu_fraction > 0 or task.gpu_memory_mib > 0:
                    gpu = task.gpu_on(where)
                else:
                    gpu = request.gpu
                    if task.extended is not None:
                        gpu += quota_gpus(task.extended)
                job.version += 1
                if task.extended is not None:
                    where.change_extended(task.extended, 1.0, True, False)
                total = where.used
                total.cpu += request.cpu
                total.memory += request.memory
                total.gpu += request.gpu
                where.pods += 1
                where.version += 1
                where.tasks[task.uid] = task
                for queue in chain:
                    total = queue.allocated
                    total.cpu += cpu
                    total.memory += memory
                    total.gpu += gpu
                    queue.version += 1
                    if non_preemptible:
                        total = queue.allocated_non_preemptible
                        total.cpu += cpu
                        total.memory += memory
                        total.gpu += gpu
                    total = queue.request
                    total.cpu += cpu
                    total.memory += memory
                    total.gpu += gpu
        for job in self.gated_at_start:  # usually none
            if not job.errors:
                for task in job.gated:
                    # Pods held by kai-py's queue-admission gate ask as pending pods do,
                    # so fair shares are the same with gating on as off (docs/autoscaling.md).
                    # Other gates are not kai-py's to judge: their pods ask for nothing, as in KAI.
                    if task.gates == (QUEUE_ADMISSION_GATE,):
                        self._queue_request(job, task, None)

    def ancestors(self, queue_name: str) -> list[Queue]:
        """The queue itself, then its parents up to the root."""
        cached = self._ancestors.get(queue_name)
        if cached is not None:
            return cached
        chain: list[Queue] = []
        name: str | None = queue_name
        while name is not None and name in self.queues:
            queue = self.queues[name]
            chain.append(queue)
            name = queue.parent
        self._ancestors[queue_name] = chain  # parents are fixed for the session
        return chain

    def task_res(self, task: Task, node: Node | None) -> Res:
        return Res(task.request.cpu, task.request.memory, self.task_gpu(task, node))

    def task_gpu(self, task: Task, node: Node | None) -> float:
        if node is None and task.gpu_memory_mib > 0 and self.max_gpu_memory > 0:
            return min(1.0, task.gpu_memory_mib / self.max_gpu_memory) * task.gpu_devices
        return task.gpu_on(node)

    def _queue_add(
        self, job: Job, gpu: float, task: Task, sign: float = 1.0, placed: bool = False
    ) -> None:
        # Res.add written out over plain floats (the same additions): this runs up the
        # tree for every placement, eviction and undo.
        cpu, memory, gpu = task.request.cpu * sign, task.request.memory * sign, gpu * sign
        added = placed and not task.shadow
        non_preemptible = not job.preemptible
        for queue in self.ancestors(job.queue):
            total = queue.allocated
            total.cpu += cpu
            total.memory += memory
            total.gpu += gpu
            if added:
                total = queue.added
                total.cpu += cpu
                total.memory += memory
                total.gpu += gpu
            queue.version += 1
            if non_preemptible:
                total = queue.allocated_non_preemptible
                total.cpu += cpu
                total.memory += memory
                total.gpu += gpu

    def _queue_request(self, job: Job, task: Task, node: Node | None) -> None:
        request = task.request
        if task.gpu_fraction > 0 or task.gpu_memory_mib > 0:
            gpu = self.task_gpu(task, node)
        else:
            gpu = request.gpu  # task_gpu of a whole-GPU task, without its three calls
            if task.extended is not None:
                gpu += quota_gpus(task.extended)
        cpu, memory = request.cpu, request.memory
        for queue in self.ancestors(job.queue):
            total = queue.request
            total.cpu += cpu
            total.memory += memory
            total.gpu += gpu

    # ------------------------------------------------------ node accounting
    def _node_add(self, node: Node, task: Task) -> None:
        self._node_change(node, task, 1.0)
        node.tasks[task.uid] = task

    def _node_remove(self, node: Node, task: Task) -> None:
        self._node_change(node, task, -1.0)
        node.tasks.pop(task.uid, None)

    def _node_change(self, node: Node, task: Task, sign: float) -> None:
        job = self.jobs.get(task.job_uid)
        if job is not None:
            job.version += 1
        req = task.request
        status = task.status
        releasing = (status is RELEASING or status is EVICTED) and not task.stuck
        # _add written out for the usual case (one call less per change of a node).
        target = node.used if task.claim_now else node.pipelined
        target.cpu += sign * req.cpu
        target.memory += sign * req.memory
        target.gpu += sign * req.gpu
        step = 1 if sign > 0 else -1
        if task.claim_now:
            node.pods += step
            if releasing:
                _add(node.releasing, req, sign)
                node.pods_releasing += step
        else:
            node.pods_pipelined += step
        if task.extended is not None:
            node.change_extended(task.extended, sign, task.claim_now, releasing)
        if task.gpu_groups:
            portion = task.portion_on(node)
            memory = task.gpu_memory_mib or portion * node.gpu_memory_mib
            for gid in task.gpu_groups:
                group = node.groups.get(gid)
                if group is None:
                    group = node.groups[gid] = GpuGroup(gid)
                    # A shared card has a reservation pod on the node (the binder makes it
                    # with the card's first pod): it takes a pod slot while the card is in
                    # use, counted as staying (it goes only after its last pod).
                    node.pods += 1
                before = group.device_flags()
                if task.claim_now:
                    group.used += sign * portion
                    if releasing:
                        group.releasing += sign * portion
                else:
                    group.pipelined += sign * portion
                group.memory_mib += sign * memory
                group.tasks += int(sign)
                after = group.device_flags()
                node.used.gpu += after[0] - before[0]
                node.releasing.gpu += after[1] - before[1]
                node.pipelined.gpu += after[2] - before[2]
                if group.tasks <= 0:
                    del node.groups[gid]
                    node.pods -= 1  # its reservation pod's slot
        node.version += 1
        if self._indexing:
            self.index.update(node)
            changed = self.changed_nodes
            if changed is not None:  # only once a topology view follows the nodes
                changed.append(node)

    def _set_status(self, task: Task, status: TaskStatus) -> None:
        """Change a placed task's status, keeping its node's totals right."""
        node = self.nodes[task.node_name] if task.node_name else None
        if node is not None:
            self._node_remove(node, task)
        task.status = status
        if node is not None:
            self._node_add(node, task)
        else:
            # _node_change bumps it otherwise: what is memoised on the job's version
            # (its demand, its place in job order) must see every change of status.
            job = self.jobs.get(task.job_uid)
            if job is not None:
                job.version += 1

    # ------------------------------------------------------------ decisions
    def statement(self) -> Statement:
        return Statement(self)

    def explain(self, job: Job, reason: Reason) -> None:
        self.decisions.reasons.setdefault(job.uid, []).append(reason)

    def event(
        self, kind: str, namespace: str, name: str, type_: str, reason: str, msg: str
    ) -> None:
        self.decisions.events.append(Event(kind, namespace, name, type_, reason, msg))


def _add(target: Res, amount: Res, sign: float) -> None:
    target.cpu += sign * amount.cpu
    target.memory += sign * amount.memory
    target.gpu += sign * amount.gpu


class Statement:
    """Tentative changes with an undo log: ``checkpoint`` / ``rollback`` / ``commit``."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.log: list[Record] = []

    def checkpoint(self) -> int:
        return len(self.log)

    def allocate(self, task: Task, node: Node, groups: tuple[str, ...], pipelined: bool) -> None:
        s = self.session
        job = s.jobs[task.job_uid]
        task.node_name = node.name
        if groups:
            # The search calls a free card by a stand-in id (one not on the node); the
            # group it opens gets its real, cluster-wide name only here.
            groups = tuple(
                gid if gid in node.groups else new_group_id(node.name, task.uid, i, node.groups)
                for i, gid in enumerate(groups)
            )
        task.gpu_groups = groups
        if task.pin is not None:
            # Which allowed cards it takes, so the next pinned task sees them taken.
            task.gpu_uuids = pinning.choose_cards(task, node, groups, pipelined)
        task.status = PIPELINED if pipelined else ALLOCATED
        task.claim_now = not pipelined
        s._node_add(node, task)
        s._queue_add(job, task.gpu_on(node), task, placed=True)
        self.log.append(Record(_ALLOCATE, task, node))

    def pipeline(self, task: Task) -> None:
        """Hold an allocated task back until its job can start as a whole."""
        self.log.append(Record(_PIPELINE, task, prev_status=task.status))
        self.session._set_status(task, PIPELINED)
        self.session.release_generation += 1  # its idle resources are free again

    def evict(self, task: Task, action: str, by: Job | None) -> None:
        """Take a pod's resources back: a running pod is evicted (it releases them); a
        pod placed earlier in this session goes back to pending (nothing was started)."""
        s = self.session
        node = s.nodes[task.node_name] if task.node_name else None
        job = s.jobs[task.job_uid]
        if task.status in PLACED_THIS_SESSION:
            assert node is not None
            self.log.append(
                Record(
                    _EVICT,
                    task,
                    node,
                    action,
                    by,
                    task.status,
                    task.gpu_groups,
                    task.gpu_uuids,
                    task.claim_now,
                )
            )
            s._queue_add(job, task.gpu_on(node), task, -1.0, placed=True)
            s._node_remove(node, task)
            task.status, task.node_name, task.gpu_groups = PENDING, None, ()
            if task.pin is not None:
                task.gpu_uuids = ()
            task.claim_now = True
            s.release_generation += 1
            return
        self.log.append(Record(_EVICT, task, node, action, by, task.status))
        s._set_status(task, EVICTED)
        s._queue_add(job, task.gpu_on(node), task, -1.0)
        s.release_generation += 1

    def rollback(self, checkpoint: int = 0) -> None:
        s = self.session
        while len(self.log) > checkpoint:
            rec = self.log.pop()
            task, job = rec.task, s.jobs[rec.task.job_uid]
            if rec.op is _ALLOCATE:
                assert rec.node is not None
                s._queue_add(job, task.gpu_on(rec.node), task, -1.0, placed=True)
                s._node_remove(rec.node, task)
                task.status, task.node_name, task.gpu_groups = PENDING, None, ()
                if task.pin is not None:
                    task.gpu_uuids = ()
                task.claim_now = True
                s.release_generation += 1
            elif rec.op is _PIPELINE:
                s._set_status(task, rec.prev_status)
            elif rec.unplaced:
                assert rec.node is not None
                task.node_name, task.gpu_groups = rec.node.name, rec.prev_groups
                if task.pin is not None:
                    task.gpu_uuids = rec.prev_uuids
                task.status = rec.prev_status
                task.claim_now = rec.prev_claim_now
                s._node_add(rec.node, task)
                s._queue_add(job, task.gpu_on(rec.node), task, placed=True)
            else:
                s._set_status(task, rec.prev_status)
                node = s.nodes[task.node_name] if task.node_name else None
                s._queue_add(job, task.gpu_on(node), task)

    def commit(self) -> None:
        self.session.committed.extend(self.log)
        self.log = []

    @property
    def has_evictions(self) -> bool:
        return any(rec.op is _EVICT for rec in self.log)
