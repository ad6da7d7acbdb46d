"""Decisions -> API writes.

``plan`` turns one cycle's decisions into a list of ``Write`` (method, path,
body, lane), using pure functions that are tested on their own; ``Writer.apply``
sends them, concurrently and each on its own: a failed write is logged and
the others go on (the next cycle retries what is still true then). With a
``BackgroundWriter`` the cycle waits for the URGENT lane only (binds,
evictions, failed-request deletions); status writes and Events follow in the
background, coalesced per object. Writes by name carry the object's uid as a
precondition. Every
write is idempotent or guarded by the cached state, so a cycle that decides
the same thing again writes nothing new:

- binds: a BindRequest named after the pod, owned by it (409 = already there);
- pipelined pods: ``status.nominatedNodeName`` (only when it changes);
- evictions: the pod's eviction subresource (429 from a PodDisruptionBudget:
  skipped and logged). One that gets no answer or a server error is sent again
  in the background until it is done or the pod is gone, replaced or finished:
  the next cycle would not decide it again (its gang's other members are gone
  by then, so it no longer looks like a victim) and a gang would be left half
  evicted;
- events: core/v1 Events; a repeat of the same event (object, type, reason,
  message) bumps the count of the first one instead of making a new one;
- pods that stay unschedulable: condition ``PodScheduled=False``, reason
  ``Unschedulable`` (when it changes);
- PodGroup ``status.schedulingConditions`` and ``status.resourcesStatus``,
  Queue ``status.allocated``/``allocatedNonPreemptible``/``requested`` and the
  PodGroup annotation ``kai.scheduler/stale-since``: only when they change.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from kai_py import metrics
from kai_py.api import keys
from kai_py.api.bindrequest import SIGNATURE_ANNOTATION, BindRequest, format_portion, signature
from kai_py.api.objects import meta, parse_time
from kai_py.api.quantities import ResourceAmounts, from_resource_map, to_resource_map
from kai_py.apiclient.kube import (
    MERGE_PATCH,
    STRATEGIC_MERGE_PATCH,
    TRANSIENT_CODES,
    Kube,
    KubeError,
    NotLeader,
    path_of,
    send,
)
from kai_py.scheduler.model import (
    ALLOCATED,
    PENDING,
    PIPELINED,
    RUNNING,
    Job,
    Node,
    Task,
    quota_gpus,
)
from kai_py.scheduler.reasons import Reason, sentences
from kai_py.scheduler.resources import Res
from kai_py.scheduler.session import Decisions, Event, QueueFigures
from kai_py.state.builder import Built
from kai_py.state.cache import BINDREQUESTS, PODGROUPS, PODS, QUEUES, ClusterCache, View
from kai_py.state.partition import DEFAULT_POOL_NAME
from kai_py.state.passmemo import PassMemo
from kai_py.writes.positions import Position, exact, position_patch, positions

log = logging.getLogger(__name__)
Json = dict[str, Any]

COMPONENT: Final = "kai-scheduler"
MESSAGE_LIMIT: Final = 1024
DEFAULT_BACKOFF_LIMIT: Final = 3
SCHEDULING_CONDITION_TYPE: Final = "UnschedulableOnNodePool"
DEFAULT_NODE_POOL: Final = DEFAULT_POOL_NAME  # unlabelled nodes' pool, as KAI names it
_API_VERSIONS: Final = {
    "Pod": "v1",
    "PodGroup": f"{keys.GROUP}/{keys.PODGROUP_VERSION}",
    "Queue": f"{keys.GROUP}/{keys.QUEUE_VERSION}",
    "PriorityClass": "scheduling.k8s.io/v1",
}


def rfc3339(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# ------------------------------------------------------------ pure builders
def bindrequest_manifest(
    task: Task,
    pod_uid: str,
    node: Node | None,
    backoff_limit: int = DEFAULT_BACKOFF_LIMIT,
    pool_labels: Mapping[str, str] | None = None,
    sign_key: bytes | None = None,
) -> Json:
    """The BindRequest for a bind decision: named after the pod, owned by it, signed
    with ``sign_key`` when there is one (the binder checks it).

    Written as a plain manifest (a burst makes thousands per cycle; the model's
    validate-and-dump took a tenth of a millisecond each); tests check that the
    BindRequest model reads it back unchanged. ``pool_labels`` put it in the node pool
    of the shard that made it (as KAI's): only that shard watches it."""
    assert task.node_name is not None, "a bind decision names its node"
    spec: Json = {
        "podName": task.name,
        "selectedNode": task.node_name,
    }
    if task.is_shared:
        portion = task.portion_on(node) if node is not None else task.gpu_fraction
        spec["receivedResourceType"] = "Fraction"
        spec["receivedGPU"] = {
            "count": task.gpu_devices,
            "portion": format_portion(min(1.0, portion)),
        }
        spec["selectedGPUGroups"] = list(task.gpu_groups)
    else:
        gpus = round(task.request.gpu)
        spec["receivedResourceType"] = "Regular"
        spec["receivedGPU"] = {"count": gpus, "portion": format_portion(1.0 if gpus else 0.0)}
    spec["backoffLimit"] = backoff_limit
    manifest: Json = {
        "apiVersion": BindRequest.API_VERSION,
        "kind": BindRequest.KIND,
        "metadata": {
            "name": task.name,
            "namespace": task.namespace,
            "labels": {"selected-node": task.node_name, **(pool_labels or {})},
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Pod", "name": task.name, "uid": pod_uid}
            ],
        },
        "spec": spec,
    }
    if sign_key is not None:
        manifest["metadata"]["annotations"] = {SIGNATURE_ANNOTATION: signature(sign_key, manifest)}
    return manifest


