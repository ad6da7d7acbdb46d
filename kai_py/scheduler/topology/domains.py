"""The domains a gang with a topology constraint may be placed in, in the order to try.

KAI's strategy: the levels from the preferred one (else the required one) up to the
required one (else the whole cluster) are tried narrowest first, so a preferred
level that cannot take the gang is relaxed one level up at a time and a required
level is never crossed. At each level the domains that can hold the whole gang are
tried fullest first (bin-packing: the domain the gang fills most), inside the
fullest parent first. Inside the domain chosen, the nodes of its preferred-level
sub-domain the gang would fill least come first, so that as much of the gang as
possible lands together.

Only nodes that carry the labels of the levels from the widest down to a domain's
level are in that domain; a preferred-only constraint may fall back to any node of
the cluster. What a domain can hold is counted from its nodes' free (and
being-freed) resources; the placement itself then decides, as for any gang.

The totals of every domain are kept per session and brought up to date from the
nodes that changed since (``Session.changed_nodes``), so that a cycle with many
constrained gangs does not count a 4,000-node cluster again for each of them.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

from kai_py.scheduler import reasons
from kai_py.scheduler.model import Job, Node, Task, TaskStatus, Topology, TopologyConstraint
from kai_py.scheduler.reasons import Reason
from kai_py.scheduler.resources import EPS
from kai_py.scheduler.session import Session
from kai_py.scheduler.topology.constraint import Levels, resolve

#: The level of the domain that is the whole cluster.
ROOT = -1
#: The ratio of a resource the gang needs and the domain has none of (sorts it last).
_NONE_FREE = 1000.0

Values = tuple[str | None, ...]
Key = tuple[int, tuple[str, ...]]  # (level, label values from the widest level down)
Shape = tuple[float, float, float]  # one pod's cpu, memory, whole GPUs
_ROOT_KEY: Key = (ROOT, ())


@dataclass(slots=True, eq=False)
class Domain:
    """A domain chosen to be tried: its level, values and the nodes to look at."""

    level: int
    values: tuple[str, ...]
    nodes: list[Node]
    rooms: list[int]  # per node: pods of the gang's shape it could hold


@dataclass(slots=True)
class _Need:
    count: int
    cpu: float
    memory: float
    gpu: float  # whole GPUs (shared cards are left to the placement)
    one: Shape  # the largest task's
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


def _room(node: Node) -> tuple[float, float, float, int]:
    """A node's free cpu, memory, whole GPUs and pod slots once releases are done."""
    alloc, used, rel, pipe = node.allocatable, node.used, node.releasing, node.pipelined
    return (
        alloc.cpu - used.cpu + rel.cpu - pipe.cpu,
        alloc.memory - used.memory + rel.memory - pipe.memory,
        alloc.gpu - used.gpu + rel.gpu - pipe.gpu,
        node.pod_slots(True),
    )


def _count(room: tuple[float, float, float, int], one: Shape) -> int:
    """How many pods of the shape ``one`` fit in ``room``."""
    count = room[3]
    for wanted, free in ((one[0], room[0]), (one[1], room[1]), (one[2], room[2])):
        if wanted > EPS:
            fit = math.floor(free / wanted + EPS)
            if fit < count:
                count = fit
    return count if count > 0 else 0


