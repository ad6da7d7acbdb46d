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
from dataclasses import dataclass
from typing import Any

from kai_py.api import keys
from kai_py.api.common import ObjectMeta
from kai_py.api.durations import parse_duration
from kai_py.api.podgroup import PodGroup, PodGroupSpec, Preemptibility, TopologyConstraint
from kai_py.podgrouper import kinds
from kai_py.podgrouper.kinds.common import (
    GrouperWarning,
    Invalid,
    Obj,
    ObjectRef,
    Plan,
    Related,
    Workload,
    group_name_for,
    group_of,
    label_path,
    mapping,
    no_related,
)
from kai_py.podgrouper.kinds.kubeflow import KUBEFLOW_REPLICA_SPECS
from kai_py.podgrouper.kinds.topology import annotated_constraint

__all__ = [
    "KUBEFLOW_REPLICA_SPECS",
    "Grouped",
    "GrouperWarning",
    "GroupingFailed",
    "GroupingResult",
    "LeftAlone",
    "ObjectRef",
    "group_name_for",
    "group_pod",
    "related_objects",
]


@dataclass(frozen=True)
class Grouped:
    """The pod belongs to ``pod_group``; annotate it with ``group_name`` (and label it
    with ``sub_group``, its subgroup, when its kind makes subgroups)."""

    group_name: str
    pod_group: PodGroup
    warnings: tuple[GrouperWarning, ...] = ()
    sub_group: str | None = None


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


