"""Ray (ray.io): a RayCluster's head and worker groups form one gang, with a subgroup
per group at its minimum (minReplicas when set, else replicas, times numOfHosts);
a RayJob's or RayService's pods join the group of their RayCluster's sizes, named
after the RayJob or RayService. As KAI's Ray groupers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from kai_py.api.podgroup import SubGroup
from kai_py.podgrouper.kinds.common import (
    Obj,
    Plan,
    Workload,
    invalid,
    mapping,
    needs_manifest,
    non_negative_int,
)
from kai_py.podgrouper.kinds.topology import template_constraint

GROUP_LABEL: Final = "ray.io/group"
HEAD_GROUP: Final = "headgroup"
PRIORITY_LABEL: Final = "ray.io/priority-class-name"
CLUSTER: Final = "RayCluster"

#: Where a RayJob / RayService names its current RayCluster, in the order read.
CLUSTER_NAME_PATHS: Final[dict[str, tuple[tuple[str, ...], ...]]] = {
    "RayJob": (("status", "rayClusterName"),),
    "RayService": (
        ("status", "activeServiceStatus", "rayClusterName"),
        ("status", "pendingServiceStatus", "rayClusterName"),
    ),
}


def _nested(obj: Mapping[str, Any] | None, path: tuple[str, ...]) -> Any:
    value: Any = obj or {}
    for key in path:
        value = mapping(value).get(key)
    return value


def cluster_name(top: Obj) -> str | None:
    """The name of the RayCluster a RayJob or RayService runs on (its status)."""
    for path in CLUSTER_NAME_PATHS.get(top.kind, ()):
        name = _nested(top.manifest, path)
        if isinstance(name, str) and name:
            return name
    return None


def _cluster(workload: Workload) -> Obj:
    top = workload.top
    if top.kind == CLUSTER:
        return top
    name = cluster_name(top)
    if name:
        found = workload.related(top.api_version, CLUSTER, name)
        if found is not None:
            return Obj.of(found, top.namespace)
    # The operator may not have written its status yet: the RayCluster in the pod's
    # own owner chain is the same one.
    for owner in workload.chain:
        if owner.kind == CLUSTER and owner.group == top.group and owner.manifest is not None:
            return owner
    paths = " or ".join("status." + ".".join(p[1:]) for p in CLUSTER_NAME_PATHS[top.kind])
    raise invalid(
        top,
        paths,
        "names no RayCluster the pod-grouper can read (is the ray-operator running and "
        "the RayCluster made?); the pods are grouped once it is",
    )


def _worker_counts(cluster: Obj, spec: Mapping[str, Any], where: str) -> int:
    if spec.get("suspended") is True:
        return 0
    replicas = non_negative_int(spec.get("replicas", 0), cluster, f"{where}.replicas")
    minimum = non_negative_int(spec.get("minReplicas", 0), cluster, f"{where}.minReplicas")
    if minimum > replicas:
        raise invalid(
            cluster,
            f"{where}.replicas",
            f"({replicas}) is below minReplicas ({minimum})",
        )
    hosts = non_negative_int(spec.get("numOfHosts", 1), cluster, f"{where}.numOfHosts")
    # An autoscaled group needs only its minimum to start: the gang is elastic above it.
    return (minimum or replicas) * hosts


def ray(workload: Workload) -> Plan:
    top = workload.top
    needs_manifest(top)
    cluster = _cluster(workload)
    spec = cluster.spec()
    head = template_constraint(
        mapping(mapping(spec.get("headGroupSpec")).get("template")),
        cluster,
        "spec.headGroupSpec.template",
    )
    sub_groups = [SubGroup(name=HEAD_GROUP, min_member=1, topology_constraint=head)]
    total = 1
    workers = spec.get("workerGroupSpecs")
    for i, item in enumerate(workers if isinstance(workers, list) else []):
        group = mapping(item)
        where = f"spec.workerGroupSpecs[{i}]"
        count = _worker_counts(cluster, group, where)
        if count == 0:
            continue
        total += count
        name = group.get("groupName")
        sub_groups.append(
            SubGroup(
                name=name if isinstance(name, str) and name else f"worker-group-{i}",
                min_member=count,
                topology_constraint=template_constraint(
                    mapping(group.get("template")), cluster, f"{where}.template"
                ),
            )
        )
    pod_group = workload.pod.labels.get(GROUP_LABEL)
    # A pod of no group of the cluster (a RayJob's submitter) is in the gang but no subgroup.
    in_sub_group = pod_group if any(g.name == pod_group for g in sub_groups) else None
    return Plan(
        owner=top,
        min_member=total,
        sub_groups=tuple(sub_groups),
        pod_sub_group=in_sub_group,
        priority_override=top.labels.get(PRIORITY_LABEL) or None,
    )


def related(top: Obj) -> list[tuple[str, str, str]]:
    """The RayCluster a RayJob or RayService names, for the caller to fetch."""
    name = cluster_name(top) if top.kind in CLUSTER_NAME_PATHS else None
    return [(top.api_version, CLUSTER, name)] if name else []
