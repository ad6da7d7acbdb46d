"""The pod watch of the operator's parts, outside Kopf.

Pods are the busiest kind by far (several events per pod: created, grouped, bound,
started...). Kopf's handling of each watch event costs more CPU than the event is
worth to kai-py, so the parts do not watch pods through Kopf: one ``Informer``
(``kai_py.cluster.informer``: LIST in pages, then WATCH, over aiohttp) per process
calls each part's listener with ``(type, pod, memo)`` on the event loop. Nothing is
written to pods by this (as with ``on.event`` handlers before).

A part subscribes with ``on_pods(registry, listener)`` when it registers its
handlers; the first subscription on a registry adds the watch's own startup and
cleanup handlers to it. Listeners must be quick; ``SerialPerKey`` hands slow work
to threads, one at a time per object (as Kopf did) and a bounded number at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final

import kopf

from kai_py.cluster.informer import AsyncTransport, Informer
from kai_py.cluster.kube import load_api_client, path_of

log = logging.getLogger(__name__)

Json = dict[str, Any]
PodListener = Callable[[str | None, Json, Any], None]

_TASK_KEY: Final = "kai_py_pod_watch"
_TRANSPORT_KEY: Final = "kai_py_pod_watch_transport"
_listeners: dict[int, list[PodListener]] = {}


def on_pods(registry: kopf.OperatorRegistry, listener: PodListener) -> None:
    """Call ``listener(type, pod, memo)`` for every pod event once the operator runs."""
    listeners = _listeners.get(id(registry))
    if listeners is None:
        listeners = _listeners[id(registry)] = []
        _register(registry, listeners)
    listeners.append(listener)


def _register(registry: kopf.OperatorRegistry, listeners: list[PodListener]) -> None:
    async def start(memo: Any, **_: Any) -> None:
        # The parts' own startup handlers may run after this one: the first events
        # reach them once the LIST is in (they ignore events until they are ready, and
        # each part catches up from state: warm-up LISTs, group_all, the sweeps).
        api_client = await asyncio.to_thread(load_api_client)
        transport = AsyncTransport(api_client.configuration)
        informer = Informer(transport, path_of("", "v1", "pods"), "pods")
        for listener in listeners:
            informer.listeners.append(_bound(listener, memo))
        memo[_TRANSPORT_KEY] = transport
        memo[_TASK_KEY] = asyncio.create_task(informer.run(), name="kai-py-pod-watch")

    async def stop(memo: Any, **_: Any) -> None:
        task = memo.get(_TASK_KEY)
        if isinstance(task, asyncio.Task):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        transport = memo.get(_TRANSPORT_KEY)
        if isinstance(transport, AsyncTransport):
            await transport.close()

    kopf.on.startup(registry=registry, id="kai-py-pod-watch-start")(start)
    kopf.on.cleanup(registry=registry, id="kai-py-pod-watch-stop")(stop)


def _bound(listener: PodListener, memo: Any) -> Callable[[str | None, Json], None]:
    def call(event_type: str | None, pod: Json) -> None:
        listener(event_type, pod, memo)

    return call


def pod_key(pod: Json) -> str:
    m = pod.get("metadata") or {}
    return f"{m.get('namespace')}/{m.get('name')}"


class SerialPerKey:
    """Runs ``fn(arg)`` in a pool of threads: one call at a time per key (a newer call
    for a busy key waits, replacing any older one waiting), ``workers`` at once."""

    def __init__(self, workers: int, name: str) -> None:
        self._executor = ThreadPoolExecutor(workers, thread_name_prefix=name)
        self._running: set[str] = set()
        self._waiting: dict[str, tuple[Callable[[Any], None], Any]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def submit(self, key: str, fn: Callable[[Any], None], arg: Any) -> None:
        if key in self._running:
            self._waiting[key] = (fn, arg)
            return
        self._running.add(key)
        task = asyncio.get_running_loop().create_task(self._run(key, fn, arg))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, key: str, fn: Callable[[Any], None], arg: Any) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                try:
                    await loop.run_in_executor(self._executor, fn, arg)
                except Exception:
                    log.exception("handling %s failed", key)
                waiting = self._waiting.pop(key, None)
                if waiting is None:
                    return
                fn, arg = waiting
        finally:
            self._running.discard(key)

    def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        self._executor.shutdown(wait=False, cancel_futures=True)


class ObjectLog(logging.LoggerAdapter):  # type: ignore[type-arg]
    """A logger whose lines name the object, as Kopf's per-object logger did."""

    def process(self, msg: Any, kwargs: Any) -> tuple[Any, Any]:
        return f"{msg} [{self.extra.get('what') if self.extra else ''}]", kwargs
