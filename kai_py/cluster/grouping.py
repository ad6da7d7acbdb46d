"""Which PodGroup a pod belongs to: its annotation, or the pod-grouper's rules."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kai_py.api import keys
from kai_py.cluster.convert import meta


@dataclass(slots=True)
class Grouped:
    name: str
    podgroup: Mapping[str, Any] | None = None  # a PodGroup to create, if the grouper made one
    warnings: list[str] = field(default_factory=list)


def group_for_pod(
    pod: Mapping[str, Any],
    owners: Mapping[tuple[str, str], Mapping[str, Any]],
    classes: Mapping[str, int],
) -> Grouped:
    m = meta(pod)
    annotations = m.get("annotations") or {}
    if annotations.get(keys.POD_GROUP_ANNOTATION):
        return Grouped(str(annotations[keys.POD_GROUP_ANNOTATION]))
    ns, name = str(m.get("namespace") or "default"), str(m["name"])
    uid = str(m.get("uid") or name)
    group = f"pg-{name}-{uid}"
    labels = m.get("labels") or {}
    spec = pod.get("spec") or {}
    podgroup = {
        "apiVersion": f"{keys.GROUP}/{keys.PODGROUP_VERSION}",
        "kind": "PodGroup",
        "metadata": {
            "name": group,
            "namespace": ns,
            "creationTimestamp": m.get("creationTimestamp"),
        },
        "spec": {
            "minMember": 1,
            "queue": labels.get(keys.QUEUE_LABEL, keys.DEFAULT_QUEUE),
            "priorityClassName": labels.get(keys.PRIORITY_CLASS_LABEL)
            or spec.get("priorityClassName")
            or keys.DEFAULT_PRIORITY_CLASS,
        },
    }
    return Grouped(group, podgroup)