def event_manifest(
    event: Event,
    *,
    name: str,
    uid: str | None,
    count: int,
    first: float,
    last: float,
    component: str = COMPONENT,
) -> Json:
    """A core/v1 Event (what ``kubectl describe`` shows)."""
    involved: Json = {
        "kind": event.kind,
        "name": event.name,
        "apiVersion": _API_VERSIONS.get(event.kind, "v1"),
    }
    if event.namespace:
        involved["namespace"] = event.namespace
    if uid:
        involved["uid"] = uid
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": event_namespace(event)},
        "involvedObject": involved,
        "reason": event.reason,
        "message": event.message[:MESSAGE_LIMIT],
        "type": event.type,
        "source": {"component": component},
        "reportingComponent": component,
        "count": count,
        "firstTimestamp": rfc3339(first),
        "lastTimestamp": rfc3339(last),
    }


def event_namespace(event: Event) -> str:
    return event.namespace or "default"  # events of cluster-scoped objects live in default


def event_name(event: Event) -> str:
    return f"{event.name[:200]}.{uuid.uuid4().hex[:16]}"


def _pod_condition(pod: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if isinstance(cond, Mapping) and cond.get("type") == kind:
            return cond
    return None


def unschedulable_patch(pod: Mapping[str, Any], message: str, now: float) -> Json | None:
    """A pods/status strategic-merge patch for PodScheduled=False, or None if already so."""
    message = message[:MESSAGE_LIMIT]
    current = _pod_condition(pod, "PodScheduled")
    if (
        current is not None
        and current.get("status") == "False"
        and current.get("reason") == "Unschedulable"
        and current.get("message") == message
    ):
        return None
    since = rfc3339(now)
    if current is not None and current.get("status") == "False":
        since = str(current.get("lastTransitionTime") or since)
    return with_uid(
        {
            "status": {
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": message,
                        "lastProbeTime": None,
                        "lastTransitionTime": since,
                    }
                ]
            }
        },
        pod,
    )


def nominated_patch(pod: Mapping[str, Any], node: str | None) -> Json | None:
    if (pod.get("status") or {}).get("nominatedNodeName") == node:
        return None
    return with_uid({"status": {"nominatedNodeName": node}}, pod)


def with_uid(patch: Json, obj: Mapping[str, Any] | None) -> Json:
    """``patch`` with the object's uid as a precondition: the API server refuses it (409)
    when the name now belongs to another object (deleted and made again)."""
    uid = meta(obj).get("uid") if obj is not None else None
    if uid:
        patch.setdefault("metadata", {})["uid"] = uid
    return patch


def kai_amounts(res: Res) -> ResourceAmounts:
    """Scheduler units -> KAI's status units (GPUs, millicores, MB)."""
    return ResourceAmounts(gpu=res.gpu, cpu=res.cpu, memory=res.memory / 1e6)


def _resource_map(res: Res) -> dict[str, int | str]:
    return dict(_map_items(res.cpu, res.memory, res.gpu))


# A cluster has few distinct resource figures (job shapes times pod counts), and a plan
# formats three per PodGroup: each distinct one is formatted once. Items, not a dict,
# so that what a caller changes is its own copy.
@functools.lru_cache(maxsize=8192)
def _map_items(cpu: float, memory: float, gpu: float) -> tuple[tuple[str, int | str], ...]:
    return tuple(to_resource_map(kai_amounts(_rounded(Res(cpu, memory, gpu)))).items())


@functools.lru_cache(maxsize=8192)
def _read_back(items: tuple[tuple[str, object], ...]) -> tuple[tuple[str, int | str], ...]:
    """A stored status map as it would be written again (raises on a bad value)."""
    return tuple(to_resource_map(from_resource_map(dict(items))).items())  # type: ignore[arg-type]


def _rounded(res: Res) -> Res:
    return Res(round(res.cpu, 3), round(res.memory, 0), round(res.gpu, 6))


def _same_map(current: object, wanted: dict[str, int | str]) -> bool:
    if not isinstance(current, dict):
        return False
    try:
        return dict(_read_back(tuple(current.items()))) == wanted
    except (TypeError, ValueError):
        return False


def queue_status_patch(
    queue: Mapping[str, Any],
    figures: QueueFigures | None,
    children: Sequence[str] = (),
    orphan: str | None = None,
    now: float = 0.0,
) -> Json | None:
    """The status a Queue should have, or None when it has it: its figures, the names of
    its child queues (``kubectl get queues -o wide`` shows them) and KAI's ``Orphan``
    condition while its parent does not exist (``orphan``: why). A queue left out of
    the cycle has no figures (None): only its condition is written."""
    status = queue.get("status") or {}
    patch: Json = {}
    if figures is not None:
        wanted = {
            "allocated": _resource_map(figures.allocated),
            "allocatedNonPreemptible": _resource_map(figures.allocated_non_preemptible),
            "requested": _resource_map(figures.requested),
            "fairShare": _resource_map(figures.fair_share),
        }
        same_children = list(status.get("childQueues") or []) == list(children)
        if not (same_children and all(_same_map(status.get(k), v) for k, v in wanted.items())):
            patch.update(wanted)
            if not same_children:
                patch["childQueues"] = list(children) or None  # null removes the field
        by_model = (
            {m: round(g, 6) for m, g in sorted(figures.gpu_models.items())}
            if figures.gpu_models
            else None
        )
        if status.get("allocatedByGpuModel") != by_model:
            patch["allocatedByGpuModel"] = by_model  # null removes it (gpuModels gone)
    conditions = _orphan_conditions(status, orphan, now)
    if conditions is not None:
        patch["conditions"] = conditions or None  # null removes the field
    return with_uid({"status": patch}, queue) if patch else None


