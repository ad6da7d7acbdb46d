"""Small builders for pure-scheduler tests: Snapshots straight from Python.

Units follow the model: CPU in millicores, memory in bytes, GPUs in devices.
Queues default to quota 0, no limit and weight 1 on every resource, like
KAI's ``default-queue``, so a test only names what it cares about.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import Any

from kai_py.scheduler.cycle import open_session
from kai_py.scheduler.model import (
    NO_POD_LIMIT,
    Config,
    Job,
    Node,
    Queue,
    SelectorRequirement,
    Snapshot,
    Taint,
    Task,
    TaskStatus,
    Toleration,
)
from kai_py.scheduler.resources import INF, Res
from kai_py.scheduler.session import Session

GB = 1e9
NS = "ns"

_ids = itertools.count()


def res(gpu: float = 0.0, cpu: float = 0.0, memory: float = 0.0) -> Res:
    return Res(cpu, memory, gpu)


def _q(value: float) -> float:
    """-1 in a spec means unlimited (INF) in the model."""
    return INF if value == -1 else float(value)


def node(
    name: str,
    gpus: float = 0,
    cpu: float = 64_000,
    memory: float = 512 * GB,
    *,
    labels: dict[str, str] | None = None,
    taints: Iterable[Taint] = (),
    ready: bool = True,
    unschedulable: bool = False,
    gpu_memory_mib: float = 0.0,
    max_pods: int = NO_POD_LIMIT,
    extended: dict[str, float] | None = None,
) -> Node:
    labels = dict(labels or {})
    if gpu_memory_mib:
        labels.setdefault("nvidia.com/gpu.memory", str(int(gpu_memory_mib)))
    return Node(
        name=name,
        allocatable=Res(cpu, memory, gpus),
        labels=labels,
        taints=tuple(taints),
        ready=ready,
        unschedulable=unschedulable,
        gpu_memory_mib=gpu_memory_mib,
        max_pods=max_pods,
        extended=extended,
    )


def queue(
    name: str,
    parent: str | None = None,
    *,
    gpu: float = 0,
    gpu_limit: float = -1,
    gpu_weight: float = 1,
    cpu: float = 0,
    cpu_limit: float = -1,
    cpu_weight: float = 1,
    memory: float = 0,
    memory_limit: float = -1,
    memory_weight: float = 1,
    priority: int = 100,
    created: float = 0.0,
    preempt_min_runtime: float | None = None,
    reclaim_min_runtime: float | None = None,
    request: Res | None = None,
) -> Queue:
    """A queue; quotas and limits of -1 mean unlimited. ``request`` presets the
    session's request (for calling ``compute_fair_shares`` directly)."""
    q = Queue(
        name=name,
        parent=parent,
        quota=Res(_q(cpu), _q(memory), _q(gpu)),
        limit=Res(_q(cpu_limit), _q(memory_limit), _q(gpu_limit)),
        weight=Res(cpu_weight, memory_weight, gpu_weight),
        priority=priority,
        created=created,
        preempt_min_runtime=preempt_min_runtime,
        reclaim_min_runtime=reclaim_min_runtime,
    )
    if request is not None:
        q.request = request.copy()
    return q


def task(
    name: str | None = None,
    *,
    gpu: float = 0,
    cpu: float = 1000,
    memory: float = 1 * GB,
    fraction: float = 0.0,
    gpu_memory_mib: float = 0.0,
    devices: int = 1,
    node_selector: dict[str, str] | None = None,
    affinity: Sequence[Sequence[SelectorRequirement]] = (),
    tolerations: Iterable[Toleration] = (),
    status: TaskStatus = TaskStatus.PENDING,
    node_name: str | None = None,
    groups: Sequence[str] = (),
    start_time: float | None = None,
    created: float = 0.0,
    role: str = "worker",
    extended: dict[str, float] | None = None,
) -> Task:
    """A pod. ``job`` fills in ``job_uid``; ``fraction``/``gpu_memory_mib`` make it shared."""
    n = next(_ids)
    name = name or f"t{n}"
    return Task(
        uid=f"uid-{name}-{n}",
        namespace=NS,
        name=name,
        job_uid="",
        request=Res(cpu, memory, gpu),
        extended=extended,
        gpu_fraction=fraction,
        gpu_memory_mib=gpu_memory_mib,
        gpu_devices=devices,
        node_selector=dict(node_selector or {}),
        affinity=tuple(tuple(term) for term in affinity),
        tolerations=tuple(tolerations),
        status=status,
        node_name=node_name,
        gpu_groups=tuple(groups),
        start_time=start_time,
        created=created,
        role=role,
    )


def running(node_name: str, *, start_time: float = 0.0, **kw: Any) -> Task:
    return task(status=TaskStatus.RUNNING, node_name=node_name, start_time=start_time, **kw)


def job(
    name: str,
    queue_name: str,
    tasks: Iterable[Task],
    *,
    priority: int = 50,
    preemptible: bool | None = None,
    min_member: int | None = None,
    created: float = 0.0,
    staleness_grace: float | None = 60.0,
    stale_since: float | None = None,
) -> Job:
    """A pod group; preemptible defaults to priority < 100, minMember to all its pods."""
    tasks = list(tasks)
    j = Job(
        uid=f"job-{name}",
        namespace=NS,
        name=name,
        queue=queue_name,
        priority=priority,
        preemptible=priority < 100 if preemptible is None else preemptible,
        min_member=len(tasks) if min_member is None else min_member,
        created=created,
        tasks=tasks,
        staleness_grace=staleness_grace,
        stale_since=stale_since,
    )
    for t in tasks:
        t.job_uid = j.uid
    return j


def snapshot(
    nodes: Iterable[Node],
    queues: Iterable[Queue],
    jobs: Iterable[Job] = (),
    *,
    now: float = 1000.0,
    placement: str = "binpack",
) -> Snapshot:
    return Snapshot(
        nodes=list(nodes),
        queues=list(queues),
        jobs=list(jobs),
        now=now,
        config=Config(placement=placement),
    )


def default_queues(*leaves: str, **kw: Any) -> list[Queue]:
    """A root ``root`` with the given leaves under it (quota 0, no limit)."""
    return [queue("root"), *(queue(name, "root", **kw) for name in leaves)]


def session(snap: Snapshot) -> Session:
    return open_session(snap)
