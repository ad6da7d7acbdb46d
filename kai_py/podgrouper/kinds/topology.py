"""A subgroup's topology constraint, read from a pod template's annotations."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from kai_py.api.podgroup import TopologyConstraint
from kai_py.podgrouper.kinds.common import Obj, annotation_path, invalid, mapping

TOPOLOGY: Final = "kai.scheduler/topology"
REQUIRED: Final = "kai.scheduler/topology-required-placement"
PREFERRED: Final = "kai.scheduler/topology-preferred-placement"


def template_constraint(
    template: Mapping[str, Any], owner: Obj, template_path: str
) -> TopologyConstraint | None:
    """The constraint a pod template's annotations ask for; None when no level is
    set. A level without the topology's name is an error (it cannot be applied)."""
    annotations = mapping(mapping(template.get("metadata")).get("annotations"))
    required = str(annotations.get(REQUIRED) or "")
    preferred = str(annotations.get(PREFERRED) or "")
    if not required and not preferred:
        return None
    topology = str(annotations.get(TOPOLOGY) or "")
    if not topology:
        raise invalid(
            owner,
            f"{template_path}.{annotation_path(TOPOLOGY)}",
            "is required when a topology placement annotation is set there",
        )
    return TopologyConstraint(
        topology=topology,
        required_topology_level=required or None,
        preferred_topology_level=preferred or None,
    )