def _orphan_conditions(
    status: Mapping[str, Any], orphan: str | None, now: float
) -> list[Json] | None:
    """The Queue's conditions with ``Orphan`` set (``orphan``: why) or cleared (None),
    or None when they already are so. Other conditions are kept as they are."""
    current = [dict(c) for c in status.get("conditions") or [] if isinstance(c, Mapping)]
    others = [c for c in current if c.get("type") != "Orphan"]
    had = next((c for c in current if c.get("type") == "Orphan"), None)
    if orphan is None:
        return None if had is None or had.get("status") != "True" else others
    message = orphan[:MESSAGE_LIMIT]
    if had is not None and had.get("status") == "True" and had.get("message") == message:
        return None
    since = rfc3339(now)
    if had is not None and had.get("status") == "True":
        since = str(had.get("lastTransitionTime") or since)
    condition = {
        "type": "Orphan",
        "status": "True",
        "reason": "ParentQueueNotFound",
        "message": message,
        "lastTransitionTime": since,
    }
    return [*others, condition]


def podgroup_phase(job: Job) -> str | None:
    """Running once minMember of its pods hold their resources (bound or running),
    Pending while some wait; None (unchanged) when no pod of it is live any more."""
    holding = waiting = 0
    for task in job.tasks:  # one plain loop: this runs for every PodGroup in every cycle
        status = task.status
        if status is RUNNING or status is ALLOCATED:
            holding += 1
        elif status is PENDING or status is PIPELINED:
            waiting += 1
    if holding and holding >= job.min_alive:  # members that Succeeded count towards it
        return "Running"
    if waiting or holding:
        return "Pending"
    return None


@dataclass(slots=True, frozen=True)
class JobResources:
    allocated: Res
    allocated_non_preemptible: Res
    requested: Res


def job_resources(job: Job, nodes: Mapping[str, Node]) -> JobResources:
    """What a job's pods hold and ask for after the cycle's decisions."""
    # Plain floats: this runs for every PodGroup in every cycle.
    a_cpu = a_memory = a_gpu = r_cpu = r_memory = r_gpu = 0.0
    for task in job.tasks:
        request = task.request
        if task.gpu_fraction > 0 or task.gpu_memory_mib > 0:  # shared: counts by its node
            gpu = task.gpu_on(nodes.get(task.node_name) if task.node_name else None)
        else:
            gpu = request.gpu
            if task.extended is not None:
                gpu += quota_gpus(task.extended)
        r_cpu += request.cpu
        r_memory += request.memory
        r_gpu += gpu
        status = task.status
        if status is RUNNING or status is ALLOCATED:
            a_cpu += request.cpu
            a_memory += request.memory
            a_gpu += gpu
    allocated = Res(a_cpu, a_memory, a_gpu)
    return JobResources(
        allocated, allocated if not job.preemptible else Res(), Res(r_cpu, r_memory, r_gpu)
    )


def status_key(
    podgroup: Mapping[str, Any],
    reasons: list[Reason],
    resources: JobResources,
    phase: str | None,
    position_moved: bool = False,
) -> tuple[object, ...] | None:
    """What a PodGroup's wanted status depends on; None when the PodGroup has no
    resourceVersion to tell its versions apart.

    Comparing a PodGroup's wanted status with its stored one formats and parses nine
    resource quantities plus its conditions; at 10,000 PodGroups that is a large share
    of a cycle that changes almost none of them. When this key is the one a plan found
    the status right for, it is right now too (the cache's ``status_memo``). Only
    "right, nothing to write" is remembered; a PodGroup that needs a patch is compared
    in full every time."""
    version = meta(podgroup).get("resourceVersion")
    if not version:
        return None
    figures = tuple(
        (r.cpu, r.memory, r.gpu)
        for r in (resources.allocated, resources.allocated_non_preemptible, resources.requested)
    )
    why = tuple((r.code, r.message, repr(r.details)) for r in reasons)
    # The position is in the key only as "moved by a step": a line that shifts a little
    # every cycle must not make every waiting PodGroup miss the memo.
    return (version, why, figures, phase, position_moved)


def _queue_details(details: Mapping[str, Any]) -> Json | None:
    q = details.get("queueDetails")
    if not isinstance(q, Mapping) or not q.get("name"):
        return None
    out: Json = {"name": q["name"]}
    names = {
        "deserved": "queueDeservedResources",
        "allocated": "queueAllocatedResources",
        "limit": "queueResourceLimits",
        "requested": "queueRequestedResources",
    }
    for ours, theirs in names.items():
        values = q.get(ours)
        if isinstance(values, Mapping):
            res = Res.of({k: float(v) for k, v in values.items() if isinstance(v, int | float)})
            amounts = kai_amounts(res)
            out[theirs] = {
                k: v
                for k, v in to_resource_map(
                    ResourceAmounts(*(-1 if x == float("inf") else x for x in amounts))
                ).items()
            }
    return out


def scheduling_conditions(
    reasons: list[Reason], now: float, node_pool: str = DEFAULT_NODE_POOL
) -> list[Json]:
    if not reasons:
        return []
    entries: list[Json] = []
    for r in reasons:
        entry: Json = {"reason": r.code, "message": r.message[:MESSAGE_LIMIT]}
        q = _queue_details(r.details)
        if q is not None:
            entry["details"] = {"queueDetails": q}
        entries.append(entry)
    message = sentences(r.message for r in reasons)
    return [
        {
            "type": SCHEDULING_CONDITION_TYPE,
            "nodePool": node_pool,
            "status": "True",
            "reason": reasons[0].code,
            "message": message[:MESSAGE_LIMIT],
            "reasons": entries,
            "lastTransitionTime": rfc3339(now),
            "transitionID": "0",
        }
    ]


