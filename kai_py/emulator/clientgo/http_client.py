"""``ClusterClient`` over HTTP: the simulated nodes and controllers against any API server.

The kubelets, device plugins and built-in controllers of the emulator talk
to the cluster through :class:`~kai_py.emulator.clientgo.client.ClusterClient`.
This implementation speaks the Kubernetes REST API with aiohttp, so the
same code can drive a real kube-apiserver (which has no kubelets and, run
alone, no controllers): the tests of ``tests/realapi`` use it that way.

Failures come back as :class:`~kai_py.emulator.storage.errors.ApiError` built from
the server's ``Status`` body, so callers handle 404/409/410 exactly as they
do with the in-process store.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import AsyncIterator
from typing import Any

import aiohttp

from kai_py.emulator.clientgo.client import Json, Kind, WatchEvent
from kai_py.emulator.storage.errors import ApiError


def _path(kind: Kind, namespace: str | None, name: str | None = None, sub: str = "") -> str:
    base = f"/apis/{kind.group}/{kind.version}" if kind.group else f"/api/{kind.version}"
    if kind.namespaced and namespace:
        base += f"/namespaces/{namespace}"
    base += f"/{kind.plural}"
    if name:
        base += f"/{name}"
    if sub:
        base += f"/{sub}"
    return base


def _error(code: int, text: str) -> ApiError:
    try:
        body: Any = json.loads(text)
    except ValueError:
        body = None
    if isinstance(body, dict) and body.get("kind") == "Status":
        return ApiError(
            int(body.get("code") or code),
            str(body.get("reason") or ""),
            str(body.get("message") or text),
            details=body.get("details"),
        )
    return ApiError(code, "", text)


#: The User-Agent of the simulated kubelets, device plugins and controllers.
SIMULATED_AGENT = "kai-py-simulated-cluster"


class HttpClient:
    """A :class:`ClusterClient` for a server at ``url`` with a bearer ``token``.

    ``ca_file`` verifies the server's certificate; without it TLS is not
    verified (loopback test servers only).
    """

    def __init__(self, url: str, token: str | None = None, ca_file: str | None = None) -> None:
        self.url = url.rstrip("/")
        # Named, as a kubelet names itself: an audit log (and the e2e benchmark) can tell
        # the simulated nodes' and controllers' requests from the operator's.
        self._headers = {"Accept": "application/json", "User-Agent": SIMULATED_AGENT}
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        self._ssl: ssl.SSLContext | bool = (
            ssl.create_default_context(cafile=ca_file) if ca_file else False
        )
        self._session: aiohttp.ClientSession | None = None

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                headers=self._headers, timeout=aiohttp.ClientTimeout(total=None, connect=10)
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def _call(
        self,
        method: str,
        path: str,
        *,
        body: Json | None = None,
        params: dict[str, str] | None = None,
        content_type: str = "application/json",
    ) -> Any:
        data = json.dumps(body) if body is not None else None
        headers = {"Content-Type": content_type} if data is not None else None
        async with self._http().request(
            method,
            self.url + path,
            data=data,
            params=params,
            headers=headers,
            ssl=self._ssl,
            timeout=aiohttp.ClientTimeout(total=60),
        ) as resp:
            text = await resp.text()
            if resp.status >= 400:
                raise _error(resp.status, text)
            return json.loads(text) if text else None

    async def create(self, kind: Kind, body: Json, namespace: str | None = None) -> Json:
        ns = namespace or (body.get("metadata") or {}).get("namespace")
        result: Json = await self._call("POST", _path(kind, ns), body=body)
        return result

    async def get(self, kind: Kind, name: str, namespace: str | None = None) -> Json:
        result: Json = await self._call("GET", _path(kind, namespace, name))
        return result

    async def list(
        self,
        kind: Kind,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> tuple[list[Json], str]:
        params = {}
        if label_selector:
            params["labelSelector"] = label_selector
        if field_selector:
            params["fieldSelector"] = field_selector
        listing = await self._call("GET", _path(kind, namespace), params=params)
        items: list[Json] = []
        for item in listing.get("items") or []:
            # A list's items carry no apiVersion/kind; the watch's objects do.
            item.setdefault("apiVersion", kind.api_version)
            item.setdefault("kind", str(listing.get("kind", "")).removesuffix("List"))
            items.append(item)
        return items, str((listing.get("metadata") or {}).get("resourceVersion", ""))

    async def patch(
        self,
        kind: Kind,
        name: str,
        patch: Json,
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> Json:
        result: Json = await self._call(
            "PATCH",
            _path(kind, namespace, name, subresource or ""),
            body=patch,
            content_type="application/merge-patch+json",
        )
        return result

    async def delete(
        self,
        kind: Kind,
        name: str,
        namespace: str | None = None,
        grace_period_seconds: int | None = None,
        uid: str | None = None,
        propagation_policy: str | None = None,
    ) -> Json | None:
        options: Json = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        if uid:
            options["preconditions"] = {"uid": uid}
        if propagation_policy:
            options["propagationPolicy"] = propagation_policy
        result = await self._call("DELETE", _path(kind, namespace, name), body=options)
        if isinstance(result, dict) and result.get("kind") == "Status":
            return None
        return result if isinstance(result, dict) else None

    async def bind(self, namespace: str, name: str, node: str, uid: str | None = None) -> None:
        binding: Json = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        if uid:
            binding["metadata"]["uid"] = uid
        pods = Kind("", "v1", "pods")
        await self._call("POST", _path(pods, namespace, name, "binding"), body=binding)

    async def watch(
        self,
        kind: Kind,
        resource_version: str,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> AsyncIterator[WatchEvent]:
        params = {
            "watch": "1",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": "300",
        }
        if label_selector:
            params["labelSelector"] = label_selector
        if field_selector:
            params["fieldSelector"] = field_selector
        async with self._http().get(
            self.url + _path(kind, namespace),
            params=params,
            ssl=self._ssl,
            timeout=aiohttp.ClientTimeout(total=None, sock_read=None),
        ) as resp:
            if resp.status >= 400:
                raise _error(resp.status, await resp.text())
            while True:
                line = await resp.content.readline()
                if not line:
                    return
                if not line.strip():
                    continue
                event = json.loads(line)
                obj = event.get("object") or {}
                if event.get("type") == "ERROR":
                    raise _error(int(obj.get("code") or 500), json.dumps(obj))
                yield WatchEvent(str(event.get("type")), obj)
