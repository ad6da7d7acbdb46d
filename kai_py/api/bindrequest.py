"""BindRequest (``scheduling.run.ai/v1alpha2``, namespaced): the scheduler's
decision for one pod, carried out by the binder. Named after the pod and
owned by it."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal, Self

from pydantic import BeforeValidator, Field, PlainSerializer, WithJsonSchema, model_validator

from kai_py.api import keys
from kai_py.api.common import (
    NO_SERVER_DEFAULT,
    FieldValueError,
    KubeModel,
    KubeObject,
    NonNegativeInt32,
)

ReceivedResourceType = Literal["Regular", "Fraction"]
BindRequestPhase = Literal["Pending", "Succeeded", "Failed"]

#: How ``status.reason`` begins when the binder's reservation pod did not report its
#: card in time: the node's kubelet starts nothing (or too slowly). The scheduler's
#: cache reads it to try that node last for a while (docs/scheduling.md).
RESERVATION_TIMEOUT_REASON = "ReservationTimeout:"


def _portion_in(value: Any) -> float:
    # KAI writes the portion as a string ("0.5"); accept a number too.
    if isinstance(value, bool):
        raise ValueError(f'must be a number between 0 and 1 such as "0.5", got {value!r}')
    try:
        portion = float(value)
    except (TypeError, ValueError):
        raise ValueError(f'must be a number between 0 and 1 such as "0.5", got {value!r}') from None
    if not 0 <= portion <= 1:
        raise ValueError(f"must be between 0 and 1, got {value!r}")
    return portion


def format_portion(value: float) -> str:
    """A portion as KAI writes it in a BindRequest ("0.5", "1")."""
    return f"{value:g}"


Portion = Annotated[
    float,
    BeforeValidator(_portion_in),
    PlainSerializer(format_portion, return_type=str),
    WithJsonSchema({"type": "string", "pattern": r"^(0(\.[0-9]*)?|1(\.0*)?|\.[0-9]+)$"}),
]


class ReceivedGPU(KubeModel):
    """GPUs given to the pod: count devices, each at the given portion ("0.5")."""

    count: NonNegativeInt32 = 0
    portion: Portion = Field(default=0.0, json_schema_extra={NO_SERVER_DEFAULT: True})


class ResourceClaimAllocation(KubeModel):
    """A DRA claim's allocation, passed through to the binder as given."""

    name: str
    allocation: dict[str, Any] | None = None


class BindRequestSpec(KubeModel):
    """Where and how to bind the pod."""

    pod_name: str = Field(min_length=1)
    selected_node: str = Field(min_length=1)
    received_resource_type: ReceivedResourceType = "Regular"
    received_gpu: ReceivedGPU | None = Field(default=None, alias="receivedGPU")
    selected_gpu_groups: list[str] | None = Field(
        default=None,
        alias="selectedGPUGroups",
        description="GPU groups (runai-gpu-group) of a Fraction request, one per device.",
    )
    backoff_limit: NonNegativeInt32 | None = None
    resource_claim_allocations: list[ResourceClaimAllocation] | None = None

    @model_validator(mode="after")
    def _fraction_needs_groups(self) -> Self:
        if self.received_resource_type == "Fraction" and not self.selected_gpu_groups:
            raise FieldValueError(
                "selectedGPUGroups", "must name at least one GPU group for a Fraction request"
            )
        return self


class BindRequestStatus(KubeModel):
    """Progress of the bind, written by the binder."""

    phase: BindRequestPhase | None = None
    reason: str | None = None
    failed_attempts: NonNegativeInt32 = 0


class BindRequest(KubeObject):
    """A request to bind one pod to one node (and GPU groups)."""

    KIND: ClassVar[str] = "BindRequest"
    API_VERSION: ClassVar[str] = f"{keys.GROUP}/{keys.BINDREQUEST_VERSION}"
    NAMESPACED: ClassVar[bool] = True

    spec: BindRequestSpec
    status: BindRequestStatus | None = None
