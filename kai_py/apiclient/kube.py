"""A thin JSON client over the ``kubernetes`` package's ApiClient.

The writer sends plain manifests (built and tested as dicts) and reads plain
JSON back, which sidesteps the v37 pydantic models (strict constructors, and
answers such as a Binding's ``Status`` that do not parse as the declared
type). Authentication, TLS and the kubeconfig are the client's. Calls are
synchronous, or async through an attached stack (``Kube.attach``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime
import json
import os
import re
import time
from collections.abc import Callable
from typing import Any, Protocol
from urllib.parse import quote, urlencode

import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from kai_py import metrics
from kai_py.api import jsoncodec

Json = dict[str, Any]

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"


class KubeError(Exception):
    """A non-2xx answer, or no answer at all (``code`` 0)."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(f"{code} {reason}: {message}" if code else message)
        self.code = code
        self.reason = reason
        self.message = message


class NotLeader(KubeError):
    """A write refused before it was sent: this replica does not lead (its fence said so)."""

    def __init__(self, method: str, path: str) -> None:
        super().__init__(0, "NotLeader", f"{method} {path}: not sent, this replica does not lead")


#: Requests that change the cluster: a fence is asked before each is sent.
MUTATING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
#: Asked with the method and path of a write at the moment it is sent; raises
#: ``NotLeader`` to refuse it (``leader.Leadership.fence``).
Fence = Callable[[str, str], None]


def user_agent() -> str:
    """The User-Agent of kai-py's requests: the process id tells replicas apart in an
    API server's audit log (and in the fault suite's record of accepted writes)."""
    return f"kai-py/{os.getpid()}"


#: Connections kept open per ``ApiClient`` and per ``AsyncTransport``: as many as
#: requests sent at once (the binder's 64 bind workers, the grouper's 48, the write
#: lanes' 32 + 8, Kopf's handler threads; more wait for a free connection). urllib3's
#: default (5 per core) is smaller: the requests over it each opened a connection of
#: their own and logged "connection pool is full".
CONNECTION_POOL_SIZE = 64


def load_api_client(
    kubeconfig: str | None = None,
    pool_size: int = CONNECTION_POOL_SIZE,
    context: str | None = None,
) -> k8s.ApiClient:
    """In-cluster config when running in a pod, else the kubeconfig ($KUBECONFIG or
    ~/.kube) at its current context, or ``context``."""
    configuration = k8s.Configuration()
    configuration.connection_pool_maxsize = max(
        int(configuration.connection_pool_maxsize or 0), pool_size
    )
    if kubeconfig is None and context is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    else:
        k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=_kubeconfig_path(kubeconfig),
            context=context,
            client_configuration=configuration,
        )
    return k8s.ApiClient(configuration)


def _kubeconfig_path(kubeconfig: str | None) -> str | None:
    path = kubeconfig or os.environ.get("KUBECONFIG") or None
    if path and os.pathsep in path:
        path = path.split(os.pathsep)[0]
    return path


_POD_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def kubeconfig_namespace(kubeconfig: str | None = None, context: str | None = None) -> str:
    """The namespace of the kubeconfig's context (the current one, or ``context``), as
    kubectl takes it: "default" where the context names none. In a pod without a
    kubeconfig, the pod's own namespace (as ``load_api_client`` then takes the pod's
    identity)."""
    if kubeconfig is None and context is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        try:
            with open(_POD_NAMESPACE_FILE, encoding="utf-8") as own:
                return own.read().strip() or "default"
        except OSError:
            return "default"
    contexts, current = k8s_config.list_kube_config_contexts(  # type: ignore[no-untyped-call]
        config_file=_kubeconfig_path(kubeconfig)
    )
    chosen = current
    if context is not None:
        chosen = next((c for c in contexts or [] if c.get("name") == context), None)
    namespace = ((chosen or {}).get("context") or {}).get("namespace")
    return str(namespace) if namespace else "default"


# What ``quote`` leaves as it is: Kubernetes names always are, and a plan makes a path
# for each of thousands of writes (the check is several times cheaper than quoting).
_UNRESERVED = re.compile(r"[A-Za-z0-9_.~-]*").fullmatch


def _segment(text: str) -> str:
    return text if _UNRESERVED(text) else quote(text, safe="")