class TopologyView:
    """One Topology's domains in a session: their nodes, and their free room kept up
    to date from the nodes that change."""

    def __init__(self, session: Session, topology: Topology) -> None:
        self.topology = topology
        if session.changed_nodes is None:
            session.changed_nodes = []
        self._seen = len(session.changed_nodes)
        self.values: dict[str, Values] = {}
        self.keys: dict[str, list[Key]] = {}  # per node: the domains it is in
        self.members: dict[Key, list[Node]] = {}
        self.by_level: list[list[Key]] = [[] for _ in topology.levels]
        self.children: dict[Key, list[Key]] = {}  # the domains one level down
        self.free: dict[Key, list[float]] = {}  # cpu, memory, whole GPUs, pod slots
        self.rooms: dict[str, tuple[float, float, float, int]] = {}
        # Per pod shape: each node's count of such pods and each domain's total.
        self._shapes: dict[Shape, tuple[dict[str, int], dict[Key, int]]] = {}
        for name, node in session.nodes.items():
            own = tuple(node.labels.get(label) for label in topology.levels)
            self.values[name] = own
            if not node.ready or node.unschedulable:
                continue
            keys = [_ROOT_KEY]
            prefix: tuple[str, ...] = ()
            for level, value in enumerate(own):
                if value is None:
                    break  # in no domain of this level or below
                prefix = (*prefix, value)
                keys.append((level, prefix))
            room = _room(node)
            self.keys[name] = keys
            self.rooms[name] = room
            for key in keys:
                members = self.members.get(key)
                if members is None:
                    members = self.members[key] = []
                    self.free[key] = [0.0, 0.0, 0.0, 0.0]
                    if key[0] >= 0:
                        self.by_level[key[0]].append(key)
                        parent = (key[0] - 1, key[1][:-1]) if key[0] > 0 else _ROOT_KEY
                        self.children.setdefault(parent, []).append(key)
                members.append(node)
                total = self.free[key]
                total[0] += room[0]
                total[1] += room[1]
                total[2] += room[2]
                total[3] += room[3]

    def sync(self, session: Session) -> None:
        """Bring the totals up to date with the nodes changed since the last call."""
        log = session.changed_nodes
        if log is None or self._seen == len(log):
            return
        changed = {node.name: node for node in log[self._seen :]}
        self._seen = len(log)
        for name, node in changed.items():
            keys = self.keys.get(name)
            if keys is None:
                continue
            old, new = self.rooms[name], _room(node)
            self.rooms[name] = new
            delta = (new[0] - old[0], new[1] - old[1], new[2] - old[2], new[3] - old[3])
            for key in keys:
                total = self.free[key]
                total[0] += delta[0]
                total[1] += delta[1]
                total[2] += delta[2]
                total[3] += delta[3]
            for one, (counts, caps) in self._shapes.items():
                count = _count(new, one)
                step = count - counts[name]
                if step:
                    counts[name] = count
                    for key in keys:
                        caps[key] += step

    def shape(self, one: Shape) -> tuple[dict[str, int], dict[Key, int]]:
        """Each node's and each domain's room for pods of the shape ``one``."""
        found = self._shapes.get(one)
        if found is None:
            counts: dict[str, int] = {}
            caps: dict[Key, int] = dict.fromkeys(self.members, 0)
            for name, keys in self.keys.items():
                count = counts[name] = _count(self.rooms[name], one)
                if count:
                    for key in keys:
                        caps[key] += count
            found = self._shapes[one] = (counts, caps)
        return found


def view_of(session: Session, topology: Topology) -> TopologyView:
    key = ("topology-view", topology)
    found = session.memo.get(key)
    if isinstance(found, TopologyView):
        return found
    made = TopologyView(session, topology)
    session.memo[key] = made
    return made


def _active(task: Task) -> bool:
    status = task.status
    return (
        status is TaskStatus.RUNNING
        or status is TaskStatus.ALLOCATED
        or (status is TaskStatus.PIPELINED)
    )


def _ratio(need: _Need, free: list[float]) -> float:
    """The gang's need over the domain's free, for its dominant resource: the larger,
    the fuller the gang leaves the domain."""
    worst = 0.0
    for wanted, have in ((need.cpu, free[0]), (need.memory, free[1]), (need.gpu, free[2])):
        if wanted > EPS:
            ratio = wanted / have if have > EPS else _NONE_FREE
            if ratio > worst:
                worst = ratio
    return worst


