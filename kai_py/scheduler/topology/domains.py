"""The domains a gang with a topology constraint may be placed in, in the order to try.

KAI's strategy: the levels from the preferred one (else the required one) up to the
required one (else the whole cluster) are tried narrowest first, so a preferred
level that cannot take the gang is relaxed one level up at a time and a required
level is never crossed. At each level the domains that can hold the whole gang are
tried fullest first (bin-packing: the domain the gang fills most), inside the
fullest parent first. Inside the domain chosen, the nodes of its emptiest
preferred-level sub-domain come first, so that as much of the gang as possible
lands together.

Only nodes that carry the labels of the levels from the widest down to the required
one can be in a required domain; a preferred-only constraint may fall back to any
node of the cluster. What a domain can hold is counted from its nodes' free (and
being-freed) resources; the placement itself then decides, as for any gang.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from kai_py.scheduler import reasons
from kai_py.scheduler.model import Job, Node, Task, TaskStatus, Topology
from kai_py.scheduler.reasons import Reason
from kai_py.scheduler.resources import EPS
from kai_py.scheduler.session import Session
from kai_py.scheduler.topology.constraint import Levels

#: The level of the domain that is the whole cluster.
ROOT = -1
#: The ratio of a resource the gang needs and the domain has none of (sorts it last).
_NONE_FREE = 1000.0

Values = tuple[str | None, ...]


@dataclass(slots=True, eq=False)
class Domain:
    """Nodes that share the label values of the levels from the widest down to ``level``."""

    level: int
    values: tuple[str, ...]
    nodes: list[Node] = field(default_factory=list)
    rooms: list[int] = field(default_factory=list)  # per node: pods of the gang's shape
    cpu: float = 0.0  # free once releases are done, over the nodes that could take a pod
    memory: float = 0.0
    gpu: float = 0.0
    slots: int = 0
    capacity: int = 0  # pods of the gang's largest shape it could hold

    def fits(self, need: _Need) -> bool:
        if need.uniform:
            return self.capacity >= need.count
        return (
            self.slots >= need.count
            and need.cpu <= self.cpu + EPS
            and need.memory <= self.memory + EPS
            and need.gpu <= self.gpu + EPS
        )

    def ratio(self, need: _Need) -> float:
        """The gang's need over the domain's free, for its dominant resource: the
        larger, the fuller the gang leaves the domain."""
        worst = 0.0
        for wanted, free in (
            (need.cpu, self.cpu),
            (need.memory, self.memory),
            (need.gpu, self.gpu),
        ):
            if wanted > EPS:
                worst = max(worst, wanted / free if free > EPS else _NONE_FREE)
        return worst


@dataclass(slots=True)
class _Need:
    count: int
    cpu: float
    memory: float
    gpu: float  # whole GPUs (shared cards are left to the placement)
    one: tuple[float, float, float]  # the largest task's cpu, memory, whole GPUs
    uniform: bool  # every task asks the same: the gang fits where ``count`` such pods fit


def _need(tasks: list[Task]) -> _Need:
    cpu = memory = gpu = 0.0
    top_cpu = top_mem = top_gpu = 0.0
    first = tasks[0].request
    uniform = True
    for task in tasks:
        r = task.request
        whole = 0.0 if task.is_shared else r.gpu
        cpu += r.cpu
        memory += r.memory
        gpu += whole
        top_cpu, top_mem, top_gpu = max(top_cpu, r.cpu), max(top_mem, r.memory), max(top_gpu, whole)
        if (
            task.is_shared
            or task.extended is not None
            or r.cpu != first.cpu
            or r.memory != first.memory
            or r.gpu != first.gpu
        ):
            uniform = False
    return _Need(len(tasks), cpu, memory, gpu, (top_cpu, top_mem, top_gpu), uniform)


def _values(session: Session, topology: Topology) -> dict[str, Values]:
    """Each node's label value at each level (None where it has no such label), once
    per session: labels do not change within one."""
    key = ("topology-values", topology.name, topology.levels)
    found = session.memo.get(key)
    if isinstance(found, dict):
        return found
    values: dict[str, Values] = {
        name: tuple(node.labels.get(label) for label in topology.levels)
        for name, node in session.nodes.items()
    }
    session.memo[key] = values
    return values


def _candidates(session: Session, need: _Need) -> list[Node]:
    """The nodes that could take a pod of the gang now or once releases are done. For a
    gang of whole-GPU pods, the node index's buckets (most nodes of a busy cluster
    are full and never looked at); else every node."""
    nodes = session.nodes
    gpu = need.one[2]
    if need.uniform and gpu > EPS:
        want = math.ceil(gpu - EPS)
        names: dict[str, None] = {}
        for bucket in session.index.free_gpu_buckets(want, False):
            names.update(dict.fromkeys(bucket))
        for bucket in session.index.releasing_by_future_gpus(want, False):
            names.update(dict.fromkeys(bucket))
        return [nodes[n] for n in names]
    return list(nodes.values())


def _room(node: Node, one: tuple[float, float, float]) -> tuple[float, float, float, int, int]:
    """A node's free cpu, memory, whole GPUs and pod slots once releases are done, and
    how many pods of the shape ``one`` it could hold."""
    alloc, used, rel, pipe = node.allocatable, node.used, node.releasing, node.pipelined
    cpu = alloc.cpu - used.cpu + rel.cpu - pipe.cpu
    memory = alloc.memory - used.memory + rel.memory - pipe.memory
    gpu = alloc.gpu - used.gpu + rel.gpu - pipe.gpu
    slots = node.pod_slots(True)
    count = slots
    for wanted, free in ((one[0], cpu), (one[1], memory), (one[2], gpu)):
        if wanted > EPS:
            count = min(count, math.floor(free / wanted + EPS))
    return cpu, memory, gpu, slots, max(count, 0)


def _active(task: Task) -> bool:
    status = task.status
    return (
        status is TaskStatus.RUNNING
        or status is TaskStatus.ALLOCATED
        or (status is TaskStatus.PIPELINED)
    )


@dataclass(slots=True)
class Plan:
    """The domains to try, in order, or why there is none (``refusal``)."""

    domains: list[Domain]
    refusal: Reason | None = None


def plan(session: Session, job: Job, tasks: list[Task], levels: Levels) -> Plan:
    """The domains ``tasks`` of ``job`` may go to together, in the order to try them."""
    topology = levels.topology
    required, preferred = levels.required, levels.preferred
    need = _need(tasks)
    values = _values(session, topology)
    deepest = max(
        required if required is not None else ROOT, preferred if preferred is not None else ROOT
    )
    # A gang that already runs in a required domain grows only inside it.
    kept: set[tuple[str | None, ...]] | None = None
    if required is not None:
        kept = {
            values[t.node_name][: required + 1]
            for t in job.tasks
            if t.node_name is not None and _active(t) and t.node_name in values
        } or None
    start = preferred if preferred is not None else required
    assert start is not None  # resolve() refuses a constraint without a level
    end = required if required is not None else ROOT
    # Every domain of the levels that matter, with its free room, in one pass.
    by_level: list[dict[tuple[str, ...], Domain]] = [{} for _ in range(deepest + 2)]
    root = Domain(ROOT, ())
    for node in _candidates(session, need):
        if not node.ready or node.unschedulable:
            continue
        own = values[node.name]
        if required is not None:
            if any(v is None for v in own[: required + 1]):
                continue  # not in any domain of the required level
            if kept is not None and own[: required + 1] not in kept:
                continue
        cpu, memory, gpu, slots, count = _room(node, need.one)
        if count <= 0 and need.uniform:
            continue
        targets = [root]
        prefix: tuple[str, ...] = ()
        for level in range(deepest + 1):
            value = own[level]
            if value is None:
                break  # in no domain of this level or below
            prefix = (*prefix, value)
            domain = by_level[level].get(prefix)
            if domain is None:
                domain = by_level[level][prefix] = Domain(level, prefix)
            targets.append(domain)
        for domain in targets:
            domain.nodes.append(node)
            domain.rooms.append(count)
            domain.cpu += cpu
            domain.memory += memory
            domain.gpu += gpu
            domain.slots += slots
            domain.capacity += count
    ratios: dict[tuple[int, tuple[str, ...]], float] = {}

    def order(domain: Domain) -> tuple[object, ...]:
        # Inside the fullest parent first, then the fullest itself; names break ties.
        key: list[object] = []
        for level in range(domain.level + 1):
            prefix = domain.values[: level + 1]
            ratio = ratios.get((level, prefix))
            if ratio is None:
                ratio = ratios[(level, prefix)] = by_level[level][prefix].ratio(need)
            key.extend((-ratio, prefix[-1]))
        return tuple(key)

    domains: list[Domain] = []
    for level in range(start, end - 1, -1):
        found = [root] if level == ROOT else list(by_level[level].values())
        domains.extend(sorted((d for d in found if d.fits(need)), key=order))
    if domains:
        return Plan(domains)
    return Plan(
        [], _refusal(job, topology, end, need, root if end == ROOT else None, by_level, kept)
    )


def _refusal(
    job: Job,
    topology: Topology,
    level: int,
    need: _Need,
    root: Domain | None,
    by_level: list[dict[tuple[str, ...], Domain]],
    kept: set[tuple[str | None, ...]] | None,
) -> Reason:
    """Why no domain of ``level`` takes the gang, with the numbers of the best one."""
    gpus = need.gpu > EPS
    wanted = f"{_num(need.gpu)} GPUs" if gpus else f"{need.count} pods"
    what = f"the {need.count} pods ({_num(need.gpu)} GPUs)" if gpus else f"the {need.count} pods"
    details: dict[str, object] = {
        "topology": topology.name,
        "pods": need.count,
        "gpus": need.gpu,
    }
    if root is not None:
        message = (
            f"topology {topology.name}: the cluster has no room for {what} of job {job.key} "
            f"together: free {_num(root.gpu) + ' GPUs' if gpus else str(root.capacity) + ' pods'} "
            f"on the nodes that could take one"
        )
        return Reason(reasons.POD_SCHEDULING_ERRORS, message, details)
    name = topology.level_name(level)
    found = list(by_level[level].values())
    details["level"] = topology.levels[level]
    where = ""
    if kept is not None:
        shown = ", ".join(
            sorted(_describe(topology, level, tuple(str(v) for v in k)) for k in kept)
        )
        where = f" (its running pods are in {shown}, which it may not leave)"
    if not found:
        message = (
            f"topology {topology.name}: no {name} has free room for {what} of job {job.key} "
            f"together{where}: no node with the labels of the levels down to {name} "
            f"({', '.join(topology.levels[: level + 1])}) can take one of its pods"
        )
        return Reason(reasons.POD_SCHEDULING_ERRORS, message, details)
    best = min(found, key=lambda d: (-(d.gpu if gpus else d.capacity), -d.capacity, d.values))
    have = f"{_num(best.gpu)} of the {wanted}" if gpus else f"room for {best.capacity} of the {wanted}"
    details.update({"domain": ".".join(best.values), "free_gpus": best.gpu, "room": best.capacity})
    message = (
        f"topology {topology.name}: no {name} has {wanted} free for {what} of job {job.key} "
        f"together{where}; the {name} with the most, "
        f"{_describe(topology, level, best.values)}, has {have} free "
        f"(room for {best.capacity} of the {need.count} pods)"
    )
    return Reason(reasons.POD_SCHEDULING_ERRORS, message, details)


def _num(value: float) -> str:
    return str(int(value)) if abs(value - round(value)) < EPS else f"{value:g}"


def _describe(topology: Topology, level: int, values: tuple[str, ...]) -> str:
    """``rack r3 (block b1)``: the domain by its level's name and value, with its parents."""
    if level == ROOT:
        return "the whole cluster"
    text = f"{topology.level_name(level)} {values[level]}"
    if level > 0:
        parents = ", ".join(
            f"{topology.level_name(i)} {values[i]}" for i in range(level - 1, -1, -1)
        )
        text += f" ({parents})"
    return text


def describe(topology: Topology, domain: Domain) -> str:
    return _describe(topology, domain.level, domain.values)


def node_rank(domain: Domain, levels: Levels, session: Session) -> dict[str, int]:
    """The order of the domain's nodes: those of the preferred-level sub-domain with
    the most room for the gang first (so most of it lands together), nodes without
    the preferred level's label last. All equal when the domain is that level or below."""
    preferred = levels.preferred
    if preferred is None or domain.level >= preferred:
        return dict.fromkeys((n.name for n in domain.nodes), 0)
    values = _values(session, levels.topology)
    room: dict[Values, int] = {}
    for node, count in zip(domain.nodes, domain.rooms, strict=True):
        own = values[node.name][: preferred + 1]
        if None not in own:
            room[own] = room.get(own, 0) + count
    ordered = sorted(room, key=lambda k: (-room[k], tuple(str(v) for v in k)))
    place = {k: i for i, k in enumerate(ordered)}
    last = len(ordered)
    return {n.name: place.get(values[n.name][: preferred + 1], last) for n in domain.nodes}
