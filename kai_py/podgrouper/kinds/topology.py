"""The topology annotations read into a constraint: the workload's own, and a sub-group's
from its pod template."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kai_py.api import keys
from kai_py.api.podgroup import TopologyConstraint
from kai_py.podgrouper.kinds.common import Obj, annotation_path, invalid, mapping


def annotated_constraint(annotations: Mapping[str, Any]) -> TopologyConstraint | None:
    """The constraint the three topology annotations ask for, as written (an empty
    value is unset); None when none is set. The topology's name may be missing: each
    caller says what that means where it reads them."""
    topology = str(annotations.get(keys.TOPOLOGY_ANNOTATION) or "")
    required = str(annotations.get(keys.TOPOLOGY_REQUIRED_ANNOTATION) or "")
    preferred = str(annotations.get(keys.TOPOLOGY_PREFERRED_ANNOTATION) or "")
    if not (topology or required or preferred):
        return None
    return TopologyConstraint(
        topology=topology or None,
        required_topology_level=required or None,
        preferred_topology_level=preferred or None,
    )


def template_constraint(
    template: Mapping[str, Any], owner: Obj, template_path: str
) -> TopologyConstraint | None:
    """A sub-group's constraint from its pod template's annotations; None when no level
    is set (a name alone asks for nothing of a sub-group)."""
    found = annotated_constraint(mapping(mapping(template.get("metadata")).get("annotations")))
    if found is None or not (found.required_topology_level or found.preferred_topology_level):
        return None
    if not found.topology:
        # Refused here, unlike the workload's own constraint (``rules``): the template's
        # author is told at once which template lacks the name, not after the PodGroup
        # is made and its sub-group's constraint is not applied.
        raise invalid(
            owner,
            f"{template_path}.{annotation_path(keys.TOPOLOGY_ANNOTATION)}",
            "is required when a topology placement annotation is set there",
        )
    return found
