"""The pod-grouper: which PodGroup a pod belongs to (docs/operator.md, "The pod-grouper").

A pure function over plain manifests (dicts), so the operator, the simulator
and the tests share one implementation and nothing here talks to Kubernetes:
``group_pod(pod, owners)`` takes a pod and its owner chain (nearest owner
first, up to the top owner) and returns one of

- ``Grouped``: the PodGroup to create (or keep) and its name, which the
  caller writes into the pod's ``pod-group-name`` annotation;
- ``LeftAlone``: not the grouper's business (another scheduler's pod, or a
  bare pod that names a user-made PodGroup itself);
- ``GroupingFailed``: the workload is misconfigured; the pod stays without
  a group, and each warning becomes a ``PodGrouperWarning`` event.

``Grouped`` may carry warnings too: problems that do not stop grouping.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final

from kai_py.api import keys
from kai_py.api.common import ObjectMeta, OwnerReference, object_ref
from kai_py.api.durations import parse_duration
from kai_py.api.podgroup import PodGroup, PodGroupSpec, Preemptibility

# Kubeflow training-operator kinds -> the prefix of their `<x>ReplicaSpecs` field.
KUBEFLOW_REPLICA_SPECS: Final[dict[str, str]] = {
    "PyTorchJob": "pytorchReplicaSpecs",
    "TFJob": "tfReplicaSpecs",
    "MPIJob": "mpiReplicaSpecs",
    "XGBoostJob": "xgbReplicaSpecs",
    "JAXJob": "jaxReplicaSpecs",
    "PaddleJob": "paddleReplicaSpecs",
}

# PodGroup names are DNS subdomains.
_MAX_NAME: Final = 253


@dataclass(frozen=True)
class ObjectRef:
    """The object an event is about."""

    api_version: str
    kind: str
    name: str
    namespace: str | None = None
    uid: str | None = None

    @property
    def ref(self) -> str:
        return object_ref(self.namespace, self.name)


@dataclass(frozen=True)
class GrouperWarning:
    """A problem found while grouping, naming the object and its field."""

    REASON: ClassVar[str] = keys.POD_GROUPER_WARNING_REASON
    EVENT_TYPE: ClassVar[str] = "Warning"

    involved: ObjectRef
    field: str
    problem: str

    @property
    def message(self) -> str:
        """The event message: `Job "ns/train": metadata.annotations[...]: must be ...`."""
        return f'{self.involved.kind} "{self.involved.ref}": {self.field}: {self.problem}'


@dataclass(frozen=True)
class Grouped:
    """The pod belongs to ``pod_group``; annotate it with ``group_name``."""

    group_name: str
    pod_group: PodGroup
    warnings: tuple[GrouperWarning, ...] = ()


@dataclass(frozen=True)
class LeftAlone:
    """The grouper does nothing for this pod. ``group_name`` is the group the pod
    already names, if any."""

    reason: str
    group_name: str | None = None
    warnings: tuple[GrouperWarning, ...] = ()


@dataclass(frozen=True)
class GroupingFailed:
    """The pod cannot be grouped until its workload is fixed."""

    warnings: tuple[GrouperWarning, ...]
    group_name: None = None


GroupingResult = Grouped | LeftAlone | GroupingFailed


class _Invalid(Exception):
    """Internal: a bad field; becomes a GroupingFailed."""

    def __init__(self, warning: GrouperWarning) -> None:
        super().__init__(warning.message)
        self.warning = warning


@dataclass(frozen=True)
class _Obj:
    """The pod or one of its owners. ``manifest`` is None when the object is
    known only from an ownerReference (the caller could not supply it)."""

    api_version: str
    kind: str
    name: str
    uid: str
    namespace: str
    manifest: Mapping[str, Any] | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, manifest: Mapping[str, Any], namespace: str) -> _Obj:
        meta = _mapping(manifest.get("metadata"))
        return cls(
            api_version=str(manifest.get("apiVersion") or ""),
            kind=str(manifest.get("kind") or ""),
            name=str(meta.get("name") or ""),
            uid=str(meta.get("uid") or ""),
            # Owners of a pod live in its namespace (cross-namespace owners are invalid).
            namespace=str(meta.get("namespace") or namespace),
            manifest=manifest,
            labels=_str_map(meta.get("labels")),
            annotations=_str_map(meta.get("annotations")),
        )

    @classmethod
    def from_reference(cls, ref: Mapping[str, Any], namespace: str) -> _Obj:
        return cls(
            api_version=str(ref.get("apiVersion") or ""),
            kind=str(ref.get("kind") or ""),
            name=str(ref.get("name") or ""),
            uid=str(ref.get("uid") or ""),
            namespace=namespace,
        )

    @property
    def group(self) -> str:
        return self.api_version.split("/", 1)[0] if "/" in self.api_version else ""

    def is_kind(self, group: str, kind: str) -> bool:
        return self.kind == kind and self.group == group

    def event_ref(self) -> ObjectRef:
        return ObjectRef(self.api_version, self.kind, self.name, self.namespace, self.uid or None)

    def owner_reference(self) -> OwnerReference:
        return OwnerReference(
            api_version=self.api_version, kind=self.kind, name=self.name, uid=self.uid
        )

    def spec(self) -> Mapping[str, Any]:
        return _mapping((self.manifest or {}).get("spec"))


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _str_map(value: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in _mapping(value).items()}


def _controller_ref(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The owner to follow: the controller reference, else the first one."""
    refs = [
        r
        for r in _mapping(obj.get("metadata")).get("ownerReferences") or []
        if isinstance(r, Mapping)
    ]
    for ref in refs:
        if ref.get("controller") is True:
            return ref
    return refs[0] if refs else None