class Plan:
    """The domains to try, in order, made one at a time (most gangs take the first), or
    why there is none (``refusal``, once ``ordered`` gave none)."""

    def __init__(
        self,
        job: Job,
        view: TopologyView,
        need: _Need,
        levels: Levels,
        kept: set[tuple[str, ...]] | None,
        root: Key = _ROOT_KEY,
        subject: str | None = None,
    ) -> None:
        self.job, self.view, self.need, self.kept = job, view, need, kept
        # The domain to stay in (a sub-group's: the one its parent got) and who is placed.
        self.root, self.subject = root, subject or f"job {job.key}"
        self.required = levels.required
        start = levels.preferred if levels.preferred is not None else levels.required
        assert start is not None  # resolve() refuses a constraint without a level
        self.start = start
        self.end = levels.required if levels.required is not None else ROOT
        self.caps = view.shape(need.one)[1] if need.uniform else None
        self._ratios: dict[Key, float] = {}

    def fits(self, key: Key) -> bool:
        need, caps = self.need, self.caps
        if caps is not None:
            return caps.get(key, 0) >= need.count
        total = self.view.free.get(key)
        return not (
            total is None
            or total[3] < need.count
            or need.cpu > total[0] + EPS
            or need.memory > total[1] + EPS
            or need.gpu > total[2] + EPS
        )

    def _order(self, key: Key) -> tuple[float, str]:
        ratio = self._ratios.get(key)
        if ratio is None:
            ratio = self._ratios[key] = _ratio(self.need, self.view.free[key])
        return -ratio, key[1][-1] if key[1] else ""

    def _under(self, parent: Key, level: int) -> Iterator[Key]:
        """The domains of ``level`` under ``parent`` that fit, fullest parent first."""
        children = self.view.children.get(parent, ())
        kept, cut = self.kept, (self.required + 1 if self.required is not None else 0)
        fitting = [
            k
            for k in children
            if self.fits(k) and (kept is None or len(k[1]) < cut or k[1][:cut] in kept)
        ]
        if len(fitting) > 1:
            fitting.sort(key=self._order)
        if children and children[0][0] == level:
            yield from fitting
            return
        for child in fitting:  # a parent that cannot hold the gang holds no child that can
            yield from self._under(child, level)

    def ordered(self) -> Iterator[Key]:
        root = self.root
        for level in range(self.start, self.end - 1, -1):
            if level <= root[0]:
                # The level is the root's or wider: the root itself is the one domain, and
                # keeping to it keeps to the wider one too.
                if self.fits(root):
                    yield root
                return
            yield from self._under(root, level)

    def domain(self, key: Key) -> Domain:
        view, need = self.view, self.need
        nodes = view.members.get(key, [])
        if need.uniform:
            counts = view.shape(need.one)[0]
            chosen = [n for n in nodes if counts.get(n.name, 0) > 0]
            return Domain(key[0], key[1], chosen, [counts[n.name] for n in chosen])
        rooms = [max(view.rooms[n.name][3], 0) for n in nodes]
        return Domain(key[0], key[1], list(nodes), rooms)

    def rank(self, domain: Domain, preferred: int | None) -> dict[str, int]:
        """The order of the domain's nodes, as KAI scores them: by their sub-domain of
        the preferred level, the one the gang would fill least first (so that most of
        it lands together), of equals the last by name first; nodes without the
        preferred level's label last. All equal when the domain is that level or below."""
        if preferred is None or domain.level >= preferred:
            return dict.fromkeys((n.name for n in domain.nodes), 0)
        values, free = self.view.values, self.view.free
        subs: dict[tuple[str, ...], float] = {}
        for node in domain.nodes:
            own = values[node.name][: preferred + 1]
            if None not in own:
                key = tuple(str(v) for v in own)
                if key not in subs:
                    subs[key] = _ratio(self.need, free[(preferred, key)])
        ordered = sorted(subs, reverse=True)  # names last-first, then the ratio (stable)
        ordered.sort(key=subs.__getitem__)
        place = {k: i for i, k in enumerate(ordered)}
        last = len(ordered)
        out: dict[str, int] = {}
        for node in domain.nodes:
            own = values[node.name][: preferred + 1]
            out[node.name] = last if None in own else place[tuple(str(v) for v in own)]
        return out

    def refusal(self) -> Reason:
        return _refusal(
            self.subject, self.view, self.end, self.need, self.caps, self.kept, self.root
        )


def plan(
    session: Session,
    job: Job,
    tasks: list[Task],
    levels: Levels,
    running: list[Task] | None = None,
    root: Key = _ROOT_KEY,
    subject: str | None = None,
) -> Plan:
    """The domains ``tasks`` of ``job`` may go to together, in the order to try them:
    inside ``root`` (a sub-group's parent domain), kept where ``running`` (default: all
    the job's pods) already run in a required domain."""
    required = levels.required
    view = view_of(session, levels.topology)
    view.sync(session)
    # A gang that already runs in a required domain grows only inside it.
    kept: set[tuple[str, ...]] | None = None
    if required is not None:
        found: set[tuple[str, ...]] = set()
        for t in job.tasks if running is None else running:
            if t.node_name is not None and _active(t):
                own = view.values.get(t.node_name)
                if own is not None and None not in own[: required + 1]:
                    found.add(tuple(str(v) for v in own[: required + 1]))
        kept = found or None
    return Plan(job, view, _need(tasks), levels, kept, root, subject)


