"""Topology (``kai.scheduler/v1alpha1``, cluster-scoped): the levels of a
cluster's network (block, rack, node), each a node label, from the widest
down. A PodGroup's ``spec.topologyConstraint`` names a Topology and one of
its levels, by node label or by the level's alias."""

from __future__ import annotations

from typing import Annotated, ClassVar, Self

from pydantic import Field, JsonValue, model_validator

from kai_py.api import keys
from kai_py.api.common import FieldValueError, KubeModel, KubeObject

# A qualified label key (optional DNS-subdomain prefix, then a name), as the API
# server checks node labels; KAI's CRD takes the same form for levels and aliases.
LABEL_KEY_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
)
LabelKey = Annotated[str, Field(min_length=1, max_length=316, pattern=LABEL_KEY_PATTERN)]
MAX_LEVELS = 16

# The API server checks these with CEL (the emulator does not run CEL; the model
# validator below and the webhook say the same). Written for kai-py.
_LEVEL_RULES: list[JsonValue] = [
    {
        "rule": "self.all(a, self.exists_one(b, b.nodeLabel == a.nodeLabel))",
        "message": "each level's nodeLabel must be different",
    },
    {
        "rule": "!self.exists(l, l.nodeLabel == 'kubernetes.io/hostname')"
        " || self[size(self) - 1].nodeLabel == 'kubernetes.io/hostname'",
        "message": "kubernetes.io/hostname may only be the last (lowest) level",
    },
    {
        "rule": "self.map(l, l.nodeLabel) == oldSelf.map(l, l.nodeLabel)",
        "message": "the levels' nodeLabels cannot change; only aliases may be edited",
    },
]


class TopologyLevel(KubeModel):
    """One level: the node label whose value names a node's domain at this level."""

    node_label: LabelKey = Field(description="Node label of this level, e.g. a rack label.")
    alias: LabelKey | None = Field(
        default=None,
        description="Short name usable in place of nodeLabel in a topologyConstraint. "
        "Unique in the Topology and never equal to a nodeLabel.",
    )


class TopologySpec(KubeModel):
    """The levels, widest first."""

    levels: list[TopologyLevel] = Field(
        min_length=1,
        max_length=MAX_LEVELS,
        description="Levels from the widest (e.g. block) to the narrowest (e.g. node).",
        json_schema_extra={
            "x-kubernetes-list-type": "atomic",
            "x-kubernetes-validations": _LEVEL_RULES,
        },
    )

    @model_validator(mode="after")
    def _check_levels(self) -> Self:
        labels: dict[str, int] = {}
        for i, level in enumerate(self.levels):
            if level.node_label in labels:
                raise FieldValueError(
                    f"levels[{i}].nodeLabel",
                    f"{level.node_label!r} is also levels[{labels[level.node_label]}].nodeLabel; "
                    "each level needs its own label",
                )
            labels[level.node_label] = i
        last = len(self.levels) - 1
        if labels.get(keys.HOSTNAME_LABEL, last) != last:
            raise FieldValueError(
                f"levels[{labels[keys.HOSTNAME_LABEL]}].nodeLabel",
                f"{keys.HOSTNAME_LABEL!r} may only be the last (lowest) level",
            )
        aliases: dict[str, int] = {}
        for i, level in enumerate(self.levels):
            alias = level.alias
            if alias is None:
                continue
            if alias in aliases:
                raise FieldValueError(
                    f"levels[{i}].alias",
                    f"{alias!r} is also the alias of levels[{aliases[alias]}]; "
                    "aliases must be unique",
                )
            if alias in labels:
                raise FieldValueError(
                    f"levels[{i}].alias",
                    f"{alias!r} is the nodeLabel of levels[{labels[alias]}]; "
                    "an alias must not equal a nodeLabel",
                )
            aliases[alias] = i
        return self

    def resolve(self, level: str) -> str | None:
        """The node label a constraint's level names (a nodeLabel or an alias); None if none."""
        for entry in self.levels:
            if level in (entry.node_label, entry.alias):
                return entry.node_label
        return None


class Topology(KubeObject):
    """A cluster's network levels, named by node labels."""

    KIND: ClassVar[str] = "Topology"
    API_VERSION: ClassVar[str] = f"{keys.TOPOLOGY_GROUP}/{keys.TOPOLOGY_VERSION}"
    NAMESPACED: ClassVar[bool] = False

    spec: TopologySpec


def label_change(old: Topology, new: Topology) -> str | None:
    """Why an update may not change the levels (only aliases may change), or None."""
    before = [level.node_label for level in old.spec.levels]
    after = [level.node_label for level in new.spec.levels]
    if before == after:
        return None
    return (
        f"spec.levels: the nodeLabels cannot change (only aliases may): was {before}, got {after}"
    )
