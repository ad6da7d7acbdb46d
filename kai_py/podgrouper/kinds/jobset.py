"""JobSet (jobset.x-k8s.io): one PodGroup per JobSet, a subgroup per replicated job
whose children are its replicas (one leaf subgroup per Job), as KAI's JobSet grouper."""

from __future__ import annotations

from typing import Final

from kai_py.api import keys
from kai_py.api.podgroup import SubGroup
from kai_py.podgrouper.kinds.common import (
    Plan,
    Workload,
    annotation_path,
    invalid,
    label_path,
    mapping,
    needs_manifest,
    non_negative_int,
)
from kai_py.podgrouper.kinds.topology import template_constraint

REPLICATED_JOB_LABEL: Final = "jobset.sigs.k8s.io/replicatedjob-name"
JOB_INDEX_LABEL: Final = "jobset.sigs.k8s.io/job-index"


def jobset(workload: Workload) -> Plan:
    top = workload.top
    needs_manifest(top)
    replicated = top.spec().get("replicatedJobs")
    if not isinstance(replicated, list) or not replicated:
        raise invalid(top, "spec.replicatedJobs", "is missing or empty: the JobSet runs no pods")
    sub_groups: list[SubGroup] = []
    for i, item in enumerate(replicated):
        rj = mapping(item)
        where = f"spec.replicatedJobs[{i}]"
        name = rj.get("name")
        if not isinstance(name, str) or not name:
            raise invalid(top, f"{where}.name", "is missing")
        replicas = non_negative_int(rj.get("replicas", 1), top, f"{where}.replicas")
        template = mapping(rj.get("template"))
        parallelism = non_negative_int(
            mapping(template.get("spec")).get("parallelism", 1),
            top,
            f"{where}.template.spec.parallelism",
        )
        override = mapping(mapping(template.get("metadata")).get("annotations")).get(
            keys.BATCH_MIN_MEMBER_ANNOTATION
        )
        leaf_min = parallelism
        if override is not None:
            path = f"{where}.template.{annotation_path(keys.BATCH_MIN_MEMBER_ANNOTATION)}"
            leaf_min = non_negative_int(override, top, path, minimum=1)
        topology = template_constraint(template, top, f"{where}.template")
        sub_groups.append(SubGroup(name=name, min_sub_group=replicas))
        sub_groups.extend(
            SubGroup(
                name=f"{name}-replica-{index}",
                min_member=leaf_min,
                parent=name,
                topology_constraint=topology,
            )
            for index in range(replicas)
        )
    labels = workload.pod.labels
    for key in (REPLICATED_JOB_LABEL, JOB_INDEX_LABEL):
        if not labels.get(key):
            # The JobSet controller labels every pod; without it the pod has no replica.
            raise invalid(workload.pod, label_path(key), "is missing on a JobSet's pod")
    leaf = f"{labels[REPLICATED_JOB_LABEL]}-replica-{labels[JOB_INDEX_LABEL]}"
    if not any(group.name == leaf for group in sub_groups):
        raise invalid(
            workload.pod,
            label_path(JOB_INDEX_LABEL),
            f'names replica "{leaf}", which JobSet {top.name} does not have',
        )
    return Plan(
        owner=top,
        min_sub_group=_min_sub_group(workload, len(replicated)),
        sub_groups=tuple(sub_groups),
        pod_sub_group=leaf,
    )


def _min_sub_group(workload: Workload, count: int) -> int:
    """All replicated jobs start together, unless the JobSet starts them in order
    (its controller makes one at a time) or the user asks for fewer."""
    top = workload.top
    raw = top.annotations.get(keys.BATCH_MIN_MEMBER_ANNOTATION)
    if raw is not None:
        path = annotation_path(keys.BATCH_MIN_MEMBER_ANNOTATION)
        return min(non_negative_int(raw, top, path, minimum=1), count)
    order = mapping(top.spec().get("startupPolicy")).get("startupPolicyOrder")
    return 1 if order == "InOrder" else count
