"""Watches on the store: matching, selector transitions, queues, bookmarks.

A :class:`Watch` is what ``Store.watch`` returns: an async iterator of
``(event_type, object)``. The store offers it every change of its resource;
the watch keeps what matches its namespace and selectors, and turns an object
that starts or stops matching a selector into ADDED or DELETED, as the real
watch cache does.
"""

from __future__ import annotations

import asyncio
import builtins
from dataclasses import dataclass
from typing import Any, Protocol

from kai_py.emulator.storage.resources import ResourceType
from kai_py.emulator.storage.selectors import (
    FieldRequirement,
    Requirement,
    fields_match,
    labels_match,
)

JSON = dict[str, Any]


class WatchSource(Protocol):
    """What a watch needs from its store."""

    @property
    def resource_version(self) -> int: ...

    def _present(self, rt: ResourceType, obj: JSON) -> JSON: ...

    def _forget_watch(self, watch: Watch) -> None: ...


@dataclass
class StoredEvent:
    rv: int
    storage_key: str
    type: str
    obj: JSON
    old: JSON | None


class Watch:
    """An open watch: an async iterator of ``(event_type, object)``.

    Ends (StopAsyncIteration) when closed by :meth:`close`, by the store
    (``Store.close_watches``), or when the resource type stops being served.
    Objects are copies the caller may keep and mutate, unless the watch was
    opened with ``shared=True`` (then they must be treated as read-only).
    """

    def __init__(
        self,
        store: WatchSource,
        rt: ResourceType,
        namespace: str | None,
        labels: builtins.list[Requirement],
        fields: builtins.list[FieldRequirement],
        bookmark_interval: float | None,
        shared: bool = False,
    ) -> None:
        self._store = store
        self._shared = shared
        self.resource = rt
        self.namespace = namespace
        self._labels = labels
        self._fields = fields
        self._queue: asyncio.Queue[tuple[str, JSON] | None] = asyncio.Queue()
        self._bookmark_interval = bookmark_interval
        self._closed = False

    def _matches(self, obj: JSON) -> bool:
        if self.namespace and (obj.get("metadata") or {}).get("namespace") != self.namespace:
            return False
        return labels_match(self._labels, obj) and fields_match(self._fields, obj)

    def _offer(self, event: StoredEvent) -> None:
        new_ok = self._matches(event.obj)
        if event.type == "MODIFIED" and event.old is not None:
            old_ok = self._matches(event.old)
            if old_ok and not new_ok:
                self._put("DELETED", event.obj)
            elif new_ok and not old_ok:
                self._put("ADDED", event.obj)
            elif new_ok:
                self._put("MODIFIED", event.obj)
        elif new_ok:
            self._put(event.type, event.obj)

    def _put(self, event_type: str, obj: JSON) -> None:
        if self._shared and obj.get("apiVersion") == self.resource.api_version:
            # Stored objects are replaced, never changed, so a reader that only
            # serializes them may share them; the copy is most of an event's cost.
            self._queue.put_nowait((event_type, obj))
        else:
            self._queue.put_nowait((event_type, self._store._present(self.resource, obj)))

    def ready(self) -> builtins.list[tuple[str, JSON]]:
        """Events already queued, taken without waiting (for batching writers)."""
        out: builtins.list[tuple[str, JSON]] = []
        while not self._queue.empty():
            item = self._queue.get_nowait()
            if item is None:
                self._queue.put_nowait(None)  # keep the end marker for __anext__
                break
            out.append(item)
        return out

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._store._forget_watch(self)
            self._queue.put_nowait(None)

    def __aiter__(self) -> Watch:
        return self

    async def __anext__(self) -> tuple[str, JSON]:
        if self._closed and self._queue.empty():
            raise StopAsyncIteration
        if self._bookmark_interval is None:
            item = await self._queue.get()
        else:
            try:
                item = await asyncio.wait_for(self._queue.get(), self._bookmark_interval)
            except TimeoutError:
                return "BOOKMARK", {
                    "kind": self.resource.kind,
                    "apiVersion": self.resource.api_version,
                    "metadata": {"resourceVersion": str(self._store.resource_version)},
                }
        if item is None:
            self._closed = True
            raise StopAsyncIteration
        return item

    async def __aenter__(self) -> Watch:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()