def _controller_ref(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The owner to follow: the controller reference, else the first one."""
    refs = [
        r
        for r in mapping(obj.get("metadata")).get("ownerReferences") or []
        if type(r) is dict or isinstance(r, Mapping)
    ]
    for ref in refs:
        if ref.get("controller") is True:
            return ref
    return refs[0] if refs else None


def _owner_chain(
    pod: Mapping[str, Any],
    owners: Sequence[Mapping[str, Any]],
    namespace: str,
    top_unreadable: bool = False,
) -> list[Obj]:
    """Owners nearest first. If the last known object still has an owner the
    caller did not pass, that owner is added from its reference, so the top
    owner (and the group's name) is right even with a partial chain; unless
    that owner's kind cannot be read at all (``top_unreadable``): then, as KAI
    does, the last owner that could be read is the top."""
    chain = [Obj.of(owner, namespace) for owner in owners]
    last = owners[-1] if owners else pod
    ref = _controller_ref(last)
    if ref is not None and not top_unreadable:
        chain.append(Obj.from_reference(ref, namespace))
    return chain


def _pod_obj(pod: Mapping[str, Any], namespace: str) -> Obj:
    return Obj.of({**pod, "apiVersion": pod.get("apiVersion") or "v1", "kind": "Pod"}, namespace)


def related_objects(
    pod: Mapping[str, Any], owners: Sequence[Mapping[str, Any]] = (), top_unreadable: bool = False
) -> list[tuple[str, str, str]]:
    """Objects besides the owners that grouping ``pod`` reads (a Grove PodGang, a
    RayJob's RayCluster), as (apiVersion, kind, name), for the caller to fetch and
    pass to ``group_pod`` as ``related``."""
    # Most pods' top owner reads nothing else: answered from the raw manifests.
    top: Mapping[str, Any] | None = owners[-1] if owners else None
    ref = None if top_unreadable else _controller_ref(top if top is not None else pod)
    if ref is None and top is None:
        return []
    where = ref if ref is not None else top
    assert where is not None
    if (group_of(str(where.get("apiVersion") or "")), where.get("kind")) not in kinds.MAY_READ:
        return []
    namespace = str(mapping(pod.get("metadata")).get("namespace") or "default")
    chain = _owner_chain(pod, owners, namespace, top_unreadable)
    return kinds.related(_pod_obj(pod, namespace), chain)


def _first_label(objects: Sequence[Obj], key: str) -> tuple[Obj, str] | None:
    for obj in objects:
        value = obj.labels.get(key)
        if value:
            return obj, value
    return None


def _preemptibility(objects: Sequence[Obj]) -> tuple[Preemptibility | None, list[GrouperWarning]]:
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
        label_path(keys.PREEMPTIBILITY_LABEL),
        f'must be "{keys.PREEMPTIBLE}" or "{keys.NON_PREEMPTIBLE}", got "{value}"; ignored',
    )
    return None, [warning]


def group_pod(
    pod: Mapping[str, Any],
    owners: Sequence[Mapping[str, Any]] = (),
    *,
    scheduler_name: str | None = keys.DEFAULT_SCHEDULER_NAME,
    default_queue: str = keys.DEFAULT_QUEUE,
    default_priority_class: str = keys.DEFAULT_PRIORITY_CLASS,
    related: Related = no_related,
    top_unreadable: bool = False,
    pool_label: str = keys.NODE_POOL_LABEL,
) -> GroupingResult:
    """Decide the PodGroup of ``pod``.

    ``owners`` is the owner chain, nearest first, ending at the top owner.
    ``scheduler_name=None`` groups the pod whatever its ``spec.schedulerName``.
    ``related(apiVersion, kind, name)`` gives the objects ``related_objects`` names.
    ``top_unreadable``: the owner above the last of ``owners`` is of a kind the
    caller may not read (or not served); the pod is grouped by the owners it has.
    Raises ValueError only for a pod that is not a manifest with a name.
    """
    meta = mapping(pod.get("metadata")) if type(pod) is dict or isinstance(pod, Mapping) else {}
    if not meta.get("name"):
        raise ValueError("group_pod needs a pod manifest with metadata.name")
    namespace = str(meta.get("namespace") or "default")
    pod_spec = mapping(pod.get("spec"))
    pod_obj = _pod_obj(pod, namespace)
    named_group = pod_obj.annotations.get(keys.POD_GROUP_ANNOTATION) or None

    if scheduler_name is not None and pod_spec.get("schedulerName") != scheduler_name:
        return LeftAlone(
            f"scheduled by {pod_spec.get('schedulerName') or 'default-scheduler'!s}", named_group
        )

    chain = _owner_chain(pod, owners, namespace, top_unreadable)
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
        workload, grouper = kinds.resolve(Workload(pod_obj, pod_spec, chain, related))
        plan = grouper(workload)
        return _group(
            workload, plan, named_group, default_queue, default_priority_class, pool_label
        )
    except Invalid as bad:
        return GroupingFailed((bad.warning,))


def _group(
    workload: Workload,
    plan: Plan,
    named_group: str | None,
    default_queue: str,
    default_priority_class: str,
    pool_label: str = keys.NODE_POOL_LABEL,
) -> Grouped:
    """The PodGroup of ``plan``: what its kind decided, and what every kind shares
    (queue, priority class, preemptibility and the duration annotations)."""
    pod = workload.pod
    # Owners top-down, then the pod: where labels are looked up, top owner first.
    lookup = [*plan.extra_lookup, *reversed(workload.chain), pod]
    group_owner = plan.owner

    queue_found = _first_label(lookup, keys.QUEUE_LABEL)
    queue = queue_found[1] if queue_found else default_queue
    priority = plan.priority_override or _priority_class(
        lookup,
        workload.pod_spec,
        plan.priority_class,
        plan.default_priority_class or default_priority_class,
    )
    preemptibility, warnings = _preemptibility(lookup)
    warnings[:0] = plan.warnings
    preemption_delay = _duration_annotation(lookup, keys.PREEMPTION_DELAY_ANNOTATION, warnings)
    staleness = _duration_annotation(
        lookup, keys.STALENESS_GRACE_ANNOTATION, warnings, negative_ok=True
    )

    name = plan.name or group_name_for(group_owner.name, group_owner.uid, group_owner.kind)
    if named_group and named_group != name:
        warnings.append(
            GrouperWarning(
                pod.event_ref(),
                f'metadata.annotations["{keys.POD_GROUP_ANNOTATION}"]',
                f'names "{named_group}", but the pod belongs to "{name}" by its owner '
                f"{group_owner.kind} {group_owner.name}; the owner's group is used",
            )
        )
    # minMember and minSubGroup are exclusive: a group of subgroups sets only the latter.
    minimum: dict[str, Any] = (
        {"min_sub_group": plan.min_sub_group}
        if plan.min_sub_group is not None
        else {"min_member": plan.min_member}
    )
    pod_group = PodGroup(
        metadata=ObjectMeta(
            name=name,
            namespace=pod.namespace,
            labels={keys.QUEUE_LABEL: queue, **node_pool_label(workload.top, pod, pool_label)},
            owner_references=[group_owner.owner_reference()],
        ),
        spec=PodGroupSpec(
            **minimum,
            queue=queue,
            priority_class_name=priority,
            preemptibility=preemptibility,
            preemption_delay=preemption_delay,
            staleness_grace_period=staleness,
            sub_groups=list(plan.sub_groups) or None,
            topology_constraint=_group_constraint(workload.top, plan),
        ),
    )
    return Grouped(name, pod_group, tuple(warnings), plan.pod_sub_group)


def _group_constraint(top: Obj, plan: Plan) -> TopologyConstraint | None:
    """The PodGroup's own constraint; a workload's topology name without a placement
    level serves its segments when they have a constraint (segments may take the
    name from the workload), so it is then no constraint of the whole PodGroup."""
    # Copied as KAI's pod-grouper copies it (the pod's own annotations when it has no
    # owner), even without the topology's name: the scheduler then says in a Warning on
    # the PodGroup that it is not applied. Whether the Topology and its levels exist is
    # the scheduler's to say too (the job waits).
    found = annotated_constraint(top.annotations)
    if (
        found is not None
        and not found.required_topology_level
        and not found.preferred_topology_level
        and any(g.topology_constraint is not None for g in plan.sub_groups)
    ):
        return None
    return found


def node_pool_label(top: Obj, pod: Obj, label: str = keys.NODE_POOL_LABEL) -> dict[str, str]:
    """The PodGroup's node-pool label: the top owner's, else the pod's (as KAI's). Only
    the scheduler shard of that pool watches the PodGroup and decides its pods."""
    value = top.labels.get(label, pod.labels.get(label))
    return {label: value} if value is not None else {}


def _duration_annotation(
    lookup: Sequence[Obj], key: str, warnings: list[GrouperWarning], *, negative_ok: bool = False
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


def _priority_class(
    lookup: Sequence[Obj],
    pod_spec: Mapping[str, Any],
    kind_priority: str | None,
    default: str,
) -> str:
    found = _first_label(lookup, keys.PRIORITY_CLASS_LABEL)
    if found:
        return found[1]
    if kind_priority:
        return kind_priority
    if isinstance(pod_spec.get("priorityClassName"), str) and pod_spec["priorityClassName"]:
        return str(pod_spec["priorityClassName"])
    return default