def _condition_key(conds: object) -> list[tuple[object, ...]]:
    if not isinstance(conds, list):
        return []
    out: list[tuple[object, ...]] = []
    for c in conds:
        if not isinstance(c, Mapping):
            continue
        reasons = tuple(
            (r.get("reason"), r.get("message"), repr(r.get("details")))
            for r in c.get("reasons") or []
            if isinstance(r, Mapping)
        )
        out.append((c.get("type"), c.get("nodePool"), c.get("status"), c.get("message"), reasons))
    return out


def podgroup_status_patch(
    podgroup: Mapping[str, Any],
    reasons: list[Reason],
    resources: JobResources,
    now: float,
    phase: str | None = None,
    node_pool: str = DEFAULT_NODE_POOL,
    position: Position | None = None,
) -> Json | None:
    status = podgroup.get("status") or {}
    wanted_conditions = scheduling_conditions(reasons, now, node_pool)
    patch: Json = {}
    current = status.get("schedulingConditions")
    if _condition_key(current) != _condition_key(wanted_conditions):
        previous = current[0] if isinstance(current, list) and current else None
        if wanted_conditions and isinstance(previous, Mapping):
            with contextlib.suppress(TypeError, ValueError):
                wanted_conditions[0]["transitionID"] = str(int(previous.get("transitionID", 0)) + 1)
        if wanted_conditions or current:
            patch["schedulingConditions"] = wanted_conditions
    wanted_resources = {
        "allocated": _resource_map(resources.allocated),
        "allocatedNonPreemptible": _resource_map(resources.allocated_non_preemptible),
        "requested": _resource_map(resources.requested),
    }
    current_resources = status.get("resourcesStatus") or {}
    if not all(_same_map(current_resources.get(k), v) for k, v in wanted_resources.items()):
        patch["resourcesStatus"] = wanted_resources
    if phase is not None and status.get("phase") != phase:
        patch["phase"] = phase
    stored = status.get("queuePosition")
    moved, value = position_patch(stored, position)
    # A write sent anyway carries the exact position; by itself it waits for a step.
    if moved or (patch and not exact(stored, position)):
        patch["queuePosition"] = value
    return with_uid({"status": patch}, podgroup) if patch else None


def stale_annotation_patch(podgroup: Mapping[str, Any], since: float | None) -> Json | None:
    current = (meta(podgroup).get("annotations") or {}).get(keys.STALE_SINCE_ANNOTATION)
    if since is None:
        if current is None:
            return None
        return with_uid(
            {"metadata": {"annotations": {keys.STALE_SINCE_ANNOTATION: None}}}, podgroup
        )
    if current is not None:
        try:
            parsed = parse_time(current)
        except ValueError:
            parsed = None
        if parsed is not None and abs(parsed - since) < 1.0:
            return None
    return with_uid(
        {"metadata": {"annotations": {keys.STALE_SINCE_ANNOTATION: rfc3339(since)}}}, podgroup
    )


def ungate_patch(pod: Mapping[str, Any], now: float) -> Json:
    """Removes kai-py's queue-admission gate, and only it (by its name: other gates and
    their order stay as they are), and notes when (the pod's quota reservation counts
    from then). The uid makes it miss a pod deleted and made again with the same name."""
    return with_uid(
        {
            "metadata": {"annotations": {keys.QUEUE_ADMITTED_ANNOTATION: rfc3339(now)}},
            "spec": {"schedulingGates": [{"name": keys.QUEUE_ADMISSION_GATE, "$patch": "delete"}]},
        },
        pod,
    )


def eviction_body(namespace: str, name: str, uid: str | None = None) -> Json:
    body: Json = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": namespace},
    }
    if uid:  # never evict a pod made since under the same name
        body["deleteOptions"] = {"preconditions": {"uid": uid}}
    return body


# ---------------------------------------------------------------- the plan
#: Write lanes, most urgent first. A cycle waits for its URGENT writes only (binds,
#: evictions, deletions of failed BindRequests); STATUS (pod conditions, nominated
#: nodes, PodGroup/Queue status) and EVENTS go to a background writer that the next
#: cycle does not wait for, which sends STATUS before EVENTS and keeps only the newest
#: queued write per object and kind.
URGENT: Final = 0
STATUS: Final = 1
EVENTS: Final = 2


@dataclass(slots=True)
class Write:
    what: str  # for logs: "bind default/p1 -> node-1"
    method: str
    path: str
    body: Json | None = None
    lane: int = URGENT
    #: Writes with one key replace each other while queued (the newest wins).
    key: str | None = None
    content_type: str = "application/json"
    ok_codes: tuple[int, ...] = ()  # answers that mean "already done"
    skip_codes: tuple[int, ...] = ()  # answers that mean "not now" (logged at info)
    # Called after success with the answer, or with None when an ok_code said it was done.
    done: Callable[[Json | None], None] | None = None
    failed: Callable[[KubeError], None] | None = None
    #: Set on evictions: after no answer or a server error the write is sent again in
    #: the background (``BackgroundWriter.retry``) for as long as this says it is wanted.
    retry: Callable[[], bool] | None = None


@dataclass(slots=True)
class _EventRecord:
    namespace: str
    name: str
    count: int
    first: float
    last: float
    written_count: int
    written_at: float


