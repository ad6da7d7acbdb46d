"""An async HTTP stack for the hot paths, and an informer on top of it.

``AsyncTransport`` speaks to the API server over ``httppool`` (HTTP/1.1 on the
event loop) from the ``kubernetes`` client's ``Configuration``: the same
kubeconfig or in-cluster settings, the same CA, client certificate and bearer
token (asked afresh for each request, so a refreshed token is used). One
connection pool per process part, sized to its concurrency.

``Informer`` LISTs a resource (in pages) and WATCHes it from the listing's
resourceVersion, calling its listeners with ``(type, object)`` for each object:
``None`` for an object of a listing (as Kopf does), then ``ADDED`` / ``MODIFIED``
/ ``DELETED``. A watch that ends is opened again from the last version seen; an
expired version (410) or a failed request starts again from a fresh LIST (after a
pause that grows to 10 s). Listeners are synchronous and quick (the event loop
runs them); slow work is theirs to hand to threads.

Why not Kopf for these: Kopf's handling of one watch event (diff base, causes,
per-handler arguments and loggers) cost more CPU than the whole scheduling cycle at
thousands of pods; the pod watch is by far the busiest.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import AsyncIterator, Callable
from typing import Any, Final
from urllib.parse import urlencode

from kubernetes import client as k8s

from kai_py import metrics
from kai_py.api import jsoncodec
from kai_py.apiclient.httppool import HttpPool
from kai_py.apiclient.kube import (
    CONNECTION_POOL_SIZE,
    LIST_PAGE_SIZE,
    MUTATING,
    BearerToken,
    Fence,
    Kube,
    KubeError,
    _error,
    user_agent,
)

log = logging.getLogger(__name__)

Json = dict[str, Any]
Listener = Callable[[str | None, Json], None]

#: Seconds a watch request asks the server to keep the stream open.
WATCH_SECONDS: Final = 240
#: A stream silent for this long (no event, no bookmark) is taken as stalled.
STALLED_SECONDS: Final = 90.0
MAX_PAUSE_SECONDS: Final = 10.0


class _Gone(Exception):
    """The version to watch from expired (410): list again."""


class AsyncTransport:
    """Requests and watch streams over ``HttpPool``, configured like the ``kubernetes``
    client."""

    def __init__(
        self,
        configuration: k8s.Configuration,
        *,
        pool_size: int = CONNECTION_POOL_SIZE,
        timeout: float = 10.0,
        fence: Fence | None = None,
    ) -> None:
        self.configuration = configuration
        #: Asked right before each write is sent (``Kube.fence``).
        self.fence = fence
        self.base = str(configuration.host).rstrip("/")
        self.pool_size = pool_size
        self.timeout = timeout
        self._pool: HttpPool | None = None
        self.closed = False
        self._token = BearerToken(configuration)

    def _ssl(self) -> ssl.SSLContext | None:
        c = self.configuration
        if not self.base.startswith("https:"):
            return None
        context = ssl.create_default_context(cafile=c.ssl_ca_cert or None)
        if c.cert_file:
            context.load_cert_chain(c.cert_file, c.key_file or None)
        if not c.verify_ssl:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        elif c.assert_hostname is False:
            context.check_hostname = False
        return context

    def _pool_now(self) -> HttpPool:
        if self.closed:
            raise ConnectionError("the transport is closed (the part stopped)")
        if self._pool is None:
            self._pool = HttpPool(self.base, ssl_context=self._ssl(), size=self.pool_size)
        return self._pool

    def _headers(self, content_type: str | None) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": user_agent()}
        if content_type:
            headers["Content-Type"] = content_type
        token = self._token()
        if token:
            headers["Authorization"] = str(token)
        return headers

    async def request(
        self,
        method: str,
        path: str,
        body: object = None,
        *,
        content_type: str = "application/json",
        query: list[tuple[str, str]] | None = None,
        timeout: float | None = None,
    ) -> Json:
        """As ``Kube.request``: the JSON answer, or ``KubeError`` (code 0: no answer)."""
        target = f"{path}?{urlencode(query)}" if query else path
        data = jsoncodec.dumps(body) if body is not None else None
        fence = self.fence
        check = None
        if fence is not None and method in MUTATING:

            def check() -> None:
                fence(method, path)

        try:
            answer = await self._pool_now().request(
                method,
                target,
                self._headers(content_type if data is not None else None),
                data,
                timeout=timeout or self.timeout,
                check=check,
            )
        except (TimeoutError, OSError) as exc:
            metrics.record_api_error(method, 0)
            raise KubeError(0, type(exc).__name__, str(exc) or type(exc).__name__) from None
        status, reason, raw = answer.status, answer.reason, answer.body
        if not 200 <= status < 300:
            metrics.record_api_error(method, status)
            raise _error(status, reason, raw)
        if not raw:
            return {}
        parsed = jsoncodec.loads(raw)
        return parsed if isinstance(parsed, dict) else {"value": parsed}

    def abort_writes(self) -> int:
        """Reset the connections of the writes in flight (``HttpPool.abort_writes``)."""
        return self._pool.abort_writes() if self._pool is not None else 0

    async def watch(
        self, path: str, version: str, label_selector: str | None = None
    ) -> AsyncIterator[Json]:
        """The events of one watch request from ``version`` (raises ``_Gone`` on a 410)."""
        query = [
            *([("labelSelector", label_selector)] if label_selector else []),
            ("watch", "true"),
            ("resourceVersion", version),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(WATCH_SECONDS)),
        ]
        stream = self._pool_now().stream(
            f"{path}?{urlencode(query)}", self._headers(None), idle_timeout=STALLED_SECONDS
        )
        async with stream as (status, reason, batches):
            if status != 200:
                body = b"\n".join([line async for batch in batches for line in batch])
                raise _Gone() if status == 410 else _error(status, reason, body)
            async for batch in batches:
                for line in batch:
                    event = jsoncodec.loads(line)
                    if event.get("type") == "ERROR":
                        status_object = event.get("object") or {}
                        if status_object.get("code") == 410:
                            raise _Gone()
                        raise KubeError(
                            int(status_object.get("code") or 0),
                            str(status_object.get("reason") or "WatchError"),
                            str(status_object.get("message") or ""),
                        )
                    yield event

    async def close(self) -> None:
        self.closed = True
        if self._pool is not None:
            await self._pool.close()
            self._pool = None


def attach_transport(kube: Kube) -> AsyncTransport:
    """Send ``kube``'s requests over a new ``AsyncTransport`` on the running loop (close
    it when the part stops)."""
    transport = AsyncTransport(
        kube.api_client.configuration, timeout=kube.timeout, fence=kube.fence
    )
    kube.attach(transport)
    return transport


class Informer:
    """LIST + WATCH of one resource path, fanned out to listeners (see the module)."""

    def __init__(
        self, transport: AsyncTransport, path: str, name: str, label_selector: str | None = None
    ) -> None:
        self.transport = transport
        self.path = path
        self.name = name
        #: Only the objects with these labels, selected by the API server (a shard's pool).
        self.label_selector = label_selector
        self.listeners: list[Listener] = []
        self.lists = 0  # how many times it listed (tests, logs)

    def _dispatch(self, event_type: str | None, obj: Json) -> None:
        for listener in self.listeners:
            try:
                listener(event_type, obj)
            except Exception:  # one listener's bug must not stop the watch
                log.exception("watch: a listener failed", extra={"watch": self.name})

    async def run(self) -> None:
        pause = 0.5
        while True:
            try:
                version = await self._list()
                pause = 0.5
                while True:
                    version = await self._watch_once(version)
            except _Gone:
                log.info("watch: version expired; listing again", extra={"watch": self.name})
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning(
                    "watch failed; listing again",
                    extra={"watch": self.name, "error": str(exc), "pause_s": pause},
                )
                await asyncio.sleep(pause)
                pause = min(MAX_PAUSE_SECONDS, pause * 2)

    async def _list(self) -> str:
        """LIST in pages, each page's objects dispatched as it comes (no whole listing
        is ever held); returns the listing's version."""
        for _ in range(3):
            version: str | None = None
            token: str | None = None
            while True:
                query = [("limit", str(LIST_PAGE_SIZE))]
                if self.label_selector:
                    query.append(("labelSelector", self.label_selector))
                if token:
                    query.append(("continue", token))
                try:
                    page = await self.transport.request("GET", self.path, query=query, timeout=60.0)
                except KubeError as exc:
                    if exc.code == 410 and token:
                        break  # expired between pages: list again (listeners are idempotent)
                    raise
                meta = page.get("metadata") or {}
                if version is None:
                    version = str(meta.get("resourceVersion") or "")
                for obj in page.get("items") or []:
                    self._dispatch(None, obj)
                token = meta.get("continue") or None
                if not token:
                    self.lists += 1
                    return version
        raise KubeError(410, "Expired", f"the listing of {self.path} kept expiring between pages")

    async def _watch_once(self, version: str) -> str:
        """One watch request; returns the last version seen (to watch on from)."""
        try:
            async for event in self.transport.watch(self.path, version, self.label_selector):
                obj = event.get("object") or {}
                seen = (obj.get("metadata") or {}).get("resourceVersion")
                if seen:
                    version = str(seen)
                kind = event.get("type")
                if kind in ("ADDED", "MODIFIED", "DELETED"):
                    self._dispatch(str(kind), obj)
        except (TimeoutError, OSError) as exc:
            # The stream broke (server restart, dropped watch): go on from the last
            # version; a version that expired meanwhile answers 410 and we list again.
            log.debug("watch interrupted", extra={"watch": self.name, "error": str(exc)})
            await asyncio.sleep(0.2)
        return version
