"""BindRequest (``scheduling.run.ai/v1alpha2``, namespaced): the scheduler's
decision for one pod, carried out by the binder. Named after the pod and
owned by it."""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Final, Literal, Self

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

#: The scheduler's signature on a BindRequest it made: an HMAC of the decision with a
#: key only the scheduler and the binder hold (the chart's Secret, in this variable).
#: The binder acts on no request without a valid one (docs/deploy.md, "Security"):
#: unlike the field manager, managedFields or any plain annotation, a tenant who may
#: create BindRequests cannot forge it.
SIGNATURE_ANNOTATION: Final = "kai.scheduler/bind-signature"
BIND_KEY_ENV: Final = "KAI_PY_BIND_KEY"


def bind_key(env: Mapping[str, str]) -> bytes | None:
    """The signing key from the environment; None: BindRequests are not signed or checked."""
    value = env.get(BIND_KEY_ENV, "").strip()
    return value.encode() if value else None


def _decision(manifest: Mapping[str, Any]) -> bytes:
    """What the signature covers: the request's place and owner and the decision, with
    the CRD's defaults applied (the API server may fill them in)."""
    m = manifest.get("metadata") or {}
    spec = manifest.get("spec") or {}
    gpu = spec.get("receivedGPU") or {}
    owner = next(
        (str(r.get("uid")) for r in m.get("ownerReferences") or [] if r.get("kind") == "Pod"), ""
    )
    fields = [
        m.get("namespace") or "",
        m.get("name") or "",
        owner,
        spec.get("podName") or "",
        spec.get("selectedNode") or "",
        spec.get("receivedResourceType") or "Regular",
        int(gpu.get("count") or 0),
        str(gpu.get("portion") or ""),
        [str(g) for g in spec.get("selectedGPUGroups") or []],
        spec.get("resourceClaimAllocations") or [],
    ]
    return json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()


def signature(key: bytes, manifest: Mapping[str, Any]) -> str:
    return hmac.new(key, _decision(manifest), hashlib.sha256).hexdigest()


def signed(key: bytes, manifest: Mapping[str, Any]) -> bool:
    """The request carries the scheduler's signature of exactly this decision."""
    given = ((manifest.get("metadata") or {}).get("annotations") or {}).get(SIGNATURE_ANNOTATION)
    return isinstance(given, str) and hmac.compare_digest(given, signature(key, manifest))


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
