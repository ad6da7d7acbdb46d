"""PodGroup (``scheduling.run.ai/v2alpha2``, namespaced, short name ``pg``):
a gang of pods scheduled together, and the scheduler's explanation of why
it is not (``status.schedulingConditions``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar, Literal, Self

from pydantic import Field, model_validator

from kai_py.api import keys
from kai_py.api.common import (
    NO_SERVER_DEFAULT,
    Duration,
    FieldValueError,
    Int32,
    KubeModel,
    KubeObject,
    NonNegativeDuration,
    NonNegativeInt32,
    ResourceMap,
)
from kai_py.api.durations import parse_duration

Preemptibility = Literal["preemptible", "non-preemptible"]
# How the webhook treats a fault in the minimums of a group's SubGroups:
# refused, refused only when created (a warning on update, so that groups
# stored before the rule still change), or a warning only.
MinSeverity = Literal["error", "error-on-create", "warning"]

# Reasons of status.schedulingConditions[].reasons[].reason that KAI defines;
# the field is open (KAI says more may be added), so it is typed as a string.
REASON_OVER_LIMIT = "OverLimit"
REASON_NON_PREEMPTIBLE_OVER_QUOTA = "NonPreemptibleOverQuota"
REASON_QUEUE_DOES_NOT_EXIST = "QueueDoesNotExist"
REASON_POD_SCHEDULING_ERRORS = "PodSchedulingErrors"


class TopologyConstraint(KubeModel):
    """Keep the pods within one domain of a topology (rack, zone, ...)."""

    preferred_topology_level: str | None = None
    required_topology_level: str | None = None
    topology: str | None = Field(default=None, description="Name of the Topology object to use.")


class SubGroup(KubeModel):
    """A named subset of the group's pods with its own minimum."""

    name: str = Field(min_length=1)
    min_member: NonNegativeInt32 | None = Field(
        default=None, description="Pods of a leaf SubGroup that must start together."
    )
    min_sub_group: NonNegativeInt32 | None = Field(
        default=None,
        description="Child SubGroups of a mid-level SubGroup that must start. "
        "Mutually exclusive with minMember.",
    )
    parent: str | None = Field(default=None, description="Name of the parent SubGroup.")
    topology_constraint: TopologyConstraint | None = None


