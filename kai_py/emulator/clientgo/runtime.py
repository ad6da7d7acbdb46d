"""Informers and work queues: the client-go pattern, small.

An ``Informer`` keeps a local cache of one resource current with list +
watch, and survives what real connections do: a watch that ends or breaks
is resumed from the last seen resourceVersion; a 410 Gone (the version is
too old) makes it list again and report the differences as events, so no
change is lost across a drop.

A ``WorkQueue`` hands keys (namespace/name) to one reconcile function, one
key at a time, and requeues a key whose reconcile failed with backoff. A
key enqueued while it is being reconciled is reconciled again afterwards,
so the last event always wins. Controllers are level-based: reconcile
looks at the cache, not at the event, which is what makes them recover.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from kai_py.emulator.clientgo.client import (
    ClusterClient,
    Json,
    Kind,
    is_retryable,
    obj_key,
    with_retries,
)
from kai_py.emulator.storage.errors import ApiError
from kai_py.emulator.timesource import Clock

log = logging.getLogger(__name__)

Handler = Callable[[str, Json, Json | None], None]


def resource_version(obj: Json) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion", ""))


class Informer:
    """A list+watch cache of one resource, with change callbacks."""

    def __init__(
        self,
        client: ClusterClient,
        kind: Kind,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        retry_delay: float = 0.05,
    ) -> None:
        self.client = client
        self.kind = kind
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.cache: dict[str, Json] = {}
        self.synced = asyncio.Event()
        self.relists = 0  # how many times it had to list again (tests read it)
        self._handlers: list[Handler] = []
        self._retry_delay = retry_delay

    def add_handler(self, handler: Handler) -> None:
        self._handlers.append(handler)

    def get(self, key: str) -> Json | None:
        return self.cache.get(key)

    def values(self) -> list[Json]:
        return list(self.cache.values())

    def remember(self, obj: Json) -> None:
        """Put an object we just wrote into the cache before its watch event arrives.

        Without this a controller that reconciles again at once would not
        see the pod it has just created and would create another.
        """
        key = obj_key(obj)
        old = self.cache.get(key)
        if old is not None and _newer(old, obj):
            return
        self.cache[key] = obj

    def forget(self, obj: Json) -> None:
        self.cache.pop(obj_key(obj), None)

    def _emit(self, kind: str, obj: Json, old: Json | None) -> None:
        for handler in self._handlers:
            try:
                handler(kind, obj, old)
            except Exception:  # a bad handler must not stop the cache
                log.exception("informer handler failed for %s", obj_key(obj))

    def _apply(self, kind: str, obj: Json) -> None:
        key = obj_key(obj)
        old = self.cache.get(key)
        if kind == "DELETED":
            self.cache.pop(key, None)
            self._emit("DELETED", obj, old)
            return
        if old is not None and _newer(old, obj):
            return  # an event older than what remember() put there
        self.cache[key] = obj
        self._emit("ADDED" if old is None else "MODIFIED", obj, old)

    def _replace(self, items: list[Json]) -> None:
        fresh = {obj_key(obj): obj for obj in items}
        for key, gone in list(self.cache.items()):
            if key not in fresh:
                del self.cache[key]
                self._emit("DELETED", gone, gone)
        for key, obj in fresh.items():
            old = self.cache.get(key)
            self.cache[key] = obj
            if old is None:
                self._emit("ADDED", obj, None)
            elif resource_version(old) != resource_version(obj):
                self._emit("MODIFIED", obj, old)

    async def _list(self) -> str:
        items, rv = await with_retries(
            lambda: self.client.list(
                self.kind,
                namespace=self.namespace,
                label_selector=self.label_selector,
                field_selector=self.field_selector,
            )
        )
        self._replace(items)
        self.synced.set()
        return rv

    async def run(self) -> None:
        rv: str | None = None
        while True:
            try:
                if rv is None:
                    rv = await self._list()
                    self.relists += 1
                rv = await self._watch(rv)
            except asyncio.CancelledError:
                raise
            except ApiError as exc:
                if exc.code == 410:
                    rv = None  # too old: list again
                    continue
                log.debug("watch of %s failed: %r", self.kind.plural, exc)
                await asyncio.sleep(self._retry_delay)
            except Exception as exc:  # dropped connection and the like
                log.debug("watch of %s broke: %r", self.kind.plural, exc)
                await asyncio.sleep(self._retry_delay)

    async def _watch(self, rv: str) -> str:
        """Follow the watch until it ends; returns the version to resume from."""
        stream = self.client.watch(
            self.kind,
            rv,
            namespace=self.namespace,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
        )
        try:
            async for event in stream:
                if event.type == "ERROR":
                    code = int(event.object.get("code") or 500)
                    raise ApiError(code, str(event.object.get("reason", "")), "watch error")
                new_rv = resource_version(event.object)
                if event.type != "BOOKMARK":
                    self._apply(event.type, event.object)
                if new_rv:
                    rv = new_rv
        finally:
            closer = getattr(stream, "aclose", None)
            if closer is not None:
                with contextlib.suppress(Exception):
                    await closer()
        return rv


def _newer(a: Json, b: Json) -> bool:
    """True if ``a`` is a strictly later version of the same object than ``b``."""
    ma, mb = a.get("metadata") or {}, b.get("metadata") or {}
    if ma.get("uid") != mb.get("uid"):
        return False
    try:
        return int(ma.get("resourceVersion", 0)) > int(mb.get("resourceVersion", 0))
    except (TypeError, ValueError):
        return False


class WorkQueue:
    """Keys to reconcile, de-duplicated, with retry backoff."""

    def __init__(
        self,
        reconcile: Callable[[str], Awaitable[None]],
        *,
        name: str,
        base_delay: float = 0.01,
        max_delay: float = 1.0,
    ) -> None:
        self._reconcile = reconcile
        self.name = name
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self._queued: set[str] = set()
        self._busy: set[str] = set()
        self._dirty: set[str] = set()
        self._failures: dict[str, int] = {}
        self._timers: set[asyncio.TimerHandle] = set()
        self._sleepers: set[asyncio.Task[None]] = set()
        self._wakes: dict[str, float] = {}
        self._base_delay = base_delay
        self._max_delay = max_delay
        self.errors = 0

    def add(self, key: str) -> None:
        if key in self._busy:
            self._dirty.add(key)
            return
        if key in self._queued:
            return
        self._queued.add(key)
        self._queue.put_nowait(key)

    def add_after(self, key: str, delay: float) -> None:
        loop = asyncio.get_running_loop()
        handle: asyncio.TimerHandle | None = None

        def fire() -> None:
            if handle is not None:
                self._timers.discard(handle)
            self.add(key)

        handle = loop.call_later(delay, fire)
        self._timers.add(handle)

    def wake_after(self, key: str, seconds: float, clock: Clock) -> None:
        """Enqueue ``key`` after ``seconds`` of ``clock`` time (simulated time in tests)."""

        at = clock.time() + seconds
        planned = self._wakes.get(key)
        if planned is not None and planned <= at:
            return  # an earlier wake-up is already planned; it reconciles anyway

        async def fire() -> None:
            await clock.sleep(seconds)
            if self._wakes.get(key) == at:
                del self._wakes[key]
            self.add(key)

        self._wakes[key] = at
        task = asyncio.get_running_loop().create_task(fire())
        self._sleepers.add(task)
        task.add_done_callback(self._sleepers.discard)

    def idle(self) -> bool:
        return not self._queued and not self._busy

    async def run(self) -> None:
        try:
            while True:
                key = await self._queue.get()
                self._queued.discard(key)
                self._busy.add(key)
                try:
                    await self._reconcile(key)
                    self._failures.pop(key, None)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    self.errors += 1
                    failures = self._failures.get(key, 0) + 1
                    self._failures[key] = failures
                    level = logging.DEBUG if _expected(exc) else logging.WARNING
                    log.log(level, "%s: reconcile %s failed: %r", self.name, key, exc)
                    delay = min(self._max_delay, self._base_delay * 2 ** min(failures, 20))
                    self.add_after(key, delay)
                finally:
                    self._busy.discard(key)
                    if key in self._dirty:
                        self._dirty.discard(key)
                        self.add(key)
        finally:
            for handle in self._timers:
                handle.cancel()
            self._timers.clear()
            for task in list(self._sleepers):
                task.cancel()


def _expected(exc: Exception) -> bool:
    """Errors a controller meets in normal life and simply retries."""
    return is_retryable(exc) or (isinstance(exc, ApiError) and exc.code in (404, 409))


def enqueue_owner(queue: WorkQueue, owner_kind: str) -> Handler:
    """A pod handler that enqueues the pod's controlling owner of ``owner_kind``."""

    def handler(_type: str, obj: Json, old: Json | None) -> None:
        for candidate in (obj, old):
            if candidate is None:
                continue
            refs: list[Any] = (candidate.get("metadata") or {}).get("ownerReferences") or []
            ns = (candidate.get("metadata") or {}).get("namespace")
            for ref in refs:
                if ref.get("controller") and ref.get("kind") == owner_kind:
                    queue.add(f"{ns}/{ref.get('name')}")

    return handler


def enqueue_self(queue: WorkQueue) -> Handler:
    def handler(_type: str, obj: Json, _old: Json | None) -> None:
        queue.add(obj_key(obj))

    return handler