def path_of(
    group: str,
    version: str,
    plural: str,
    namespace: str | None = None,
    name: str | None = None,
    subresource: str | None = None,
) -> str:
    base = f"/api/{version}" if not group else f"/apis/{group}/{version}"
    if namespace:
        base += f"/namespaces/{_segment(namespace)}"
    base += f"/{plural}"
    if name:
        base += f"/{_segment(name)}"
    if subresource:
        base += f"/{subresource}"
    return base


class AsyncSender(Protocol):
    """An async HTTP stack with ``Kube.request``'s contract (``informer.AsyncTransport``)."""

    async def request(
        self,
        method: str,
        path: str,
        body: object = None,
        *,
        content_type: str = ...,
        query: list[tuple[str, str]] | None = None,
        timeout: float | None = None,
    ) -> Json: ...


class Kube:
    """Requests by path, answered as JSON; non-2xx answers raise ``KubeError``.

    Attached to an async HTTP stack (``attach``), every request goes through it:
    those made on the event loop (``arequest``: the scheduling loop's writes) directly,
    those from threads (``request``: the pod-grouper's and the binder's workers) handed
    to the loop and waited for. On ``httppool`` that costs the operator half the CPU of
    sending them from each thread over the ``kubernetes`` client's urllib3 pool (a
    4,000-pod burst: 27 s -> 13 s), which unattached clients (and a request made on
    the loop thread through ``request``, which cannot wait there) still use.
    """

    def __init__(
        self,
        api_client: k8s.ApiClient,
        timeout: float = 10.0,
        *,
        fence: Fence | None = None,
        retries: bool = True,
    ) -> None:
        self.api_client = api_client
        self.timeout = timeout
        #: Asked before every write is sent (here, or by the attached async stack).
        self.fence = fence
        #: urllib3's own retries of a request that got no answer (GETs only when a
        #: fence is set: a write sent again by urllib3 would pass no fence).
        self.retries = retries
        self._sender: AsyncSender | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._host = str(api_client.configuration.host).rstrip("/")
        self._token = BearerToken(api_client.configuration)

    def attach(self, sender: AsyncSender) -> None:
        """Send every request through ``sender`` on the running event loop."""
        self._sender = sender
        self._loop = asyncio.get_running_loop()

    def detach(self) -> None:
        self._sender = self._loop = None

    async def arequest(
        self,
        method: str,
        path: str,
        body: object = None,
        *,
        content_type: str = "application/json",
        query: list[tuple[str, str]] | None = None,
    ) -> Json:
        """``request`` for the event loop: over the async stack, else in a thread."""
        if self._sender is not None and self._loop is asyncio.get_running_loop():
            return await self._sender.request(
                method, path, body, content_type=content_type, query=query, timeout=self.timeout
            )
        return await asyncio.to_thread(
            self.request, method, path, body, content_type=content_type, query=query
        )

    def request(
        self,
        method: str,
        path: str,
        body: object = None,
        *,
        content_type: str = "application/json",
        query: list[tuple[str, str]] | None = None,
    ) -> Json:
        sender, loop = self._sender, self._loop
        # A thread's request goes to the loop's async stack (one on the loop itself cannot
        # wait for it there).
        if (
            sender is not None
            and loop is not None
            and not loop.is_closed()
            and asyncio._get_running_loop() is not loop
        ):
            return self._on_loop(sender, loop, method, path, body, content_type, query)
        # Straight to the client's urllib3 pool (its TLS, client certificate and proxy
        # settings): the generated client's serialisation and per-request auth refresh
        # (which re-reads the kubeconfig) cost more CPU than the request itself.
        url = self._host + path
        if query:
            url += "?" + urlencode(query)
        headers = {**self.api_client.default_headers, "Accept": "application/json"}
        # The client's own product first (how its requests are counted apart from the
        # async stack's), then ours with the process id.
        headers["User-Agent"] = f"{headers.get('User-Agent') or 'kubernetes'} {user_agent()}"
        data: bytes | None = None
        if body is not None:
            headers["Content-Type"] = content_type
            data = jsoncodec.dumps(body, default=_plain_json)
        token = self._token()
        if token:
            headers["Authorization"] = token
        retries: Any = None if self.retries else False
        if method in MUTATING and self.fence is not None:
            self.fence(method, path)  # as late as can be: right before it is sent
            retries = False
        try:
            response = self.api_client.rest_client.pool_manager.request(
                method,
                url,
                body=data,
                headers=headers,
                timeout=urllib3.Timeout(total=self.timeout),
                retries=retries,
                preload_content=True,
            )
        except Exception as exc:  # connection refused, timeouts, TLS
            metrics.record_api_error(method, 0)
            raise KubeError(0, type(exc).__name__, str(exc)) from None
        raw = response.data or b""
        status = int(response.status)
        if not 200 <= status < 300:
            metrics.record_api_error(method, status)
            raise _error(status, str(response.reason or ""), raw)
        if not raw:
            return {}
        parsed = jsoncodec.loads(raw)
        return parsed if isinstance(parsed, dict) else {"value": parsed}

    def _on_loop(
        self,
        sender: AsyncSender,
        loop: asyncio.AbstractEventLoop,
        method: str,
        path: str,
        body: object,
        content_type: str,
        query: list[tuple[str, str]] | None,
    ) -> Json:
        """A request from a thread, sent over the async stack by the event loop."""
        try:
            future = asyncio.run_coroutine_threadsafe(
                sender.request(
                    method, path, body, content_type=content_type, query=query, timeout=self.timeout
                ),
                loop,
            )
        except RuntimeError as exc:  # the loop stopped meanwhile
            raise KubeError(0, "LoopClosed", str(exc)) from None
        try:
            # The sender's own timeout ends it; this one only guards a loop that stopped.
            return future.result(self.timeout + 5.0)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise KubeError(0, "TimeoutError", f"{method} {path}: no answer") from None

    def get(self, path: str) -> Json:
        return self.request("GET", path)

    def create(self, path: str, body: Json) -> Json:
        return self.request("POST", path, body)

    def patch(self, path: str, body: Json, content_type: str = MERGE_PATCH) -> Json:
        return self.request("PATCH", path, body, content_type=content_type)

    def delete(self, path: str, body: Json | None = None) -> Json:
        return self.request("DELETE", path, body)


