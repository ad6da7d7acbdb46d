"""Staggered start: pods that share a card start one at a time (pure rules).

An inference engine (vLLM and the like) measures the card's free memory when it
starts; two engines starting on one card at once each count the other's memory
wrong. With staggered start the binder binds a shared pod (a Fraction request:
``gpu-fraction``, ``gpu-memory``, HAMi's shares, pinned or not) only once every
other pod bound to its card is Ready, or once the one it waits for has had
``timeout`` seconds since it was bound (then with an Event naming it).

Who opts in, first match wins: the pod's annotation
``kai.scheduler/staggered-start`` (``"true"`` or ``"false"``), then the same
annotation on the pod's Queue, then the cluster-wide setting
(``KAI_PY_STAGGERED_START``, the chart's ``gpuSharing.staggeredStart``).

Everything here is read from the cluster's objects (the pods on the card, their
conditions and times), so a restarted binder continues the same wait.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from kai_py.api import keys
from kai_py.api.objects import parse_time
from kai_py.binder import reservation as rsv
from kai_py.gpu import groups

#: The Warning on a pod bound after waiting out the timeout, and on an invalid setting.
TIMEOUT_REASON: Final = "StaggeredStartTimeout"
INVALID_REASON: Final = "StaggeredStartIgnored"
_TRUE: Final = ("true",)
_FALSE: Final = ("false",)


@dataclass(frozen=True, slots=True)
class Blocker:
    """A pod on the card that is not Ready yet, and since when it was bound (epoch s)."""

    key: str  # namespace/name
    since: float | None


def setting(annotations: Mapping[str, Any], where: str) -> tuple[bool | None, str | None]:
    """The object's ``kai.scheduler/staggered-start``: (True/False, None) when set,
    (None, None) when not, (None, message) for a value that is neither (the message
    names the object, the field and the value; the setting is then not applied)."""
    raw = annotations.get(keys.STAGGERED_START_ANNOTATION)
    if raw is None:
        return None, None
    value = str(raw).strip().lower()
    if value in _TRUE:
        return True, None
    if value in _FALSE:
        return False, None
    return None, (
        f"{where}: metadata.annotations[{keys.STAGGERED_START_ANNOTATION}]={raw!r} is "
        'neither "true" nor "false"; ignored'
    )


def wanted(pod: bool | None, queue: bool | None, cluster: bool) -> bool:
    """The pod's setting, else its queue's, else the cluster's."""
    if pod is not None:
        return pod
    if queue is not None:
        return queue
    return cluster


def is_ready(pod: Mapping[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def bound_since(pod: Mapping[str, Any]) -> float | None:
    """When the pod was bound: its PodScheduled condition (set by the Binding), else
    its start time, else its creation."""
    status = pod.get("status") or {}
    for c in status.get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "True":
            when = parse_time(c.get("lastTransitionTime"))
            if when is not None:
                return when
    return parse_time(status.get("startTime")) or parse_time(
        (pod.get("metadata") or {}).get("creationTimestamp")
    )


def blockers(
    pods: Iterable[Mapping[str, Any]], node: str, card_groups: Sequence[str], waiting: str
) -> list[Blocker]:
    """The pods bound to ``node`` on any of ``card_groups`` that are not Ready: running
    or starting, not finished, not terminating (a terminating pod is leaving its card),
    other than the pod ``waiting`` (namespace/name). Oldest first."""
    out = []
    for pod in pods:
        m = pod.get("metadata") or {}
        key = f"{m.get('namespace')}/{m.get('name')}"
        if key == waiting or m.get("deletionTimestamp") or not rsv.holds_card(pod):
            continue
        if (pod.get("spec") or {}).get("nodeName") != node:
            continue
        if not any(groups.uses_group(pod, g) for g in card_groups) or is_ready(pod):
            continue
        out.append(Blocker(key, bound_since(pod)))
    return sorted(out, key=lambda b: (b.since or 0.0, b.key))


def overdue(blocker: Blocker, now: float, timeout: float) -> bool:
    """The blocker has had ``timeout`` seconds since it was bound (or its time is
    unknown, so no wait can be measured)."""
    return blocker.since is None or now - blocker.since >= timeout