@dataclass(slots=True)
class EventRecorder:
    """Aggregates repeated events: one Event object per (object, type, reason, message).

    The first occurrence is written at once; repeats bump the count in memory
    and are written at most every ``refresh`` seconds. Records not seen for
    ``forget_after`` seconds are dropped.
    """

    refresh: float = 10.0
    forget_after: float = 3600.0
    component: str = COMPONENT
    records: dict[tuple[str, str, str, str, str, str], _EventRecord] = field(default_factory=dict)

    def writes(
        self, events: list[Event], uids: ObjectUids | Mapping[tuple[str, str, str], str], now: float
    ) -> list[Write]:
        out: list[Write] = []
        for event in events:
            key = (event.kind, event.namespace, event.name, event.type, event.reason, event.message)
            record = self.records.get(key)
            uid = uids.get((event.kind, event.namespace, event.name))
            if record is None:
                name = event_name(event)
                record = _EventRecord(event_namespace(event), name, 1, now, now, 1, now)
                self.records[key] = record
                body = event_manifest(
                    event,
                    name=name,
                    uid=uid,
                    count=1,
                    first=now,
                    last=now,
                    component=self.component,
                )
                out.append(
                    Write(
                        f"event {event.reason} {event.kind} {event.object}",
                        "POST",
                        path_of("", "v1", "events", record.namespace),
                        body,
                        lane=EVENTS,
                        failed=self._forget(key),
                    )
                )
                continue
            record.count += 1
            record.last = now
            if now - record.written_at < self.refresh:
                continue
            record.written_count, record.written_at = record.count, now
            out.append(
                Write(
                    f"event {event.reason} {event.kind} {event.object} x{record.count}",
                    "PATCH",
                    path_of("", "v1", "events", record.namespace, record.name),
                    {"count": record.count, "lastTimestamp": rfc3339(now)},
                    content_type=MERGE_PATCH,
                    lane=EVENTS,
                    key=f"event-count {record.namespace}/{record.name}",
                    failed=self._forget(key),
                )
            )
        for key, record in list(self.records.items()):
            if now - record.last > self.forget_after:
                del self.records[key]
        return out

    def _forget(self, key: tuple[str, str, str, str, str, str]) -> Callable[[KubeError], None]:
        def forget(exc: KubeError) -> None:
            self.records.pop(key, None)  # gone or never made: the next repeat creates it

        return forget


def bindrequest_writes(view: View, cache: ClusterCache | None = None) -> list[Write]:
    """Deletions of Failed (or orphaned) BindRequests, so the pod is decided again."""
    out: list[Write] = []
    for ns, name in view.failed_bindrequests:
        br = cache.get(BINDREQUESTS, ns, name) if cache is not None else None
        uid = meta(br).get("uid") if br is not None else None

        def done(_: Json | None, ns: str = ns, name: str = name) -> None:
            if cache is not None:
                cache.forget(BINDREQUESTS, ns, name)

        out.append(
            Write(
                f"delete failed BindRequest {ns}/{name}",
                "DELETE",
                path_of(keys.GROUP, keys.BINDREQUEST_VERSION, "bindrequests", ns, name),
                # Only the request that was seen Failed: a new one of the same name stays.
                {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}}
                if uid
                else None,
                ok_codes=(404,),
                skip_codes=(409,),  # a newer request of that name: left alone
                done=done,
            )
        )
    return out


def _seen_by(cache: ClusterCache | None, kind: str) -> Callable[[Json | None], None] | None:
    """A write's ``done``: its answer (the object as the API server now stores it) goes
    into the cache, as its watch event will. Without an answer (a 409 or 404 taken as
    done) the watch has, or will have, the real object."""
    if cache is None:
        return None

    def seen(answer: Json | None) -> None:
        if answer and meta(answer).get("name"):
            cache.observe(kind, "MODIFIED", answer)

    return seen


def _still_running(
    cache: ClusterCache | None, namespace: str, name: str, uid: str
) -> Callable[[], bool] | None:
    """An eviction's ``retry``: while the cache holds that very pod (same uid), not
    being deleted and not finished. A pod that is gone, replaced, being deleted or
    finished holds nothing any more: the eviction has nothing left to do."""
    if cache is None:
        return None

    def running() -> bool:
        pod = cache.get(PODS, namespace, name)
        if pod is None or meta(pod).get("uid") != uid or meta(pod).get("deletionTimestamp"):
            return False
        return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")

    return running


def _still_needed(
    cache: ClusterCache,
    pg: Mapping[str, Any],
    ns: str,
    name: str,
    patch: Json,
    reasons: list[Reason],
    resources: JobResources,
    now: float,
    phase: str | None,
    node_pool: str,
    position: Position | None,
) -> Json | None:
    """``patch``, made again against the PodGroup as the cache holds it now: the view is
    as old as the cycle, and the answer of the last cycle's write for it (the very
    status wanted now) may have come in since."""
    current = cache.get(PODGROUPS, ns, name)
    if current is None or current is pg or meta(current).get("uid") != meta(pg).get("uid"):
        return patch
    return podgroup_status_patch(current, reasons, resources, now, phase, node_pool, position)


