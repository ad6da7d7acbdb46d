"""The pod webhook's half of queue-admission gating: add kai-py's scheduling gate to a
new pod of a gated queue. No quota is computed here (the queue's usage is the
scheduler's to know, on a consistent snapshot); the scheduler lifts the gate once the
pod's job fits (``kai_py.scheduler.admission``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from kai_py.api import keys
from kai_py.api.objects import meta

#: The answer of a queue look-up when the Queue does not exist.
MISSING = "missing"


def pod_queue(pod: Mapping[str, Any]) -> str:
    """The queue the pod's label names, else the default queue (the webhook sees the pod
    only: a queue label on its owner alone is not seen here, docs/autoscaling.md)."""
    return str((meta(pod).get("labels") or {}).get(keys.QUEUE_LABEL) or keys.DEFAULT_QUEUE)


def gates_to_set(
    pod: Mapping[str, Any],
    scheduler_name: str,
    mode: str,
    queue_gating: Callable[[str], bool | str | None],
) -> list[Any] | None:
    """spec.schedulingGates with kai-py's gate added, or None to leave the pod as it is.

    ``queue_gating(name)`` is the Queue's spec.admissionGating (None when unset), or
    ``MISSING``. A pod of a queue that does not exist is gated too: it cannot run, and
    left ungated it would have an autoscaler buy a node for it; the scheduler lets it go
    if the queue turns up without gating."""
    spec = pod.get("spec") or {}
    if mode == "off" or spec.get("schedulerName") != scheduler_name or spec.get("nodeName"):
        return None
    current = list(spec.get("schedulingGates") or [])
    if any(isinstance(g, Mapping) and g.get("name") == keys.QUEUE_ADMISSION_GATE for g in current):
        return None
    setting = queue_gating(pod_queue(pod))
    if setting != MISSING:
        wanted = setting is True if mode == "queues" else setting is not False
        if not wanted:
            return None
    return [*current, {"name": keys.QUEUE_ADMISSION_GATE}]