class PodGroupSpec(KubeModel):
    """Desired state of a PodGroup."""

    # Not defaulted by the server (KAI's CRD has no default): a stored group
    # must still say whether minMember was set, because minMember and
    # minSubGroup are mutually exclusive. Unset reads as 1.
    min_member: NonNegativeInt32 = Field(
        default=1,
        description="Pods that must be placed together before any runs. 0 = fully elastic. "
        "Default 1. Mutually exclusive with minSubGroup.",
        json_schema_extra={NO_SERVER_DEFAULT: True},
    )
    min_sub_group: NonNegativeInt32 | None = Field(
        default=None,
        description="Direct child SubGroups that must start before any runs. "
        "0 = no gang requirement. Mutually exclusive with minMember.",
    )
    queue: str | None = Field(default=None, description="The leaf Queue whose quota is used.")
    priority_class_name: str | None = None
    preemptibility: Preemptibility | None = Field(
        default=None,
        description="Unset: preemptible when the priority is below 100.",
    )
    mark_unschedulable: bool = Field(
        default=True, description="Set PodScheduled=False (Unschedulable) on pods that do not fit."
    )
    scheduling_backoff: Int32 | None = Field(
        default=None,
        description="Cycles to try before marking the group unschedulable on a node pool; "
        "-1 = forever.",
    )
    sub_groups: list[SubGroup] | None = None
    topology_constraint: TopologyConstraint | None = None
    # Unset means "the scheduler's default" (60 s), not written by the server, so
    # that changing the scheduler's default also changes existing groups.
    staleness_grace_period: Duration | None = Field(
        default=None,
        description="How long the group may run below minMember before it is evicted. "
        "Default 60s; negative = never.",
        json_schema_extra={NO_SERVER_DEFAULT: True},
    )
    preemption_delay: NonNegativeDuration | None = None

    @model_validator(mode="after")
    def _check_sub_groups(self) -> Self:
        # Structural faults: refused at admission on create and update alike,
        # and a stored group with one is left out (as KAI's webhook treats them).
        if "min_member" in self.model_fields_set and self.min_sub_group is not None:
            raise FieldValueError(
                "minSubGroup",
                f"minMember and minSubGroup are mutually exclusive: set minMember "
                f"({self.min_member}) for a number of pods, or minSubGroup for a number of "
                "child SubGroups, not both",
            )
        names: dict[str, int] = {}
        for i, group in enumerate(self.sub_groups or []):
            if group.name in names:
                raise FieldValueError(
                    f"subGroups[{i}].name",
                    f"duplicate name {group.name!r} (also subGroups[{names[group.name]}])",
                )
            names[group.name] = i
            if group.min_member is not None and group.min_sub_group is not None:
                raise FieldValueError(
                    f"subGroups[{i}]",
                    f"SubGroup {group.name!r}: minMember and minSubGroup are mutually exclusive",
                )
        for i, group in enumerate(self.sub_groups or []):
            if group.parent is not None and group.parent not in names:
                raise FieldValueError(
                    f"subGroups[{i}].parent",
                    f"names no SubGroup of this PodGroup, got {group.parent!r}",
                )
        parents = {g.name: g.parent for g in self.sub_groups or []}
        for i, group in enumerate(self.sub_groups or []):
            seen = {group.name}
            parent = group.parent
            while parent is not None:
                if parent in seen:
                    raise FieldValueError(
                        f"subGroups[{i}].parent", f"parents form a cycle through {parent!r}"
                    )
                seen.add(parent)
                parent = parents[parent]
        return self

    def min_definition_problems(self) -> list[tuple[str, MinSeverity]]:
        """Faults in the minimums of the SubGroup tree, each with how the webhook treats it.

        A leaf needs minMember and cannot have minSubGroup; a SubGroup with
        children counts them with minSubGroup, not pods with minMember; a
        minSubGroup above the number of direct children can never be met.
        """
        groups = self.sub_groups or []
        children: dict[str | None, int] = {}
        for group in groups:
            children[group.parent] = children.get(group.parent, 0) + 1
        problems: list[tuple[str, MinSeverity]] = []
        if self.min_sub_group is not None and self.min_sub_group > children.get(None, 0):
            problems.append((
                f"minSubGroup ({self.min_sub_group}) exceeds the number of direct child "
                f"SubGroups ({children.get(None, 0)})",
                "warning",
            ))
        for i, group in sorted(enumerate(groups), key=lambda item: item[1].name):
            where = f"subGroups[{i}] ({group.name!r})"
            count = children.get(group.name, 0)
            if count == 0:
                if group.min_sub_group is not None:
                    problems.append((
                        f"{where}: minSubGroup cannot be set on a leaf SubGroup "
                        "(it has no child SubGroups)",
                        "error",
                    ))
                if group.min_member is None:
                    problems.append((f"{where}: minMember is required on a leaf SubGroup", "error"))
                continue
            if group.min_member is not None:
                problems.append((
                    f"{where}: minMember cannot be set on a SubGroup with child SubGroups; "
                    "use minSubGroup",
                    "error-on-create",
                ))
            if group.min_sub_group is not None and group.min_sub_group > count:
                problems.append((
                    f"{where}: minSubGroup ({group.min_sub_group}) exceeds the number of direct "
                    f"child SubGroups ({count})",
                    "warning",
                ))
        return problems

    @property
    def staleness_grace_seconds(self) -> float | None:
        """Seconds a stale gang may live; None = never evict (a negative period)."""
        if self.staleness_grace_period is None:
            return keys.DEFAULT_STALENESS_GRACE_SECONDS
        seconds = parse_duration(self.staleness_grace_period)
        return None if seconds < 0 else seconds

    @property
    def preemption_delay_seconds(self) -> float:
        return parse_duration(self.preemption_delay) if self.preemption_delay else 0.0


