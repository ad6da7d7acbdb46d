"""Which GPU group a pod uses, as the binder marks it and the cache reads it back.

A shared (fractional) pod and the reservation pod holding its card carry the
group in the label ``runai-gpu-group`` (made a valid label value here: a hash
keeps long or unusual names unique) and the exact names, several for a pod of
more than one card, in the annotation ``kai.scheduler/gpu-groups``. The binder
writes them; the scheduler's cache reads them to know which card a running
shared pod is on. A group the scheduler opens is named by a UUID
(``kai_py.scheduler.model.new_group_id``), one card across the cluster, as
KAI's; the per-node numbers of earlier kai-py versions are read as they are.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any, Final

from kai_py.api import keys

GPU_GROUPS_ANNOTATION: Final = keys.GPU_GROUPS_ANNOTATION

_MAX_LABEL: Final = 63
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def short_digest(*parts: str) -> str:
    """Ten hex digits of a hash of ``parts``: what keeps a shortened name unique."""
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:10]


def label_value(value: str) -> str:
    """``value`` if it is a valid label value, else a valid stand-in that stays unique."""
    if len(value) <= _MAX_LABEL and _LABEL_VALUE.match(value):
        return value
    suffix = short_digest(value)
    head = re.sub(r"[^A-Za-z0-9_.-]+", "-", value)[: _MAX_LABEL - len(suffix) - 1]
    head = head.strip("-_.")
    return f"{head}-{suffix}" if head else suffix


def reservation_group(pod: Mapping[str, Any]) -> str | None:
    """The GPU group a reservation pod holds (the annotation keeps the exact name)."""
    m = pod.get("metadata") or {}
    value = (m.get("annotations") or {}).get(GPU_GROUPS_ANNOTATION) or (m.get("labels") or {}).get(
        keys.GPU_GROUP_LABEL
    )
    return str(value) if value else None


def shared_pod_groups(pod: Mapping[str, Any]) -> list[str]:
    """The GPU groups a shared pod uses: the annotation (all), else the label (one)."""
    m = pod.get("metadata") or {}
    listed = (m.get("annotations") or {}).get(GPU_GROUPS_ANNOTATION)
    if listed:
        return [g for g in str(listed).split(",") if g]
    label = (m.get("labels") or {}).get(keys.GPU_GROUP_LABEL)
    return [str(label)] if label else []


def uses_group(pod: Mapping[str, Any], group: str) -> bool:
    if group in shared_pod_groups(pod):
        return True
    label = ((pod.get("metadata") or {}).get("labels") or {}).get(keys.GPU_GROUP_LABEL)
    return label is not None and label == label_value(group)
