"""LeaderWorkerSet (leaderworkerset.x-k8s.io): one PodGroup per replica group (a
leader and its workers), with a leader and a workers subgroup, as KAI's LWS grouper."""

from __future__ import annotations

from typing import Final

from kai_py.api.podgroup import SubGroup
from kai_py.podgrouper.kinds.common import (
    GrouperWarning,
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
SEGMENT_SIZE_ANNOTATION: Final = "kai.scheduler/segment-size"
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
    sub_groups = [SubGroup(name=LEADER, min_member=1)]
    if min_member > 1:
        sub_groups.append(SubGroup(name=WORKERS, min_member=min_member - 1))
    warnings: tuple[GrouperWarning, ...] = ()
    segmented = "subGroupSize" in mapping(template.get("subGroupPolicy")) or (
        SEGMENT_SIZE_ANNOTATION in top.annotations
    )
    if segmented:
        # Not applied yet: said once per workload, and the group keeps its two subgroups.
        field = (
            "spec.leaderWorkerTemplate.subGroupPolicy.subGroupSize"
            if "subGroupSize" in mapping(template.get("subGroupPolicy"))
            else annotation_path(SEGMENT_SIZE_ANNOTATION)
        )
        warnings = (
            GrouperWarning(
                top.event_ref(),
                field,
                "segments of a replica group are not applied by kai-py; "
                "the group has one leader and one workers subgroup",
            ),
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
        pod_sub_group=LEADER if is_leader else (WORKERS if min_member > 1 else None),
        warnings=warnings,
    )