def _refusal(
    subject: str,
    view: TopologyView,
    level: int,
    need: _Need,
    caps: dict[Key, int] | None,
    kept: set[tuple[str, ...]] | None,
    root: Key = _ROOT_KEY,
) -> Reason:
    """Why no domain of ``level`` takes the gang, with the numbers of the best one."""
    topology = view.topology
    gpus = need.gpu > EPS
    wanted = f"{_num(need.gpu)} GPUs" if gpus else f"{need.count} pods"
    what = f"the {need.count} pods ({_num(need.gpu)} GPUs)" if gpus else f"the {need.count} pods"
    details: dict[str, object] = {"topology": topology.name, "pods": need.count, "gpus": need.gpu}

    def room(key: Key) -> int:
        if caps is not None:
            return caps.get(key, 0)
        return max(int(view.free[key][3]), 0)

    if level <= root[0]:
        total = view.free.get(root, [0.0, 0.0, 0.0, 0.0])
        where = "the cluster" if root == _ROOT_KEY else _describe(topology, root[0], root[1])
        message = (
            f"topology {topology.name}: {where} has no room for {what} of {subject} "
            f"together: {_num(total[2])} GPUs free, room for {room(root)} of its pods"
        )
        return Reason(reasons.POD_SCHEDULING_ERRORS, message, details)
    name = topology.level_name(level)
    found = view.by_level[level]
    if root != _ROOT_KEY:
        cut = len(root[1])
        found = [k for k in found if k[1][:cut] == root[1]]
    if kept is not None:
        found = [k for k in found if k[1] in kept]
    details["level"] = topology.levels[level]
    where = ""
    if root != _ROOT_KEY:
        where = f" inside {_describe(topology, root[0], root[1])}, the domain its parent got"
    if kept is not None:
        shown = ", ".join(sorted(_describe(topology, level, k) for k in kept))
        where += f" (its running pods are in {shown}, which it may not leave)"
    if not found:
        message = (
            f"topology {topology.name}: no {name} has free room for {what} of {subject} "
            f"together{where}: no node with the labels of the levels down to {name} "
            f"({', '.join(topology.levels[: level + 1])}) can take one of its pods"
        )
        return Reason(reasons.POD_SCHEDULING_ERRORS, message, details)
    free = view.free
    best = min(found, key=lambda k: (-(free[k][2] if gpus else room(k)), -room(k), k[1]))
    have_gpus = free[best][2]
    have = (
        f"{_num(have_gpus)} of the {wanted}" if gpus else f"room for {room(best)} of the {wanted}"
    )
    details.update({"domain": ".".join(best[1]), "free_gpus": have_gpus, "room": room(best)})
    message = (
        f"topology {topology.name}: no {name} has {wanted} free for {what} of {subject} "
        f"together{where}; the {name} with the most, "
        f"{_describe(topology, level, best[1])}, has {have} free "
        f"(room for {room(best)} of the {need.count} pods)"
    )
    return Reason(reasons.POD_SCHEDULING_ERRORS, message, details)


def _num(value: float) -> str:
    return str(round(value)) if abs(value - round(value)) < EPS else f"{value:g}"


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


def home_nodes(session: Session, job: Job, node_name: str | None) -> list[Node] | None:
    """The nodes a pod of ``job`` that ran on ``node_name`` may move to: those of its
    required domain (a move never takes a pod out of it), or None for no bound (no
    required level, a constraint that cannot be read, a node outside every domain)."""
    if job.topology is None or node_name is None:
        return None
    return required_domain(session, job.topology, node_name)


def required_domain(
    session: Session, constraint: TopologyConstraint, node_name: str
) -> list[Node] | None:
    """The nodes of ``constraint``'s required domain that holds ``node_name``, or None
    (no required level, a constraint that cannot be read, a node outside every domain)."""
    levels = resolve(constraint, session.snapshot.topologies)
    if isinstance(levels, str) or levels.required is None:
        return None
    cut = levels.required + 1
    own = view_of(session, levels.topology).values.get(node_name)
    if own is None or None in own[:cut]:
        return None
    return view_of(session, levels.topology).members.get(
        (levels.required, tuple(str(v) for v in own[:cut])), []
    )
