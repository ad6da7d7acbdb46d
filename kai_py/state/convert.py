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
    Claim,
    Node,
    PodAffinityTerm,
    PodNeeds,
    SelectorRequirement,
    StorageClass,
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
    capacity = resource_vector(who, "status.allocatable", allocatable)
    healthy = sum(1 for card in cards if card.healthy)
    if healthy < len(cards) and capacity.gpu > healthy:
        # The device plugin may still count a card the inventory calls unhealthy: no pod
        # gets it, pinned or not. Where the plugin already left it out, the count is at
        # most one card per unhealthy card short, never below the healthy cards listed.
        capacity.gpu = float(max(healthy, capacity.gpu - (len(cards) - healthy)))
    return Node(
        name=name,
        max_pods=_max_pods(who, allocatable),
        extended=_node_extended(who, allocatable),
        cards=cards,
        group_cards=inventory.group_cards(meta(obj).get("annotations") or {}),
        allocatable=capacity,
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
    """The required terms of spec.affinity.<kind>."""
    who = _pod_who(obj)
    section = _affinity_section(obj, kind)
    field = f"spec.affinity.{kind}.requiredDuringSchedulingIgnoredDuringExecution"
    return tuple(
        _pod_term(term, who, f"{field}[{i}]")
        for i, term in enumerate(
            section.get("requiredDuringSchedulingIgnoredDuringExecution") or []
        )
    )


def _preferred_pod_affinity(obj: Manifest) -> tuple[tuple[int, PodAffinityTerm], ...]:
    """The preferred terms of spec.affinity.podAffinity and podAntiAffinity, as (weight,
    term), the weight negated for anti-affinity."""
    who = _pod_who(obj)
    found: list[tuple[int, PodAffinityTerm]] = []
    for kind, sign in (("podAffinity", 1), ("podAntiAffinity", -1)):
        field = f"spec.affinity.{kind}.preferredDuringSchedulingIgnoredDuringExecution"
        section = _affinity_section(obj, kind)
        for i, entry in enumerate(
            section.get("preferredDuringSchedulingIgnoredDuringExecution") or []
        ):
            at = f"{field}[{i}]"
            weight = _weight(who, at, entry)
            term = entry.get("podAffinityTerm")
            if not isinstance(term, Mapping):
                raise WorkloadError(who, f"{at}.podAffinityTerm", f"required, got {term!r}")
            found.append((sign * weight, _pod_term(term, who, f"{at}.podAffinityTerm")))
    return tuple(found)


def _preferred_affinity(obj: Manifest) -> tuple[tuple[int, tuple[SelectorRequirement, ...]], ...]:
    """spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution as
    (weight, requirements)."""
    who = _pod_who(obj)
    field = "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution"
    found: list[tuple[int, tuple[SelectorRequirement, ...]]] = []
    section = _affinity_section(obj, "nodeAffinity")
    for i, entry in enumerate(section.get("preferredDuringSchedulingIgnoredDuringExecution") or []):
        weight = _weight(who, f"{field}[{i}]", entry)
        preference = entry.get("preference") or {}
        if preference.get("matchFields"):
            continue  # not applied: the builder warns (NotApplied)
        found.append((weight, _requirements(preference.get("matchExpressions"))))
    return tuple(found)


def _pod_who(obj: Manifest) -> str:
    m = meta(obj)
    return f"Pod {m.get('namespace') or 'default'}/{m.get('name')}"


def _affinity_section(obj: Manifest, kind: str) -> Mapping[str, Any]:
    spec = obj.get("spec") or {}
    section = (spec.get("affinity") or {}).get(kind) or {}
    return section if isinstance(section, Mapping) else {}


def _weight(who: str, at: str, entry: object) -> int:
    weight = entry.get("weight") if isinstance(entry, Mapping) else None
    if not isinstance(weight, int) or isinstance(weight, bool) or not 1 <= weight <= 100:
        raise WorkloadError(
            who, f"{at}.weight", f"must be a whole number from 1 to 100, got {weight!r}"
        )
    return weight


def _requirements(expressions: object) -> tuple[SelectorRequirement, ...]:
    return tuple(
        SelectorRequirement(
            str(e.get("key")), str(e.get("operator")), tuple(map(str, e.get("values") or ()))
        )
        for e in expressions or []  # type: ignore[attr-defined]
    )


def _pod_term(term: object, who: str, at: str) -> PodAffinityTerm:
    key = term.get("topologyKey") if isinstance(term, Mapping) else None
    if not key or not isinstance(key, str) or not isinstance(term, Mapping):
        raise WorkloadError(who, f"{at}.topologyKey", "required, got nothing")
    selector = term.get("labelSelector") or {}
    return PodAffinityTerm(
        topology_key=key,
        match_labels=tuple(
            sorted((str(k), str(v)) for k, v in (selector.get("matchLabels") or {}).items())
        ),
        match_expressions=_requirements(selector.get("matchExpressions")),
        namespaces=tuple(str(n) for n in term.get("namespaces") or ()),
        # An empty namespaceSelector selects every namespace.
        all_namespaces=term.get("namespaceSelector") == {},
    )


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


def _host_ports(obj: Manifest) -> tuple[tuple[str, str, int], ...]:
    """(protocol, hostIP, port) of each container port with a hostPort, as kube-scheduler
    reads them: the containers and the sidecars (init containers that keep running)."""
    who = ref(obj)
    spec = obj.get("spec") or {}
    found: list[tuple[str, str, int]] = []
    for part in ("initContainers", "containers"):
        for i, c in enumerate(spec.get(part) or []):
            if part == "initContainers" and c.get("restartPolicy") != "Always":
                continue
            for j, p in enumerate(c.get("ports") or []):
                raw = p.get("hostPort") if isinstance(p, Mapping) else None
                if raw in (None, 0):
                    continue
                if not isinstance(raw, int) or isinstance(raw, bool) or not 0 < raw < 65536:
                    raise WorkloadError(
                        who,
                        f"spec.{part}[{i}].ports[{j}].hostPort",
                        f"must be a port number from 1 to 65535, got {raw!r}",
                    )
                protocol = str(p.get("protocol") or "TCP")
                found.append((protocol, str(p.get("hostIP") or "0.0.0.0"), raw))
    return tuple(sorted(set(found)))


#: The env keys whose ConfigMap the binder writes for a shared-GPU pod once it is bound
#: (``binder.reservation.GPU_KEYS``): not the user's, so the pod does not wait for it.
_BINDER_GPU_KEYS: Final = ("NVIDIA_VISIBLE_DEVICES", "GPU_PORTION")


_CONTAINER_PARTS: Final = ("initContainers", "containers", "ephemeralContainers")


def _reads_env(spec: Mapping[str, Any]) -> bool:
    # Loops, not any() over a generator: this is asked of every pod parsed.
    for part in _CONTAINER_PARTS:
        for c in spec.get(part) or ():
            if "env" in c or "envFrom" in c:
                return True
    return False


def _config_map_refs(obj: Manifest) -> tuple[tuple[str, str, str], ...]:
    """(name, where, env key) of each ConfigMap the pod needs, as KAI's ConfigMap
    predicate reads them: mounted volumes (configMap, or a projected source), env
    ``configMapKeyRef`` and ``envFrom`` ``configMapRef``; not those marked optional."""
    spec = obj.get("spec") or {}
    if not spec.get("volumes") and not _reads_env(spec):
        return ()  # most pods of a simulation (no service account volume there)
    containers = [
        c for part in _CONTAINER_PARTS for c in spec.get(part) or [] if isinstance(c, Mapping)
    ]
    mounted = {m.get("name") for c in containers for m in c.get("volumeMounts") or []}
    refs: list[tuple[str, str, str]] = []

    def add(source: object, where: str, key: str = "") -> None:
        if isinstance(source, Mapping) and source.get("name") and not source.get("optional"):
            refs.append((str(source["name"]), where, key))

    for v in spec.get("volumes") or []:
        if not isinstance(v, Mapping) or v.get("name") not in mounted:
            continue
        where = f'volume "{v.get("name")}"'
        add(v.get("configMap"), where)
        for src in (v.get("projected") or {}).get("sources") or []:
            add((src or {}).get("configMap"), where)
    for c in containers:
        who = f'container "{c.get("name")}"'
        for e in c.get("env") or []:
            key_ref = ((e or {}).get("valueFrom") or {}).get("configMapKeyRef")
            add(key_ref, f"{who} env {(e or {}).get('name')}", str((key_ref or {}).get("key")))
        for e in c.get("envFrom") or []:
            add((e or {}).get("configMapRef"), f"{who} envFrom")
    return tuple(refs)


def _needed_config_maps(
    refs: tuple[tuple[str, str, str], ...], pod_name: str, shared: bool, gpu_prefix: str
) -> tuple[tuple[str, str], ...]:
    """The Task's ``config_maps``: each name once; for a shared-GPU pod, not the GPU
    ConfigMaps the binder writes after the bind: as KAI, those whose name starts with
    the pod's ``runai/shared-gpu-configmap`` (``<prefix>-<i>`` and ``<prefix>-<i>-evar``),
    and the ``<pod>-gpu`` one of pods wired before that naming."""
    if not refs:
        return ()
    needed: dict[str, str] = {}
    for name, where, key in refs:
        if shared and (
            key in _BINDER_GPU_KEYS
            or name == f"{pod_name}-gpu"
            or (gpu_prefix and name.startswith(gpu_prefix))
        ):
            continue
        needed.setdefault(name, where)
    return tuple(needed.items())


def pod_claims(obj: Manifest, pod_name: str) -> tuple[tuple[str, str], ...]:
    """(claim, volume) for each volume backed by a PersistentVolumeClaim: a
    ``persistentVolumeClaim`` volume, or an ``ephemeral`` one (its claim is named
    ``<pod>-<volume>``, made by the ephemeral volume controller)."""
    found: list[tuple[str, str]] = []
    for v in (obj.get("spec") or {}).get("volumes") or ():
        if not isinstance(v, Mapping):
            continue
        source = v.get("persistentVolumeClaim")
        if isinstance(source, Mapping) and source.get("claimName"):
            found.append((str(source["claimName"]), str(v.get("name"))))
        elif v.get("ephemeral"):
            found.append((f"{pod_name}-{v.get('name')}", str(v.get("name"))))
    return tuple(found)


def claim_from_manifest(obj: Manifest) -> Claim:
    spec = obj.get("spec") or {}
    cls = spec.get("storageClassName")
    return Claim(
        volume=str(spec["volumeName"]) if spec.get("volumeName") else None,
        storage_class=str(cls) if cls else None,
    )


def volume_node_affinity(obj: Manifest) -> tuple[tuple[SelectorRequirement, ...], ...]:
    """A PersistentVolume's spec.nodeAffinity.required (empty: any node); a matchFields
    requirement reads the node's name as ``metadata.name``."""
    required = ((obj.get("spec") or {}).get("nodeAffinity") or {}).get("required") or {}
    return tuple(
        _requirements(term.get("matchExpressions")) + _requirements(term.get("matchFields"))
        for term in required.get("nodeSelectorTerms") or []
        if isinstance(term, Mapping)
    )


def storage_class_from_manifest(obj: Manifest) -> StorageClass:
    """A StorageClass: its binding mode, and allowedTopologies as node selector terms."""
    who = f"StorageClass {meta(obj).get('name')}"
    mode = obj.get("volumeBindingMode") or "Immediate"
    if mode not in ("Immediate", "WaitForFirstConsumer"):
        raise WorkloadError(
            who, "volumeBindingMode", f"must be Immediate or WaitForFirstConsumer, got {mode!r}"
        )
    topologies = tuple(
        tuple(
            SelectorRequirement(str(e.get("key")), "In", tuple(map(str, e.get("values") or ())))
            for e in term.get("matchLabelExpressions") or []
        )
        for term in obj.get("allowedTopologies") or []
        if isinstance(term, Mapping)
    )
    return StorageClass(wait_for_consumer=mode == "WaitForFirstConsumer", topologies=topologies)


def _needs(
    obj: Manifest, host_ports: tuple[tuple[str, str, int], ...], name: str, shared: bool
) -> PodNeeds | None:
    # ConfigMaps and claims are not among the memoized spec parts: a real API server
    # gives each pod a volume of its own name (the service account token's, which
    # mounts kube-root-ca.crt).
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    gpu_prefix = str(annotations.get(keys.SHARED_GPU_CONFIGMAP_ANNOTATION) or "")
    config_maps = _needed_config_maps(_config_map_refs(obj), name, shared, gpu_prefix)
    claims = pod_claims(obj, name) if (obj.get("spec") or {}).get("volumes") else ()
    if host_ports or config_maps or claims:
        return PodNeeds(host_ports, config_maps, claims)
    return None


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
    host_ports: tuple[tuple[str, str, int], ...]
    preferred_affinity: tuple[tuple[int, tuple[SelectorRequirement, ...]], ...]
    preferred_pod_affinity: tuple[tuple[int, PodAffinityTerm], ...]


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
            host_ports=_host_ports(obj),
            preferred_affinity=_preferred_affinity(obj),
            preferred_pod_affinity=_preferred_pod_affinity(obj),
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
        preferred_affinity=parts.preferred_affinity,
        preferred_pod_affinity=parts.preferred_pod_affinity,
        needs=_needs(obj, parts.host_ports, name, bool(fraction or memory)),
        stuck=status is TaskStatus.RELEASING and deadline is not None and deadline < now,
        nominated_node=(
            str(status_obj["nominatedNodeName"])
            if status is TaskStatus.PENDING and status_obj.get("nominatedNodeName")
            else None
        ),
        gates=_gates(spec) if status is TaskStatus.PENDING else (),
        admitted_at=_admitted_at(m) if status is TaskStatus.PENDING else None,
    )


def _admitted_at(m: Mapping[str, Any]) -> float | None:
    """When kai-py lifted the pod's queue-admission gate; None when it did not, or when
    the annotation is not a time (then the pod reserves nothing: the allocation-time
    quota checks still hold)."""
    value = (m.get("annotations") or {}).get(keys.QUEUE_ADMITTED_ANNOTATION)
    if value is None:
        return None
    try:
        return parse_time(value)
    except ValueError:
        return None


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
