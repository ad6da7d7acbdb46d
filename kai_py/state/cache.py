"""The operator's in-memory picture of the cluster, fed by watch events.

``ClusterCache`` keeps small projections of the objects a scheduling cycle
reads: Nodes, the scheduler's own Pods (and the bound pods of other
schedulers, which hold node resources), Queues, PodGroups, PriorityClasses
and BindRequests. ``view()`` turns it into the manifests that
``kai_py.state.builder.build`` reads, the same code path ``kai-py simulate``
takes, after two adjustments:

- a pod with a BindRequest that has not Failed counts as placed on the
  request's ``selectedNode`` (and, for a shared GPU, in its GPU groups), so a
  decision the binder has not carried out yet is not taken twice;
- a reservation pod (namespace ``kai-resource-reservation``) whose GPU group
  no live shared pod (or pending BindRequest) on its node uses any more counts
  as another scheduler's pod holding one whole GPU, until it is gone: its card
  is not free while it exists (while shared pods use the group, they count the
  card, so it is not counted twice);
- a node where a bind timed out (a BindRequest whose status reason begins
  ``ReservationTimeout:``: the reservation pod never reported its card, e.g.
  a kubelet that starts nothing) is marked avoided for
  ``BIND_TIMEOUT_AVOID_SECONDS`` after the failure was seen, so the scheduler
  tries it only after every other node (``Node.avoided``); the cache keeps
  the time itself, since the scheduler deletes a Failed request;
- a pod that names a PodGroup the cache has not seen yet is held back for a
  short grace period (the pod-grouper creates the group, then annotates the
  pod; the two watches may deliver them in either order).

Other schedulers' bound pods are not handed to the builder at all: each is
parsed once, when its event arrives, into what it holds on its node
(``kai_py/state/foreign.py``), and a view carries one sum per node. The
scheduler's own pods are parsed again only when their version changes
(``ParseMemo``), and a cycle over an unchanged cache is skipped
(``kai_py/state/idle.py``).

The cache is not thread-safe: Kopf's handlers and the scheduling loop run
on one event loop. Bodies are replaced, never changed in place, so a view
taken on the loop may be built in a worker thread.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from kai_py.api import jsoncodec, keys
from kai_py.api.bindrequest import RESERVATION_TIMEOUT_REASON
from kai_py.api.common import ManifestError
from kai_py.api.objects import is_newer, meta, parse_time, resource_version
from kai_py.api.queue import MAX_QUEUE_DEPTH
from kai_py.api.queue import Queue as QueueModel
from kai_py.gpu import groups, hami, pins
from kai_py.scheduler.model import Config
from kai_py.scheduler.resources import Res
from kai_py.scheduler.session import Event
from kai_py.state.builder import Built, ParseMemo, PodFacts, build
from kai_py.state.convert import take_extended
from kai_py.state.documents import Document
from kai_py.state.foreign import ForeignPods
from kai_py.state.partition import Partition
from kai_py.state.passmemo import PassMemo
from kai_py.state.queuetree import level_text, levels, loop_text, parent_loops

Json = dict[str, Any]
Key = tuple[str, str]  # (namespace or "", name)

NODES: Final = "nodes"
PODS: Final = "pods"
QUEUES: Final = "queues"
PODGROUPS: Final = "podgroups"
PRIORITY_CLASSES: Final = "priorityclasses"
BINDREQUESTS: Final = "bindrequests"
CONFIGMAPS: Final = "configmaps"
PVCS: Final = "persistentvolumeclaims"
PVS: Final = "persistentvolumes"
STORAGE_CLASSES: Final = "storageclasses"
TOPOLOGIES: Final = "topologies"
KINDS: Final = (
    NODES,
    PODS,
    QUEUES,
    PODGROUPS,
    PRIORITY_CLASSES,
    BINDREQUESTS,
    CONFIGMAPS,
    PVCS,
    PVS,
    STORAGE_CLASSES,
    TOPOLOGIES,
)

_KIND_NAMES: Final = {
    NODES: ("v1", "Node"),
    PODS: ("v1", "Pod"),
    QUEUES: (f"{keys.GROUP}/{keys.QUEUE_VERSION}", "Queue"),
    PODGROUPS: (f"{keys.GROUP}/{keys.PODGROUP_VERSION}", "PodGroup"),
    PRIORITY_CLASSES: ("scheduling.k8s.io/v1", "PriorityClass"),
    BINDREQUESTS: (f"{keys.GROUP}/{keys.BINDREQUEST_VERSION}", "BindRequest"),
    CONFIGMAPS: ("v1", "ConfigMap"),
    PVCS: ("v1", "PersistentVolumeClaim"),
    PVS: ("v1", "PersistentVolume"),
    STORAGE_CLASSES: ("storage.k8s.io/v1", "StorageClass"),
    TOPOLOGIES: (f"{keys.TOPOLOGY_GROUP}/{keys.TOPOLOGY_VERSION}", "Topology"),
}

#: Kinds whose objects belong to one node pool by their own label.
_POOLED: Final = frozenset({NODES, PODGROUPS, BINDREQUESTS})


def _of_another_pool(partition: Partition, body: Mapping[str, Any]) -> bool:
    """A pod whose own node-pool label names a pool other than ``partition``'s."""
    labels: Mapping[str, Any] = meta(body).get("labels") or {}
    return partition.label in labels and not partition.holds(labels)


#: The builder's name for "not ours": any name other than the default scheduler's.
_FOREIGN_SCHEDULER: Final = "kai-py/another-scheduler"
#: How long a pod that names an unseen PodGroup is held back before it is reported.
PODGROUP_GRACE_SECONDS: Final = 10.0
_FAILED: Final = "Failed"
#: How long after a bind on a node timed out the scheduler tries that node last: long
#: enough for the retries of the pods it failed to land elsewhere, short enough that a
#: node whose kubelet recovers is used again soon without anyone's help.
BIND_TIMEOUT_AVOID_SECONDS: Final = 300.0