#: Objects per page of a paginated LIST (``list_all``); kubectl asks for 500 too.
LIST_PAGE_SIZE = 500


class _Requests(Protocol):
    def request(
        self,
        method: str,
        path: str,
        body: object = None,
        *,
        content_type: str = ...,
        query: list[tuple[str, str]] | None = None,
    ) -> Json: ...


def list_all(
    kube: _Requests,
    path: str,
    query: list[tuple[str, str]] | None = None,
    *,
    limit: int = LIST_PAGE_SIZE,
) -> Json:
    """A LIST in pages of ``limit`` objects (``limit`` / ``continue``), as one listing.

    No answer holds more than one page, so a LIST of 100,000 pods is never one
    response of hundreds of MB. The listing's ``metadata.resourceVersion`` is the first
    page's: the server serves every page of one listing from that snapshot. A
    ``continue`` token that expired meanwhile (410) starts the listing again, twice at
    most.
    """
    for _ in range(3):
        items: list[Any] = []
        first: Json | None = None
        token: str | None = None
        while True:
            page_query = [*(query or []), ("limit", str(limit))]
            if token:
                page_query.append(("continue", token))
            try:
                page = kube.request("GET", path, query=page_query)
            except KubeError as exc:
                if exc.code == 410 and token:
                    break  # the snapshot expired between pages: list again
                raise
            if first is None:
                first = page
            items.extend(page.get("items") or [])
            token = (page.get("metadata") or {}).get("continue") or None
            if not token:
                listing = {k: v for k, v in first.items() if k != "items"}
                meta = dict(first.get("metadata") or {})
                meta.pop("continue", None)
                meta.pop("remainingItemCount", None)
                listing["metadata"] = meta
                listing["items"] = items
                return listing
    raise KubeError(410, "Expired", f"the listing of {path} kept expiring between pages")


async def send(
    kube: Any,
    method: str,
    path: str,
    body: object = None,
    *,
    content_type: str = "application/json",
) -> Json:
    """A request from the event loop: ``kube.arequest`` where there is one (a ``Kube``),
    else ``kube.request`` in a thread (test doubles)."""
    arequest = getattr(kube, "arequest", None)
    if arequest is not None:
        answer: Json = await arequest(method, path, body, content_type=content_type)
        return answer
    answer = await asyncio.to_thread(kube.request, method, path, body, content_type=content_type)
    return answer