class QueueDetails(KubeModel):
    """The queue's figures at the time of a refusal (OverLimit, NonPreemptibleOverQuota).

    The wire names are KAI's, so that tools written for KAI read them.
    """

    name: str
    deserved: ResourceMap | None = Field(default=None, alias="queueDeservedResources")
    allocated: ResourceMap | None = Field(default=None, alias="queueAllocatedResources")
    allocated_non_preemptible: ResourceMap | None = Field(
        default=None, alias="queueAllocatedNonPreemptibleResources"
    )
    limit: ResourceMap | None = Field(default=None, alias="queueResourceLimits")
    requested: ResourceMap | None = Field(default=None, alias="queueRequestedResources")
    pod_group_requested: ResourceMap | None = Field(
        default=None, alias="podGroupRequestedResources"
    )
    pod_group_requested_non_preemptible: ResourceMap | None = Field(
        default=None, alias="podGroupRequestedNonPreemptibleResources"
    )


class UnschedulableDetails(KubeModel):
    """Structured data behind a reason; which field is set depends on the reason."""

    queue_details: QueueDetails | None = None


class UnschedulableReason(KubeModel):
    """One reason why the group is not scheduled, for people and for programs."""

    reason: str
    message: str | None = None
    details: UnschedulableDetails | None = None


class SchedulingCondition(KubeModel):
    """Why the group is not scheduled on one node pool."""

    type: str
    node_pool: str | None = None
    status: str | None = None
    reasons: list[UnschedulableReason] | None = None
    # Deprecated in KAI in favour of `reasons`; kept so KAI-written status loads.
    reason: str | None = None
    message: str | None = None
    last_transition_time: datetime | None = None
    transition_id: str | None = Field(default=None, alias="transitionID")


class PodGroupCondition(KubeModel):
    """A condition of the group as a whole. Nothing is required, as in KAI's CRD,
    so that a status KAI wrote always loads."""

    type: str | None = None
    status: str | None = None
    reason: str | None = None
    message: str | None = None
    last_transition_time: datetime | None = None
    transition_id: str | None = Field(default=None, alias="transitionID")


class ResourcesStatus(KubeModel):
    """Resources of the group's pods: GPUs in devices, CPU in millicores, memory in MB."""

    allocated: ResourceMap | None = None
    allocated_non_preemptible: ResourceMap | None = None
    requested: ResourceMap | None = None


class QueuePosition(KubeModel):
    """Where a pending group stands in line, as the scheduler last took jobs up
    (kai-py's own field; docs/kubectl.md). Rewritten only when it moves by a step."""

    in_queue: NonNegativeInt32 = Field(
        description="1 = the next job of its queue the scheduler tries."
    )
    in_cluster: NonNegativeInt32 = Field(
        description="1 = the next job of the cluster (its node pool) the scheduler tries."
    )
    higher_priority_ahead: NonNegativeInt32 = Field(
        default=0, description="Jobs of its queue ahead of it with a higher priority."
    )


class PodGroupStatus(KubeModel):
    """Observed state, written by kai-py."""

    phase: str | None = None
    running: NonNegativeInt32 | None = None
    pending: NonNegativeInt32 | None = None
    succeeded: NonNegativeInt32 | None = None
    failed: NonNegativeInt32 | None = None
    resources_status: ResourcesStatus | None = None
    conditions: list[PodGroupCondition] | None = None
    scheduling_conditions: list[SchedulingCondition] | None = None
    queue_position: QueuePosition | None = None


class PodGroup(KubeObject):
    """A gang of pods: none runs until minMember of them can."""

    KIND: ClassVar[str] = "PodGroup"
    API_VERSION: ClassVar[str] = f"{keys.GROUP}/{keys.PODGROUP_VERSION}"
    NAMESPACED: ClassVar[bool] = True

    spec: PodGroupSpec = Field(default_factory=PodGroupSpec)
    status: PodGroupStatus | None = None

    def to_manifest(self) -> dict[str, Any]:
        data = super().to_manifest()
        # A group counted in subgroups does not write the (defaulted) minMember: the
        # two are exclusive, and writing both would be refused on the way back in.
        if self.spec.min_sub_group is not None and "min_member" not in self.spec.model_fields_set:
            data["spec"].pop("minMember", None)
        return data
