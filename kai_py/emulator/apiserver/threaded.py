"""Run the emulated API server in a background thread, for sync code and kubectl.

::

    with run_in_thread() as srv:
        subprocess.run(["kubectl", "get", "pods"], env={"KUBECONFIG": srv.kubeconfig_path})
        pod = srv.call(srv.store.get("pods", "default", "p1"))   # run a coroutine on its loop
        srv.server.faults.add(verb="list", resource="pods", code=500)
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from kai_py.emulator.apiserver.server import EmulatedAPIServer
from kai_py.emulator.storage.store import Store

T = TypeVar("T")


class LoopThread:
    """An event loop in a daemon thread; ``call`` runs a coroutine on it from sync code."""

    def __init__(self, name: str) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def call(self, awaitable: Awaitable[T], timeout: float = 30.0) -> T:
        """Run a coroutine on the thread's loop and return its result."""

        async def wrap() -> T:
            return await awaitable

        return asyncio.run_coroutine_threadsafe(wrap(), self._loop).result(timeout)

    def call_soon(self, fn: Callable[[], T], timeout: float = 30.0) -> T:
        """Run a plain function on the loop (for calls that are not thread-safe)."""

        async def wrap() -> T:
            return fn()

        return self.call(wrap(), timeout)

    def _stop_loop(self) -> None:
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
        if not self._loop.is_running():
            self._loop.close()


class ThreadedServer(LoopThread):
    """An :class:`EmulatedAPIServer` running on its own event loop in a daemon thread."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__("kai-py-emulator")
        self._kwargs = kwargs
        self._server: EmulatedAPIServer | None = None

    def start(self) -> ThreadedServer:
        self._thread.start()

        async def make() -> EmulatedAPIServer:
            return await EmulatedAPIServer(**self._kwargs).start()

        self._server = self.call(make())
        return self

    @property
    def server(self) -> EmulatedAPIServer:
        assert self._server is not None, "not started"
        return self._server

    @property
    def store(self) -> Store:
        return self.server.store

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def kubeconfig_path(self) -> str:
        return self.server.kubeconfig_path

    def stop(self) -> None:
        if self._server is not None:
            self.call(self._server.close())
            self._server = None
        self._stop_loop()

    def __enter__(self) -> ThreadedServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextmanager
def run_in_thread(**kwargs: Any) -> Iterator[ThreadedServer]:
    """Start an emulated API server in a thread for the duration of a ``with`` block.

    Keyword arguments go to :class:`EmulatedAPIServer`.
    """
    srv = ThreadedServer(**kwargs).start()
    try:
        yield srv
    finally:
        srv.stop()