def plan(
    view: View,
    built: Built,
    decisions: Decisions,
    now: float,
    recorder: EventRecorder,
    cache: ClusterCache | None = None,
    backoff_limit: int = DEFAULT_BACKOFF_LIMIT,
    sign_key: bytes | None = None,
) -> list[Write]:
    """All writes for one cycle's decisions (``sign_key``: the BindRequests' signing key)."""
    nodes = {n.name: n for n in built.snapshot.nodes}
    writes: list[Write] = []
    pool, pool_labels = view.partition.name, view.partition.labels()
    # The answers of binds and status writes are seen at once, so the next cycle does
    # not decide a pod again, nor plan (and send) a status again, before the watch
    # delivers them; that event then changes nothing.
    bound, podgroup_written, queue_written = (
        _seen_by(cache, BINDREQUESTS),
        _seen_by(cache, PODGROUPS),
        _seen_by(cache, QUEUES),
    )
    for task in decisions.binds:
        pod = view.pods.get(task.uid)
        if pod is None:
            continue
        body = bindrequest_manifest(
            task, task.uid, nodes.get(task.node_name or ""), backoff_limit, pool_labels, sign_key
        )
        writes.append(
            Write(
                f"bind {task.key} -> {task.node_name}",
                "POST",
                path_of(keys.GROUP, keys.BINDREQUEST_VERSION, "bindrequests", task.namespace),
                body,
                ok_codes=(409,),
                done=bound,
            )
        )
    for task in decisions.pipelined:
        pod = view.pods.get(task.uid)
        patch = nominated_patch(pod, task.node_name) if pod is not None else None
        if patch is not None:
            writes.append(
                Write(
                    f"nominate {task.key} -> {task.node_name}",
                    "PATCH",
                    path_of("", "v1", "pods", task.namespace, task.name, "status"),
                    patch,
                    content_type=MERGE_PATCH,
                    ok_codes=(404, 409),
                    lane=STATUS,
                    key=f"nominate {task.namespace}/{task.name}",
                )
            )
    for eviction in decisions.evictions:
        task = eviction.task
        writes.append(
            Write(
                f"evict {task.key} ({eviction.action})",
                "POST",
                path_of("", "v1", "pods", task.namespace, task.name, "eviction"),
                eviction_body(task.namespace, task.name, task.uid),
                ok_codes=(404, 409),
                skip_codes=(429,),
                retry=_still_running(cache, task.namespace, task.name, task.uid),
            )
        )
    for uid in sorted({eviction.task.job_uid for eviction in decisions.evictions}):
        # As KAI: the evicted job's PodGroup remembers when, so that its preemption
        # delay counts from its last eviction (it does not take back at once).
        pg = view.podgroups.get(uid)
        if pg is None:
            continue
        ns, name = str(meta(pg).get("namespace") or ""), str(meta(pg).get("name") or "")
        writes.append(
            Write(
                f"PodGroup {ns}/{name} last eviction",
                "PATCH",
                path_of(keys.GROUP, keys.PODGROUP_VERSION, "podgroups", ns, name),
                with_uid(
                    {"metadata": {"annotations": {keys.LAST_EVICTION_ANNOTATION: rfc3339(now)}}},
                    pg,
                ),
                content_type=MERGE_PATCH,
                ok_codes=(404, 409),
                lane=STATUS,
                key=f"podgroup-evicted {ns}/{name}",
            )
        )
    pod_written = _seen_by(cache, PODS) if decisions.ungated else None
    for task in decisions.ungated:
        pod = view.pods.get(task.uid)
        if pod is None:
            continue
        writes.append(
            Write(
                f"admit {task.key} (lift {keys.QUEUE_ADMISSION_GATE})",
                "PATCH",
                path_of("", "v1", "pods", task.namespace, task.name),
                ungate_patch(pod, now),
                content_type=STRATEGIC_MERGE_PATCH,
                ok_codes=(404, 409),
                key=f"ungate {task.namespace}/{task.name}",
                done=pod_written,
            )
        )
    uids = ObjectUids(view)
    for event in decisions.events:
        if event.kind == "Pod" and event.reason == "Unschedulable":
            pod = uids.body("Pod", event.namespace, event.name)
            # The condition holds the whole reason, also where the event only points to it.
            why = decisions.pending_reasons.get(f"{event.namespace}/{event.name}", event.message)
            patch = unschedulable_patch(pod, why, now) if pod is not None else None
            if patch is not None:
                writes.append(
                    Write(
                        f"PodScheduled=False {event.object}",
                        "PATCH",
                        path_of("", "v1", "pods", event.namespace, event.name, "status"),
                        patch,
                        content_type=STRATEGIC_MERGE_PATCH,
                        ok_codes=(404, 409),
                        lane=STATUS,
                        key=f"podscheduled {event.namespace}/{event.name}",
                    )
                )
    writes.extend(recorder.writes([*view.events, *built.events, *decisions.events], uids, now))
    jobs = {j.uid: j for j in built.snapshot.jobs}
    # Kept across cycles by the cache; a view without one (simulate) remembers nothing.
    memo = view.status_memo if view.status_memo is not None else PassMemo()
    in_line = positions(decisions.order, jobs)
    for uid, pg in view.podgroups.items():
        job = jobs.get(uid)
        if job is None:
            continue
        reasons = decisions.reasons.get(uid, [])
        resources, phase = job_resources(job, nodes), podgroup_phase(job)
        position = in_line.get(uid)
        stored = pg.get("status")
        moved = position_patch(
            stored.get("queuePosition") if isinstance(stored, Mapping) else None, position
        )[0]
        # The key is made only to compare with one kept, or to keep it: a first cycle
        # (nothing kept yet) patches most PodGroups and needs none.
        found = memo.get(uid)
        key = status_key(pg, reasons, resources, phase, moved) if found is not None else None
        if key is not None and found == key:
            patch = None
        else:
            patch = podgroup_status_patch(pg, reasons, resources, now, phase, pool, position)
            if patch is None and key is None:
                key = status_key(pg, reasons, resources, phase, moved)
        if patch is None and key is not None:
            memo.keep(uid, key)
        stale_patch = (
            stale_annotation_patch(pg, decisions.stale_since[uid])
            if uid in decisions.stale_since
            else None
        )
        if patch is None and stale_patch is None:
            continue  # the common case: nothing to write, no name needed
        ns, name = str(meta(pg).get("namespace") or ""), str(meta(pg).get("name") or "")
        if patch is not None and cache is not None:
            patch = _still_needed(
                cache, pg, ns, name, patch, reasons, resources, now, phase, pool, position
            )
        if patch is not None:
            writes.append(
                Write(
                    f"PodGroup {ns}/{name} status",
                    "PATCH",
                    path_of(keys.GROUP, keys.PODGROUP_VERSION, "podgroups", ns, name, "status"),
                    patch,
                    content_type=MERGE_PATCH,
                    ok_codes=(404, 409),
                    lane=STATUS,
                    key=f"podgroup-status {ns}/{name}",
                    done=podgroup_written,
                )
            )
        if stale_patch is not None:
            writes.append(
                Write(
                    f"PodGroup {ns}/{name} {keys.STALE_SINCE_ANNOTATION}",
                    "PATCH",
                    path_of(keys.GROUP, keys.PODGROUP_VERSION, "podgroups", ns, name),
                    stale_patch,
                    content_type=MERGE_PATCH,
                    ok_codes=(404, 409),
                    lane=STATUS,
                    key=f"podgroup-stale {ns}/{name}",
                )
            )
    children: dict[str, list[str]] = {}
    for q in sorted(built.snapshot.queues, key=lambda q: q.name):
        if q.parent is not None:
            children.setdefault(q.parent, []).append(q.name)
    # A queue left out has no figures, but its Orphan condition is still set or cleared.
    figures_of: dict[str, QueueFigures | None] = {**dict.fromkeys(view.queues), **decisions.queues}
    if view.partition.value:
        # Queues are shared by every pool and KAI's Queue status has no per-pool field:
        # the default shard alone writes it (shards writing their own pool's figures
        # would overwrite each other every cycle). docs/operator.md, "Node pools".
        figures_of = {}
    for name, figures in figures_of.items():
        queue = view.queues.get(name)
        if queue is None:
            continue  # a queue the builder assumed (default-queue) that is not in the cluster
        patch = queue_status_patch(
            queue, figures, children.get(name, []), view.orphans.get(name), now
        )
        if patch is not None:
            writes.append(
                Write(
                    f"Queue {name} status",
                    "PATCH",
                    path_of(keys.GROUP, keys.QUEUE_VERSION, "queues", None, name, "status"),
                    patch,
                    content_type=MERGE_PATCH,
                    ok_codes=(404, 409),
                    lane=STATUS,
                    key=f"queue-status {name}",
                    done=queue_written,
                )
            )
    memo.done()
    return writes