def _owner_chain(
    pod: Mapping[str, Any], owners: Sequence[Mapping[str, Any]], namespace: str
) -> list[_Obj]:
    """Owners nearest first. If the last known object still has an owner the
    caller did not pass, that owner is added from its reference, so the top
    owner (and the group's name) is right even with a partial chain."""
    chain = [_Obj.of(owner, namespace) for owner in owners]
    last = owners[-1] if owners else pod
    ref = _controller_ref(last)
    if ref is not None:
        chain.append(_Obj.from_reference(ref, namespace))
    return chain


def group_name_for(obj_name: str, uid: str, kind: str) -> str:
    """``pg-<name>-<uid>``, cut to a valid object name. Without a uid (hand-written
    manifests) the kind stands in, so a Job and a Pod of one name do not clash."""
    suffix = uid or kind.lower()
    room = _MAX_NAME - len("pg--") - len(suffix)
    return f"pg-{obj_name[:room]}-{suffix}"


def _first_label(objects: Sequence[_Obj], key: str) -> tuple[_Obj, str] | None:
    for obj in objects:
        value = obj.labels.get(key)
        if value:
            return obj, value
    return None


def _non_negative_int(value: Any, where: _Obj, field_path: str) -> int:
    # YAML may give an int, or a string in an annotation; bools are not numbers.
    if isinstance(value, bool):
        value = repr(value)
    number = int(value.strip()) if isinstance(value, str) and value.strip().isdigit() else value
    # The PodGroup field is an int32.
    if isinstance(number, int) and 0 <= number < 2**31:
        return number
    shown = f'"{value}"' if isinstance(value, str) else repr(value)
    raise _Invalid(
        GrouperWarning(
            where.event_ref(), field_path, f"must be a non-negative integer, got {shown}"
        )
    )


def _batch_min_member(job: _Obj) -> int:
    raw = job.annotations.get(keys.BATCH_MIN_MEMBER_ANNOTATION)
    if raw is None:
        return 1
    path = f'metadata.annotations["{keys.BATCH_MIN_MEMBER_ANNOTATION}"]'
    return _non_negative_int(raw, job, path)


def _kubeflow_min_member(job: _Obj) -> int:
    spec = job.spec()
    policy = _mapping(_mapping(spec.get("runPolicy")).get("schedulingPolicy"))
    if policy.get("minAvailable") is not None:
        return _non_negative_int(
            policy["minAvailable"], job, "spec.runPolicy.schedulingPolicy.minAvailable"
        )
    elastic = _mapping(spec.get("elasticPolicy"))
    if job.kind == "PyTorchJob" and elastic.get("minReplicas") is not None:
        # An elastic PyTorchJob runs with as few as minReplicas workers.
        return _non_negative_int(elastic["minReplicas"], job, "spec.elasticPolicy.minReplicas")
    specs_field = KUBEFLOW_REPLICA_SPECS[job.kind]
    replica_specs = spec.get(specs_field)
    if not isinstance(replica_specs, Mapping) or not replica_specs:
        raise _Invalid(
            GrouperWarning(
                job.event_ref(),
                f"spec.{specs_field}",
                "is missing, and spec.runPolicy.schedulingPolicy.minAvailable is not set: "
                "cannot tell how many pods the job needs",
            )
        )
    total = 0
    for role, replica_spec in replica_specs.items():
        # The training operator defaults replicas to 1.
        replicas = _mapping(replica_spec).get("replicas", 1)
        total += _non_negative_int(replicas, job, f"spec.{specs_field}.{role}.replicas")
    return total


