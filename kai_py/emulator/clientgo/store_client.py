"""``ClusterClient`` on top of the in-process ``Store``: no HTTP, same behaviour.

Objects come out shared (``shared=True``): the stored versions themselves, not
copies, so they are read-only for the kubelets and controllers (which build what
they write afresh); copying each pod for each in-process watcher was a tenth of
the emulator's CPU in a burst of pod writes.

The store raises the same ``ApiError``s the HTTP layer turns into Status
bodies. The server's fault hooks only see HTTP requests, so this client
takes a ``FaultSet`` of its own: tests use it to make the simulated
kubelets and controllers meet errors, conflicts and latency too.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from kai_py.emulator.apiserver.faults import FaultSet
from kai_py.emulator.clientgo.client import Json, Kind, WatchEvent

if TYPE_CHECKING:
    from kai_py.emulator.storage.store import Store


def resource_name(kind: Kind) -> str:
    """The name the store resolves without ambiguity (core events vs events.k8s.io)."""
    return f"{kind.plural}.{kind.version}.{kind.group}" if kind.group else kind.plural


class StoreClient:
    def __init__(
        self,
        store: Store,
        *,
        bookmark_interval: float | None = None,
        faults: FaultSet | None = None,
    ) -> None:
        self.store = store
        self.bookmark_interval = bookmark_interval
        self.faults = faults if faults is not None else FaultSet()

    async def _fault(self, verb: str, kind: Kind, name: str = "", sub: str | None = None) -> None:
        if not len(self.faults):
            return
        resource = f"{kind.plural}/{sub}" if sub else kind.plural
        delay, error = self.faults.decide(verb, resource, name)
        if delay:
            await asyncio.sleep(delay)
        if error is not None:
            raise error

    async def create(self, kind: Kind, body: Json, namespace: str | None = None) -> Json:
        await self._fault("create", kind, str((body.get("metadata") or {}).get("name", "")))
        return await self.store.create(resource_name(kind), body, namespace=namespace, shared=True)

    async def get(self, kind: Kind, name: str, namespace: str | None = None) -> Json:
        await self._fault("get", kind, name)
        return await self.store.get(resource_name(kind), namespace, name, shared=True)

    async def list(
        self,
        kind: Kind,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> tuple[list[Json], str]:
        await self._fault("list", kind)
        return await self.store.list(
            resource_name(kind),
            namespace,
            label_selector=label_selector,
            field_selector=field_selector,
            shared=True,
        )

    async def patch(
        self,
        kind: Kind,
        name: str,
        patch: Json,
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> Json:
        await self._fault("patch", kind, name, subresource)
        return await self.store.patch(
            resource_name(kind),
            namespace,
            name,
            patch,
            "merge",
            subresource=subresource or "",
            shared=True,
        )

    async def delete(
        self,
        kind: Kind,
        name: str,
        namespace: str | None = None,
        grace_period_seconds: int | None = None,
        uid: str | None = None,
        propagation_policy: str | None = None,
    ) -> Json | None:
        await self._fault("delete", kind, name)
        return await self.store.delete(
            resource_name(kind),
            namespace,
            name,
            grace_period_seconds=grace_period_seconds,
            propagation_policy=propagation_policy,
            preconditions={"uid": uid} if uid else None,
        )

    async def bind(self, namespace: str, name: str, node: str, uid: str | None = None) -> None:
        await self._fault("create", Kind("", "v1", "pods"), name, "binding")
        await self.store.bind_pod(namespace, name, node)

    def attach_kubelet(self, node: str) -> None:
        self.store.attach_kubelet(node)

    def detach_kubelet(self, node: str) -> None:
        self.store.detach_kubelet(node)

    async def watch(
        self,
        kind: Kind,
        resource_version: str,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> AsyncIterator[WatchEvent]:
        await self._fault("watch", kind)
        watch = self.store.watch(
            resource_name(kind),
            namespace,
            resource_version=resource_version,
            label_selector=label_selector,
            field_selector=field_selector,
            bookmark_interval=self.bookmark_interval,
            shared=True,
        )
        async with watch:
            async for event_type, obj in watch:
                yield WatchEvent(event_type, obj)