class ObjectUids:
    """(kind, namespace, name) -> uid of the objects events are about, looked up in the
    view's by-name stores (an index of every pod built per cycle would cost more than
    the lookups)."""

    def __init__(self, view: View) -> None:
        self._by_name = {"Queue": view.queues, "Node": view.nodes}  # cluster-scoped
        self._stores = {"Pod": view.pods_by_name, "PodGroup": view.podgroups_by_name}

    def body(self, kind: str, namespace: str, name: str) -> Json | None:
        if kind in self._by_name:
            return self._by_name[kind].get(name)
        store = self._stores.get(kind)
        if store is None:
            return None
        found = store.get((namespace, name))
        if found is None and namespace == "default":
            found = store.get(("", name))  # an object without a namespace is in "default"
        return found

    def get(self, key: tuple[str, str, str]) -> str | None:
        body = self.body(*key)
        uid = meta(body).get("uid") if body is not None else None
        return str(uid) if uid else None


# ------------------------------------------------------------- the writer
@dataclass(slots=True)
class Outcome:
    done: int = 0
    skipped: int = 0
    failed: int = 0
    failures: list[str] = field(default_factory=list)


class Writer:
    """Sends a plan's writes with a bounded number in flight; never raises for one write.

    With a ``background`` writer, ``apply`` waits for the URGENT writes only and hands
    the others to it (the cycle goes on; see the lanes above).
    """

    def __init__(
        self, kube: Kube, concurrency: int = 8, background: BackgroundWriter | None = None
    ) -> None:
        self.kube = kube
        self.concurrency = concurrency
        self.background = background

    async def apply(self, writes: list[Write]) -> Outcome:
        outcome = Outcome()
        if self.background is not None:
            later = [w for w in writes if w.lane != URGENT]
            writes = [w for w in writes if w.lane == URGENT]
            self.background.submit(later)
        if not writes:
            return outcome
        limit = asyncio.Semaphore(self.concurrency)

        async def one(write: Write) -> None:
            async with limit:
                error = await self._send(write, outcome)
            if error is not None and retried(write, error) and self.background is not None:
                self.background.retry(write)

        await asyncio.gather(*(one(w) for w in writes))
        return outcome

    async def _send(self, write: Write, outcome: Outcome) -> KubeError | None:
        """Sends one write; returns the API's refusal when it failed (not an ok or
        skip code)."""
        started = time.monotonic()
        try:
            answer = await send(
                self.kube, write.method, write.path, write.body, content_type=write.content_type
            )
        except KubeError as exc:
            if exc.code in write.ok_codes:
                outcome.done += 1
                log.debug("write already done", extra={"write": write.what, "error": str(exc)})
                if write.done is not None:
                    write.done(None)
                return None
            if exc.code in write.skip_codes:
                outcome.skipped += 1
                log.info("write skipped", extra={"write": write.what, "error": str(exc)})
                return None
            outcome.failed += 1
            outcome.failures.append(f"{write.what}: {exc}")
            then = "sent again" if retried(write, exc) else "the next cycle retries"
            log.warning(
                "write failed", extra={"write": write.what, "then": then, "error": str(exc)}
            )
            if write.failed is not None:
                write.failed(exc)
            return exc
        except Exception as exc:  # a bug in one write must not stop the others
            outcome.failed += 1
            outcome.failures.append(f"{write.what}: {exc!r}")
            log.exception("write failed", extra={"write": write.what})
            return None
        outcome.done += 1
        log.debug(
            "write done",
            extra={"write": write.what, "duration_s": round(time.monotonic() - started, 3)},
        )
        if write.what.startswith("bind "):
            metrics.record_bind_write(time.monotonic() - started)
        if write.done is not None:
            try:
                write.done(answer)
            except Exception:
                log.exception("after-write hook failed", extra={"write": write.what})
        return None