def _preemptibility(objects: Sequence[_Obj]) -> tuple[Preemptibility | None, list[GrouperWarning]]:
    found = _first_label(objects, keys.PREEMPTIBILITY_LABEL)
    if found is None:
        return None, []
    obj, value = found
    if value == keys.PREEMPTIBLE:
        return "preemptible", []
    if value == keys.NON_PREEMPTIBLE:
        return "non-preemptible", []
    # Not fatal: the group falls back to the priority rule (< 100 is preemptible).
    warning = GrouperWarning(
        obj.event_ref(),
        f'metadata.labels["{keys.PREEMPTIBILITY_LABEL}"]',
        f'must be "{keys.PREEMPTIBLE}" or "{keys.NON_PREEMPTIBLE}", got "{value}"; ignored',
    )
    return None, [warning]


def _needs_manifest(obj: _Obj) -> None:
    if obj.manifest is None:
        raise _Invalid(
            GrouperWarning(
                obj.event_ref(),
                "metadata.ownerReferences",
                "owner not available to the pod-grouper; the pod is grouped once it is",
            )
        )


def group_pod(
    pod: Mapping[str, Any],
    owners: Sequence[Mapping[str, Any]] = (),
    *,
    scheduler_name: str | None = keys.DEFAULT_SCHEDULER_NAME,
    default_queue: str = keys.DEFAULT_QUEUE,
    default_priority_class: str = keys.DEFAULT_PRIORITY_CLASS,
) -> GroupingResult:
    """Decide the PodGroup of ``pod``.

    ``owners`` is the owner chain, nearest first, ending at the top owner.
    ``scheduler_name=None`` groups the pod whatever its ``spec.schedulerName``.
    Raises ValueError only for a pod that is not a manifest with a name.
    """
    meta = _mapping(pod.get("metadata")) if isinstance(pod, Mapping) else {}
    if not meta.get("name"):
        raise ValueError("group_pod needs a pod manifest with metadata.name")
    namespace = str(meta.get("namespace") or "default")
    pod_spec = _mapping(pod.get("spec"))
    pod_obj = _Obj.of(
        {**pod, "apiVersion": pod.get("apiVersion") or "v1", "kind": "Pod"}, namespace
    )
    named_group = pod_obj.annotations.get(keys.POD_GROUP_ANNOTATION) or None

    if scheduler_name is not None and pod_spec.get("schedulerName") != scheduler_name:
        return LeftAlone(
            f"scheduled by {pod_spec.get('schedulerName') or 'default-scheduler'!s}", named_group
        )

    chain = _owner_chain(pod, owners, namespace)
    skipper = next(
        (
            o
            for o in [pod_obj, *chain]
            if o.annotations.get(keys.SKIP_PODGROUPER_ANNOTATION) == "true"
        ),
        None,
    )
    if skipper is not None:
        # The user manages the PodGroup (named in the pod's pod-group-name annotation).
        return LeftAlone(
            f'{skipper.kind} {skipper.name} has {keys.SKIP_PODGROUPER_ANNOTATION}: "true"',
            named_group,
        )
    if not chain and named_group:
        return LeftAlone("the pod names its own PodGroup and has no owner", named_group)

    try:
        return _group(pod_obj, pod_spec, chain, named_group, default_queue, default_priority_class)
    except _Invalid as invalid:
        return GroupingFailed((invalid.warning,))


