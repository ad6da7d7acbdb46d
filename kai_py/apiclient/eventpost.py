"""core/v1 Events from the binder and the pod-grouper (what ``kubectl describe`` shows).

Posted through the JSON client rather than ``kopf.event`` so that the
reporting component names the part of kai-py that speaks, and so that code
outside Kopf's handlers (the binder's clean-up task) can post too.
"""

from __future__ import annotations

import logging
import queue
import socket
import threading
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final

from kai_py.apiclient.kube import Kube, KubeError, path_of, send

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


def _event_create(
    ref: Mapping[str, Any], type_: str, reason: str, message: str, component: str
) -> tuple[str, Json]:
    """The path and body that create one Event, stamped now."""
    body = event_manifest(ref, type_, reason, message, component, datetime.now(UTC))
    return path_of("", "v1", "events", body["metadata"]["namespace"]), body


def _not_posted(ref: Mapping[str, Any], reason: str, exc: KubeError) -> None:
    log.warning(
        "could not post event",
        extra={
            "reason": reason,
            "kind": ref.get("kind"),
            "object": ref.get("name"),
            "error": str(exc),
        },
    )


def post_event(
    kube: Kube, ref: Mapping[str, Any], type_: str, reason: str, message: str, component: str
) -> None:
    """Post one Event; a failure is logged, never raised (events are best effort)."""
    try:
        kube.create(*_event_create(ref, type_, reason, message, component))
    except KubeError as exc:
        _not_posted(ref, reason, exc)


async def apost_event(
    kube: Kube, ref: Mapping[str, Any], type_: str, reason: str, message: str, component: str
) -> None:
    """``post_event`` from the event loop."""
    try:
        await send(kube, "POST", *_event_create(ref, type_, reason, message, component))
    except KubeError as exc:
        _not_posted(ref, reason, exc)


class EventPoster:
    """Posts Events for one component, at once or from a background thread.

    In the background (the operator) a bind never waits behind an Event: events
    queue up (at most ``limit``; beyond that the newest are dropped and counted,
    as events are best effort) and one thread posts them in order.
    """

    def __init__(
        self, kube: Kube, component: str, *, background: bool = False, limit: int = 10_000
    ) -> None:
        self.kube = kube
        self.component = component
        self.dropped = 0
        self._queue: queue.Queue[tuple[Json, str, str, str] | None] | None = None
        self._limit = limit
        if background:
            self._queue = queue.Queue()
            self._thread = threading.Thread(
                target=self._drain, name=f"{component}-events", daemon=True
            )
            self._thread.start()

    def post(self, ref: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        if self._queue is None:
            post_event(self.kube, ref, type_, reason, message, self.component)
            return
        if self._queue.qsize() >= self._limit:
            self.dropped += 1
            return
        self._queue.put((dict(ref), type_, reason, message))

    def close(self) -> None:
        if self._queue is not None:
            self._queue.put(None)

    def _drain(self) -> None:
        assert self._queue is not None
        while True:
            item = self._queue.get()
            if item is None:
                return
            try:
                post_event(self.kube, *item, self.component)
            except Exception:  # never let one event stop the thread
                log.exception("posting an event failed")
