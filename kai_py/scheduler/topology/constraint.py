"""A job's topology constraint read against the Topology it names.

A constraint that cannot be applied (no such Topology, a level that is not one of
its levels, no level at all, a preferred level wider than the required one) keeps
the job pending with a message naming the PodGroup field and its value: the job
asked to be kept together, and placing it anywhere would break that silently.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kai_py.scheduler.model import Topology, TopologyConstraint

_FIELD = "spec.topologyConstraint"


@dataclass(slots=True, frozen=True)
class Levels:
    """A constraint resolved: its Topology and the indices of its levels (widest = 0)."""

    topology: Topology
    required: int | None
    preferred: int | None


def _levels_text(topology: Topology) -> str:
    return ", ".join(
        f"{label} ({topology.aliases[i]})"
        if i < len(topology.aliases) and topology.aliases[i]
        else label
        for i, label in enumerate(topology.levels)
    )


def resolve(
    constraint: TopologyConstraint, topologies: Mapping[str, Topology], field: str = _FIELD
) -> Levels | str:
    """The constraint's levels, or why it cannot be applied (``field`` and value named)."""
    topology = topologies.get(constraint.topology)
    if topology is None:
        return (
            f"{field}.topology: Topology {constraint.topology!r} does not exist; "
            "the job waits until it is created"
        )
    found: dict[str, int | None] = {}
    for name, value in (
        ("requiredTopologyLevel", constraint.required),
        ("preferredTopologyLevel", constraint.preferred),
    ):
        if value is None:
            found[name] = None
            continue
        index = topology.level_of(value)
        if index is None:
            return (
                f"{field}.{name}: {value!r} is not a level of Topology {topology.name!r} "
                f"(its levels: {_levels_text(topology)})"
            )
        found[name] = index
    required, preferred = found["requiredTopologyLevel"], found["preferredTopologyLevel"]
    if required is None and preferred is None:
        return (
            f"{field}: names Topology {topology.name!r} but neither requiredTopologyLevel "
            "nor preferredTopologyLevel"
        )
    if required is not None and preferred is not None and preferred < required:
        return (
            f"{field}.preferredTopologyLevel: {constraint.preferred!r} is wider than the "
            f"requiredTopologyLevel {constraint.required!r}; the preferred level must be "
            "the required one or narrower"
        )
    return Levels(topology, required, preferred)