def _group(
    pod: _Obj,
    pod_spec: Mapping[str, Any],
    chain: list[_Obj],
    named_group: str | None,
    default_queue: str,
    default_priority_class: str,
) -> Grouped:
    # Owners top-down, then the pod: where labels are looked up, top owner first.
    lookup = [*reversed(chain), pod]
    top = chain[-1] if chain else pod
    group_owner, min_member = top, 1
    kubeflow_job: _Obj | None = None

    if any(o.is_kind("apps", "Deployment") for o in chain):
        # Serving replicas come and go one by one: each pod is its own group.
        group_owner = pod
        default_priority_class = keys.INFERENCE_PRIORITY_CLASS
    elif (job := _batch_job(chain)) is not None:
        _needs_manifest(job)
        group_owner, min_member = job, _batch_min_member(job)
    elif top.group == keys.KUBEFLOW_GROUP and top.kind in KUBEFLOW_REPLICA_SPECS:
        _needs_manifest(top)
        kubeflow_job = top
        min_member = _kubeflow_min_member(top)

    queue_found = _first_label(lookup, keys.QUEUE_LABEL)
    queue = queue_found[1] if queue_found else default_queue
    priority = _priority_class(lookup, pod_spec, kubeflow_job, default_priority_class)
    preemptibility, warnings = _preemptibility(lookup)
    preemption_delay = _duration_annotation(lookup, keys.PREEMPTION_DELAY_ANNOTATION, warnings)
    staleness = _duration_annotation(
        lookup, keys.STALENESS_GRACE_ANNOTATION, warnings, negative_ok=True
    )

    name = group_name_for(group_owner.name, group_owner.uid, group_owner.kind)
    if named_group and named_group != name:
        warnings.append(
            GrouperWarning(
                pod.event_ref(),
                f'metadata.annotations["{keys.POD_GROUP_ANNOTATION}"]',
                f'names "{named_group}", but the pod belongs to "{name}" by its owner '
                f"{group_owner.kind} {group_owner.name}; the owner's group is used",
            )
        )
    pod_group = PodGroup(
        metadata=ObjectMeta(
            name=name,
            namespace=pod.namespace,
            labels={keys.QUEUE_LABEL: queue, **node_pool_label(top, pod)},
            owner_references=[group_owner.owner_reference()],
        ),
        spec=PodGroupSpec(
            min_member=min_member,
            queue=queue,
            priority_class_name=priority,
            preemptibility=preemptibility,
            preemption_delay=preemption_delay,
            staleness_grace_period=staleness,
        ),
    )
    return Grouped(name, pod_group, tuple(warnings))


def node_pool_label(top: _Obj, pod: _Obj, label: str = keys.NODE_POOL_LABEL) -> dict[str, str]:
    """The PodGroup's node-pool label: the top owner's, else the pod's (as KAI's). Only
    the scheduler shard of that pool watches the PodGroup and decides its pods."""
    value = top.labels.get(label, pod.labels.get(label))
    return {label: value} if value is not None else {}


def _duration_annotation(
    lookup: Sequence[_Obj], key: str, warnings: list[GrouperWarning], *, negative_ok: bool = False
) -> str | None:
    """A duration annotation (top owner first, then the pod); a bad value is ignored, loudly."""
    for obj in lookup:
        value = obj.annotations.get(key)
        if value is None:
            continue
        try:
            seconds = parse_duration(value)
        except ValueError:
            seconds = None
        if seconds is None or (seconds < 0 and not negative_ok):
            warnings.append(
                GrouperWarning(
                    obj.event_ref(),
                    f'metadata.annotations["{key}"]',
                    f"must be a {'' if negative_ok else 'non-negative '}duration such as "
                    f'"30s" or "5m", got "{value}"; ignored',
                )
            )
            continue
        return value
    return None


def _batch_job(chain: list[_Obj]) -> _Obj | None:
    """The batch Job that forms the group: the top owner, or a CronJob's Job
    (one group per run, not one for every run the CronJob ever makes)."""
    if not chain:
        return None
    top = chain[-1]
    if top.is_kind("batch", "Job"):
        return top
    if top.is_kind("batch", "CronJob") and len(chain) >= 2 and chain[-2].is_kind("batch", "Job"):
        return chain[-2]
    return None


def _priority_class(
    lookup: Sequence[_Obj],
    pod_spec: Mapping[str, Any],
    kubeflow_job: _Obj | None,
    default: str,
) -> str:
    found = _first_label(lookup, keys.PRIORITY_CLASS_LABEL)
    if found:
        return found[1]
    if kubeflow_job is not None:
        policy = _mapping(_mapping(kubeflow_job.spec().get("runPolicy")).get("schedulingPolicy"))
        if isinstance(policy.get("priorityClass"), str) and policy["priorityClass"]:
            return str(policy["priorityClass"])
    if isinstance(pod_spec.get("priorityClassName"), str) and pod_spec["priorityClassName"]:
        return str(pod_spec["priorityClassName"])
    return default
