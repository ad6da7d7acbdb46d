"""Kubernetes objects (as dicts) -> scheduler model objects.

Shared by ``kai-py simulate`` and the operator's watch cache, so
that a manifest means the same thing offline and in a cluster. Problems of
one workload are returned as messages naming the object and the field; the
caller keeps that workload pending and goes on with the rest.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from kai_py.api import jsoncodec, keys
from kai_py.api.objects import Manifest, WorkloadError, meta, parse_time, ref
from kai_py.api.quantities import parse_quantity
from kai_py.gpu import inventory
from kai_py.scheduler.model import (
    NO_POD_LIMIT,
    Node,
    PodAffinityTerm,
    SelectorRequirement,
    Taint,
    Task,
    TaskStatus,
    Toleration,
)
from kai_py.scheduler.resources import INF, Res

#: The resources Res holds; every other one a pod or a node names is ``extended``.
_BASIC: Final = frozenset({"cpu", "memory", keys.GPU_RESOURCE})


def _quantity(obj: str, path: str, value: object) -> float:
    try:
        return parse_quantity(value)  # type: ignore[arg-type]
    except (ValueError, TypeError) as exc:
        raise WorkloadError(obj, path, str(exc)) from None


def resource_vector(obj: str, path: str, values: Mapping[str, Any] | None) -> Res:
    """A requests/allocatable map -> Res (cpu in millicores, memory in bytes, whole GPUs)."""
    values = values or {}
    if not isinstance(values, Mapping):
        raise WorkloadError(obj, path, f"must be a map of resource quantities, got {values!r}")
    res = Res()
    if "cpu" in values:
        res.cpu = _quantity(obj, f"{path}.cpu", values["cpu"]) * 1000
    if "memory" in values:
        res.memory = _quantity(obj, f"{path}.memory", values["memory"])
    if keys.GPU_RESOURCE in values:
        res.gpu = _quantity(obj, f"{path}.{keys.GPU_RESOURCE}", values[keys.GPU_RESOURCE])
    return res


# ------------------------------------------------------------------ nodes
def node_from_manifest(obj: Manifest) -> Node:
    """A v1 Node. A node without conditions counts as Ready (handy in hand-written files)."""
    name = str(meta(obj)["name"])
    who = f"Node {name}"
    status = obj.get("status") or {}
    spec = obj.get("spec") or {}
    allocatable = status.get("allocatable") or status.get("capacity") or {}
    labels = dict(meta(obj).get("labels") or {})
    conditions = status.get("conditions")
    ready = True
    if conditions:
        ready = any(c.get("type") == "Ready" and str(c.get("status")) == "True" for c in conditions)
    gpu_memory = 0.0
    if keys.GPU_MEMORY_NODE_LABEL in labels:
        gpu_memory = _quantity(
            who,
            f"metadata.labels[{keys.GPU_MEMORY_NODE_LABEL}]",
            labels[keys.GPU_MEMORY_NODE_LABEL],
        )
    taints = tuple(
        Taint(str(t.get("key", "")), str(t.get("value", "") or ""), str(t.get("effect", "")))
        for t in spec.get("taints") or []
    )
    try:
        cards = inventory.node_cards(meta(obj).get("annotations") or {})
    except inventory.InventoryError:
        cards = ()  # the builder reports it; the node stays usable for unpinned pods
    if gpu_memory <= 0:
        # GPU Feature Discovery's label wins; the inventory fills in where it is missing.
        gpu_memory = inventory.card_memory_mib(cards)
    return Node(
        name=name,
        max_pods=_max_pods(who, allocatable),
        extended=_node_extended(who, allocatable),
        cards=cards,
        group_cards=inventory.group_cards(meta(obj).get("annotations") or {}),
        allocatable=resource_vector(who, "status.allocatable", allocatable),
        labels=labels,
        taints=taints,
        ready=ready,
        unschedulable=bool(spec.get("unschedulable", False)),
        gpu_memory_mib=gpu_memory,
    )


def _node_extended(who: str, allocatable: Mapping[str, Any]) -> dict[str, float] | None:
    """Every resource of status.allocatable besides CPU, memory, GPUs and pods."""
    if not isinstance(allocatable, Mapping):
        return None  # (reported by resource_vector)
    out = {
        str(name): _quantity(who, f"status.allocatable.{name}", raw)
        for name, raw in allocatable.items()
        if name not in _BASIC and name != "pods"
    }
    return out or None


def take_extended(node: Node, held: Mapping[str, float]) -> None:
    """Less ``held`` (what another scheduler's pods hold there) of the node's ``extended``:
    a new dict, since a node's clones share the parsed one."""
    have = dict(node.extended or {})
    for name, amount in held.items():
        have[name] = have.get(name, 0.0) - amount
    node.extended = have


def _max_pods(who: str, allocatable: Mapping[str, Any]) -> int:
    """status.allocatable.pods: how many pods the node's kubelet admits; none = no limit."""
    if not isinstance(allocatable, Mapping) or "pods" not in allocatable:
        return NO_POD_LIMIT  # (a bad map is reported by resource_vector)
    raw = allocatable["pods"]
    count = _quantity(who, "status.allocatable.pods", raw)
    if count < 0 or count != int(count):
        raise WorkloadError(
            who, "status.allocatable.pods", f"must be a whole number of pods, got {raw!r}"
        )
    return int(count)


# ------------------------------------------------------------------- pods
def requests_by_name(obj: Manifest) -> dict[str, float]:
    """A pod's effective requests per resource, as kube-scheduler computes them (the
    component-helpers PodRequests rule, which the kubelet admits by): the app
    containers and the restartable init containers (sidecars, restartPolicy: Always)
    add up; each other init container runs alone beside the sidecars started before
    it, so the pod needs the larger of that and the sum; spec.overhead (RuntimeClass)
    is added. A limit without a request is the request, as the API server defaults
    it. CPU in millicores, everything else in its own unit (bytes, devices)."""
    who = ref(obj)
    spec = obj.get("spec") or {}
    total: dict[str, float] = {}
    for i, c in enumerate(spec.get("containers") or []):
        _add_to(total, _container_requests(who, c, f"spec.containers[{i}]"))
    sidecars: dict[str, float] = {}
    peak: dict[str, float] = {}  # the most any init container needs with its sidecars
    for i, c in enumerate(spec.get("initContainers") or []):
        init = _container_requests(who, c, f"spec.initContainers[{i}]")
        if isinstance(c, Mapping) and c.get("restartPolicy") == "Always":
            _add_to(total, init)
            _add_to(sidecars, init)
            continue
        _add_to(init, sidecars)
        for name, amount in init.items():
            if amount > peak.get(name, 0.0):
                peak[name] = amount
    for name, amount in peak.items():  # compared with the whole sum, sidecars and all
        if amount > total.get(name, 0.0):
            total[name] = amount
    _add_to(total, _quantities(who, "spec.overhead", spec.get("overhead")))
    return total


def _container_requests(who: str, c: object, path: str) -> dict[str, float]:
    if not isinstance(c, Mapping):
        raise WorkloadError(who, path, f"must be a container, got {c!r}")
    resources = c.get("resources") or {}
    if not isinstance(resources, Mapping):
        raise WorkloadError(who, f"{path}.resources", f"must be a map, got {resources!r}")
    limits = _quantities(who, f"{path}.resources.limits", resources.get("limits"))
    limits.update(_quantities(who, f"{path}.resources.requests", resources.get("requests")))
    return limits


def _quantities(who: str, path: str, values: object) -> dict[str, float]:
    if not values:
        return {}
    if not isinstance(values, Mapping):
        raise WorkloadError(who, path, f"must be a map of resource quantities, got {values!r}")
    out: dict[str, float] = {}
    for name, raw in values.items():
        amount = _quantity(who, f"{path}.{name}", raw)
        out[str(name)] = amount * 1000 if name == "cpu" else amount
    return out


def _add_to(into: dict[str, float], amounts: Mapping[str, float]) -> None:
    for name, amount in amounts.items():
        into[name] = into.get(name, 0.0) + amount


def split_requests(by_name: Mapping[str, float]) -> tuple[Res, dict[str, float] | None]:
    """(CPU, memory, whole GPUs) and every other resource asked for (None when none is:
    the usual pod). Zero amounts are left out: they ask for nothing."""
    res = Res(
        by_name.get("cpu", 0.0), by_name.get("memory", 0.0), by_name.get(keys.GPU_RESOURCE, 0.0)
    )
    extended = {n: a for n, a in by_name.items() if n not in _BASIC and a > 0}
    return res, extended or None


def pod_requests(obj: Manifest) -> Res:
    """CPU, memory and whole GPUs of ``requests_by_name``."""
    return split_requests(requests_by_name(obj))[0]


def _gpu_limit(obj: Manifest) -> bool:
    for c in (obj.get("spec") or {}).get("containers") or []:
        resources = c.get("resources") or {}
        for part in ("limits", "requests"):
            if keys.GPU_RESOURCE in (resources.get(part) or {}):
                return True
    return False


def gpu_share(obj: Manifest) -> tuple[float, float, int]:
    """(fraction, memory MiB, devices) from the KAI annotations, validated."""
    who = ref(obj)
    ann = meta(obj).get("annotations") or {}
    fraction = memory = 0.0
    devices = 1
    if keys.GPU_FRACTION_ANNOTATION in ann:
        path = f"metadata.annotations[{keys.GPU_FRACTION_ANNOTATION}]"
        raw = ann[keys.GPU_FRACTION_ANNOTATION]
        try:
            fraction = float(raw)
        except (TypeError, ValueError):
            raise WorkloadError(
                who, path, f"must be a number between 0 and 1, got {raw!r}"
            ) from None
        if not 0 < fraction < 1 or math.isnan(fraction):
            raise WorkloadError(
                who,
                path,
                f"must be above 0 and below 1 (use nvidia.com/gpu for whole GPUs), got {raw!r}",
            )
        if _gpu_limit(obj):
            raise WorkloadError(
                who,
                path,
                f"cannot be combined with a {keys.GPU_RESOURCE} request or limit; use one",
            )
    if keys.GPU_MEMORY_ANNOTATION in ann:
        path = f"metadata.annotations[{keys.GPU_MEMORY_ANNOTATION}]"
        raw = ann[keys.GPU_MEMORY_ANNOTATION]
        text = str(raw).strip()
        if not text.isdigit() or int(text) <= 0:
            raise WorkloadError(who, path, f"must be a positive whole number of MiB, got {raw!r}")
        if fraction:
            raise WorkloadError(
                who, path, f"cannot be combined with {keys.GPU_FRACTION_ANNOTATION}"
            )
        if _gpu_limit(obj):
            raise WorkloadError(
                who,
                path,
                f"cannot be combined with a {keys.GPU_RESOURCE} request or limit; use one",
            )
        memory = float(text)
    if keys.GPU_FRACTION_NUM_DEVICES_ANNOTATION in ann:
        path = f"metadata.annotations[{keys.GPU_FRACTION_NUM_DEVICES_ANNOTATION}]"
        raw = ann[keys.GPU_FRACTION_NUM_DEVICES_ANNOTATION]
        text = str(raw).strip()
        if not text.isdigit() or int(text) <= 0:
            raise WorkloadError(who, path, f"must be a positive whole number, got {raw!r}")
        devices = int(text)
    return fraction, memory, devices


def _affinity(obj: Manifest) -> tuple[tuple[SelectorRequirement, ...], ...]:
    spec = obj.get("spec") or {}
    node_aff = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = []
    for term in node_aff.get("nodeSelectorTerms") or []:
        reqs = tuple(
            SelectorRequirement(
                str(e.get("key")), str(e.get("operator")), tuple(map(str, e.get("values") or ()))
            )
            for e in term.get("matchExpressions") or []
        )
        terms.append(reqs)
    return tuple(terms)


def _pod_affinity_terms(obj: Manifest, kind: str) -> tuple[PodAffinityTerm, ...]:
    """The required terms of spec.affinity.<kind> (preferred ones are warned about)."""
    m = meta(obj)
    who = f"Pod {m.get('namespace') or 'default'}/{m.get('name')}"
    spec = obj.get("spec") or {}
    section = ((spec.get("affinity") or {}).get(kind)) or {}
    terms: list[PodAffinityTerm] = []
    field = f"spec.affinity.{kind}.requiredDuringSchedulingIgnoredDuringExecution"
    for i, term in enumerate(section.get("requiredDuringSchedulingIgnoredDuringExecution") or []):
        key = term.get("topologyKey") if isinstance(term, Mapping) else None
        if not key or not isinstance(key, str):
            raise WorkloadError(who, f"{field}[{i}].topologyKey", "required, got nothing")
        selector = term.get("labelSelector") or {}
        namespaces = tuple(str(n) for n in term.get("namespaces") or ())
        terms.append(
            PodAffinityTerm(
                topology_key=key,
                match_labels=tuple(
                    sorted((str(k), str(v)) for k, v in (selector.get("matchLabels") or {}).items())
                ),
                match_expressions=tuple(
                    SelectorRequirement(
                        str(e.get("key")),
                        str(e.get("operator")),
                        tuple(map(str, e.get("values") or ())),
                    )
                    for e in selector.get("matchExpressions") or []
                ),
                namespaces=namespaces,
                # An empty namespaceSelector selects every namespace.
                all_namespaces=term.get("namespaceSelector") == {},
            )
        )
    return tuple(terms)


def _tolerations(obj: Manifest) -> tuple[Toleration, ...]:
    return tuple(
        Toleration(
            str(t.get("key", "") or ""),
            str(t.get("operator", "Equal") or "Equal"),
            str(t.get("value", "") or ""),
            str(t.get("effect", "") or ""),
        )
        for t in (obj.get("spec") or {}).get("tolerations") or []
    )


def pod_status(obj: Manifest) -> TaskStatus | None:
    """The pod's state for scheduling; None = finished (holds nothing, needs nothing)."""
    spec = obj.get("spec") or {}
    phase = (obj.get("status") or {}).get("phase") or "Pending"
    if phase in ("Succeeded", "Failed"):
        return None
    if meta(obj).get("deletionTimestamp"):
        return TaskStatus.RELEASING if spec.get("nodeName") else None
    return TaskStatus.RUNNING if spec.get("nodeName") else TaskStatus.PENDING


@dataclass(frozen=True, slots=True)
class _SpecParts:
    """What a Task takes from its pod's spec alone: the same for every pod made from
    one template (a Job's, a Deployment's), wherever it runs."""

    request: Res
    extended: dict[str, float] | None
    node_selector: dict[str, str]
    affinity: tuple[tuple[SelectorRequirement, ...], ...]
    tolerations: tuple[Toleration, ...]
    pod_affinity: tuple[PodAffinityTerm, ...]
    pod_anti_affinity: tuple[PodAffinityTerm, ...]


#: The spec fields _SpecParts reads (nodeName is not one: a template's pods share
#: their parts wherever they run).
_PARTS_FIELDS: Final = (
    "containers",
    "initContainers",
    "overhead",
    "nodeSelector",
    "affinity",
    "tolerations",
)
#: Parts by those fields' JSON. Emptied when full: a cluster has few templates, and
#: a rebuilt entry costs one parse.
_PARTS_MEMO: dict[bytes, _SpecParts] = {}
_PARTS_MEMO_SIZE: Final = 4096


def _spec_parts(obj: Manifest) -> _SpecParts:
    """The pod's _SpecParts, parsed once per distinct spec (parsing them was about half
    of a pod's conversion, and a snapshot after a start converts every pod). Only a
    spec that parsed is remembered: a bad one raises again, naming each pod."""
    spec = obj.get("spec") or {}
    try:
        key: bytes | None = jsoncodec.key([spec.get(f) for f in _PARTS_FIELDS])
    except TypeError:  # what JSON cannot hold: parsed each time, as before
        key = None
    parts = _PARTS_MEMO.get(key) if key is not None else None
    if parts is None:
        request, extended = split_requests(requests_by_name(obj))
        parts = _SpecParts(
            request=request,
            extended=extended,
            node_selector={str(k): str(v) for k, v in (spec.get("nodeSelector") or {}).items()},
            affinity=_affinity(obj),
            tolerations=_tolerations(obj),
            pod_affinity=_pod_affinity_terms(obj, "podAffinity"),
            pod_anti_affinity=_pod_affinity_terms(obj, "podAntiAffinity"),
        )
        if key is not None:
            if len(_PARTS_MEMO) >= _PARTS_MEMO_SIZE:
                _PARTS_MEMO.clear()
            _PARTS_MEMO[key] = parts
    return parts


def task_from_pod(obj: Manifest, job_uid: str, status: TaskStatus, now: float) -> Task:
    m = meta(obj)
    ns, name = str(m.get("namespace") or "default"), str(m["name"])
    fraction, memory, devices = gpu_share(obj)
    parts = _spec_parts(obj)
    spec = obj.get("spec") or {}
    labels = m.get("labels") or {}
    groups: tuple[str, ...] = ()
    if (fraction or memory) and spec.get("nodeName"):
        # A running shared pod without its group label (placed by something else, or
        # the label lost) is counted on cards of its own: over-counting is safe,
        # sharing a card it may not be on is not.
        # A pod on several cards lists all its groups in an annotation, since a label
        # value cannot hold commas; the label holds the first.
        listed = (m.get("annotations") or {}).get(keys.GPU_GROUPS_ANNOTATION)
        label = str(listed or labels.get(keys.GPU_GROUP_LABEL) or f"unlabelled-{name}")
        groups = tuple(g for g in label.split(",") if g)[:devices]
        if len(groups) < devices:
            groups = groups + tuple(f"{groups[0]}-{i}" for i in range(len(groups), devices))
    role = "master" if _is_master(labels, name) else "worker"
    status_obj = obj.get("status") or {}
    deadline = parse_time(m.get("deletionTimestamp"))
    return Task(
        uid=str(m.get("uid") or f"{ns}/{name}"),
        namespace=ns,
        name=name,
        job_uid=job_uid,
        request=parts.request.copy(),  # Tasks own theirs: parts are shared
        extended=parts.extended,  # never changed in place: shared
        gpu_fraction=fraction,
        gpu_memory_mib=memory,
        gpu_devices=devices,
        node_selector=dict(parts.node_selector),
        affinity=parts.affinity,
        tolerations=parts.tolerations,
        status=status,
        node_name=str(spec["nodeName"]) if status is not TaskStatus.PENDING else None,
        gpu_groups=groups,
        start_time=parse_time(status_obj.get("startTime")),
        created=parse_time(m.get("creationTimestamp")) or 0.0,
        role=role,
        task_priority=_task_priority(labels),
        labels={str(k): str(v) for k, v in labels.items()},
        pod_affinity=parts.pod_affinity,
        pod_anti_affinity=parts.pod_anti_affinity,
        stuck=status is TaskStatus.RELEASING and deadline is not None and deadline < now,
        nominated_node=(
            str(status_obj["nominatedNodeName"])
            if status is TaskStatus.PENDING and status_obj.get("nominatedNodeName")
            else None
        ),
        gates=_gates(spec) if status is TaskStatus.PENDING else (),
    )


def _gates(spec: Mapping[str, Any]) -> tuple[str, ...]:
    """The names in spec.schedulingGates (a gate without a name still holds the pod)."""
    found = spec.get("schedulingGates")
    if not found:
        return ()
    return tuple(str(g.get("name") or "?") if isinstance(g, Mapping) else str(g) for g in found)


def _task_priority(labels: Mapping[str, Any]) -> int | None:
    """The kai.scheduler/task-priority label; a value that is not a whole number
    ranks below every number (as KAI does)."""
    value = labels.get(keys.TASK_PRIORITY_LABEL)
    if value is None:
        return None
    try:
        return int(str(value))
    except ValueError:
        return -(2**31)


_MASTER_LABELS = ("training.kubeflow.org/replica-type", "replica-type", "role")


def _is_master(labels: Mapping[str, Any], name: str) -> bool:
    for key in _MASTER_LABELS:
        if str(labels.get(key, "")).lower() in ("master", "launcher", "leader", "chief"):
            return True
    return False


# ----------------------------------------------------------------- queues
def queue_amount(value: float, resource: str) -> float:
    """KAI units -> scheduler units (memory MB -> bytes); -1 -> unlimited."""
    if value == -1:
        return INF
    return value * 1e6 if resource == "memory" else value