_META_KEYS: Final = (
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "labels",
    "annotations",
    "ownerReferences",
    "creationTimestamp",
    "deletionTimestamp",
)
_POD_SPEC_KEYS: Final = (
    "schedulerName",
    "nodeName",
    "nodeSelector",
    "affinity",
    "tolerations",
    "priorityClassName",
    "schedulingGates",  # a gated pod is never placed (its Binding would be refused)
    "overhead",  # RuntimeClass overhead: part of the pod's request
)
#: The node annotations the scheduler reads: its GPU inventory (for pinned pods), and
#: HAMi's card cordon, which it does not apply but must say so on the Node.
_NODE_ANNOTATIONS: Final = (
    keys.GPU_INVENTORY_ANNOTATION,
    keys.HAMI_NODE_REGISTER_ANNOTATION,
    keys.HAMI_DEVICE_CORDON_ANNOTATION,
)
_POD_STATUS_KEYS: Final = ("phase", "startTime", "nominatedNodeName", "conditions")


def _meta(body: Mapping[str, Any], wanted: Iterable[str] = _META_KEYS) -> Json:
    m = meta(body)
    return {k: m[k] for k in wanted if m.get(k) is not None}


def _resources_only(containers: object) -> list[Json]:
    if not isinstance(containers, list):
        return []
    out: list[Json] = []
    for c in containers:
        if isinstance(c, Mapping):
            kept = {"name": c.get("name", ""), "resources": c.get("resources") or {}}
            if c.get("restartPolicy"):  # a sidecar's (Always): counted with the app's
                kept["restartPolicy"] = c["restartPolicy"]
            out.append(kept)
    return out


def _container_needs(containers: object) -> list[Json]:
    """Our pods' containers as the scheduler reads them: resources, and only where a
    container has them, its host ports, volume mounts' names, the restart policy of a
    sidecar and its ConfigMap references (``convert``'s predicates' inputs); not the
    image, command or other env."""
    kept = _resources_only(containers)
    for out, c in zip(kept, containers if isinstance(containers, list) else [], strict=False):
        if not (
            "ports" in c
            or "volumeMounts" in c
            or "env" in c
            or "envFrom" in c
            or "restartPolicy" in c
        ):
            continue  # the usual container: resources only
        ports = [p for p in c.get("ports") or [] if isinstance(p, Mapping) and p.get("hostPort")]
        if ports:
            out["ports"] = ports
        mounts = [
            {"name": m.get("name")} for m in c.get("volumeMounts") or [] if isinstance(m, Mapping)
        ]
        if mounts:
            out["volumeMounts"] = mounts
        env = [
            e
            for e in c.get("env") or []
            if isinstance(e, Mapping) and (e.get("valueFrom") or {}).get("configMapKeyRef")
        ]
        if env:
            out["env"] = env
        env_from = [
            e for e in c.get("envFrom") or [] if isinstance(e, Mapping) and e.get("configMapRef")
        ]
        if env_from:
            out["envFrom"] = env_from
        if c.get("restartPolicy"):
            out["restartPolicy"] = c["restartPolicy"]
    return kept


def _volumes(volumes: object) -> list[Json]:
    """The volumes a predicate reads: ConfigMaps, directly or projected, and
    PersistentVolumeClaims, named or ephemeral (others are left out; a mount of one
    of them then names nothing the scheduler reads)."""
    kept: list[Json] = []
    for v in volumes if isinstance(volumes, list) else []:
        if not isinstance(v, Mapping):
            continue
        if v.get("persistentVolumeClaim"):
            kept.append(
                {"name": v.get("name"), "persistentVolumeClaim": v["persistentVolumeClaim"]}
            )
            continue
        if v.get("ephemeral"):
            kept.append({"name": v.get("name"), "ephemeral": {}})  # its claim: <pod>-<volume>
            continue
        if v.get("configMap"):
            kept.append({"name": v.get("name"), "configMap": v["configMap"]})
            continue
        sources = [
            {"configMap": s["configMap"]}
            for s in (v.get("projected") or {}).get("sources") or []
            if isinstance(s, Mapping) and s.get("configMap")
        ]
        if sources:
            kept.append({"name": v.get("name"), "projected": {"sources": sources}})
    return kept


def project_config_map(body: Mapping[str, Any]) -> Json:
    """A ConfigMap as the scheduler needs it: that it exists (never its data)."""
    return {"metadata": _meta(body, ("name", "namespace", "uid", "resourceVersion"))}


#: What the volume predicate reads of each storage kind, besides its name.
_STORAGE_FIELDS: Final = {
    PVCS: ("spec", ("volumeName", "storageClassName")),
    PVS: ("spec", ("nodeAffinity",)),
    STORAGE_CLASSES: ("", ("volumeBindingMode", "allowedTopologies")),
}


def project_storage(kind: str, body: Mapping[str, Any]) -> Json:
    """A PersistentVolumeClaim, PersistentVolume or StorageClass as the volume
    predicate reads it (not its status, capacity or parameters)."""
    part, fields = _STORAGE_FIELDS[kind]
    source = (body.get(part) or {}) if part else body
    kept = {k: source[k] for k in fields if source.get(k) is not None}
    projected: Json = {"metadata": _meta(body, ("name", "namespace", "uid", "resourceVersion"))}
    if part:
        projected[part] = kept
    else:
        projected.update(kept)
    return projected


