"""The snapshot model: nodes, queues, jobs (pod groups) and tasks (pods).

These objects are built by ``kai_py.state`` (from manifests or the watch
cache) and handed to a Session. The fields under "session state" are reset
when a session opens and changed only through a Statement, which keeps an
undo log instead of copying the snapshot.
"""

from __future__ import annotations

import enum
import re
import uuid
from collections.abc import Container
from dataclasses import dataclass, field, replace
from typing import Final

from kai_py.api.keys import CPU_WORKER_NODE_LABEL, GPU_WORKER_NODE_LABEL
from kai_py.scheduler.resources import EPS, INF, Res
from kai_py.scheduler.timeshare.settings import UsageDB


class TaskStatus(enum.Enum):
    PENDING = "Pending"
    RUNNING = "Running"  # bound before this session (Running or Bound in the cluster)
    RELEASING = "Releasing"  # being deleted: still holds its resources
    ALLOCATED = "Bound"  # placed in this session on idle resources
    PIPELINED = "Pipelined"  # placed in this session on resources being released
    EVICTED = "Evicted"  # chosen as a victim in this session: now releasing

    # Identity tests rather than a frozenset: hashing an Enum member runs Python code
    # (Enum.__hash__), and these are asked for every task, many times a cycle.
    @property
    def holds_resources(self) -> bool:
        return self is RUNNING or self is RELEASING or self is ALLOCATED or self is EVICTED

    @property
    def is_placed(self) -> bool:
        return self is RUNNING or self is ALLOCATED or self is PIPELINED


# The members as module names, for the hot loops: looking a member up on the Enum
# class goes through its metaclass's __getattr__ hook, several times slower.
PENDING: Final = TaskStatus.PENDING
RUNNING: Final = TaskStatus.RUNNING
RELEASING: Final = TaskStatus.RELEASING
ALLOCATED: Final = TaskStatus.ALLOCATED
PIPELINED: Final = TaskStatus.PIPELINED
EVICTED: Final = TaskStatus.EVICTED


#: A node without status.allocatable.pods: no limit on its pods. Far above any node's
#: pods, and a machine word in compiled code (mypyc boxes an int from 2**62 on).
NO_POD_LIMIT: Final = 2**31 - 1


@dataclass(slots=True, frozen=True)
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"


