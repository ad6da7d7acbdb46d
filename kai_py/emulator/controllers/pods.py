"""Pod helpers the workload controllers share: making pods from templates, sorting them."""

from __future__ import annotations

import copy
from typing import Any

from kai_py.emulator.clientgo.client import Json

TERMINAL = ("Succeeded", "Failed")


def phase(pod: Json) -> str:
    return str((pod.get("status") or {}).get("phase") or "Pending")


def is_deleting(pod: Json) -> bool:
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def is_active(pod: Json) -> bool:
    """Counts toward a controller's replicas: not finished and not being deleted."""
    return phase(pod) not in TERMINAL and not is_deleting(pod)


def is_ready(pod: Json) -> bool:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return bool(condition.get("status") == "True")
    return False


def pod_from_template(
    template: Json,
    *,
    generate_name: str,
    namespace: str,
    owner_ref: Json,
    extra_labels: dict[str, str] | None = None,
    extra_annotations: dict[str, str] | None = None,
    finalizers: list[str] | None = None,
) -> Json:
    """A pod as controllers make it: the template's metadata and spec, owned by the controller."""
    tmeta: dict[str, Any] = copy.deepcopy(template.get("metadata") or {})
    spec: dict[str, Any] = copy.deepcopy(template.get("spec") or {})
    labels = dict(tmeta.get("labels") or {})
    labels.update(extra_labels or {})
    annotations = dict(tmeta.get("annotations") or {})
    annotations.update(extra_annotations or {})
    metadata: Json = {
        "generateName": generate_name,
        "namespace": namespace,
        "labels": labels,
        "ownerReferences": [owner_ref],
    }
    if annotations:
        metadata["annotations"] = annotations
    if finalizers:
        metadata["finalizers"] = list(finalizers)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def deletion_rank(pod: Json) -> tuple[int, int, int, str]:
    """Order to delete surplus pods in, first = deleted first (as ReplicaSets do).

    Unassigned before assigned, Pending before Running, not ready before
    ready, newer before older.
    """
    unassigned = 0 if not (pod.get("spec") or {}).get("nodeName") else 1
    pending = 0 if phase(pod) == "Pending" else 1
    ready = 1 if is_ready(pod) else 0
    created = str((pod.get("metadata") or {}).get("creationTimestamp") or "")
    # Newer first: invert the timestamp's order by sorting on its negation below.
    return (unassigned, pending, ready, _invert(created))


def _invert(text: str) -> str:
    return "".join(chr(0x10FFFF - ord(ch)) for ch in text)
