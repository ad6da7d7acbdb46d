"""The HTTP face of the emulator: the Kubernetes REST and watch protocol over aiohttp.

Usage from async code::

    async with EmulatedAPIServer() as srv:       # a free port on 127.0.0.1
        print(srv.url, srv.kubeconfig_path)      # give KUBECONFIG to kubectl or clients
        await srv.store.create("pods", {...})    # the same state, in process
        srv.faults.add(verb="create", resource="pods", fraction=0.5, code=500)
        srv.drop_watches()                       # end every open HTTP watch stream
        await srv.stop(); await srv.start()      # a restart with the same state and port

From sync code (kubectl, the sync ``kubernetes`` client) use
:func:`kai_py.emulator.apiserver.threaded.run_in_thread`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import tempfile
import time
from collections import Counter, OrderedDict
from typing import Any

import yaml
from aiohttp import web

from kai_py.api import jsoncodec
from kai_py.emulator.apiserver import discovery, protobuf
from kai_py.emulator.apiserver.admission import WebhookDispatcher
from kai_py.emulator.apiserver.faults import FaultSet
from kai_py.emulator.apiserver.kubeconfig import write_kubeconfig
from kai_py.emulator.apiserver.protobuf import ProtobufError
from kai_py.emulator.apiserver.rbac import Authorizer
from kai_py.emulator.apiserver.tables import to_table
from kai_py.emulator.storage.errors import ApiError, bad_request, method_not_allowed
from kai_py.emulator.storage.patches import json_patch, merge_patch
from kai_py.emulator.storage.resources import ResourceType
from kai_py.emulator.storage.store import Store
from kai_py.emulator.storage.watch import Watch

JSON = dict[str, Any]

_CORE_PREFIX = ("api", "v1")
_TRUE = ("1", "true", "True")
_WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def _dumps(body: Any) -> bytes:
    return jsoncodec.dumps(body)


class EncodedObjects:
    """The JSON of stored objects, kept by identity for the last ``size`` of them.

    Stored objects are replaced, never changed (``Watch``'s ``shared``), so one
    stored version serializes to the same bytes each time: the answer to the write
    that made it and the event to each watch that sees it. Holding the object keeps
    its ``id`` from being reused while its bytes are kept.
    """

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self._data: OrderedDict[int, tuple[Any, bytes]] = OrderedDict()

    def __call__(self, obj: Any) -> bytes:
        hit = self._data.get(id(obj))
        if hit is not None and hit[0] is obj:
            return hit[1]
        raw = _dumps(obj)
        self._data[id(obj)] = (obj, raw)
        if len(self._data) > self.size:
            self._data.popitem(last=False)
        return raw


def json_response(
    body: Any,
    status: int = 200,
    warnings: list[str] | None = None,
    encoded: bytes | None = None,
) -> web.Response:
    """``encoded``: ``body`` already serialized."""
    headers = {}
    if warnings:
        headers["Warning"] = ", ".join(
            '299 - "' + w.replace("\\", "\\\\").replace('"', '\\"') + '"' for w in warnings
        )
    return web.Response(
        body=_dumps(body) if encoded is None else encoded,
        status=status,
        content_type="application/json",
        headers=headers,
    )


def error_response(err: ApiError) -> web.Response:
    return json_response(err.status, status=err.code)


def success_status(code: int = 201, details: JSON | None = None) -> JSON:
    body: JSON = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "code": code,
    }
    if details:
        body["details"] = details
    return body


class _Request:
    """A resource request decoded from the URL."""

    def __init__(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str | None,
        subresource: str,
        watch_path: bool,
    ) -> None:
        self.rt = rt
        self.namespace = namespace
        self.name = name
        self.subresource = subresource
        self.watch_path = watch_path


def _wants_table(request: web.Request) -> bool:
    accept = request.headers.get("Accept", "")
    first = accept.split(",")[0]
    return "as=Table" in first


class EmulatedAPIServer:
    """An in-memory Kubernetes API server on 127.0.0.1.

    ``port=0`` picks a free port on first start and keeps it across
    :meth:`stop` / :meth:`start`. ``kubeconfig_path`` defaults to a file in a
    fresh temporary folder. ``bookmark_interval`` is how often idle watches
    that asked for bookmarks get one (the real server: about a minute).
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        kubeconfig_path: str | os.PathLike[str] | None = None,
        store: Store | None = None,
        bookmark_interval: float = 10.0,
        history_size: int = 20_000,
        service_resolver: Any = None,
    ) -> None:
        self.host = host
        self.port = port
        self.store = store if store is not None else Store(history_size=history_size)
        self.faults = FaultSet()
        #: RBAC for ServiceAccount tokens (``rbac.Authorizer``); None allows everything.
        self.rbac: Authorizer | None = None
        self.bookmark_interval = bookmark_interval
        self.webhooks = WebhookDispatcher(self.store, service_resolver=service_resolver)
        self.store.admission = self.webhooks
        self._tmpdir: tempfile.TemporaryDirectory[str] | None = None
        if kubeconfig_path is None:
            self._tmpdir = tempfile.TemporaryDirectory(prefix="kai-py-emulator-")
            kubeconfig_path = os.path.join(self._tmpdir.name, "kubeconfig")
        self.kubeconfig_path = str(kubeconfig_path)
        self._runner: web.AppRunner | None = None
        self._http_watches: set[Watch] = set()
        self._watch_tasks: set[asyncio.Task[Any]] = set()
        self.requests_served = 0
        #: Resource requests served, by "client verb resource" (client: the User-Agent's
        #: product token, e.g. ``kopf``, ``OpenAPI-Generator``), for benchmarks.
        self.request_counts: Counter[str] = Counter()
        #: Every object deleted over HTTP (evictions included): (client, resource,
        #: namespace, name), so a test can tell who deleted what (the fault suite checks
        #: that the operator deletes no pod it did not decide to evict).
        self.deletions: list[tuple[str, str, str, str]] = []
        #: When a list: every write it accepted (2xx to POST, PUT, PATCH, DELETE), as
        #: ``(time.time() when answered, User-Agent, method, path)`` (the fault suite
        #: tells replicas apart by the pid in kai-py's User-Agent).
        self.accepted_writes: list[tuple[float, str, str, str]] | None = None
        #: Stored objects the store hands over shared (read-only), serialized once.
        self._encoded = EncodedObjects()

    # ---- lifecycle ------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._runner is not None

    async def start(self) -> EmulatedAPIServer:
        if self._runner is not None:
            return self
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.5)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port, reuse_address=True)
        await site.start()
        if self.port == 0:
            server = site._server
            sockets = getattr(server, "sockets", None) or []
            self.port = int(sockets[0].getsockname()[1])
        self._runner = runner
        self.store.resume_background()
        write_kubeconfig(self.kubeconfig_path, self.url)
        return self

    async def stop(self) -> None:
        """Stop serving (open watches end); the store keeps its state for :meth:`start`.

        The store's own background work (garbage collection, pod grace periods)
        goes on, as the controller manager's does while an API server restarts.
        """
        runner, self._runner = self._runner, None
        self.drop_watches()
        if runner is not None:
            await runner.cleanup()

    async def close(self) -> None:
        """Stop, and end the store's timers and background tasks (its loop may end too)."""
        await self.stop()
        self.store.cancel_background()
        await self.webhooks.aclose()
        if self._tmpdir is not None:
            self._tmpdir.cleanup()
            self._tmpdir = None

    async def __aenter__(self) -> EmulatedAPIServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def drop_watches(self) -> int:
        """End every open HTTP watch stream (clients see the connection close)."""
        watches = list(self._http_watches)
        for w in watches:
            w.close()
        return len(watches)

    # ---- dispatch -------------------------------------------------------------------------

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        self.requests_served += 1
        try:
            response = await self._route(request)
            if (
                self.accepted_writes is not None
                and request.method in _WRITE_METHODS
                and 200 <= response.status < 300
            ):
                self.accepted_writes.append(
                    (
                        time.time(),
                        request.headers.get("User-Agent", ""),
                        request.method,
                        request.path,
                    )
                )
            return response
        except ApiError as err:
            return error_response(err)
        except (ConnectionResetError, asyncio.CancelledError):
            raise
        except Exception as exc:  # an emulator bug must still answer like a server
            return error_response(
                ApiError(500, "InternalError", f"Internal error occurred: {exc!r}")
            )

    async def _route(self, request: web.Request) -> web.StreamResponse:
        parts = [p for p in request.path.split("/") if p]
        if not parts:
            return json_response({"paths": ["/api", "/api/v1", "/apis", "/version", "/healthz"]})
        head = parts[0]
        if head in ("healthz", "livez", "readyz"):
            return web.Response(text="ok", content_type="text/plain")
        if head == "version":
            return json_response(discovery.VERSION_INFO)
        if head == "openapi":
            return self._openapi(parts)
        if head == "api":
            if len(parts) == 1:
                return json_response(discovery.api_versions(f"{self.host}:{self.port}"))
            group, version, rest = "", parts[1], parts[2:]
        elif head == "apis":
            if len(parts) == 1:
                return json_response(discovery.api_group_list(self.store.registry))
            if len(parts) == 2:
                g = discovery.api_group(self.store.registry, parts[1])
                if g is None:
                    raise _not_found_path()
                return json_response(g)
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise _not_found_path()
        if not rest:
            if request.method != "GET":
                raise method_not_allowed()
            listing = discovery.api_resource_list(self.store.registry, group, version)
            if listing is None:
                raise _not_found_path()
            return json_response(listing)
        req = self._decode(group, version, rest)
        return await self._serve(request, req)

    def _openapi(self, parts: list[str]) -> web.Response:
        registry = self.store.registry
        if parts[1:2] == ["v3"]:
            rest = parts[2:]
            if not rest:
                return json_response(discovery.openapi_v3_root(registry))
            if rest[0] == "api" and len(rest) == 2:
                doc = discovery.openapi_v3_gv(registry, "", rest[1])
            elif rest[0] == "apis" and len(rest) == 3:
                doc = discovery.openapi_v3_gv(registry, rest[1], rest[2])
            else:
                doc = None
            if doc is not None:
                return json_response(doc)
        raise _not_found_path()

    def _decode(self, group: str, version: str, rest: list[str]) -> _Request:
        watch_path = False
        if rest[0] == "watch":
            watch_path, rest = True, rest[1:]
            if not rest:
                raise _not_found_path()
        namespace: str | None = None
        if rest[0] == "namespaces" and len(rest) >= 3 and rest[2] not in ("status", "finalize"):
            namespace, rest = rest[1], rest[2:]
        plural = rest[0]
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else ""
        if len(rest) > 3:
            raise _not_found_path()
        if plural == "bindings" and not group and version == "v1" and namespace:
            pods = self.store.registry.get("", "v1", "pods")
            assert pods is not None
            return _Request(pods, namespace, name, "bindings", watch_path)
        rt = self.store.registry.get(group, version, plural)
        if rt is None:
            raise _not_found_path()
        if rt.namespaced is False and namespace is not None:
            raise _not_found_path()
        if sub and sub not in rt.subresources:
            raise _not_found_path()
        return _Request(rt, namespace, name, sub, watch_path)

    async def _serve(self, request: web.Request, req: _Request) -> web.StreamResponse:
        q = request.query
        method = request.method
        verb = self._verb(method, req, q)
        if req.rt.namespaced and req.namespace is None and verb not in ("list", "watch"):
            # Across namespaces, namespaced kinds can only be listed and watched.
            if req.name is None:
                raise method_not_allowed()
            raise _not_found_path()
        resource = f"{req.rt.plural}/{req.subresource}" if req.subresource else req.rt.plural
        if resource == "pods/bindings":
            resource = "pods/binding"
        agent = request.headers.get("User-Agent", "").split("/", 1)[0] or "-"
        self.request_counts[f"{agent} {verb} {resource}"] += 1
        delay, fault = self.faults.decide(verb, resource, req.name or "")
        if delay:
            await asyncio.sleep(delay)
        if fault is not None:
            raise fault
        if self.rbac is not None:
            await self.rbac.check(
                request.headers.get("Authorization"),
                verb,
                req.rt.group,
                resource,
                req.rt.plural,
                req.namespace,
                req.name,
            )
        store = self.store
        rt = req.rt
        dry_run = "All" in q.getall("dryRun", [])
        validation = q.get("fieldValidation", "Warn")
        if verb == "list":
            return await self._list(request, req)
        if verb == "watch":
            return await self._watch(request, req)
        if req.subresource == "log":
            if verb != "get":
                raise method_not_allowed()
            text = await store.pod_log(req.namespace or "", req.name or "", q.get("container"))
            if q.get("tailLines", "").isdigit():
                lines = text.splitlines(keepends=True)
                text = "".join(lines[-int(q["tailLines"]) :]) if int(q["tailLines"]) else ""
            return web.Response(text=text, content_type="text/plain")
        if req.subresource == "scale" and verb in ("get", "update", "patch"):
            return await self._scale(request, req, verb, dry_run)
        if verb == "get":
            obj = await store.get(rt, req.namespace, req.name or "", shared=True)
            if _wants_table(request) and not req.subresource:
                return json_response(
                    to_table(
                        rt,
                        [obj],
                        resource_version=obj["metadata"].get("resourceVersion", ""),
                        include_object=q.get("includeObject", "Metadata"),
                    )
                )
            return self._stored_response(obj)
        if verb == "create":
            body = await _read_json(request, rt)
            warnings: list[str] = []
            if req.subresource in ("binding", "bindings"):
                return await self._bind(req, body, dry_run)
            if req.subresource == "eviction":
                evicted = await self._evict(req, body, dry_run)
                if not dry_run:
                    self.deletions.append((agent, resource, req.namespace or "", req.name or ""))
                return evicted
            if rt.extra.get("review"):
                return json_response(_review_answer(rt, body), 201)
            obj = await store.create(
                rt,
                body,
                namespace=req.namespace,
                dry_run=dry_run,
                field_validation=validation,
                warnings=warnings,
                take=True,
                shared=True,
            )
            return self._stored_response(obj, 201, warnings)
        if verb == "update":
            body = await _read_json(request, rt)
            warnings = []
            if not isinstance(body, dict):
                raise bad_request("the body of the request was not a JSON object")
            name = (body.get("metadata") or {}).get("name")
            if name != req.name:
                raise bad_request(
                    f"the name of the object ({name}) does not match the name "
                    f"on the URL ({req.name})"
                )
            if req.subresource == "status":
                obj = await store.update_status(
                    rt, body, namespace=req.namespace, dry_run=dry_run, shared=True
                )
            elif req.subresource:
                raise method_not_allowed()
            else:
                obj = await store.update(
                    rt,
                    body,
                    namespace=req.namespace,
                    dry_run=dry_run,
                    field_validation=validation,
                    warnings=warnings,
                    shared=True,
                )
            return self._stored_response(obj, 200, warnings)
        if verb == "patch":
            content_type = request.headers.get("Content-Type", "").split(";")[0].strip()
            raw = await request.read()
            patch = _parse_patch(raw, content_type)
            warnings = []
            existed = True
            if content_type.startswith("application/apply-patch"):
                try:
                    await store.get(rt, req.namespace, req.name or "")
                except ApiError:
                    existed = False
                if not q.get("fieldManager"):
                    raise ApiError(
                        422,
                        "Invalid",
                        'PatchOptions.meta.k8s.io "" is invalid: '
                        "fieldManager: Required value: is required for apply patch",
                    )
            if req.subresource and req.subresource not in ("status", "scale"):
                raise method_not_allowed()
            obj = await store.patch(
                rt,
                req.namespace,
                req.name or "",
                patch,
                content_type,
                subresource=req.subresource,
                dry_run=dry_run,
                field_manager=q.get("fieldManager"),
                force=q.get("force") in _TRUE,
                field_validation=validation,
                warnings=warnings,
                shared=True,
            )
            return self._stored_response(obj, 200 if existed else 201, warnings)
        if verb == "delete":
            opts = await _delete_options(request)
            dry_run = dry_run or "All" in (opts.get("dryRun") or [])
            obj = await store.delete(
                rt,
                req.namespace,
                req.name or "",
                grace_period_seconds=opts.get("gracePeriodSeconds"),
                propagation_policy=opts.get("propagationPolicy"),
                preconditions=opts.get("preconditions"),
                dry_run=dry_run,
            )
            if not dry_run:
                self.deletions.append((agent, resource, req.namespace or "", req.name or ""))
            pending = bool(obj["metadata"].get("deletionTimestamp")) and (
                obj["metadata"].get("finalizers") or rt.storage_key == "pods"
            )
            return json_response(obj, 202 if pending else 200)
        if verb == "deletecollection":
            opts = await _delete_options(request)
            items = await store.delete_collection(
                rt,
                req.namespace,
                label_selector=q.get("labelSelector"),
                field_selector=q.get("fieldSelector"),
                grace_period_seconds=opts.get("gracePeriodSeconds"),
                propagation_policy=opts.get("propagationPolicy"),
                dry_run=dry_run,
            )
            return json_response(
                {
                    "kind": rt.list_kind,
                    "apiVersion": rt.api_version,
                    "metadata": {"resourceVersion": str(store.resource_version)},
                    "items": items,
                }
            )
        raise method_not_allowed()

    @staticmethod
    def _verb(method: str, req: _Request, q: Any) -> str:
        if req.watch_path:
            return "watch"
        if method == "GET":
            if req.name is None:
                return "watch" if q.get("watch") in _TRUE else "list"
            return "get"
        if method == "POST":
            if req.name is not None and not req.subresource:
                raise method_not_allowed()
            return "create"
        if req.name is None and req.subresource != "bindings":
            if method == "DELETE":
                return "deletecollection"
            raise method_not_allowed()
        return {"PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(method, "unknown")

    async def _list(self, request: web.Request, req: _Request) -> web.Response:
        q = request.query
        limit = int(q["limit"]) if q.get("limit", "").isdigit() else None
        page = await self.store.list_page(
            req.rt,
            req.namespace,
            label_selector=q.get("labelSelector"),
            field_selector=q.get("fieldSelector"),
            limit=limit or None,
            continue_=q.get("continue"),
            shared=True,
        )
        if _wants_table(request):
            return json_response(
                to_table(
                    req.rt,
                    page.items,
                    resource_version=page.resource_version,
                    continue_token=page.continue_token,
                    include_object=q.get("includeObject", "Metadata"),
                )
            )
        meta: JSON = {"resourceVersion": page.resource_version}
        if page.continue_token:
            meta["continue"] = page.continue_token
            meta["remainingItemCount"] = page.remaining
        return json_response(
            {
                "kind": req.rt.list_kind,
                "apiVersion": req.rt.api_version,
                "metadata": meta,
                "items": page.items,
            }
        )

    async def _watch(self, request: web.Request, req: _Request) -> web.StreamResponse:
        q = request.query
        table = _wants_table(request)
        bookmarks = q.get("allowWatchBookmarks") in _TRUE
        initial = q.get("sendInitialEvents") in _TRUE
        try:
            timeout = float(q.get("timeoutSeconds") or 0) or None  # 0: the server's default
        except ValueError:
            raise bad_request(f"invalid timeoutSeconds {q['timeoutSeconds']!r}") from None
        rv = q.get("resourceVersion")
        if req.name:
            name_sel = f"metadata.name={req.name}"
            field_sel = q.get("fieldSelector")
            field_sel = f"{field_sel},{name_sel}" if field_sel else name_sel
        else:
            field_sel = q.get("fieldSelector")
        response = web.StreamResponse(
            status=200,
            headers={
                "Content-Type": "application/json",
                "Cache-Control": "no-cache, private",
                "Transfer-Encoding": "chunked",
            },
        )
        try:
            w = self.store.watch(
                req.rt,
                req.namespace,
                resource_version=None if initial else rv,
                label_selector=q.get("labelSelector"),
                field_selector=field_sel,
                shared=True,
            )
        except ApiError as err:
            if err.code != 410:
                raise
            await response.prepare(request)
            await response.write(_dumps({"type": "ERROR", "object": err.status}) + b"\n")
            return response
        self._http_watches.add(w)
        await response.prepare(request)
        deadline = time.monotonic() + timeout if timeout else None
        last_sent = time.monotonic()
        include = q.get("includeObject", "Metadata")
        headers_sent = False
        try:
            if initial:
                chunks = []
                for event_type, obj in w.ready():
                    chunks.append(
                        self._event_bytes(req.rt, event_type, obj, table, include, not headers_sent)
                    )
                    headers_sent = True
                await response.write(b"".join(chunks))
                mark = {
                    "kind": req.rt.kind,
                    "apiVersion": req.rt.api_version,
                    "metadata": {
                        "resourceVersion": str(self.store.resource_version),
                        "annotations": {"k8s.io/initial-events-end": "true"},
                    },
                }
                await response.write(_dumps({"type": "BOOKMARK", "object": mark}) + b"\n")
            while True:
                batch = w.ready()
                if batch:
                    chunks = []
                    for event_type, obj in batch:
                        chunks.append(
                            self._event_bytes(
                                req.rt, event_type, obj, table, include, not headers_sent
                            )
                        )
                        headers_sent = headers_sent or table
                    await response.write(b"".join(chunks))
                    last_sent = time.monotonic()
                    continue
                wait = 1.0
                if deadline is not None:
                    wait = min(wait, deadline - time.monotonic())
                    if wait <= 0:
                        break
                try:
                    event_type, obj = await asyncio.wait_for(w.__anext__(), wait)
                except TimeoutError:
                    transport = request.transport
                    if transport is None or transport.is_closing():
                        break
                    if bookmarks and time.monotonic() - last_sent >= self.bookmark_interval:
                        mark = {
                            "kind": req.rt.kind,
                            "apiVersion": req.rt.api_version,
                            "metadata": {"resourceVersion": str(self.store.resource_version)},
                        }
                        await response.write(_dumps({"type": "BOOKMARK", "object": mark}) + b"\n")
                        last_sent = time.monotonic()
                    continue
                except StopAsyncIteration:
                    break
                chunk = self._event_bytes(req.rt, event_type, obj, table, include, not headers_sent)
                headers_sent = headers_sent or table
                await response.write(chunk)
                last_sent = time.monotonic()
        except (ConnectionResetError, ConnectionError):
            pass
        finally:
            w.close()
            self._http_watches.discard(w)
        with contextlib.suppress(ConnectionError, RuntimeError):
            await response.write_eof()
        return response

    def _event_bytes(
        self,
        rt: ResourceType,
        event_type: str,
        obj: JSON,
        table: bool,
        include: str,
        headers: bool,
    ) -> bytes:
        if table and event_type in ("ADDED", "MODIFIED", "DELETED"):
            obj = to_table(rt, [obj], include_object=include, with_headers=headers)
            return _dumps({"type": event_type, "object": obj}) + b"\n"
        # The object's JSON as the write's answer and the other watches had it.
        return b'{"type":' + _dumps(event_type) + b',"object":' + self._encoded(obj) + b"}\n"

    def _stored_response(
        self, obj: JSON, status: int = 200, warnings: list[str] | None = None
    ) -> web.Response:
        """An answer with an object the store handed over shared (read-only)."""
        return json_response(obj, status, warnings, encoded=self._encoded(obj))

    async def _scale(
        self, request: web.Request, req: _Request, verb: str, dry_run: bool
    ) -> web.Response:
        store, name = self.store, req.name or ""
        if verb == "get":
            return json_response(await store.get_scale(req.rt, req.namespace, name))
        if verb == "update":
            body = await _read_json(request, req.rt)
            if not isinstance(body, dict):
                raise bad_request("the body of the request was not a JSON object")
            return json_response(
                await store.update_scale(req.rt, req.namespace, name, body, dry_run=dry_run)
            )
        content_type = request.headers.get("Content-Type", "").split(";")[0].strip()
        patch = _parse_patch(await request.read(), content_type)
        current = await store.get_scale(req.rt, req.namespace, name)
        if content_type == "application/json-patch+json":
            patched = json_patch(current, patch)
        elif isinstance(patch, dict):
            patched = merge_patch(current, patch)
        else:
            raise bad_request("the patch must be an object")
        patched["metadata"].pop("resourceVersion", None)
        return json_response(
            await store.update_scale(req.rt, req.namespace, name, patched, dry_run=dry_run)
        )

    async def _bind(self, req: _Request, body: Any, dry_run: bool) -> web.Response:
        if not isinstance(body, dict):
            raise bad_request("the body of the request was not a JSON object")
        target = body.get("target") or {}
        name = req.name or (body.get("metadata") or {}).get("name") or ""
        if not target.get("name"):
            raise ApiError(
                422,
                "Invalid",
                f'Binding "{name}" is invalid: target.name: Required value',
                details={
                    "name": name,
                    "kind": "Binding",
                    "causes": [
                        {
                            "reason": "FieldValueRequired",
                            "message": "Required value",
                            "field": "target.name",
                        }
                    ],
                },
            )
        uid = (body.get("metadata") or {}).get("uid")
        await self.store.bind_pod(
            req.namespace or "",
            name,
            target["name"],
            uid=str(uid) if uid else None,
            dry_run=dry_run,
        )
        return json_response(success_status(201), 201)

    async def _evict(self, req: _Request, body: Any, dry_run: bool) -> web.Response:
        opts = (body or {}).get("deleteOptions") or {} if isinstance(body, dict) else {}
        await self.store.evict_pod(
            req.namespace or "",
            req.name or "",
            grace_period_seconds=opts.get("gracePeriodSeconds"),
            preconditions=opts.get("preconditions"),
            dry_run=dry_run,
        )
        return json_response(success_status(201), 201)


def _review_answer(rt: ResourceType, body: Any) -> JSON:
    """Access reviews allow everything (the emulator has no RBAC); whoami is the admin."""
    if not isinstance(body, dict):
        raise bad_request("the body of the request was not a JSON object")
    answer: JSON = {**body, "apiVersion": rt.api_version, "kind": rt.kind}
    answer.setdefault("metadata", {})["creationTimestamp"] = None
    if rt.kind == "SelfSubjectReview":
        answer["status"] = {
            "userInfo": {
                "username": "kubernetes-admin",
                "groups": ["system:masters", "system:authenticated"],
            }
        }
    else:
        answer["status"] = {"allowed": True, "reason": "the kai-py emulator has no RBAC"}
    return answer


def _not_found_path() -> ApiError:
    return ApiError(404, "NotFound", "the server could not find the requested resource", details={})


async def _read_json(request: web.Request, rt: ResourceType) -> Any:
    raw = await request.read()
    content_type = request.headers.get("Content-Type", "application/json").split(";")[0]
    if "protobuf" in content_type:
        try:
            return protobuf.decode(raw)
        except ProtobufError as exc:
            raise ApiError(
                415,
                "UnsupportedMediaType",
                f"the body of the request was in an unknown format - accepted media "
                f"types include: application/json, application/yaml ({exc})",
            ) from None
    if "cbor" in content_type:
        raise ApiError(
            415,
            "UnsupportedMediaType",
            f"the body of the request was in an unknown format - accepted media "
            f"types include: application/json, application/yaml "
            f"(got {content_type})",
        )
    try:
        if "yaml" in content_type:
            return yaml.safe_load(raw.decode())
        return jsoncodec.loads(raw or b"null")
    except (ValueError, yaml.YAMLError) as exc:
        raise bad_request(
            f"the object provided is unrecognized (must be of type {rt.kind}): "
            f"couldn't get version/kind; json parse error: {exc}"
        ) from None


def _parse_patch(raw: bytes, content_type: str) -> Any:
    try:
        if content_type.startswith("application/apply-patch+yaml"):
            return yaml.safe_load(raw.decode())
        return json.loads(raw.decode())
    except (ValueError, yaml.YAMLError) as exc:
        raise bad_request(f"error decoding patch: {exc}") from None


async def _delete_options(request: web.Request) -> JSON:
    opts: JSON = {}
    raw = await request.read()
    if raw.startswith(protobuf.MAGIC):
        try:
            opts.update(protobuf.decode(raw))
        except ProtobufError as exc:
            raise bad_request(str(exc)) from None
    elif raw.strip():
        try:
            body = json.loads(raw.decode())
        except ValueError as exc:
            raise bad_request(f"couldn't get version/kind; json parse error: {exc}") from None
        if isinstance(body, dict):
            opts.update(body)
    q = request.query
    if "gracePeriodSeconds" in q:
        try:
            opts["gracePeriodSeconds"] = int(q["gracePeriodSeconds"])
        except ValueError:
            raise bad_request("gracePeriodSeconds must be an integer") from None
    if "propagationPolicy" in q:
        opts["propagationPolicy"] = q["propagationPolicy"]
    if q.get("orphanDependents") in ("true", "false") and "propagationPolicy" not in opts:
        opts["propagationPolicy"] = "Orphan" if q["orphanDependents"] == "true" else "Background"
    if opts.get("orphanDependents") is True and "propagationPolicy" not in opts:
        opts["propagationPolicy"] = "Orphan"
    return opts
