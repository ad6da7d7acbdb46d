"""Structured refusal reasons: a code, a message a person can act on, the numbers.

A Reason becomes a PodGroup ``schedulingConditions`` entry, an Event and a
line in ``kai-py simulate``; keeping the numbers in ``details`` lets each of
those show them without parsing the message.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

NOT_READY: Final = "NotReady"
OVER_LIMIT: Final = "OverLimit"
NON_PREEMPTIBLE_OVER_QUOTA: Final = "NonPreemptibleOverQuota"
QUEUE_DOES_NOT_EXIST: Final = "QueueDoesNotExist"
POD_SCHEDULING_ERRORS: Final = "PodSchedulingErrors"
INVALID_WORKLOAD: Final = "InvalidWorkload"
NO_RECLAIM: Final = "CannotReclaim"
NO_PREEMPT: Final = "CannotPreempt"
STALE_JOB: Final = "StaleJob"

#: A node's cause in "0/N nodes are available": no pod slot left (status.allocatable.pods),
#: in kube-scheduler's words.
TOO_MANY_PODS: Final = "Too many pods"


@dataclass(slots=True)
class Reason:
    code: str
    message: str
    details: dict[str, object] = field(default_factory=dict)

    def as_dict(self) -> dict[str, object]:
        return {"reason": self.code, "message": self.message, "details": self.details}


def insufficient(name: str, requested: float, free: float, allocatable: float) -> str:
    """A node's cause for a resource beyond CPU, memory and GPUs it cannot hold, in
    kube-scheduler's words with the amounts (in the resource's own units: bytes for
    ephemeral-storage and hugepages, devices for the rest)."""
    return (
        f"Insufficient {name} (requested {_amount(requested)}, free "
        f"{_amount(max(free, 0.0))} of {_amount(allocatable)})"
    )


def _amount(value: float) -> str:
    """Whole amounts in full (bytes: 1073741824, not 1.07374e+09), others as they are."""
    return str(int(value)) if value == int(value) else f"{value:g}"


def sentences(messages: Iterable[str]) -> str:
    """Messages as one text, each a sentence (a full stop added where it has none), each
    only once: how an Event and a PodGroup's condition join a job's reasons."""
    return " ".join(m if m.endswith((".", "!", "?")) else f"{m}." for m in dict.fromkeys(messages))