def project_reservation(body: Mapping[str, Any]) -> Json | None:
    """A reservation pod as a foreign pod holding its card, with its node and group
    kept aside (``view`` counts it only while no shared pod uses the group)."""
    spec = body.get("spec") or {}
    phase = (body.get("status") or {}).get("phase")
    group = groups.reservation_group(body)
    if not spec.get("nodeName") or phase in ("Succeeded", "Failed") or not group:
        return None
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _meta(body, ("name", "namespace", "uid", "resourceVersion")),
        "spec": {
            "schedulerName": _FOREIGN_SCHEDULER,
            "nodeName": spec["nodeName"],
            "containers": [
                {"name": "reservation", "resources": {"requests": {keys.GPU_RESOURCE: "1"}}}
            ],
        },
        "status": {"phase": phase} if phase else {},
        "group": group,
    }


def project_pod(body: Mapping[str, Any], scheduler_name: str) -> tuple[bool, Json | None]:
    """(ours, projection): what the scheduler needs of a pod; None = not worth keeping.

    Pods of other schedulers are kept only while they hold a node's resources.
    Our pods are rewritten to the scheduler name the builder knows. Reservation
    pods are projected by ``project_reservation``.
    """
    spec = body.get("spec") or {}
    status = body.get("status") or {}
    ours = (spec.get("schedulerName") or "default-scheduler") == scheduler_name
    phase = status.get("phase")
    if not ours:
        if not spec.get("nodeName") or phase in ("Succeeded", "Failed"):
            return False, None
        return False, {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": _meta(body, ("name", "namespace", "uid", "resourceVersion")),
            "spec": {
                "schedulerName": _FOREIGN_SCHEDULER,
                "nodeName": spec["nodeName"],
                "containers": _resources_only(spec.get("containers")),
                "initContainers": _resources_only(spec.get("initContainers")),
                **({"overhead": spec["overhead"]} if spec.get("overhead") else {}),
            },
            "status": {"phase": phase} if phase else {},
        }
    projected_spec = {k: spec[k] for k in _POD_SPEC_KEYS if spec.get(k) is not None}
    projected_spec["schedulerName"] = keys.DEFAULT_SCHEDULER_NAME
    projected_spec["containers"] = _container_needs(spec.get("containers"))
    if spec.get("initContainers"):
        projected_spec["initContainers"] = _container_needs(spec.get("initContainers"))
    if spec.get("ephemeralContainers"):
        projected_spec["ephemeralContainers"] = _container_needs(spec.get("ephemeralContainers"))
    volumes = _volumes(spec.get("volumes"))
    if volumes:
        projected_spec["volumes"] = volumes
    projected_meta = _meta(body)
    if hami.needs_translation(body):
        # Stored untranslated: the HAMi webhook did not run, and no node advertises
        # these resources. The builder reports it instead of placing the pod.
        projected_meta["annotations"] = {
            **(projected_meta.get("annotations") or {}),
            hami.UNTRANSLATED_ANNOTATION: "true",
        }
    cards = pins.reported_uuids(body)
    if cards and keys.GPU_UUIDS_ANNOTATION not in (projected_meta.get("annotations") or {}):
        # The kubelet's report of the pod's cards, for pinned pods beside it.
        annotations = {**(projected_meta.get("annotations") or {})}
        annotations[keys.GPU_UUIDS_ANNOTATION] = ",".join(cards)
        projected_meta["annotations"] = annotations
    return True, {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": projected_meta,
        "spec": projected_spec,
        "status": _pod_status(status),
    }


#: Of a pod's conditions the writer reads PodScheduled only (is it already what it
#: would write?); the others (~1 KB a pod) are not kept.
_CONDITION_KEYS: Final = ("type", "status", "reason", "message", "lastTransitionTime")


def _pod_status(status: Mapping[str, Any]) -> Json:
    kept = {k: status[k] for k in _POD_STATUS_KEYS if status.get(k) is not None}
    if "conditions" in kept:
        scheduled = [
            {k: c[k] for k in _CONDITION_KEYS if k in c}
            for c in kept["conditions"] or []
            if isinstance(c, Mapping) and c.get("type") == "PodScheduled"
        ]
        if scheduled:
            kept["conditions"] = scheduled
        else:
            del kept["conditions"]
    return kept


def _is_blocker(body: Mapping[str, Any]) -> bool:
    return (meta(body).get("labels") or {}).get(keys.GPU_BLOCKER_LABEL) == "true"


def project_node(body: Mapping[str, Any]) -> Json:
    status = body.get("status") or {}
    projected = _meta(body, ("name", "uid", "resourceVersion", "labels", "creationTimestamp"))
    annotations = meta(body).get("annotations") or {}
    inventory = {k: annotations[k] for k in _NODE_ANNOTATIONS if k in annotations}
    if inventory:
        projected["annotations"] = inventory
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": projected,
        "spec": dict(body.get("spec") or {}),
        "status": {k: status[k] for k in ("allocatable", "capacity", "conditions") if k in status},
    }


_BINDREQUEST_SPEC_KEYS: Final = (
    "podName",
    "selectedNode",
    "selectedGPUGroups",
    "receivedResourceType",
)


def project_bindrequest(body: Mapping[str, Any]) -> Json:
    """What the scheduler reads of a BindRequest: who it is for (pod name, owner uid),
    where it puts the pod (node, GPU groups) and its phase. A few hundred bytes instead
    of the whole object (~1.9 KB with managedFields) per bound pod."""
    m = meta(body)
    projected = _meta(body, ("name", "namespace", "uid", "resourceVersion", "deletionTimestamp"))
    owners = [
        {k: ref[k] for k in ("kind", "name", "uid") if ref.get(k) is not None}
        for ref in m.get("ownerReferences") or []
        if isinstance(ref, Mapping) and ref.get("kind") == "Pod"
    ]
    if owners:
        projected["ownerReferences"] = owners
    spec = body.get("spec") or {}
    projected_spec: Json = {k: spec[k] for k in _BINDREQUEST_SPEC_KEYS if spec.get(k) is not None}
    if "selectedGPUGroups" in projected_spec:
        projected_spec["selectedGPUGroups"] = [str(g) for g in projected_spec["selectedGPUGroups"]]
    phase = (body.get("status") or {}).get("phase")
    return {
        "metadata": projected,
        "spec": projected_spec,
        "status": {"phase": phase} if phase else {},
    }


