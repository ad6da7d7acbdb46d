"""A subgroup's topology constraint, read from a pod template's annotations."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kai_py.api import keys
from kai_py.api.podgroup import TopologyConstraint
from kai_py.podgrouper.kinds.common import Obj, annotation_path, invalid, mapping

TOPOLOGY = keys.TOPOLOGY_ANNOTATION
REQUIRED = keys.TOPOLOGY_REQUIRED_ANNOTATION
PREFERRED = keys.TOPOLOGY_PREFERRED_ANNOTATION


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