@dataclass(slots=True, frozen=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if self.operator == "Exists":
            return not self.key or self.key == taint.key
        return self.key == taint.key and self.value == taint.value


@dataclass(slots=True, frozen=True)
class SelectorRequirement:
    key: str
    operator: str  # In, NotIn, Exists, DoesNotExist, Gt, Lt
    values: tuple[str, ...] = ()

    def matches(self, labels: dict[str, str]) -> bool:
        value = labels.get(self.key)
        op = self.operator
        if op == "In":
            return value is not None and value in self.values
        if op == "NotIn":
            return value is None or value not in self.values
        if op == "Exists":
            return value is not None
        if op == "DoesNotExist":
            return value is None
        if op in ("Gt", "Lt") and value is not None and self.values:
            try:
                left, right = int(value), int(self.values[0])
            except ValueError:
                return False
            return left > right if op == "Gt" else left < right
        return False


@dataclass(slots=True, frozen=True)
class PodAffinityTerm:
    """One required pod (anti-)affinity term: pods matching the selector, in the
    namespaces (empty: the pod's own; ``all_namespaces``: every one), on nodes
    with the same value of ``topology_key``."""

    topology_key: str
    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[SelectorRequirement, ...] = ()
    namespaces: tuple[str, ...] = ()
    all_namespaces: bool = False

    def selects(self, labels: dict[str, str], namespace: str, own_namespace: str) -> bool:
        if not self.all_namespaces and namespace not in (self.namespaces or (own_namespace,)):
            return False
        return all(labels.get(k) == v for k, v in self.match_labels) and all(
            e.matches(labels) for e in self.match_expressions
        )


@dataclass(slots=True, frozen=True)
class Card:
    """One physical GPU of a node, as its inventory reports it (for pinning)."""

    index: int
    uuid: str
    product: str = ""
    memory_mib: float = 0.0
    healthy: bool = True


@dataclass(slots=True, frozen=True)
class GpuPin:
    """Which cards a pod may use (HAMi's pod annotations), already validated.

    ``use_*`` are allow lists, ``nouse_*`` deny lists; every list given applies, so a
    card named in both an allow and a deny list is excluded (HAMi v2.10). Types match
    as a case-insensitive substring of the card's product name; indexes are the
    card's index on its node (the same on every node).
    """

    use_uuids: tuple[str, ...] = ()
    nouse_uuids: tuple[str, ...] = ()
    use_types: tuple[str, ...] = ()
    nouse_types: tuple[str, ...] = ()
    text: str = ""  # the annotations as the user wrote them, for messages
    use_indexes: tuple[int, ...] = ()

    def allows(self, card: Card) -> bool:
        if not card.healthy:
            return False
        if self.use_uuids and card.uuid not in self.use_uuids:
            return False
        if card.uuid in self.nouse_uuids:
            return False
        if self.use_indexes and card.index not in self.use_indexes:
            return False
        product = card.product.lower()
        if self.use_types and not any(t.lower() in product for t in self.use_types):
            return False
        return not any(t.lower() in product for t in self.nouse_types)


@dataclass(slots=True, frozen=True)
class PodPolicy:
    """A pod's own placement (HAMi's per-pod policies): ``binpack`` or ``spread`` for the
    node and for the cards on it, instead of the cluster's placement."""

    node: str
    card: str


#: Where the names of new GPU groups come from (``new_group_id``).
_GROUP_NAMESPACE: Final = uuid.uuid5(uuid.NAMESPACE_URL, "kai-py/gpu-group")


def new_group_id(node: str, task_uid: str, index: int, taken: Container[str] = ()) -> str:
    """The name of a GPU group a task opens on a free card of ``node``: a UUID, as KAI's.

    It is the ``runai-gpu-group`` label value of every pod on that card, so it must
    name one card across the whole cluster (KAI's tools select pods by it alone) and
    stay the same while the card is shared. A UUID made from the node, the task's uid
    (a pod's uid is unique) and which of its cards this is, rather than a random one:
    the same decision made again (a pipelined task, a bind retried) names the same
    group, and the scheduler stays deterministic. ``taken``: names already on the
    node, never reused (a task placed again while its old card is still leaving).
    """
    seed = f"{node}/{task_uid}/{index}"
    name = str(uuid.uuid5(_GROUP_NAMESPACE, seed))
    while name in taken:
        seed += "+"
        name = str(uuid.uuid5(_GROUP_NAMESPACE, seed))
    return name


@dataclass(slots=True)
class GpuGroup:
    """One GPU card shared by fractional pods (label ``runai-gpu-group``; a new one is
    named by ``new_group_id``, older ones keep the name the cluster gave them)."""

    id: str
    used: float = 0.0  # portion held by tasks that hold resources (incl. releasing)
    releasing: float = 0.0  # portion of the above being released
    pipelined: float = 0.0  # portion promised to pipelined tasks
    memory_mib: float = 0.0
    tasks: int = 0

    def device_flags(self) -> tuple[int, int, int]:
        """How this card counts in its node's whole-device totals (used, releasing, pipelined).

        A card whose holders are all leaving is releasing; once a pipelined task
        claims part of it, it is promised too, so no one else counts it as free.
        """
        if self.used > EPS:
            leaving = self.used - self.releasing <= EPS
            return 1, int(leaving), int(leaving and self.pipelined > EPS)
        return 0, 0, int(self.pipelined > EPS)

    @property
    def free_later(self) -> bool:
        """All holders are leaving and nothing waits for the card yet."""
        return self.used > EPS and self.used - self.releasing <= EPS and self.pipelined <= EPS


@dataclass(slots=True, eq=False)
class Node:
    name: str
    allocatable: Res
    labels: dict[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    ready: bool = True
    unschedulable: bool = False
    gpu_memory_mib: float = 0.0  # per card, from nvidia.com/gpu.memory; 0 = unknown
    cards: tuple[Card, ...] = ()  # the node's GPU inventory; empty = not published
    group_cards: dict[str, str] = field(default_factory=dict)  # GPU group -> card UUID, when known
    # Why this node is tried only after every other one (a bind there timed out
    # recently, so its kubelet may start nothing), or None; said in the pod's Event.
    avoided: str | None = None
    # Pods the kubelet admits (status.allocatable.pods), less other schedulers' pods
    # on the node: a pod over it is rejected (OutOfpods), as kube-scheduler counts.
    max_pods: int = NO_POD_LIMIT
    # What the kubelet admits of every other resource in status.allocatable (rdma/ib,
    # ephemeral-storage, hugepages-*, MIG profiles...), or None: most nodes' pods ask
    # for none of them, so they are counted only for a task that asks (Task.extended).
    extended: dict[str, float] | None = None
    # session state
    used: Res = field(default_factory=Res)
    releasing: Res = field(default_factory=Res)
    pipelined: Res = field(default_factory=Res)
    # Pods counted like ``used``, ``releasing`` and ``pipelined``: a releasing pod holds
    # its slot until it is gone, so only a pipelined task may count on that slot.
    pods: int = 0
    pods_releasing: int = 0
    pods_pipelined: int = 0
    # Held, released and promised amounts of ``extended`` resources, counted like
    # ``used``, ``releasing`` and ``pipelined``; None while no task asking for any is here.
    extended_used: dict[str, float] | None = None
    extended_releasing: dict[str, float] | None = None
    extended_pipelined: dict[str, float] | None = None
    groups: dict[str, GpuGroup] = field(default_factory=dict)
    tasks: dict[str, Task] = field(default_factory=dict)
    version: int = 0

    def clone(self) -> Node:
        """A copy a session may change: its own ``allocatable`` and session state; labels,
        taints, cards and ``group_cards`` are shared, since nothing changes them after
        parsing. Written out like ``Task.clone``: the operator copies every node of every
        cycle from the one it parsed; a test checks that no field is left out."""
        new = Node.__new__(Node)  # not object.__new__: refused by a compiled class
        new.name = self.name
        new.allocatable = self.allocatable.copy()
        new.labels = self.labels
        new.taints = self.taints
        new.ready = self.ready
        new.unschedulable = self.unschedulable
        new.gpu_memory_mib = self.gpu_memory_mib
        new.cards = self.cards
        new.group_cards = self.group_cards
        new.avoided = self.avoided
        new.max_pods = self.max_pods
        new.extended = self.extended
        new.used = self.used.copy()
        new.releasing = self.releasing.copy()
        new.pipelined = self.pipelined.copy()
        new.pods = self.pods
        new.pods_releasing = self.pods_releasing
        new.pods_pipelined = self.pods_pipelined
        new.extended_used = _copy(self.extended_used)
        new.extended_releasing = _copy(self.extended_releasing)
        new.extended_pipelined = _copy(self.extended_pipelined)
        new.groups = {gid: replace(g) for gid, g in self.groups.items()}
        new.tasks = dict(self.tasks)
        new.version = self.version
        return new

    @property
    def idle(self) -> Res:
        return self.allocatable - self.used

    def pod_slots(self, future: bool) -> int:
        """Pods the node can take now (also leaving room for those pipelined onto it),
        or, ``future``, once its releasing pods are gone."""
        later = self.max_pods - self.pods + self.pods_releasing - self.pods_pipelined
        if future:
            return later
        now = self.max_pods - self.pods
        return now if now < later else later

    def extended_shortfall(
        self, wanted: dict[str, float], future: bool
    ) -> tuple[str, float, float, float] | None:
        """The first of ``wanted`` (a task's ``extended``) the node cannot hold now, or
        ``future`` once its releasing pods are gone: (name, requested, free, allocatable);
        None if all fit. Free amounts are counted like ``pod_slots``."""
        have = self.extended or _NONE
        used = self.extended_used or _NONE
        releasing = self.extended_releasing or _NONE
        pipelined = self.extended_pipelined or _NONE
        for name, amount in wanted.items():
            allocatable = have.get(name, 0.0)
            now = allocatable - used.get(name, 0.0)
            later = now + releasing.get(name, 0.0) - pipelined.get(name, 0.0)
            free = later if future or later < now else now
            if amount > free + EPS:
                return name, amount, free, allocatable
        return None

    def change_extended(
        self, wanted: dict[str, float], sign: float, claim_now: bool, releasing: bool
    ) -> None:
        """Count a task's ``extended`` on the node (sign 1) or no more (sign -1), as
        ``used``, ``releasing`` and ``pipelined`` count its CPU."""
        if claim_now:
            if self.extended_used is None:
                self.extended_used = {}
            _add_amounts(self.extended_used, wanted, sign)
            if releasing:
                if self.extended_releasing is None:
                    self.extended_releasing = {}
                _add_amounts(self.extended_releasing, wanted, sign)
        else:
            if self.extended_pipelined is None:
                self.extended_pipelined = {}
            _add_amounts(self.extended_pipelined, wanted, sign)

    def free_gpus_now(self) -> float:
        return self.allocatable.gpu - self.used.gpu

    def free_gpus_future(self) -> float:
        return self.allocatable.gpu - self.used.gpu + self.releasing.gpu - self.pipelined.gpu


_NONE: Final[dict[str, float]] = {}

#: A MIG instance's resource name; KAI counts each as its number of GPU slices (the
#: "3" of nvidia.com/mig-3g.40gb) in its queue. KAI also counts amd.com/gpu as GPUs.
_MIG: Final = re.compile(r"^nvidia\.com/mig-(\d+)g\.(\d+)gb$")
_AMD_GPU: Final = "amd.com/gpu"
_QUOTA_GPUS: dict[str, float] = {}  # resource name -> GPUs one unit counts as


def quota_gpus(extended: dict[str, float]) -> float:
    """The GPUs a task's ``extended`` resources count as in its queue, as KAI counts them
    (MIG instances and AMD GPUs); they are still fitted on nodes by their own names."""
    total = 0.0
    for name, amount in extended.items():
        per = _QUOTA_GPUS.get(name)
        if per is None:
            found = _MIG.match(name)
            per = float(found.group(1)) if found else 1.0 if name == _AMD_GPU else 0.0
            _QUOTA_GPUS[name] = per
        total += per * amount
    return total


def _copy(amounts: dict[str, float] | None) -> dict[str, float] | None:
    return None if amounts is None else dict(amounts)


def _add_amounts(into: dict[str, float], amounts: dict[str, float], sign: float) -> None:
    for name, amount in amounts.items():
        into[name] = into.get(name, 0.0) + sign * amount


class Shape:
    """A task's shape as a dict key, hashed once: a tuple's hash is computed again on
    every lookup, through every selector and toleration in it, and the placer looks
    one up for each node it considers."""

    __slots__ = ("_hash", "value")

    def __init__(self, value: tuple[object, ...]) -> None:
        self.value = value
        self._hash = hash(value)

    @classmethod
    def of(cls, value: tuple[object, ...]) -> Shape:
        """The one Shape for ``value`` while any task holds it: lookups then compare by
        identity, not field by field."""
        found = _SHAPES.get(value)
        if found is None:
            if len(_SHAPES) >= _SHAPES_KEPT:
                # Bounded instead of weak (compiled classes take no weak references):
                # a Shape made before still equals one made since, by value.
                _SHAPES.clear()
                _SHAPES[_PLAIN_SHAPE.value] = _PLAIN_SHAPE
            found = _SHAPES[value] = cls(value)
        return found

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, Shape):
            return NotImplemented
        return self._hash == other._hash and self.value == other.value

    def __repr__(self) -> str:
        return f"Shape{self.value!r}"


#: The interned Shapes (tasks of one template share one): at most this many are kept.
_SHAPES_KEPT: Final = 50_000
_SHAPES: dict[tuple[object, ...], Shape] = {}
# The shape of a task with no selector, affinity, toleration, memory share or pin: most
# tasks. Held here, so it stays the one Shape of its value (Shape.of finds it too).
_PLAIN_SHAPE: Final = Shape.of(((), (), (), False, (), (), None))


@dataclass(slots=True, frozen=True)
class PodNeeds:
    """What few pods ask of a node besides resources and labels, in the pod's namespace:
    the containers' host ports as (protocol, hostIP, port), the ConfigMaps it cannot
    start without and the PersistentVolumeClaims its volumes name, each as (name,
    where the pod names it, e.g. 'volume "cfg"')."""

    host_ports: tuple[tuple[str, str, int], ...] = ()
    config_maps: tuple[tuple[str, str], ...] = ()
    claims: tuple[tuple[str, str], ...] = ()


@dataclass(slots=True, eq=False)
class Task:
    uid: str
    namespace: str
    name: str
    job_uid: str
    request: Res  # cpu, memory and whole GPUs
    # Every other resource the pod asks for (rdma/ib, ephemeral-storage, hugepages-*,
    # MIG profiles...), counted against the node's ``extended``; only MIG instances and
    # AMD GPUs count for the queue, as GPUs (``quota_gpus``). None for the usual pod, so
    # the fit check costs it one test.
    extended: dict[str, float] | None = None
    gpu_fraction: float = 0.0  # portion of each shared card, 0 = not shared
    gpu_memory_mib: float = 0.0  # memory of each shared card, 0 = not by memory
    gpu_devices: int = 1  # gpu-fraction-num-devices
    node_selector: dict[str, str] = field(default_factory=dict)
    affinity: tuple[tuple[SelectorRequirement, ...], ...] = ()  # OR of ANDs
    tolerations: tuple[Toleration, ...] = ()
    status: TaskStatus = TaskStatus.PENDING
    node_name: str | None = None
    gpu_groups: tuple[str, ...] = ()
    start_time: float | None = None
    created: float = 0.0
    role: str = "worker"  # "master" pods are evicted last
    labels: dict[str, str] = field(default_factory=dict)  # the pod's, for pod affinity
    pod_affinity: tuple[PodAffinityTerm, ...] = ()  # required terms
    pod_anti_affinity: tuple[PodAffinityTerm, ...] = ()  # required terms
    # The kai.scheduler/task-priority label: labelled pods go first, higher first
    # (and are evicted last); None = no label.
    task_priority: int | None = None
    # Releasing past its deletion deadline: it holds its resources, but nothing may
    # wait for them, since they may never be freed.
    stuck: bool = False
    shadow: bool = False  # a victim's planned new place (consolidation); never emitted
    # The node this pending pod was pipelined to last cycle (pod status.nominatedNodeName):
    # what was freed for it goes to it first.
    nominated_node: str | None = None
    pin: GpuPin | None = None  # nvidia.com/use-gpuuuid and friends; None = any card
    policy: PodPolicy | None = None  # HAMi's per-pod policies; None = the cluster's
    # The cards this task holds (one per GPU group for a shared task), when known:
    # reported for running pods, chosen by the scheduler for pinned pods it places.
    gpu_uuids: tuple[str, ...] = ()
    # spec.schedulingGates (names) of a pending pod: the API server refuses its Binding
    # until they are removed, so the builder keeps it out of ``Job.tasks`` (``Job.gated``).
    gates: tuple[str, ...] = ()
    # When kai-py lifted its queue-admission gate from this pending pod (its annotation):
    # its demand stays reserved in its queue for a while (``scheduler/admission``).
    admitted_at: float | None = None
    # Host ports, ConfigMaps, PersistentVolumeClaims: None for the common pod, so that
    # its checks cost one test (``PredicateCache.check``).
    needs: PodNeeds | None = None
    # Preferred terms, scores rather than predicates (``preferences.py``): node affinity
    # as (weight, requirements ANDed), pod affinity as (weight, term), anti-affinity with
    # the weight negated.
    preferred_affinity: tuple[tuple[int, tuple[SelectorRequirement, ...]], ...] = ()
    preferred_pod_affinity: tuple[tuple[int, PodAffinityTerm], ...] = ()
    # session state
    claim_now: bool = True  # a pipelined task that holds idle resources too
    _shape: Shape | None = field(default=None, repr=False)

    def clone(self) -> Task:
        """A copy a session may change (its own ``request``; the rest is replaced, not
        changed in place). Written out because ``copy.copy`` of a slotted dataclass is
        ten times slower (the operator once copied every pod of every cycle; builds now
        hand out parsed Tasks as they are, see ``builder.KeptTask``); a test checks that
        no field is left out."""
        new = Task.__new__(Task)
        new.request = self.request.copy()
        new.uid = self.uid
        new.namespace = self.namespace
        new.name = self.name
        new.job_uid = self.job_uid
        new.extended = self.extended
        new.gpu_fraction = self.gpu_fraction
        new.gpu_memory_mib = self.gpu_memory_mib
        new.gpu_devices = self.gpu_devices
        new.node_selector = self.node_selector
        new.affinity = self.affinity
        new.tolerations = self.tolerations
        new.status = self.status
        new.node_name = self.node_name
        new.gpu_groups = self.gpu_groups
        new.start_time = self.start_time
        new.created = self.created
        new.role = self.role
        new.labels = self.labels
        new.pod_affinity = self.pod_affinity
        new.pod_anti_affinity = self.pod_anti_affinity
        new.task_priority = self.task_priority
        new.stuck = self.stuck
        new.shadow = self.shadow
        new.nominated_node = self.nominated_node
        new.pin = self.pin
        new.policy = self.policy
        new.gpu_uuids = self.gpu_uuids
        new.gates = self.gates
        new.admitted_at = self.admitted_at
        new.needs = self.needs
        new.preferred_affinity = self.preferred_affinity
        new.preferred_pod_affinity = self.preferred_pod_affinity
        new.claim_now = self.claim_now
        new._shape = self._shape
        return new

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def order(self) -> tuple[int, int, int, float, str]:
        """The order in which a job's pods are placed (smaller first); evicted in reverse."""
        labelled = self.task_priority is not None
        return (
            0 if self.role == "master" else 1,
            0 if labelled else 1,
            -(self.task_priority or 0),
            self.created,
            self.name,
        )

    @property
    def is_shared(self) -> bool:
        return self.gpu_fraction > 0 or self.gpu_memory_mib > 0

    def portion_on(self, node: Node) -> float:
        """The portion of one card this task takes on ``node`` (0 for whole-GPU tasks)."""
        if self.gpu_fraction > 0:
            return self.gpu_fraction
        if self.gpu_memory_mib > 0:
            if self.pin is not None and len({c.memory_mib for c in node.cards}) > 1:
                # Cards of mixed sizes, which no node-wide figure describes: a pinned pod
                # lands only on its allowed cards, so its share is measured against the
                # smallest of those, not the node's smallest card.
                sizes = [
                    c.memory_mib for c in node.cards if c.memory_mib > 0 and self.pin.allows(c)
                ]
                if sizes:
                    return self.gpu_memory_mib / min(sizes)
            if node.gpu_memory_mib <= 0:
                return INF
            return self.gpu_memory_mib / node.gpu_memory_mib  # above 1: does not fit a card
        return 0.0

    def gpu_on(self, node: Node | None) -> float:
        """GPUs counted against the queue when this task runs on ``node``."""
        if not self.is_shared:
            if self.extended is not None:
                return self.request.gpu + quota_gpus(self.extended)
            return self.request.gpu
        if node is None:
            return self.gpu_fraction * self.gpu_devices if self.gpu_fraction > 0 else 0.0
        return self.portion_on(node) * self.gpu_devices

    @property
    def shape(self) -> Shape:
        """Tasks of the same shape pass the same predicates on the same node."""
        if self._shape is None:
            if (
                not self.node_selector
                and not self.affinity
                and not self.tolerations
                and not self.gpu_memory_mib > 0
                and not self.pod_affinity
                and not self.pod_anti_affinity
                and self.pin is None
            ):
                # What _make_shape would build, without building and looking it up.
                self._shape = _PLAIN_SHAPE
            else:
                self._shape = Shape.of(self._make_shape())
        return self._shape

    def _make_shape(self) -> tuple[object, ...]:
        # The fields below are fixed once a task is built, so the shape is kept.
        return (
            tuple(sorted(self.node_selector.items())),
            self.affinity,
            self.tolerations,
            self.gpu_memory_mib > 0,
            self.pod_affinity,
            self.pod_anti_affinity,
            self.pin,
        )


@dataclass(slots=True, frozen=True)
class Topology:
    """A Topology object: its levels' node labels, widest first, and their aliases."""

    name: str
    levels: tuple[str, ...]
    aliases: tuple[str | None, ...] = ()  # per level, None where it has none

    def level_of(self, name: str) -> int | None:
        """The index of the level ``name`` names (a node label or an alias), or None."""
        for i, label in enumerate(self.levels):
            if name == label or (i < len(self.aliases) and name == self.aliases[i]):
                return i
        return None

    def level_name(self, index: int) -> str:
        """What people call a level: its alias, else its node label."""
        alias = self.aliases[index] if index < len(self.aliases) else None
        return alias or self.levels[index]


@dataclass(slots=True, frozen=True)
class TopologyConstraint:
    """A PodGroup's spec.topologyConstraint, as written (levels by label or alias)."""

    topology: str
    required: str | None = None
    preferred: str | None = None


@dataclass(slots=True, frozen=True)
class SubGroup:
    """One node of a PodGroup's sub-group tree (``spec.subGroups[]``). A leaf holds the
    pods labelled with its name and is satisfied with ``min_member`` of them placed; a
    mid-level one is satisfied with ``min_sub_group`` of its children satisfied (None:
    all of them)."""

    name: str
    parent: str | None = None  # None: a direct child of the PodGroup
    min_member: int = 0
    min_sub_group: int | None = None
    children: tuple[str, ...] = ()  # direct child sub-groups, in the order of the spec
    # Its own spec.subGroups[].topologyConstraint: its pods in one domain, inside the
    # domain its parent (and the PodGroup) got.
    topology: TopologyConstraint | None = None
    # Its place in spec.subGroups, for messages naming the field (not part of its value).
    index: int = field(default=0, compare=False)


@dataclass(slots=True, frozen=True)
class SubGroups:
    """A PodGroup's sub-group tree; the PodGroup itself is its root, satisfied with
    ``min_sub_group`` of its ``top`` sub-groups satisfied (None: all of them). Fixed once
    parsed, so jobs share it."""

    groups: dict[str, SubGroup]
    top: tuple[str, ...]
    min_sub_group: int | None = None
    #: Some sub-group has a topology constraint (the placement then goes down the tree).
    constrained: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        found = any(g.topology is not None for g in self.groups.values())
        object.__setattr__(self, "constrained", found)


@dataclass(slots=True, eq=False)
class Job:
    uid: str
    namespace: str
    name: str
    queue: str
    priority: int
    preemptible: bool
    min_member: int
    created: float
    tasks: list[Task] = field(default_factory=list)
    staleness_grace: float | None = 60.0  # None = never evict a stale gang
    # The PodGroup did not set a grace period: the scheduler's default applies.
    staleness_default: bool = False
    # Seconds the job must wait, from max(created, last_evicted), before it may
    # evict others (preempt, reclaim, consolidation); plain allocation is not delayed.
    preemption_delay: float = 0.0
    last_evicted: float | None = None  # when one of its pods was last evicted
    # Its pods that finished successfully: they count towards minMember (see
    # ``min_alive``), and a gang with one is winding down, never stale.
    succeeded: int = 0
    # Its pending pods held by scheduling gates: never placed, so not in ``tasks`` (no
    # action or total sees them); they count as existing, not as ready, for minMember.
    gated: list[Task] = field(default_factory=list)
    stale_since: float | None = None
    mark_unschedulable: bool = True
    priority_class: str = ""
    errors: list[str] = field(default_factory=list)  # input problems: keep it pending
    source: str = ""  # where it came from (a file, an API object), for messages
    version: int = 0  # bumped whenever one of its tasks changes in a session
    # Keep the gang within one domain of a Topology (None for most jobs).
    topology: TopologyConstraint | None = None
    # spec.subGroups: each sub-group is a gang within the gang (``subgroups/``); None
    # for the common job, whose gang is ``min_member`` pods.
    subgroups: SubGroups | None = None

    def clone(self) -> Job:
        """A copy with its own ``tasks`` and ``errors`` lists (the tasks themselves are
        shared). Written out like ``Task.clone``: the operator copies every PodGroup's
        job of every cycle from the one it parsed; a test checks no field is left out."""
        new = Job.__new__(Job)
        new.uid = self.uid
        new.namespace = self.namespace
        new.name = self.name
        new.queue = self.queue
        new.priority = self.priority
        new.preemptible = self.preemptible
        new.min_member = self.min_member
        new.created = self.created
        new.tasks = list(self.tasks)
        new.staleness_grace = self.staleness_grace
        new.staleness_default = self.staleness_default
        new.preemption_delay = self.preemption_delay
        new.last_evicted = self.last_evicted
        new.succeeded = self.succeeded
        new.gated = list(self.gated)
        new.stale_since = self.stale_since
        new.mark_unschedulable = self.mark_unschedulable
        new.priority_class = self.priority_class
        new.errors = list(self.errors)
        new.source = self.source
        new.version = self.version
        new.topology = self.topology
        new.subgroups = self.subgroups
        return new

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def within_preemption_delay(self, now: float) -> bool:
        if self.preemption_delay <= 0:
            return False
        anchor = max(self.created, self.last_evicted or self.created)
        return now < anchor + self.preemption_delay

    def count(self, *statuses: TaskStatus) -> int:
        return sum(1 for t in self.tasks if t.status in statuses)

    @property
    def placed(self) -> int:
        count = 0
        for task in self.tasks:  # a plain loop: this is asked for every job, every turn
            status = task.status
            if status is RUNNING or status is ALLOCATED or status is PIPELINED:
                count += 1
        return count

    @property
    def min_alive(self) -> int:
        """How many of its unfinished pods minMember asks for: its members that Succeeded
        count towards it. A gang whose member finished before the others were evicted
        gets only the rest back from its controller (a Job makes as many pods as
        completions are missing), and would otherwise wait for a pod that never comes."""
        rest = self.min_member - self.succeeded
        return rest if rest > 0 else 0

    @property
    def pending_tasks(self) -> list[Task]:
        return [t for t in self.tasks if t.status is PENDING]


@dataclass(slots=True, eq=False)
class Unit:
    """What a victim search takes back at once: a job's tasks chosen together (a
    whole gang, or an elastic job's surplus). Here, below the framework and the
    actions, because both name it: the framework's scenario validators are given
    the victims as units."""

    job: Job
    tasks: list[Task]


@dataclass(slots=True, frozen=True)
class OwnedCards:
    """Cards matched by all the given fields (``node`` alone: all its cards)."""

    node: str | None = None
    uuid: str | None = None
    index: int | None = None
    model: str | None = None  # a case-insensitive part of the card's product name


@dataclass(slots=True, frozen=True)
class QueueTenancy:
    """What an admin gave a queue (kai-py's own Queue fields); None = not set, and a
    queue that does not set one takes its nearest ancestor's (``tenancy/``)."""

    namespaces: frozenset[str] | None = None
    priority_classes: frozenset[str] | None = None
    cards: tuple[OwnedCards, ...] = ()
    lend_cards: bool = False


@dataclass(slots=True, eq=False)
class Queue:
    name: str
    parent: str | None
    quota: Res  # deserved; INF = -1 (all of what the parent has)
    limit: Res  # INF = no limit
    weight: Res
    priority: int = 100
    created: float = 0.0
    preempt_min_runtime: float | None = None
    reclaim_min_runtime: float | None = None
    tenancy: QueueTenancy | None = None  # None for KAI's queues: anyone, any card
    admission_gating: bool | None = None  # spec.admissionGating; None = not set
    # spec.gpuModels: model -> (deserved quota, limit) of its GPUs, INF = none
    # (``scheduler/gpumodels``); None for a queue without it, as KAI's.
    gpu_models: dict[str, tuple[float, float]] | None = None
    children: list[str] = field(default_factory=list)
    # Time-based fair share: usage over the window, normalised to the cluster's capacity
    # over it (``scheduler/timeshare``); None = not known, weights apply as given.
    usage: Res | None = None
    # session state (subtree totals)
    allocated: Res = field(default_factory=Res)
    allocated_non_preemptible: Res = field(default_factory=Res)
    request: Res = field(default_factory=Res)
    deserved: Res = field(default_factory=Res)
    fair_share: Res = field(default_factory=Res)
    added: Res = field(default_factory=Res)  # what this session placed in the subtree
    version: int = 0  # bumped whenever its totals change in a session


#: The actions of a cycle, in KAI's default order.
DEFAULT_ACTIONS = ("allocate", "consolidation", "reclaim", "preempt", "stalegangeviction")


@dataclass(slots=True)
class Config:
    """The scheduler's configuration (KAI's scheduler config and parameters)."""

    placement: str = "binpack"  # or "spread"
    # Which card a shared pod takes on its node: KAI's gpupack ("binpack") or gpuspread
    # ("spread") plugin; "" = as ``placement``. A pod's own HAMi policy comes first.
    card_placement: str = ""
    # Pods one consolidation may move: 0 turns consolidation off (as KAI), None = no cap.
    max_consolidation_victims: int | None = 16
    stale_gang_eviction: bool = True
    actions: tuple[str, ...] = DEFAULT_ACTIONS  # run in this order in each cycle
    # Seconds a gang may run below minMember when its PodGroup does not say; None = never.
    staleness_grace: float | None = 60.0
    # A victim moved elsewhere frees nothing in the reclaim checks (KAI's default); the
    # scenario simulation moves victims either way.
    allow_consolidating_reclaim: bool = True
    # Seconds a job runs before it may be preempted / reclaimed when no queue up its tree
    # sets it (a SchedulingShard's minRuntime); 0 = at once.
    preempt_min_runtime: float = 0.0
    reclaim_min_runtime: float = 0.0
    # KAI's restrict-node-scheduling: pods that want a GPU go only to nodes with the
    # GPU worker label, the others only to nodes with the CPU worker label; a node with
    # neither takes no pod and, as GPUs of a node without the GPU label, is not counted
    # for fair share (``predicates.role_capacity``).
    restrict_node_scheduling: bool = False
    gpu_worker_label: str = GPU_WORKER_NODE_LABEL
    cpu_worker_label: str = CPU_WORKER_NODE_LABEL
    # The proportion plugin's kValue: how much a queue's past usage lowers its over-quota
    # share (time-based fair share, when queues carry a usage).
    k_value: float = 1.0
    # KAI's usageDBConfig: where queues' past usage comes from; None = time-based fair
    # share off (the operator and ``simulate`` fill ``Queue.usage`` from it).
    usage_db: UsageDB | None = None
    # Queue-admission gating (``scheduler/admission``): "off", "queues" (queues with
    # spec.admissionGating: true) or "all" (every queue but those with false); how long
    # an admitted pod that is still pending keeps its demand reserved in its queue; how
    # many pods one cycle lifts the gate of at most.
    queue_admission_gating: str = "off"
    admission_reservation: float = 600.0
    max_admissions_per_cycle: int = 500


@dataclass(slots=True, frozen=True)
class Claim:
    """A PersistentVolumeClaim as the volume predicate reads it."""

    volume: str | None = None  # spec.volumeName: the PersistentVolume it is bound to
    storage_class: str | None = None  # spec.storageClassName


@dataclass(slots=True, frozen=True)
class StorageClass:
    wait_for_consumer: bool = False  # volumeBindingMode WaitForFirstConsumer
    # allowedTopologies: the nodes a volume may be made for (OR of ANDs); empty = any.
    topologies: tuple[tuple[SelectorRequirement, ...], ...] = ()


@dataclass(slots=True)
class Storage:
    """What the volume predicate reads: claims by (namespace, name), each
    PersistentVolume's required node affinity by name (OR of ANDs; empty = any node;
    ``metadata.name`` stands for a matchFields term), StorageClasses by name."""

    claims: dict[tuple[str, str], Claim] = field(default_factory=dict)
    volumes: dict[str, tuple[tuple[SelectorRequirement, ...], ...]] = field(default_factory=dict)
    classes: dict[str, StorageClass] = field(default_factory=dict)


@dataclass(slots=True)
class Snapshot:
    nodes: list[Node]
    queues: list[Queue]
    jobs: list[Job]
    now: float = 0.0
    config: Config = field(default_factory=Config)
    #: The ConfigMaps that exist, as (namespace, name): a pod that needs another waits.
    config_maps: frozenset[tuple[str, str]] = frozenset()
    storage: Storage = field(default_factory=Storage)
    #: The Topology objects by name, for the jobs' topology constraints.
    topologies: dict[str, Topology] = field(default_factory=dict)