def _plain(body: Mapping[str, Any]) -> Json:
    """A deep plain-dict copy: the body may be a read-only view (Kopf's), and other
    listeners of the same watch event hold the same dict. Without
    ``metadata.managedFields``: a real API server lists every writer's fields there
    (for a PodGroup the grouper's create and the scheduler's status writes), nothing
    here reads them, and at 10,000 PodGroups they took memory and copying."""
    m = body.get("metadata")
    if isinstance(m, Mapping) and "managedFields" in m:
        body = {**body, "metadata": {k: v for k, v in m.items() if k != "managedFields"}}
    result: Json = jsoncodec.copy(body)
    return result


def _key(body: Mapping[str, Any]) -> Key:
    m = meta(body)
    return str(m.get("namespace") or ""), str(m.get("name") or "")


@dataclass(slots=True)
class View:
    """One cycle's worth of cached objects, ready to build a snapshot from."""

    documents: list[Document]  # all but our pods, which are in ``pod_documents``
    pods: dict[str, Json]  # our pods by uid (the cached projections)
    podgroups: dict[str, Json]  # by uid
    queues: dict[str, Json]  # by name
    nodes: dict[str, Json]  # by name
    held_back: int = 0
    failed_bindrequests: list[Key] = field(default_factory=list)
    #: Nodes the scheduler tries last (a bind there timed out recently): why, by name.
    avoided: dict[str, str] = field(default_factory=dict)
    #: Problems found before the builder (queues left out), as Warning events.
    events: list[Event] = field(default_factory=list)
    #: Queues left out, by name: why (their workloads are told, not "does not exist").
    left_out: dict[str, str] = field(default_factory=dict)
    #: Those of them whose parent does not exist (yet): why (their status says so too).
    orphans: dict[str, str] = field(default_factory=dict)
    #: The cache's generation this view was taken at.
    generation: int = 0
    #: When this view would change with no watch event (a pod's PodGroup grace ends).
    wake_at: float = float("inf")

    #: Parsed pods of earlier builds (the cache's), reused when unchanged.
    memo: ParseMemo | None = None
    #: Per node: what other schedulers' bound pods hold (they are not in ``documents``).
    used_by_others: dict[str, Res] = field(default_factory=dict)
    #: Per node: what they hold of resources besides CPU, memory and GPUs.
    extended_by_others: dict[str, dict[str, float]] = field(default_factory=dict)
    #: How many such pods there are.
    others: int = 0
    #: Per node: how many of other schedulers' pods (not in ``documents``) are bound there.
    pods_of_others: dict[str, int] = field(default_factory=dict)
    #: Our pods and the PodGroups by (namespace, name), as cached when the view was
    #: taken (held-back pods too): the plan finds an event's object here.
    pods_by_name: dict[Key, Json] = field(default_factory=dict)
    podgroups_by_name: dict[Key, Json] = field(default_factory=dict)
    #: PodGroup status the plan found already right, kept across cycles (the cache's).
    status_memo: PassMemo[str, tuple[object, ...]] | None = None
    #: Our pods as placed, each with what the build reads of it (read once per manifest).
    pod_documents: list[tuple[Document, PodFacts]] = field(default_factory=list)
    #: The ConfigMaps that exist, by (namespace, name): pods that need another wait.
    config_maps: frozenset[Key] = frozenset()
    #: The node pool this view is of (its name goes into status conditions).
    partition: Partition = field(default_factory=Partition)

    @property
    def all_documents(self) -> list[Document]:
        """Every document of the view, our pods among them, as ``kai-py simulate`` reads them."""
        config_maps = [
            Document(
                f"ConfigMap {ns}/{name}",
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": name, "namespace": ns},
                },
            )
            for ns, name in sorted(self.config_maps)
        ]
        return [*self.documents, *(doc for doc, _ in self.pod_documents), *config_maps]

    def build(self, now: float, config: Config | None = None) -> Built:
        built = build(
            self.documents,
            now,
            config,
            self.memo,
            workloads=False,
            pods=self.pod_documents,
            strict=False,  # one unreadable object is left out, not the whole cycle
        )
        for node in built.snapshot.nodes:
            used = self.used_by_others.get(node.name)
            if used is not None:
                node.allocatable.sub(used)
            held = self.extended_by_others.get(node.name)
            if held is not None:
                take_extended(node, held)
            node.avoided = self.avoided.get(node.name)
            node.max_pods -= self.pods_of_others.get(node.name, 0)
        built.other_scheduler_pods += self.others
        built.snapshot.config_maps = self.config_maps
        for job in built.snapshot.jobs:
            if job.queue in self.left_out:
                job.errors.append(
                    f"PodGroup {job.namespace}/{job.name}: spec.queue: {self.left_out[job.queue]}"
                )
        return built


