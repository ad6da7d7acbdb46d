"""Knative Serving (serving.knative.dev): a Service's pods are grouped per Revision
(its min-scale pods start together), priority class inference, as KAI's Knative
grouper with its default (gang-scheduled revisions)."""

from __future__ import annotations

from typing import Final

from kai_py.api import keys
from kai_py.podgrouper.kinds.common import (
    GrouperWarning,
    Obj,
    Plan,
    Workload,
    annotation_path,
    invalid,
    label_path,
)

GROUP: Final = "serving.knative.dev"
REVISION_LABEL: Final = "serving.knative.dev/revision"
MIN_SCALE_ANNOTATION: Final = "autoscaling.knative.dev/min-scale"


def _revision(workload: Workload) -> Obj:
    name = workload.pod.labels.get(REVISION_LABEL)
    if not name:
        raise invalid(workload.pod, label_path(REVISION_LABEL), "is missing on a Knative pod")
    for owner in workload.chain:
        if owner.is_kind(GROUP, "Revision") and owner.name == name and owner.manifest is not None:
            return owner
    found = workload.related(f"{GROUP}/v1", "Revision", name)
    if found is None:
        raise invalid(
            workload.pod,
            label_path(REVISION_LABEL),
            f'names Revision "{name}", which the pod-grouper cannot read; '
            "the pod is grouped once it can",
        )
    return Obj.of(found, workload.pod.namespace)


def service(workload: Workload) -> Plan:
    revision = _revision(workload)
    raw = revision.annotations.get(MIN_SCALE_ANNOTATION)
    min_member = 1
    warnings: tuple[GrouperWarning, ...] = ()
    if raw is not None:
        if raw.strip().isdigit():
            min_member = int(raw.strip())
        else:
            # Knative itself refuses such a revision; read as 1 (as KAI does), loudly.
            warnings = (
                GrouperWarning(
                    revision.event_ref(),
                    annotation_path(MIN_SCALE_ANNOTATION),
                    f'must be a non-negative integer, got "{raw}"; read as 1',
                ),
            )
    return Plan(
        owner=revision,
        min_member=min_member,
        default_priority_class=keys.INFERENCE_PRIORITY_CLASS,
        extra_lookup=(revision,),
        warnings=warnings,
    )


def related(pod: Obj) -> list[tuple[str, str, str]]:
    name = pod.labels.get(REVISION_LABEL)
    return [(f"{GROUP}/v1", "Revision", name)] if name else []
