"""core/v1 Events as kubelets and controllers post them (what ``kubectl describe`` shows)."""

from __future__ import annotations

import logging
import secrets

from kai_py.emulator.clientgo.client import EVENTS, ClusterClient, Json
from kai_py.emulator.timesource import Clock, rfc3339

log = logging.getLogger(__name__)


class EventRecorder:
    """Posts Events; a failed post is dropped, as client-go's recorder drops it."""

    def __init__(
        self,
        client: ClusterClient,
        clock: Clock,
        component: str,
        host: str | None = None,
        enabled: bool = True,
    ) -> None:
        self.client = client
        self.clock = clock
        self.component = component
        self.host = host
        self.enabled = enabled

    async def record(
        self,
        obj: Json,
        reason: str,
        message: str,
        *,
        type: str = "Normal",
        field_path: str | None = None,
        host: str | None = None,
    ) -> None:
        if not self.enabled:
            return
        m = obj.get("metadata") or {}
        namespace = m.get("namespace") or "default"
        now = rfc3339(self.clock.time())
        involved: Json = {
            "apiVersion": obj.get("apiVersion", "v1"),
            "kind": obj.get("kind", ""),
            "name": m.get("name"),
            "namespace": m.get("namespace"),
            "uid": m.get("uid"),
            "resourceVersion": m.get("resourceVersion"),
        }
        if field_path:
            involved["fieldPath"] = field_path
        source: Json = {"component": self.component}
        where = host or self.host
        if where:
            source["host"] = where
        event: Json = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                # client-go names events <object>.<unique hex>
                "name": f"{m.get('name')}.{secrets.token_hex(8)}",
                "namespace": namespace,
            },
            "involvedObject": {k: v for k, v in involved.items() if v is not None},
            "reason": reason,
            "message": message,
            "type": type,
            "source": source,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
            "reportingComponent": self.component,
            "reportingInstance": where or "",
        }
        try:
            await self.client.create(EVENTS, event, namespace=namespace)
        except Exception as exc:
            log.debug("dropped event %s for %s: %r", reason, m.get("name"), exc)