def retried(write: Write, error: KubeError) -> bool:
    """Whether a failed write is sent again by the background writer: one that asks
    for it, after no answer or a server error (a refusal on its merits, a 403 or a
    400, would be refused again). Never one the leadership fence refused: this
    replica was deposed, and whoever leads now decides that pod afresh."""
    if isinstance(error, NotLeader):
        return False
    return write.retry is not None and error.code in TRANSIENT_CODES


def _same_write(sending: Write | None, write: Write) -> bool:
    return (
        sending is not None
        and sending.method == write.method
        and sending.path == write.path
        and sending.body == write.body
    )


#: A write sent again by ``BackgroundWriter.retry`` waits this long first, then twice
#: as long after each failure, at most the second figure: an API server back from a
#: short fault gets it at once, one that stays down is not asked every 200 ms.
RETRY_DELAY_SECONDS: Final = 0.2
RETRY_MAX_DELAY_SECONDS: Final = 5.0


class BackgroundWriter:
    """The STATUS and EVENTS lanes: queued, coalesced by key, sent by a few workers.

    A write queued under a key that is already queued replaces the older one
    (the newest status is the one that matters); one that says what the write being
    sent under its key says is dropped with it (the next cycle plans a status again
    before the answer is in: it would be sent twice). STATUS writes go before EVENTS.
    At most ``limit`` writes wait per lane; beyond that the oldest are dropped
    (each kind is recomputed by a later cycle from the cache, and events are best
    effort) and counted in ``dropped``.

    It also sends again the URGENT writes that ask for it (``retry``): evictions.
    """

    def __init__(
        self,
        kube: Kube,
        concurrency: int = 8,
        limit: int = 20_000,
        retry_delay: float = RETRY_DELAY_SECONDS,
        retry_max_delay: float = RETRY_MAX_DELAY_SECONDS,
    ) -> None:
        self.writer = Writer(kube)
        self.concurrency = concurrency
        self.limit = limit
        self.retry_delay = retry_delay
        self.retry_max_delay = retry_max_delay
        self.outcome = Outcome()
        self.coalesced = 0
        self.dropped = 0
        self.retried = 0  # writes sent again by ``retry``
        self._retrying: dict[str, asyncio.Task[None]] = {}  # by path
        self._lanes: dict[int, OrderedDict[object, Write]] = {
            STATUS: OrderedDict(),
            EVENTS: OrderedDict(),
        }
        self._wake: asyncio.Event | None = None
        self._workers: list[asyncio.Task[None]] = []
        self._sending = 0
        self._in_flight: dict[object, Write] = {}  # by key: the writes being sent

    @property
    def queued(self) -> int:
        """Writes waiting or being sent."""
        return sum(len(q) for q in self._lanes.values()) + self._sending

    def submit(self, writes: list[Write]) -> None:
        for write in writes:
            lane = self._lanes[EVENTS if write.lane == EVENTS else STATUS]
            key: object = write.key if write.key is not None else object()
            if key in lane:
                del lane[key]
                self.coalesced += 1
            if _same_write(self._in_flight.get(key), write):
                self.coalesced += 1
                continue
            lane[key] = write
            while len(lane) > self.limit:
                lane.popitem(last=False)
                self.dropped += 1
        if writes:
            self._start()
            assert self._wake is not None
            self._wake.set()

    def _start(self) -> None:
        if self._wake is None:
            self._wake = asyncio.Event()
        self._workers = [t for t in self._workers if not t.done()]
        while len(self._workers) < self.concurrency:
            self._workers.append(asyncio.get_running_loop().create_task(self._work()))

    def _next(self) -> tuple[object, Write] | None:
        for lane in (self._lanes[STATUS], self._lanes[EVENTS]):
            if lane:
                return lane.popitem(last=False)
        return None

    async def _work(self) -> None:
        assert self._wake is not None
        while True:
            found = self._next()
            if found is None:
                self._wake.clear()
                await self._wake.wait()
                continue
            key, write = found
            self._sending += 1
            self._in_flight[key] = write
            try:
                await self.writer._send(write, self.outcome)
            finally:
                self._sending -= 1
                if self._in_flight.get(key) is write:
                    del self._in_flight[key]

    def retry(self, write: Write) -> None:
        """Send ``write`` again until it is done, is refused on its merits, or its
        ``retry`` says it is no longer wanted, waiting longer after each failure.
        One retry per path: a write already being retried is not started twice."""
        running = self._retrying.get(write.path)
        if running is not None and not running.done():
            return
        task = asyncio.get_running_loop().create_task(self._retry(write))
        self._retrying[write.path] = task

    async def _retry(self, write: Write) -> None:
        delay = self.retry_delay
        try:
            while True:
                await asyncio.sleep(delay)
                if write.retry is None or not write.retry():
                    log.info("write no longer needed, not sent again", extra={"write": write.what})
                    return
                self.retried += 1
                error = await self.writer._send(write, self.outcome)
                if error is None or not retried(write, error):
                    return
                delay = min(delay * 2, self.retry_max_delay)
        finally:
            if self._retrying.get(write.path) is asyncio.current_task():
                del self._retrying[write.path]

    async def drain(self, timeout: float = 30.0) -> None:
        """Until nothing is queued (tests, a clean stop)."""
        deadline = time.monotonic() + timeout
        while self.queued and time.monotonic() < deadline:
            await asyncio.sleep(0.01)

    async def close(self) -> None:
        tasks = [*self._workers, *self._retrying.values()]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._workers = []
        self._retrying = {}
