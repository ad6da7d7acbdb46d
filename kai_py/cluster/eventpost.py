"""core/v1 Events from the binder and the pod-grouper (what ``kubectl describe`` shows).

Posted through the JSON client rather than ``kopf.event`` so that the
reporting component names the part of kai-py that speaks, and so that code
outside Kopf's handlers (the binder's clean-up task) can post too.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final

from kai_py.cluster.kube import Kube, KubeError, path_of

Json = dict[str, Any]

_MAX_MESSAGE: Final = 1024
log = logging.getLogger(__name__)


def involved(obj: Mapping[str, Any], api_version: str = "v1", kind: str = "Pod") -> Json:
    """The ``involvedObject`` of an Event about ``obj`` (a manifest)."""
    m = obj.get("metadata") or {}
    ref: Json = {
        "apiVersion": str(obj.get("apiVersion") or api_version),
        "kind": str(obj.get("kind") or kind),
        "name": str(m.get("name") or ""),
    }
    if m.get("namespace"):
        ref["namespace"] = str(m["namespace"])
    if m.get("uid"):
        ref["uid"] = str(m["uid"])
    return ref


def event_manifest(
    ref: Mapping[str, Any], type_: str, reason: str, message: str, component: str, now: datetime
) -> Json:
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    namespace = str(ref.get("namespace") or "default")
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{ref.get('name')}.", "namespace": namespace},
        "involvedObject": dict(ref),
        "type": type_,
        "reason": reason,
        "message": message[:_MAX_MESSAGE],
        "source": {"component": component},
        "reportingComponent": component,
        "reportingInstance": socket.gethostname(),
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


def post_event(
    kube: Kube, ref: Mapping[str, Any], type_: str, reason: str, message: str, component: str
) -> None:
    """Post one Event; a failure is logged, never raised (events are best effort)."""
    body = event_manifest(ref, type_, reason, message, component, datetime.now(UTC))
    try:
        kube.create(path_of("", "v1", "events", body["metadata"]["namespace"]), body)
    except KubeError as exc:
        log.warning("could not post event %s on %s: %s", reason, ref.get("name"), exc)