async def list_paged(
    kube: Any,
    path: str,
    on_page: Callable[[list[Json]], None] | None = None,
    *,
    limit: int = LIST_PAGE_SIZE,
    label_selector: str | None = None,
    field_selector: str | None = None,
) -> Json:
    """A paginated LIST from the event loop that hands each page's objects to
    ``on_page`` as it comes and keeps none of them: returns the listing's
    ``resourceVersion`` and the uids it held, as ``{"metadata": {...}, "items":
    [{"metadata": {"uid": ...}}, ...]}``. So a LIST of 100,000 pods never holds more
    than one page of whole objects. A ``continue`` token that expired (410) starts the
    listing again (``on_page`` then sees objects again: it must be idempotent)."""
    arequest = getattr(kube, "arequest", None)
    for _ in range(3):
        uids: list[str] = []
        version: str | None = None
        token: str | None = None
        while True:
            query = [("limit", str(limit))]
            if label_selector:
                query.append(("labelSelector", label_selector))
            if field_selector:
                query.append(("fieldSelector", field_selector))
            if token:
                query.append(("continue", token))
            try:
                if arequest is not None:
                    page: Json = await arequest("GET", path, query=query)
                else:
                    page = await asyncio.to_thread(kube.request, "GET", path, query=query)
            except KubeError as exc:
                if exc.code == 410 and token:
                    break
                raise
            meta = page.get("metadata") or {}
            if version is None:
                version = meta.get("resourceVersion")
            items = page.get("items") or []
            uids.extend(str((i.get("metadata") or {}).get("uid") or "") for i in items)
            if on_page is not None:
                on_page(items)
            token = meta.get("continue") or None
            if not token:
                return {
                    "metadata": {"resourceVersion": version},
                    "items": [{"metadata": {"uid": uid}} for uid in uids if uid],
                }
    raise KubeError(410, "Expired", f"the listing of {path} kept expiring between pages")


#: How long a bearer token is used before the configuration is asked again.
TOKEN_SECONDS = 30.0


class BearerToken:
    """The configuration's bearer token, asked for at most every TOKEN_SECONDS (its
    refresh hook re-reads the kubeconfig: too dear for every request). Calling it
    gives the token, or None without one."""

    def __init__(self, configuration: k8s.Configuration) -> None:
        self.configuration = configuration
        self._value: str | None = None
        self._at: float | None = None

    def __call__(self) -> str | None:
        now = time.monotonic()
        if self._at is None or now - self._at > TOKEN_SECONDS:
            auth: dict[str, Any] = dict(self.configuration.auth_settings())
            value = (auth.get("BearerToken") or {}).get("value")
            self._value = str(value) if value else None
            self._at = now
        return self._value


def _plain_json(value: object) -> object:
    """What ``json.dumps`` cannot encode by itself: times, and client models."""
    if isinstance(value, datetime.datetime | datetime.date):
        return value.isoformat()
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict):
        return to_dict()
    raise TypeError(f"cannot send {type(value).__name__} as JSON")


def _error(code: int, reason: str, body: object) -> KubeError:
    message = ""
    if isinstance(body, bytes | str):
        text = body.decode(errors="replace") if isinstance(body, bytes) else body
        try:
            status = json.loads(text)
            message = str(status.get("message") or "") if isinstance(status, dict) else text
            reason = str(status.get("reason") or reason) if isinstance(status, dict) else reason
        except ValueError:
            message = text
    return KubeError(code, reason, message[:500])


#: Answers worth asking again at once: no answer, throttled, server-side errors.
TRANSIENT_CODES = frozenset({0, 429, 500, 502, 503, 504})


class RetryingKube(Kube):
    """A ``Kube`` that asks again (``tries`` in all, ``delay`` apart) after a transient
    error, for callers whose every request is safe to repeat: a create answered 409 on
    the repeat, a delete 404, a Binding "already assigned", which they handle."""

    def __init__(
        self,
        api_client: k8s.ApiClient,
        timeout: float = 10.0,
        *,
        fence: Fence | None = None,
        tries: int = 3,
        delay: float = 0.2,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        super().__init__(api_client, timeout, fence=fence)
        self.tries = max(1, tries)
        self.delay = delay
        self._sleep = sleep

    def request(
        self,
        method: str,
        path: str,
        body: object = None,
        *,
        content_type: str = "application/json",
        query: list[tuple[str, str]] | None = None,
    ) -> Json:
        for attempt in range(1, self.tries + 1):
            try:
                return super().request(method, path, body, content_type=content_type, query=query)
            except KubeError as exc:
                if (
                    exc.code not in TRANSIENT_CODES
                    or attempt == self.tries
                    or isinstance(exc, NotLeader)
                ):
                    raise
                self._sleep(self.delay * attempt)
        raise AssertionError("unreachable")