class ClusterCache:
    """Objects by kind and (namespace, name), updated from watch events."""

    def __init__(
        self,
        scheduler_name: str = keys.DEFAULT_SCHEDULER_NAME,
        clock: Callable[[], float] = time.time,
        partition: Partition | None = None,
    ) -> None:
        self.scheduler_name = scheduler_name
        #: The node pool served: nodes, PodGroups and BindRequests of other pools are
        #: not kept (the watches are filtered too; this holds for any other input).
        self.partition = partition or Partition()
        #: PodGroups seen in other pools (the default shard watches them all): their
        #: unlabelled pods are another shard's, not pods of a missing PodGroup.
        self.elsewhere: set[Key] = set()
        #: A named pool's shard keeps no pod bound to a node outside its pool (every
        #: pool's unlabelled pods reach it: other schedulers' above all). Nodes that
        #: join the pool once the pods are listed: their pods are to be listed again.
        self.new_nodes: set[str] = set()
        self._clock = clock
        #: Per node: when a bind there last timed out, as the BindRequest's status said.
        self.bind_timeouts: dict[str, float] = {}
        self.objects: dict[str, dict[Key, Json]] = {kind: {} for kind in KINDS}
        #: Other schedulers' bound pods: what they hold per node.
        self.foreign_pods = ForeignPods()
        #: Reservation pods (kai-resource-reservation) that hold a card, by key.
        self.reservations: dict[Key, Json] = {}
        #: Reservation pods' reported cards: (node, GPU group, UUID), for pinned pods.
        self.group_cards: dict[Key, tuple[str, str, str]] = {}
        #: Bumped on every change; a cycle over an unchanged cache is skipped (idle.py).
        self.generation = 0
        #: Pods parsed by earlier builds, by version: a build parses only what changed.
        self.memo = ParseMemo()
        #: PodGroups whose status the last plan found right (``writer.status_key``).
        self.status_memo: PassMemo[str, tuple[object, ...]] = PassMemo()
        # What the last view read from each pod, by the identity of the manifest it read
        # (the manifest is held, so its id stays its own): an unchanged pod is not read.
        self._pod_entries: PassMemo[int, _PodEntry] = PassMemo()
        # Warm-up: uids a first LIST returned that the watch has not delivered yet.
        self._waiting: dict[str, set[str] | None] = dict.fromkeys(KINDS)
        self._seen: dict[str, set[str]] = {kind: set() for kind in KINDS}

    # ---------------------------------------------------------------- updates
    def observe(self, kind: str, event_type: str | None, body: Mapping[str, Any]) -> bool:
        """Apply one watch event (None/ADDED/MODIFIED/DELETED); True if anything changed."""
        if kind not in self.objects:
            raise ValueError(f"unknown kind {kind!r}")
        key = _key(body)
        if not key[1]:
            return False
        uid = str(meta(body).get("uid") or "")
        deleted = event_type == "DELETED"
        if uid:
            self._seen[kind].add(uid)
            waiting = self._waiting[kind]
            if waiting is not None:
                waiting.discard(uid)
        if kind == PODS:
            return self._observe_pod(key, deleted, body)
        store = self.objects[kind]
        if kind in _POOLED:
            if not deleted and not self.partition.holds(meta(body).get("labels")):
                # Never in the pool or left it (relabelled): another shard's.
                if kind == PODGROUPS:
                    self.elsewhere.add(key)
                return self._drop(store, key, uid)
            if kind == PODGROUPS:
                self.elsewhere.discard(key)
        if deleted:
            return self._drop(store, key, uid)
        if not self._newer(store.get(key), body):
            return False
        if kind == NODES:
            if key not in store and self.partition.value and self._waiting[PODS] is not None:
                self.new_nodes.add(key[1])
            store[key] = project_node(body)
        elif kind == BINDREQUESTS:
            store[key] = project_bindrequest(body)
            self._note_bind_timeout(body)
        elif kind == CONFIGMAPS:
            store[key] = project_config_map(body)
        elif kind in _STORAGE_FIELDS:
            store[key] = project_storage(kind, body)
        else:
            store[key] = _plain(body)
        self.generation += 1
        return True

    def _note_bind_timeout(self, body: Mapping[str, Any]) -> None:
        """Remember the node of a bind that timed out (each attempt's status says so,
        the last one Failed): the request itself is deleted once it has Failed."""
        reason = (body.get("status") or {}).get("reason")
        node = (body.get("spec") or {}).get("selectedNode")
        if isinstance(reason, str) and reason.startswith(RESERVATION_TIMEOUT_REASON) and node:
            self.bind_timeouts[str(node)] = self._clock()

    def avoided_nodes(self, now: float) -> dict[str, float]:
        """Nodes to try last, with when that ends; forgets the failures that are over."""
        until = {n: t + BIND_TIMEOUT_AVOID_SECONDS for n, t in self.bind_timeouts.items()}
        for node, end in until.items():
            if end <= now:
                del self.bind_timeouts[node]
        return {n: end for n, end in until.items() if end > now}

    def _observe_pod(self, key: Key, deleted: bool, body: Mapping[str, Any]) -> bool:
        ours_store, foreign = self.objects[PODS], self.foreign_pods
        uid = str(meta(body).get("uid") or "")
        if key[0] == keys.RESERVATION_NAMESPACE:
            self._observe_reservation(key, deleted, body)
        if key[0] == keys.RESERVATION_NAMESPACE and not _is_blocker(body):
            # A pinned bind's blockers fall through: they are counted as other
            # schedulers' pods, holding cards nothing else counts.
            if deleted:
                return self._drop(self.reservations, key, uid)
            if not self._newer(self.reservations.get(key), body):
                return False
            reservation = project_reservation(body)
            if reservation is None:
                self.reservations.pop(key, None)
            else:
                self.reservations[key] = reservation
            self.generation += 1
            return True
        if deleted:
            changed = self._drop(ours_store, key, uid)
            if foreign.pop(key, uid):
                self.generation += 1
                changed = True
            return changed
        current = ours_store.get(key)
        if not (self._newer(current, body) if current else foreign.newer(key, body)):
            return False
        ours, projection = project_pod(body, self.scheduler_name)
        if ours and _of_another_pool(self.partition, body):
            projection = None  # labelled with another pool: another shard's pod
        elif projection is not None and self.partition.value:
            node = (body.get("spec") or {}).get("nodeName")
            if node and ("", node) not in self.objects[NODES]:
                projection = None  # on another pool's node (see ``new_nodes``)
        ours_store.pop(key, None)
        foreign.pop(key)
        if projection is not None:
            if ours:
                ours_store[key] = projection
            else:
                foreign.put(key, projection, str(projection["spec"]["nodeName"]))
        self.generation += 1
        return True

    def _observe_reservation(self, key: Key, deleted: bool, body: Mapping[str, Any]) -> None:
        m = meta(body)
        uuid = (m.get("annotations") or {}).get(keys.RESERVED_GPU_INDEX_ANNOTATION)
        group = (m.get("annotations") or {}).get(keys.GPU_GROUPS_ANNOTATION)
        node = (body.get("spec") or {}).get("nodeName")
        if deleted or not (uuid and group and node) or _is_blocker(body):
            if self.group_cards.pop(key, None) is not None:
                self.generation += 1
            return
        entry = (str(node), str(group), str(uuid))
        if self.group_cards.get(key) != entry:
            self.group_cards[key] = entry
            self.generation += 1

    def _drop(self, store: dict[Key, Json], key: Key, uid: str) -> bool:
        current = store.get(key)
        if current is None:
            return False
        if uid and meta(current).get("uid") not in (None, uid):
            return False  # a newer object of the same name is already here
        del store[key]
        self.generation += 1
        return True

    @staticmethod
    def _newer(current: Mapping[str, Any] | None, body: Mapping[str, Any]) -> bool:
        """False when ``body`` is an older version of the same object than ``current``."""
        if current is None:
            return True
        return is_newer(meta(current).get("uid"), resource_version(current), body)

    def forget(self, kind: str, namespace: str, name: str) -> None:
        """Drop an object this process deleted (the watch will confirm it)."""
        if self.objects[kind].pop((namespace, name), None) is not None:
            self.generation += 1

    def resync(self, kind: str, listing: Mapping[str, Any]) -> int:
        """Drop cached objects a fresh LIST no longer has; returns how many.

        A watch that is restarted from a new listing (after a 410) reports no
        deletions for what vanished in between; this catches those. Only
        objects not newer than the listing are dropped, so one created after
        the LIST was taken stays.
        """
        listed = {str(meta(item).get("uid")) for item in listing.get("items") or []}
        try:
            at = int(str(meta(listing).get("resourceVersion")))
        except (TypeError, ValueError):
            return 0  # without a version to compare with, nothing is safe to drop
        stores = [self.objects[kind]]
        dropped = 0
        if kind == PODS:
            stores.append(self.reservations)
            for key, pod in self.foreign_pods.items():
                rv = pod.resource_version
                if pod.uid and pod.uid not in listed and rv is not None and rv <= at:
                    self.foreign_pods.pop(key)
                    dropped += 1
        for store in stores:
            for key, body in list(store.items()):
                rv = resource_version(body)
                uid = str(meta(body).get("uid") or "")
                if uid and uid not in listed and rv is not None and rv <= at:
                    del store[key]
                    dropped += 1
        if dropped:
            self.generation += 1
        return dropped

    def load(self, kind: str, listing: Mapping[str, Any]) -> None:
        """Take a fresh LIST as the truth: its objects (unless the cache holds newer
        versions) and nothing older that it lacks. The kind is warm after it."""
        for item in listing.get("items") or []:
            self.observe(kind, "ADDED", item)
        self.resync(kind, listing)
        self.mark_warm(kind)

    # ---------------------------------------------------------------- warm-up
    def expect(self, kind: str, uids: Iterable[str]) -> None:
        """The uids a first LIST returned: the kind is warm once the watch has shown them all."""
        self._waiting[kind] = set(uids) - self._seen[kind]

    def mark_warm(self, kind: str) -> None:
        self._waiting[kind] = set()

    def waiting_for(self) -> dict[str, int | None]:
        """Per kind: objects still to arrive (None: not listed yet)."""
        return {k: (None if v is None else len(v)) for k, v in self._waiting.items()}

    @property
    def warm(self) -> bool:
        return all(v is not None and not v for v in self._waiting.values())

    # ------------------------------------------------------------------ reads
    def get(self, kind: str, namespace: str, name: str) -> Json | None:
        return self.objects[kind].get((namespace, name))

    def view(self, now: float | None = None) -> View:
        """The cached objects as builder input, with the adjustments described above."""
        now = time.time() if now is None else now
        docs: list[Document] = []
        by_uid: dict[str, Json] = {}
        podgroups: dict[str, Json] = {}
        queues, events = usable_queues(self.objects[QUEUES])
        api_version, kind_name = _KIND_NAMES[QUEUES]
        for name, body in queues.items():
            docs.append(Document(f"Queue {name}", _with_type(body, api_version, kind_name)))
        cards_by_node: dict[str, dict[str, str]] = {}
        for node_name, gpu_group, card in self.group_cards.values():
            cards_by_node.setdefault(node_name, {})[gpu_group] = card
        for kind in (NODES, PRIORITY_CLASSES, PVCS, PVS, STORAGE_CLASSES, TOPOLOGIES):
            api_version, kind_name = _KIND_NAMES[kind]
            for key, body in self.objects[kind].items():
                if kind == NODES and key[1] in cards_by_node:
                    body = _with_group_cards(body, cards_by_node[key[1]])
                shown = f"{key[0]}/{key[1]}" if key[0] else key[1]
                docs.append(
                    Document(f"{kind_name} {shown}", _with_type(body, api_version, kind_name))
                )
        api_version, kind_name = _KIND_NAMES[PODGROUPS]
        for (ns, name), body in self.objects[PODGROUPS].items():
            docs.append(Document(f"PodGroup {ns}/{name}", _with_type(body, api_version, kind_name)))
            podgroups[str(meta(body).get("uid") or f"{ns}/{name}")] = body
        binds = self.objects[BINDREQUESTS]
        failed: list[Key] = []
        for key, br in binds.items():
            pod = self.objects[PODS].get(key)
            owner = bindrequest_owner_uid(br)
            if (br.get("status") or {}).get("phase") == _FAILED or (
                pod is not None and owner is not None and owner != meta(pod).get("uid")
            ):
                failed.append(key)  # to delete; its pod is decided once it is gone
        blocked = set(failed)
        held_back = 0
        wake = float("inf")  # when a held-back pod's grace period ends
        used_groups: set[tuple[str, str]] = set()  # (node, group) that live shared pods use
        entries = self._pod_entries
        ours: list[tuple[Document, PodFacts]] = []
        # Looked up once: this loop runs for every pod of ours in every cycle.
        known_groups, entry_of, keep = self.objects[PODGROUPS], entries.get, entries.keep
        elsewhere, pooled = self.elsewhere, bool(self.partition.value)
        nodes = self.objects[NODES]
        for (ns, name), pod in self.objects[PODS].items():
            request = binds.get((ns, name))
            placed = pod if request is None else _placed_by_bindrequest(pod, request)
            entry = entry_of(id(placed))
            if entry is None or entry.document.body is not placed:
                entry = _PodEntry.of(ns, name, pod, placed)
            keep(id(placed), entry)
            if entry.gpu_groups:
                # Every live shared pod (also those held back below) keeps its card's group.
                used_groups.update(entry.gpu_groups)
            if not entry.group or ((ns, name) in blocked and not entry.bound):
                # Not grouped by the pod-grouper yet, or a BindRequest still to delete.
                held_back += 1
                continue
            if (ns, entry.group) not in known_groups:
                if (
                    (pooled or (ns, entry.group) in elsewhere)
                    and ("", (pod.get("spec") or {}).get("nodeName")) not in nodes
                    if entry.bound
                    else (ns, entry.group) in elsewhere
                    or (pooled and self.partition.label not in (meta(pod).get("labels") or {}))
                ):
                    # Another pool's pod: running on a node of that pool, or its PodGroup
                    # is there (a named pool's shard sees its own PodGroups only; an
                    # unlabelled pod of an unseen one is the default shard's to report).
                    continue
                if now - entry.created < PODGROUP_GRACE_SECONDS:
                    wake = min(wake, entry.created + PODGROUP_GRACE_SECONDS)
                    held_back += 1
                    continue
            by_uid[entry.uid] = pod
            ours.append((entry.document, entry.facts))
        entries.done()
        for (ns, name), reservation in self.reservations.items():
            node = str((reservation.get("spec") or {}).get("nodeName"))
            group = str(reservation.get("group"))
            if (node, group) in used_groups or (node, groups.label_value(group)) in used_groups:
                # Its shared pods count the card, and the session counts the card's
                # reservation pod with it (also before the binder has made it). One
                # handed to the builder below is counted there as another's pod.
                continue
            body = {k: v for k, v in reservation.items() if k != "group"}
            docs.append(Document(f"Pod {ns}/{name}", body))
        avoided = self.avoided_nodes(now)
        if avoided:
            wake = min(wake, *avoided.values())  # the node is tried in order again then
        return View(
            documents=docs,
            pods=by_uid,
            podgroups=podgroups,
            queues={k[1]: v for k, v in self.objects[QUEUES].items()},
            nodes={k[1]: v for k, v in self.objects[NODES].items()},
            held_back=held_back,
            failed_bindrequests=failed,
            avoided={n: avoided_text(n, end) for n, end in avoided.items()},
            events=events,
            left_out={
                e.name: e.message
                for e in events
                if e.reason in ("InvalidQueue", PARENT_QUEUE_NOT_FOUND)
            },
            orphans={e.name: e.message for e in events if e.reason == PARENT_QUEUE_NOT_FOUND},
            generation=self.generation,
            wake_at=wake,
            memo=self.memo,
            used_by_others=self.foreign_pods.used(),
            extended_by_others=self.foreign_pods.extended_used(),
            pods_of_others=self.foreign_pods.pods_per_node(),
            others=self.foreign_pods.counted(),
            pods_by_name=dict(self.objects[PODS]),
            podgroups_by_name=dict(self.objects[PODGROUPS]),
            status_memo=self.status_memo,
            pod_documents=ours,
            config_maps=frozenset(self.objects[CONFIGMAPS]),
            partition=self.partition,
        )


