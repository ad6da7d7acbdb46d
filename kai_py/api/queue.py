"""Queue (``scheduling.run.ai/v2``, cluster-scoped): quotas, limits and
over-quota weights per resource, arranged in a tree by ``parentQueue``."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Self

from pydantic import (
    AfterValidator,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from kai_py.api import keys
from kai_py.api.common import (
    NO_SERVER_DEFAULT,
    Condition,
    FieldValueError,
    KubeModel,
    KubeObject,
    NonNegativeDuration,
    Number,
    ResourceMap,
)
from kai_py.api.durations import parse_duration

UNLIMITED: float = -1.0
#: The deepest queue tree kai-py takes: a root queue is level 1, its children level 2.
#: KAI has no limit. The webhook refuses a Queue that would be deeper and the operator
#: leaves out one that is (created while the webhook was down), with a Warning Event.
#: Without a limit a chain of 1,000 Queues, each level accepted, was every cycle's work.
MAX_QUEUE_DEPTH: int = 32


def _minus_one_or_non_negative(value: float) -> float:
    if value != UNLIMITED and value < 0:
        raise ValueError(f"must be -1 or >= 0, got {_show(value)}")
    return value


def _show(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


# -1 means "unlimited" (quota) or "no limit" (limit); other negatives are errors.
# In the CRD: at least -1 and not strictly between -1 and 0. Bounds rather than
# `enum: [-1]` because the server compares enums exactly and -1 may arrive as -1.0.
QuotaNumber = Annotated[
    Number,
    AfterValidator(_minus_one_or_non_negative),
    Field(
        json_schema_extra={
            "minimum": -1,
            "not": {
                "minimum": -1,
                "exclusiveMinimum": True,
                "maximum": 0,
                "exclusiveMaximum": True,
            },
        }
    ),
]


class QueueResource(KubeModel):
    """Quota, limit and over-quota weight of one resource.

    Units: GPU in devices (fractions allowed), CPU in millicores, memory in
    MB (10^6 bytes).
    """

    quota: QuotaNumber = Field(
        default=0.0,
        description="Deserved share. -1 = unlimited (the whole of the parent's share).",
    )
    # KAI's trap kept on purpose: unset is 0, and 0 is a hard zero. The CRD
    # does not default it, so `kubectl get -o yaml` shows that it was unset.
    limit: QuotaNumber = Field(
        default=0.0,
        description="Hard ceiling. -1 = no limit. 0 or unset = nothing at all (KAI behaviour).",
        json_schema_extra={NO_SERVER_DEFAULT: True},
    )
    over_quota_weight: Number = Field(
        default=1.0,
        ge=0,
        description="Share of the resources beyond quota, relative to siblings. 0 = none.",
    )

    @model_serializer(mode="wrap")
    def _keep_limit_unset(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Like the API server (no default for limit), do not write a limit nobody gave,
        # so a round trip keeps "unset" distinguishable from an explicit 0.
        data: dict[str, Any] = handler(self)
        if not self.limit_is_set:
            data.pop("limit", None)
        return data

    @property
    def limit_is_set(self) -> bool:
        """False when the manifest did not give a limit (and it is therefore 0)."""
        return "limit" in self.model_fields_set

    @property
    def unlimited_quota(self) -> bool:
        return self.quota == UNLIMITED

    @property
    def has_limit(self) -> bool:
        return self.limit != UNLIMITED


class QueueResources(KubeModel):
    """Per-resource settings; a resource left out has quota 0 and limit 0."""

    gpu: QueueResource = Field(
        default_factory=QueueResource, description="GPUs in devices; 0.5 = half a GPU."
    )
    cpu: QueueResource = Field(
        default_factory=QueueResource, description="CPU in millicores; 1000 = one core."
    )
    memory: QueueResource = Field(
        default_factory=QueueResource, description="Memory in MB; 1 = 10^6 bytes."
    )

    def items(self) -> list[tuple[str, QueueResource]]:
        return [("gpu", self.gpu), ("cpu", self.cpu), ("memory", self.memory)]


#: A namespace name (a DNS label), the shape the API server gives namespaces.
_DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
#: A PriorityClass name (a DNS subdomain).
_DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"


class QueueCard(KubeModel):
    """GPU cards a queue owns (kai-py's own; KAI has no such field): every card that
    matches all the fields given. ``node`` alone: all the node's cards."""

    node: str | None = Field(default=None, description="Node name; alone: all its cards.")
    uuid: str | None = Field(default=None, description="The card's UUID (GPU-...).")
    index: int | None = Field(default=None, ge=0, description="The card's index on `node`.")
    model: str | None = Field(
        default=None,
        min_length=1,
        description="Product name, matched case-insensitively as a part of the card's "
        "(A100 matches NVIDIA-A100-SXM4-80GB).",
    )

    @model_validator(mode="after")
    def _check_entry(self) -> Self:
        if self.index is not None and self.node is None:
            raise FieldValueError(
                "index", f"{self.index} needs node: an index names a card of one node"
            )
        if self.node is None and self.uuid is None and self.model is None:
            raise ValueError("give node, uuid or model (an empty entry owns nothing)")
        return self


class GpuModelQuota(KubeModel):
    """Quota and limit of the GPUs of one model (kai-py's; docs/quota-per-model.md)."""

    model: str = Field(
        min_length=1,
        description="GPU model as nodes name it: label nvidia.com/gpu.product, e.g. "
        "NVIDIA-H100-80GB-HBM3.",
    )
    quota: QuotaNumber = Field(
        default=0.0, description="Deserved GPUs of this model. -1 = unlimited."
    )
    # Unlike the GPU limit, unset is no limit: an entry that only sets a quota must not
    # forbid the model.
    limit: QuotaNumber = Field(
        default=UNLIMITED,
        description="Most GPUs of this model the queue and its children may hold. -1 or "
        "unset = no limit.",
    )


def _unique_models(entries: list[GpuModelQuota]) -> list[GpuModelQuota]:
    seen: set[str] = set()
    for entry in entries:
        if entry.model in seen:
            raise ValueError(f"model {entry.model!r} is listed twice")
        seen.add(entry.model)
    return entries


class QueueSpec(KubeModel):
    """Desired state of a Queue."""

    parent_queue: str | None = Field(default=None, description="Name of the parent queue.")
    priority: int = Field(
        default=keys.DEFAULT_QUEUE_PRIORITY,
        description="Higher-priority queues get over-quota resources first and are reclaimed last.",
    )
    preempt_min_runtime: NonNegativeDuration | None = Field(
        default=None,
        description='Minimum runtime before a job of this queue can be preempted ("5m").',
    )
    reclaim_min_runtime: NonNegativeDuration | None = Field(
        default=None,
        description='Minimum runtime before a job of this queue can be reclaimed ("5m").',
    )
    display_name: str | None = None
    # Queue-admission gating (docs/autoscaling.md): KAI's proposed field.
    admission_gating: bool | None = Field(
        default=None,
        description="Hold this queue's new pods with the scheduling gate "
        "kai.scheduler/queue-admission until their job fits within the queue's quota and "
        "limit (operator flag --queue-admission-gating=queues); false keeps the queue out "
        "under --queue-admission-gating=all.",
    )
    resources: QueueResources = Field(default_factory=QueueResources)
    # Tenancy (kai-py's own fields; KAI has none): unset = anyone, as in KAI. A queue
    # without a list takes its nearest ancestor's (docs/deploy.md, "Tenancy").
    namespaces: list[Annotated[str, Field(pattern=_DNS_LABEL, max_length=63)]] | None = Field(
        default=None,
        description="Namespaces whose pods and PodGroups may use this queue (and the queues "
        "under it that set none). Unset: any namespace.",
    )
    priority_classes: list[Annotated[str, Field(pattern=_DNS_SUBDOMAIN, max_length=253)]] | None = (
        Field(
            default=None,
            description="PriorityClasses this queue's pods and PodGroups may name (and the queues "
            "under it that set none). Unset: any.",
        )
    )
    cards: list[QueueCard] | None = Field(
        default=None,
        description="GPU cards this queue (and the queues under it) owns: other queues' pods "
        "do not use them unless lendCards is true.",
    )
    lend_cards: bool | None = Field(
        default=None,
        description="Let other queues' pods use this queue's idle cards while it does not; "
        "such pods are over-quota use, reclaimed like any other. Unset: false.",
    )
    # Quota per GPU model (docs/quota-per-model.md): kai-py's, beside the GPU one.
    gpu_models: Annotated[list[GpuModelQuota], AfterValidator(_unique_models)] | None = Field(
        default=None,
        description="Quota and limit per GPU model, beside the GPU ones (kai-py).",
    )

    @property
    def preempt_min_runtime_seconds(self) -> float:
        return parse_duration(self.preempt_min_runtime) if self.preempt_min_runtime else 0.0

    @property
    def reclaim_min_runtime_seconds(self) -> float:
        return parse_duration(self.reclaim_min_runtime) if self.reclaim_min_runtime else 0.0


class QueueUsageHistory(KubeModel):
    """Time-based fair share's usage, kept by the scheduler when no Prometheus is used:
    rows of [bucket, GPU, CPU, memory] resource-seconds held in each bucket, for this
    queue (used) and for the cluster (capacity)."""

    bucket_seconds: float
    origin: float = 0.0
    until: float | None = None
    used: list[list[float]] = Field(default_factory=list)
    capacity: list[list[float]] = Field(default_factory=list)


class QueueStatus(KubeModel):
    """Observed state. Resource maps are keyed nvidia.com/gpu, cpu and memory,
    in KAI units: GPUs in devices, CPU in millicores, memory in MB."""

    child_queues: list[str] | None = None
    allocated: ResourceMap | None = None
    allocated_non_preemptible: ResourceMap | None = None
    requested: ResourceMap | None = None
    # kai-py's own: the share the scheduler computed for the queue in its last cycle
    # (quota, then the over-quota share by weight), so `kubectl kai queues` can show it.
    fair_share: ResourceMap | None = None
    # kai-py's, for a queue with spec.gpuModels: GPUs held per model (quota-per-model.md).
    allocated_by_gpu_model: dict[str, Number] | None = Field(
        default=None, description="GPUs the queue holds per GPU model (kai-py)."
    )
    conditions: list[Condition] | None = None
    usage_history: QueueUsageHistory | None = None


class Queue(KubeObject):
    """A scheduling queue. Only leaf queues hold jobs."""

    KIND: ClassVar[str] = "Queue"
    API_VERSION: ClassVar[str] = f"{keys.GROUP}/{keys.QUEUE_VERSION}"
    NAMESPACED: ClassVar[bool] = False

    spec: QueueSpec = Field(default_factory=QueueSpec)
    status: QueueStatus | None = None

    def warnings(self) -> list[str]:
        """Settings that are valid but almost certainly not what the user meant."""
        return [*queue_warnings(self), *quota_above_limit(self)]


def queue_warnings(queue: Queue) -> list[str]:
    """Warn about KAI's limit trap: a limit of 0, or none at all, is a hard zero,
    so the queue can never get that resource, whatever its quota."""
    found = []
    for name, res in queue.spec.resources.items():
        if res.limit != 0:
            continue
        how = "is 0" if res.limit_is_set else "is not set, which means 0"
        found.append(
            f'Queue "{queue.ref}": spec.resources.{name}.limit {how}: the queue can never '
            f"be given any {name} (quota {_show(res.quota)} does not help). "
            f"Set limit: -1 for no limit."
        )
    return found


def quota_above_limit(queue: Queue) -> list[str]:
    """A quota above its (non-zero) limit: KAI accepts it, and the queue is never given
    more than the limit, so the part of the quota above it does nothing. (A limit of
    0 is the trap above, said by ``queue_warnings``.)"""
    found = []
    for name, res in queue.spec.resources.items():
        if res.limit > 0 and res.quota != UNLIMITED and res.quota > res.limit:
            found.append(
                f'Queue "{queue.ref}": spec.resources.{name}.quota {_show(res.quota)} is above '
                f"spec.resources.{name}.limit {_show(res.limit)}: the queue is never given more "
                f"than {_show(res.limit)} {name}, the rest of its quota does nothing"
            )
    return found
