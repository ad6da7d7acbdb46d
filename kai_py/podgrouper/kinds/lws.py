"""LeaderWorkerSet (leaderworkerset.x-k8s.io): one PodGroup per replica group (a
leader and its workers), with a leader and a workers subgroup, or, for a group cut
into segments (``subGroupPolicy.subGroupSize``, ``kai.scheduler/segment-size``), a
subgroup per segment, as KAI's LWS grouper."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from kai_py.api import keys
from kai_py.api.podgroup import SubGroup, TopologyConstraint
from kai_py.podgrouper.kinds.common import (
    GrouperWarning,
    Obj,
    Plan,
    Workload,
    annotation_path,
    group_name_for,
    invalid,
    label_path,
    mapping,
    needs_manifest,
    non_negative_int,
)

SIZE_ANNOTATION: Final = "leaderworkerset.sigs.k8s.io/size"
GROUP_INDEX_LABEL: Final = "leaderworkerset.sigs.k8s.io/group-index"
WORKER_INDEX_LABEL: Final = "leaderworkerset.sigs.k8s.io/worker-index"
#: More segments than this in one replica group is refused (as KAI refuses it).
MAX_SEGMENTS: Final = 10_000
LEADER: Final = "leader"
WORKERS: Final = "workers"


def leader_worker_set(workload: Workload) -> Plan:
    top, pod = workload.top, workload.pod
    needs_manifest(top)
    template = mapping(top.spec().get("leaderWorkerTemplate"))
    if "size" not in template:
        raise invalid(top, "spec.leaderWorkerTemplate.size", "is missing")
    size = non_negative_int(template["size"], top, "spec.leaderWorkerTemplate.size", minimum=1)
    policy = top.spec().get("startupPolicy") or "LeaderCreated"
    worker_index = pod.labels.get(WORKER_INDEX_LABEL)
    if worker_index is not None:
        non_negative_int(worker_index, pod, label_path(WORKER_INDEX_LABEL))
    is_leader = worker_index == "0"
    if policy == "LeaderCreated":
        min_member = size
    elif policy == "LeaderReady":
        # The workers are made once the leader is ready: until the leader is placed
        # the group is the leader alone; then it is the whole group (the size the
        # pod was made with, if it says).
        if is_leader and not (workload.pod_spec.get("nodeName")):
            min_member = 1
        else:
            raw = pod.annotations.get(SIZE_ANNOTATION, "")
            min_member = int(raw) if raw.isdigit() else size
    else:
        raise invalid(
            top,
            "spec.startupPolicy",
            f'must be "LeaderCreated" or "LeaderReady", got "{policy}"',
        )
    warnings: list[GrouperWarning] = []
    segment = _segment_size(top, template, min_member) if min_member > 1 else None
    if segment is None:
        sub_groups = [SubGroup(name=LEADER, min_member=1)]
        if min_member > 1:
            sub_groups.append(SubGroup(name=WORKERS, min_member=min_member - 1))
        pod_sub_group = LEADER if is_leader else (WORKERS if min_member > 1 else None)
    else:
        if worker_index is None:
            raise invalid(pod, label_path(WORKER_INDEX_LABEL), "is missing on a segmented LWS pod")
        topology = _segment_topology(workload, template, warnings)
        sub_groups, pod_sub_group = _segments(
            top, template, min_member, segment, int(worker_index), topology
        )
    name = group_name_for(top.name, top.uid, top.kind)
    group_index = pod.labels.get(GROUP_INDEX_LABEL, "")
    if group_index.isdigit():
        name = f"{name}-group-{int(group_index)}"
    return Plan(
        owner=top,
        name=name,
        min_member=min_member,
        sub_groups=tuple(sub_groups),
        pod_sub_group=pod_sub_group,
        warnings=tuple(warnings),
    )


def _segment_size(top: Obj, template: Mapping[str, Any], size: int) -> int | None:
    """Pods per segment of a replica group (None: not segmented): the LWS's
    ``subGroupPolicy.subGroupSize``, else the segment-size annotation of the LWS,
    else that of its worker template."""
    policy = mapping(template.get("subGroupPolicy"))
    if "subGroupSize" in policy:
        where, raw = "spec.leaderWorkerTemplate.subGroupPolicy.subGroupSize", policy["subGroupSize"]
    elif keys.SEGMENT_SIZE_ANNOTATION in top.annotations:
        where = annotation_path(keys.SEGMENT_SIZE_ANNOTATION)
        raw = top.annotations[keys.SEGMENT_SIZE_ANNOTATION]
    else:
        worker_annotations = _worker_annotations(template)
        if keys.SEGMENT_SIZE_ANNOTATION not in worker_annotations:
            return None
        where = "spec.leaderWorkerTemplate.workerTemplate." + annotation_path(
            keys.SEGMENT_SIZE_ANNOTATION
        )
        raw = worker_annotations[keys.SEGMENT_SIZE_ANNOTATION]
    segment = non_negative_int(raw, top, where, minimum=2)
    if segment > size:
        raise invalid(top, where, f"({segment}) is above the replica group's size ({size})")
    return segment


def _worker_annotations(template: Mapping[str, Any]) -> Mapping[str, Any]:
    return mapping(
        mapping(mapping(template.get("workerTemplate")).get("metadata")).get("annotations")
    )


def _segment_topology(
    workload: Workload, template: Mapping[str, Any], warnings: list[GrouperWarning]
) -> TopologyConstraint | None:
    return segment_topology(workload, _worker_annotations(template), "worker template", warnings)


def segment_topology(
    workload: Workload,
    worker: Mapping[str, Any],
    template: str,
    warnings: list[GrouperWarning],
) -> TopologyConstraint | None:
    """Each segment's topology constraint (LWS and PyTorchJob alike): the pod's
    annotations, else those of the workers' pod template (``worker``, called
    ``template`` in the warning); the topology's name may also come from the top owner."""
    pod = workload.pod.annotations

    def value(key: str) -> str:
        return str(pod.get(key) or worker.get(key) or "")

    required = value(keys.SEGMENT_REQUIRED_ANNOTATION)
    preferred = value(keys.SEGMENT_PREFERRED_ANNOTATION)
    if not required and not preferred:
        return None
    topology = value(keys.TOPOLOGY_ANNOTATION) or workload.top.annotations.get(
        keys.TOPOLOGY_ANNOTATION, ""
    )
    if not topology:
        warnings.append(
            GrouperWarning(
                workload.top.event_ref(),
                annotation_path(keys.TOPOLOGY_ANNOTATION),
                f"is not set on the pod, its {template} or the {workload.top.kind}: "
                "the segments' placement annotations are ignored",
            )
        )
        return None
    return TopologyConstraint(
        topology=topology,
        required_topology_level=required or None,
        preferred_topology_level=preferred or None,
    )


