"""kai-py's API: the CRD models (Queue, PodGroup, BindRequest), the well-known
names of kai_py.api.keys, and CRD generation (kai_py.api.crdgen)."""

from kai_py.api.bindrequest import BindRequest, BindRequestSpec, BindRequestStatus, ReceivedGPU
from kai_py.api.common import KubeObject, ManifestError, ObjectMeta, OwnerReference
from kai_py.api.durations import format_duration, parse_duration
from kai_py.api.podgroup import (
    PodGroup,
    PodGroupSpec,
    PodGroupStatus,
    QueueDetails,
    SchedulingCondition,
    SubGroup,
    TopologyConstraint,
    UnschedulableReason,
)
from kai_py.api.quantities import ResourceAmounts, parse_quantity
from kai_py.api.queue import Queue, QueueResource, QueueResources, QueueSpec, QueueStatus

__all__ = [
    "BindRequest",
    "BindRequestSpec",
    "BindRequestStatus",
    "KubeObject",
    "ManifestError",
    "ObjectMeta",
    "OwnerReference",
    "PodGroup",
    "PodGroupSpec",
    "PodGroupStatus",
    "Queue",
    "QueueDetails",
    "QueueResource",
    "QueueResources",
    "QueueSpec",
    "QueueStatus",
    "ReceivedGPU",
    "ResourceAmounts",
    "SchedulingCondition",
    "SubGroup",
    "TopologyConstraint",
    "UnschedulableReason",
    "format_duration",
    "parse_duration",
    "parse_quantity",
]