#: The Warning on a Queue whose spec.parentQueue names no Queue (it is left out until
#: the parent is created); its status holds KAI's ``Orphan`` condition meanwhile.
PARENT_QUEUE_NOT_FOUND: Final = "ParentQueueNotFound"


def avoided_text(node: str, until: float) -> str:
    """Why ``node`` is tried last, for the Events of the pods it concerns."""
    clock = time.strftime("%H:%M:%S", time.gmtime(until))
    return f"node {node} is avoided until {clock} UTC: a bind there timed out"


def usable_queues(objects: Mapping[Key, Json]) -> tuple[dict[str, Json], list[Event]]:
    """The queues a snapshot can be built from, and a Warning for each one left out.

    ``kai-py simulate`` refuses a bad Queue or queue tree as a whole; in a
    cluster one bad Queue must not stop scheduling, so it is left out here
    (its workloads then meet ``QueueDoesNotExist``) with an event that says why:
    an invalid field, a parent loop, a queue deeper than ``MAX_QUEUE_DEPTH`` (the
    webhook refuses it, but one may have come in while the webhook was down), and
    every queue under a missing or left-out parent. The rest of the tree is used.
    A parent that does not exist is not an error (the webhook admits the child: it
    may be applied first): that queue's Warning is ``ParentQueueNotFound``, and it is
    used as soon as the parent is created.
    """
    events: list[Event] = []
    parents: dict[str, str | None] = {}
    bodies: dict[str, Json] = {}
    invalid: set[str] = set()  # Queues that exist but cannot be read
    orphans: set[str] = set()  # Queues whose parent does not exist (yet)
    for (_, name), body in objects.items():
        try:
            model = QueueModel.from_manifest(_with_type(body, *_KIND_NAMES[QUEUES]))
        except ManifestError as exc:
            message = f"Queue {name} is not used: {'; '.join(str(exc).splitlines())}"
            events.append(Event("Queue", "", name, "Warning", "InvalidQueue", message))
            invalid.add(name)
            continue
        bodies[name] = body
        parents[name] = model.spec.parent_queue or None
    why: dict[str, str] = {}  # left out: the message
    for loop in parent_loops(parents):
        for member in loop:
            why[member] = (
                f"Queue {member} is not used: spec.parentQueue: parents form a cycle: "
                f"{loop_text(loop)}"
            )
    level = levels({name: parent for name, parent in parents.items() if name not in why})
    for name, parent in parents.items():
        found = level.get(name, 0)
        if name in why or 0 < found <= MAX_QUEUE_DEPTH:
            continue
        if found == MAX_QUEUE_DEPTH + 1:
            text = level_text(name, parent, found, MAX_QUEUE_DEPTH)
            why[name] = f"Queue {name} is not used: spec.parentQueue: {text}"
        elif parent is not None and parent not in parents and parent not in invalid:
            # Not an error: the parent may be applied after its child (GitOps order).
            orphans.add(name)
            why[name] = (
                f"Queue {name} is not used: spec.parentQueue: queue {parent!r} does not "
                "exist; its jobs wait until it is created"
            )
        else:  # under a missing, left-out or too deep parent
            why[name] = (
                f"Queue {name} is not used: spec.parentQueue: queue {parent!r} "
                "does not exist or is not used"
            )
    for name in parents:
        if name in why:
            reason = PARENT_QUEUE_NOT_FOUND if name in orphans else "InvalidQueue"
            events.append(Event("Queue", "", name, "Warning", reason, why[name]))
    return {name: body for name, body in bodies.items() if name not in why}, events