def _segments(
    top: Obj,
    template: Mapping[str, Any],
    size: int,
    segment: int,
    worker_index: int,
    topology: TopologyConstraint | None,
) -> tuple[list[SubGroup], str]:
    """Segments of ``segment`` pods (``segment-<i>``) and the pod's subgroup. With
    policy LeaderWorker the leader is in segment 0 (as a ``leader`` and a ``workers``
    subgroup under it); with LeaderExcluded it is a ``leader`` subgroup of its own."""
    policy = mapping(template.get("subGroupPolicy")).get("subGroupPolicyType") or "LeaderWorker"
    # When the workers divide into whole segments the leader is one more pod of the first.
    whole = (size - 1) % segment == 0

    def index(worker: int) -> int:
        if worker == 0:
            return 0
        return (worker - 1) // segment if whole else worker // segment

    count = index(size - 1) + 1
    if count > MAX_SEGMENTS:
        raise invalid(
            top,
            "spec.leaderWorkerTemplate.subGroupPolicy.subGroupSize",
            f"makes {count} segments of a replica group, above {MAX_SEGMENTS}",
        )
    members = [0] * count
    for worker in range(size):
        members[index(worker)] += 1
    names = [f"segment-{i}" for i in range(count)]
    mine = index(worker_index)
    if policy == "LeaderExcluded":
        if not whole:
            raise invalid(
                top,
                "spec.leaderWorkerTemplate.subGroupPolicy.subGroupPolicyType",
                f"LeaderExcluded needs the {size - 1} workers to divide into segments of {segment}",
            )
        members[0] -= 1  # the leader has its own subgroup
        groups = [SubGroup(name=LEADER, min_member=1)]
        groups += [
            SubGroup(name=n, min_member=m, topology_constraint=topology)
            for n, m in zip(names, members, strict=True)
        ]
        return groups, LEADER if worker_index == 0 else names[mine]
    if policy != "LeaderWorker":
        raise invalid(
            top,
            "spec.leaderWorkerTemplate.subGroupPolicy.subGroupPolicyType",
            f'must be "LeaderWorker" or "LeaderExcluded", got "{policy}"',
        )
    # Segment 0 holds the leader and workers subgroups, so it counts subgroups, not pods.
    groups = [SubGroup(name=names[0], min_sub_group=2, topology_constraint=topology)]
    groups += [
        SubGroup(name=n, min_member=m, topology_constraint=topology)
        for n, m in zip(names[1:], members[1:], strict=True)
    ]
    groups += [
        SubGroup(name=LEADER, min_member=1, parent=names[0]),
        SubGroup(name=WORKERS, min_member=members[0] - 1, parent=names[0]),
    ]
    if worker_index == 0:
        return groups, LEADER
    return groups, WORKERS if mine == 0 else names[mine]
