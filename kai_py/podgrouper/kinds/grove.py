"""Grove (grove.io PodCliqueSet / PodGangSet, and NVIDIA Dynamo's DynamoGraphDeployment
above one): a pod is grouped by the PodGang it is labelled with (scheduler.grove.io),
one subgroup per clique of the gang at its minReplicas, under a parent subgroup per
group of cliques the PodGang names, as KAI's Grove grouper."""

from __future__ import annotations

from typing import Final

from kai_py.api.podgroup import SubGroup, TopologyConstraint
from kai_py.podgrouper.kinds.common import (
    Obj,
    Plan,
    Workload,
    invalid,
    label_path,
    mapping,
    non_negative_int,
)

PODGANG_LABEL: Final = "grove.io/podgang"
PODGANG_API: Final = "scheduler.grove.io/v1alpha1"
PODGANG: Final = "PodGang"


def _constraint(value: object, topology: str, gang: Obj, where: str) -> TopologyConstraint | None:
    pack = mapping(mapping(value).get("packConstraint"))
    required, preferred = pack.get("required"), pack.get("preferred")
    if not required and not preferred:
        return None
    if not topology:
        raise invalid(
            gang,
            where,
            'needs the topology\'s name (annotation "grove.io/topology-name" or '
            '"kai.scheduler/topology" on the PodGang)',
        )
    return TopologyConstraint(
        topology=topology,
        required_topology_level=str(required) if required else None,
        preferred_topology_level=str(preferred) if preferred else None,
    )


def _parents(gang: Obj, topology: str) -> tuple[list[SubGroup], dict[str, str]]:
    """The PodGang's groups of cliques (``spec.topologyConstraintGroupConfigs``): a
    parent subgroup each, all of its cliques required; and clique -> parent."""
    parents: list[SubGroup] = []
    parent_of: dict[str, str] = {}
    configs = gang.spec().get("topologyConstraintGroupConfigs")
    for i, item in enumerate(configs if isinstance(configs, list) else []):
        config = mapping(item)
        where = f"spec.topologyConstraintGroupConfigs[{i}]"
        name = config.get("name")
        if not isinstance(name, str) or not name:
            raise invalid(gang, f"{where}.name", "is missing")
        cliques = [str(c) for c in config.get("podGroupNames") or []]
        if not cliques:
            continue
        parent_of.update(dict.fromkeys(cliques, name))
        parents.append(
            SubGroup(
                name=name,
                min_sub_group=len(cliques),
                topology_constraint=_constraint(
                    config.get("topologyConstraint"), topology, gang, f"{where}.topologyConstraint"
                ),
            )
        )
    return parents, parent_of


def podgang(workload: Workload) -> Plan:
    pod = workload.pod
    gang_name = pod.labels.get(PODGANG_LABEL)
    if not gang_name:
        raise invalid(pod, label_path(PODGANG_LABEL), "is missing on a Grove pod")
    found = workload.related(PODGANG_API, PODGANG, gang_name)
    if found is None:
        raise invalid(
            pod,
            label_path(PODGANG_LABEL),
            f'names PodGang "{gang_name}", which the pod-grouper cannot read; '
            "the pod is grouped once it can",
        )
    gang = Obj.of(found, pod.namespace)
    spec = gang.spec()
    topology = gang.annotations.get("grove.io/topology-name") or gang.annotations.get(
        "kai.scheduler/topology", ""
    )
    sub_groups, parents = _parents(gang, topology)
    total = 0
    pod_sub_group = None
    groups = spec.get("podgroups")
    for i, item in enumerate(groups if isinstance(groups, list) else []):
        clique = mapping(item)
        where = f"spec.podgroups[{i}]"
        name = clique.get("name")
        if not isinstance(name, str) or not name:
            raise invalid(gang, f"{where}.name", "is missing")
        minimum = non_negative_int(
            clique.get("minReplicas"), gang, f"{where}.minReplicas", minimum=1
        )
        total += minimum
        for ref in clique.get("podReferences") or []:
            ref_ns = mapping(ref).get("namespace") or gang.namespace
            if ref_ns != gang.namespace:
                raise invalid(
                    gang,
                    f"{where}.podReferences",
                    f'names a pod of namespace "{ref_ns}"; a PodGang groups pods of its own only',
                )
            if mapping(ref).get("name") == pod.name:
                pod_sub_group = name
        sub_groups.append(
            SubGroup(
                name=name,
                min_member=minimum,
                parent=parents.get(name),
                topology_constraint=_constraint(
                    clique.get("topologyConstraint"), topology, gang, f"{where}.topologyConstraint"
                ),
            )
        )
    own = spec.get("priorityClassName")
    return Plan(
        owner=gang,
        min_member=total,
        sub_groups=tuple(sub_groups),
        pod_sub_group=pod_sub_group,
        priority_class=own if isinstance(own, str) and own else None,
        extra_lookup=(gang,),
    )


def related(pod: Obj) -> list[tuple[str, str, str]]:
    name = pod.labels.get(PODGANG_LABEL)
    return [(PODGANG_API, PODGANG, name)] if name else []