def _with_group_cards(node: Json, cards: Mapping[str, str]) -> Json:
    """The node with the cards its GPU groups sit on (what the reservation pods reported)."""
    m = dict(meta(node))
    annotations = dict(m.get("annotations") or {})
    annotations[keys.GPU_GROUP_CARDS_ANNOTATION] = json.dumps(dict(sorted(cards.items())))
    m["annotations"] = annotations
    return {**node, "metadata": m}


def _with_type(body: Json, api_version: str, kind: str) -> Json:
    if body.get("kind") == kind and body.get("apiVersion"):
        return body
    return {**body, "apiVersion": api_version, "kind": kind}


def bindrequest_owner_uid(br: Mapping[str, Any]) -> str | None:
    for ref in meta(br).get("ownerReferences") or []:
        if ref.get("kind") == "Pod":
            return str(ref.get("uid") or "") or None
    return None


@dataclass(slots=True, frozen=True)
class _PodEntry:
    """What ``ClusterCache.view`` reads from one of our pods (as a BindRequest places it)."""

    uid: str
    group: str | None  # its PodGroup annotation
    bound: bool  # the pod itself names a node
    created: float
    gpu_groups: tuple[tuple[str, str], ...]  # (node, GPU group) it uses while live
    document: Document  # holds the manifest read (so its id stays its own)
    facts: PodFacts  # what the build reads of it, read here once

    @staticmethod
    def of(ns: str, name: str, pod: Json, placed: Json) -> _PodEntry:
        m = meta(pod)
        node = (placed.get("spec") or {}).get("nodeName")
        used: tuple[tuple[str, str], ...] = ()
        if node and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
            used = tuple(
                (str(node), one)
                for gpu_groups in groups.shared_pod_groups(placed)
                for one in gpu_groups.split(",")
            )
        group = (m.get("annotations") or {}).get(keys.POD_GROUP_ANNOTATION)
        return _PodEntry(
            uid=str(m.get("uid") or f"{ns}/{name}"),
            group=str(group) if group else None,
            bound=bool((pod.get("spec") or {}).get("nodeName")),
            created=_created(m),
            gpu_groups=used,
            document=Document(f"Pod {ns}/{name}", placed),
            facts=PodFacts.of(placed),
        )


def _created(m: Mapping[str, Any]) -> float:
    try:
        return parse_time(m.get("creationTimestamp")) or 0.0
    except ValueError:
        return 0.0  # unreadable: as old as can be, so it waits for no grace period


def _placed_by_bindrequest(pod: Json, br: Json | None) -> Json:
    """The pod as the scheduler should see it: bound where a live BindRequest puts it."""
    spec = pod.get("spec") or {}
    if br is None or spec.get("nodeName"):
        return pod
    if (br.get("status") or {}).get("phase") == _FAILED:
        return pod
    owner = bindrequest_owner_uid(br)
    if owner is not None and owner != meta(pod).get("uid"):
        return pod  # a request for an earlier pod of the same name
    br_spec = br.get("spec") or {}
    node = br_spec.get("selectedNode")
    if not node:
        return pod
    placed = {**pod, "spec": {**spec, "nodeName": node}}
    selected = br_spec.get("selectedGPUGroups") or []
    if selected:
        m = dict(meta(pod))
        m["labels"] = {**(m.get("labels") or {}), keys.GPU_GROUP_LABEL: ",".join(selected)}
        placed["metadata"] = m
    return placed
