"""The operator's watches, outside Kopf.

Kopf's handling of each watch event (diff base, causes, per-handler arguments and
loggers) costs more CPU than the event is worth to kai-py, whose handlers only
observe: pods above all (several events per pod: created, grouped, bound,
started...), then PodGroups and BindRequests (a few per pod). So the parts do not
watch through Kopf: one ``Informer`` (``kai_py.apiclient.informer``: LIST in pages,
then WATCH, over httppool) per resource and process calls each part's listener with
``(type, object, memo)`` on the event loop. Nothing is written to the watched
objects (as with the ``on.event`` handlers before).

A part subscribes with ``on_events(registry, group, version, plural, listener)``
(``on_pods`` for pods) when it registers its handlers; the first subscription on a
registry adds the watches' own startup and cleanup handlers to it. Listeners must be
quick; ``SerialPerKey`` runs slow work one at a time per object (as Kopf did) and a
bounded number at once: coroutines on the loop (the pod-grouper), or calls in threads
(the binder's synchronous code).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final

import kopf

from kai_py.apiclient.informer import AsyncTransport, Informer
from kai_py.apiclient.kube import load_api_client, path_of

log = logging.getLogger(__name__)

Json = dict[str, Any]
Listener = Callable[[str | None, Json, Any], None]
PodListener = Listener
#: The label selectors of a part's watches of one resource, read at the start (from the
#: settings): one watch per selector, None for all objects.
Selectors = Callable[[], tuple[str | None, ...]]
_ALL: Final[tuple[str | None, ...]] = (None,)

_TASKS_KEY: Final = "kai_py_watches"
_TRANSPORT_KEY: Final = "kai_py_watches_transport"
_Resource = tuple[str, str, str, Selectors | None]
#: Per registry: (group, version, plural, selectors) -> listeners.
_listeners: dict[int, dict[_Resource, list[Listener]]] = {}


def on_events(
    registry: kopf.OperatorRegistry,
    group: str,
    version: str,
    plural: str,
    listener: Listener,
    selectors: Selectors | None = None,
) -> None:
    """Call ``listener(type, object, memo)`` for every event of the resource once the
    operator runs (type ``None`` for the objects of a listing); with ``selectors``, for
    the objects they select only (parts with the same ``selectors`` share watches)."""
    by_resource = _listeners.get(id(registry))
    if by_resource is None:
        by_resource = _listeners[id(registry)] = {}
        _register(registry, by_resource)
    by_resource.setdefault((group, version, plural, selectors), []).append(listener)


def on_pods(
    registry: kopf.OperatorRegistry, listener: PodListener, selectors: Selectors | None = None
) -> None:
    """Call ``listener(type, pod, memo)`` for every pod event once the operator runs."""
    on_events(registry, "", "v1", "pods", listener, selectors)


def _register(
    registry: kopf.OperatorRegistry, by_resource: dict[_Resource, list[Listener]]
) -> None:
    async def start(memo: Any, **_: Any) -> None:
        # The parts' own startup handlers may run after this one: the first events
        # reach them once the LIST is in (they ignore events until they are ready, and
        # each part catches up from state: warm-up LISTs, group_all, the sweeps).
        api_client = await asyncio.to_thread(load_api_client)
        transport = AsyncTransport(api_client.configuration)
        tasks = []
        for (group, version, plural, selectors), listeners in by_resource.items():
            for selector in selectors() if selectors is not None else _ALL:
                informer = Informer(transport, path_of(group, version, plural), plural, selector)
                for listener in listeners:
                    informer.listeners.append(_bound(listener, memo))
                tasks.append(asyncio.create_task(informer.run(), name=f"kai-py-watch-{plural}"))
        memo[_TRANSPORT_KEY] = transport
        memo[_TASKS_KEY] = tasks

    async def stop(memo: Any, **_: Any) -> None:
        tasks = memo.get(_TASKS_KEY) or []
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        transport = memo.get(_TRANSPORT_KEY)
        if isinstance(transport, AsyncTransport):
            await transport.close()

    kopf.on.startup(registry=registry, id="kai-py-watches-start")(start)
    kopf.on.cleanup(registry=registry, id="kai-py-watches-stop")(stop)


def _bound(listener: PodListener, memo: Any) -> Callable[[str | None, Json], None]:
    def call(event_type: str | None, pod: Json) -> None:
        listener(event_type, pod, memo)

    return call


def pod_key(pod: Json) -> str:
    m = pod.get("metadata") or {}
    return f"{m.get('namespace')}/{m.get('name')}"


class SerialPerKey:
    """Runs ``fn(arg)`` one call at a time per key (a newer call for a busy key waits,
    replacing any older one waiting), ``workers`` at once: in a pool of threads, or
    with ``threads=False`` on the event loop (``fn`` then returns an awaitable)."""

    def __init__(self, workers: int, name: str, *, threads: bool = True) -> None:
        self._executor = ThreadPoolExecutor(workers, thread_name_prefix=name) if threads else None
        self._slots = None if threads else asyncio.Semaphore(workers)
        self._running: set[str] = set()
        self._waiting: dict[str, tuple[Callable[[Any], Any], Any]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def submit(self, key: str, fn: Callable[[Any], Any], arg: Any) -> None:
        if key in self._running:
            self._waiting[key] = (fn, arg)
            return
        self._running.add(key)
        task = asyncio.get_running_loop().create_task(self._run(key, fn, arg))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _call(self, fn: Callable[[Any], Any], arg: Any) -> None:
        if self._executor is not None:
            await asyncio.get_running_loop().run_in_executor(self._executor, fn, arg)
            return
        assert self._slots is not None  # on the loop
        async with self._slots:
            await fn(arg)

    async def _run(self, key: str, fn: Callable[[Any], Any], arg: Any) -> None:
        try:
            while True:
                try:
                    await self._call(fn, arg)
                except Exception:
                    log.exception("handling failed", extra={"key": key})
                waiting = self._waiting.pop(key, None)
                if waiting is None:
                    return
                fn, arg = waiting
        finally:
            self._running.discard(key)

    def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)


class ObjectLog(logging.LoggerAdapter):  # type: ignore[type-arg]
    """A logger whose lines name the object as a field (``pod=namespace/name``), as
    Kopf's per-object logger does; a line's own fields are kept beside it."""

    def process(self, msg: Any, kwargs: Any) -> tuple[Any, Any]:
        kwargs["extra"] = {**(self.extra or {}), **(kwargs.get("extra") or {})}
        return msg, kwargs
