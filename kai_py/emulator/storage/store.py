"""The emulated API server's state: objects, resourceVersions, watches, deletion, GC.

This is the in-process interface controllers use without HTTP. The HTTP
layer (:mod:`kai_py.emulator.apiserver.server`) is a thin translation on top of it,
so both see exactly the same behaviour.

Concurrency model
-----------------
**Asyncio, single event loop.** Every read and write is a coroutine
(``await store.create(...)``) because writes may call admission webhooks;
``watch()`` returns an async iterator. The store itself never blocks and
holds no locks: call it only from the loop that runs the server (from another
thread use ``ThreadedServer.call``). State changes are atomic with respect
to other coroutines: no ``await`` happens between the resourceVersion check
and the write.

Resources
---------
Every method takes ``resource`` as a :class:`~kai_py.emulator.storage.resources.ResourceType`
or a name the registry resolves: ``"pods"``, ``"jobs.batch"``,
``"queues.scheduling.run.ai"``, a kind (``"Pod"``) or a short name
(``"po"``). Objects are plain JSON dicts (what ``json.loads`` returns);
the store copies what it is given and what it hands out, so callers may
mutate their copies freely.

Errors
------
Failures raise :class:`~kai_py.emulator.storage.errors.ApiError` whose ``status``
is the ``kind: Status`` object the HTTP layer sends (404 NotFound, 409
AlreadyExists / Conflict, 410 Expired, 422 Invalid, 403 Forbidden, 400 ...).

Summary of the interface::

    store = Store()
    obj = await store.create("pods", pod)                     # namespace from the body
    obj = await store.get("pods", "default", "p1")
    items, rv = await store.list("pods", "default", label_selector="app=x",
                                 field_selector="spec.nodeName=n1")
    page = await store.list_page("pods", limit=500, continue_=None)
    obj = await store.update("pods", obj)                     # 409 on stale resourceVersion
    obj = await store.update_status("pods", obj)              # only .status (pods: + metadata)
    obj = await store.patch("pods", "default", "p1", {"metadata": {...}}, "merge")
    #   patch types: "merge", "json", "strategic", "apply" (field_manager=...);
    #   subresource="status" patches only .status
    obj = await store.bind_pod("default", "p1", "node-1")     # the pods/binding subresource
    obj = await store.evict_pod("default", "p1")              # the pods/eviction subresource
    scale = await store.get_scale("deployments.apps", "default", "web")   # autoscaling/v1
    result = await store.delete("pods", "default", "p1", grace_period_seconds=0)
    gone = await store.delete_collection("pods", "default", label_selector="app=x")
    store.iter_objects("nodes")                               # no copies: read only
    store.close_watches("pods")                               # end open watches
    async with store.watch("pods", resource_version=rv) as w:
        async for event_type, obj in w:                       # ADDED MODIFIED DELETED BOOKMARK
            ...

Kubelets and graceful pod deletion
----------------------------------
Deleting a pod that has ``spec.nodeName`` (and is not Succeeded/Failed) only
sets ``deletionTimestamp`` and ``deletionGracePeriodSeconds`` (a MODIFIED
event). A simulated kubelet calls ``store.attach_kubelet(node_name)`` when it
starts serving a node; it then sees the MODIFIED event, stops the pod, and
confirms the termination as the real kubelet does, with
``await store.delete("pods", ns, name, grace_period_seconds=0)``, which
removes the pod (DELETED). For a node without an attached kubelet the store
removes the pod itself once the grace period has passed, as the node
lifecycle controller eventually would. ``detach_kubelet`` undoes ``attach``.

Garbage collection runs as background tasks after a deletion, like the real
controller: ``await store.wait_idle()`` waits until it has finished.
"""

from __future__ import annotations

import asyncio
import base64
import builtins
import contextlib
import json
import logging
import random
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from kai_py.api.jsoncodec import copy as copy_json
from kai_py.emulator.quantity import parse_quantity
from kai_py.emulator.storage import builtin_validation, conversion, schema
from kai_py.emulator.storage.errors import (
    ApiError,
    FieldError,
    already_exists,
    bad_request,
    conflict,
    forbidden,
    gone,
    invalid,
    not_found,
)
from kai_py.emulator.storage.patches import drop_unapplied, json_patch, merge_patch, strategic_merge
from kai_py.emulator.storage.resources import Registry, ResourceType, builtin_types, types_from_crd
from kai_py.emulator.storage.selectors import (
    fields_match,
    labels_match,
    parse_field_selector,
    parse_label_selector,
)
from kai_py.emulator.storage.watch import StoredEvent, Watch
from kai_py.emulator.timesource import rfc3339

__all__ = [
    "PATCH_TYPES",
    "AdmissionHook",
    "AdmissionRequest",
    "ListResult",
    "Store",
    "Watch",
    "collect",
    "now_rfc3339",
]

JSON = dict[str, Any]
Key = tuple[str, str]  # (namespace or "", name)
log = logging.getLogger(__name__)

#: Accepted spellings of patch types (the short names and the HTTP content types).
PATCH_TYPES = {
    "merge": "merge",
    "application/merge-patch+json": "merge",
    "json": "json",
    "application/json-patch+json": "json",
    "strategic": "strategic",
    "application/strategic-merge-patch+json": "strategic",
    "apply": "apply",
    "application/apply-patch+yaml": "apply",
    "application/apply-patch+json": "apply",
}

#: Storage keys whose objects carry metadata.generation (as in Kubernetes 1.32).
_GENERATION_KEYS = frozenset(
    {
        "customresourcedefinitions.apiextensions.k8s.io",
        "deployments.apps",
        "replicasets.apps",
        "statefulsets.apps",
        "daemonsets.apps",
        "jobs.batch",
        "cronjobs.batch",
        "poddisruptionbudgets.policy",
    }
)
#: Built-ins that keep the status given at creation (the rest start with none).
_STATUS_ON_CREATE = frozenset({"nodes", "namespaces"})
#: Where the API's default propagationPolicy is Orphan (kubectl asks for Background).
_ORPHAN_BY_DEFAULT = frozenset({"jobs.batch", "replicationcontrollers"})
_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"
#: How long the garbage collector waits before it treats a missing owner as gone.
DANGLING_OWNER_DELAY = 0.2
#: PriorityClasses every cluster has.
SYSTEM_PRIORITY_CLASSES = {
    "system-cluster-critical": 2000000000,
    "system-node-critical": 2000001000,
}
DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


def now_rfc3339(ts: float | None = None) -> str:
    return rfc3339(time.time() if ts is None else ts)


@dataclass
class AdmissionRequest:
    """What an admission hook is asked about (one API write)."""

    operation: str  # CREATE, UPDATE, DELETE, CONNECT
    resource: ResourceType
    namespace: str
    name: str
    obj: JSON | None
    old_obj: JSON | None
    subresource: str = ""
    dry_run: bool = False
    options: JSON = field(default_factory=dict)
    user: JSON = field(
        default_factory=lambda: {"username": "system:admin", "groups": ["system:masters"]}
    )
    #: Where the webhooks' ``response.warnings`` go: the client's ``Warning`` headers.
    warnings: list[str] | None = None


_DEFAULT_CLASS = "storageclass.kubernetes.io/is-default-class"
#: How often a patch or unconditional update that loses a race to another write is
#: tried (the real server retries until its request times out; a bound keeps a
#: livelock visible).
_PATCH_ATTEMPTS = 10


class _LostRace(ApiError):
    """409 for a write whose object changed while it awaited (webhooks), not for a stale
    resourceVersion the client named: the storage-level conflict a patch retries."""


def _same_quantities(a: Any, b: Any) -> bool:
    """Resource lists equal by value (``1000m`` is ``1``), as apimachinery's Semantic.DeepEqual."""
    if not isinstance(a, dict) or not isinstance(b, dict) or a.keys() != b.keys():
        return False
    try:
        return all(parse_quantity(a[k]) == parse_quantity(b[k]) for k in a)
    except (ValueError, TypeError):
        return a == b


class AdmissionHook(Protocol):
    """Called for every write; the server installs the webhook dispatcher here."""

    def active(self) -> bool:
        """Could a write call anything at all? (False: no request need be built.)"""
        ...

    async def mutate(self, request: AdmissionRequest) -> JSON | None: ...

    async def validate(self, request: AdmissionRequest) -> None: ...


class ListResult(NamedTuple):
    items: builtins.list[JSON]
    resource_version: str
    continue_token: str | None
    remaining: int | None


class Store:
    """All objects of the emulated cluster, and everything that changes them."""

    def __init__(
        self,
        *,
        history_size: int = 20_000,
        clock: Callable[[], float] = time.time,
        create_default_namespaces: bool = True,
    ) -> None:
        self.registry = Registry(builtin_types())
        self.admission: AdmissionHook | None = None
        #: Where ``pods/log`` text comes from: ``(pod, container) -> text``; the
        #: simulated kubelet may set it. None: running containers have empty logs.
        self.log_provider: Callable[[JSON, str], str] | None = None
        self.clock = clock
        self._objects: dict[str, dict[Key, JSON]] = {}
        self._rv = 0
        self._history: deque[StoredEvent] = deque(maxlen=history_size)
        self._compacted_rv = 0
        self._watchers: dict[str, set[Watch]] = {}
        self._dependents: dict[str, set[tuple[str, Key]]] = {}
        self._uids: dict[str, tuple[str, Key]] = {}
        self._kubelets: set[str] = set()
        self._terminated: set[Key] = set()  # pods whose kubelet confirmed (or timed out)
        self._tasks: set[asyncio.Future[Any]] = set()
        self._timers: dict[Key, asyncio.TimerHandle] = {}
        self._service_ips = 9  # 10.96.0.1-10 are the cluster's own
        self._dangling: set[str] = set()  # owner uids being checked for existence
        self._applied: dict[str, dict[str, JSON]] = {}  # uid -> field manager -> config
        if create_default_namespaces:
            for ns in DEFAULT_NAMESPACES:
                self._insert(
                    self.registry.resolve("namespaces"),
                    self._new_object_meta(
                        self.registry.resolve("namespaces"),
                        {
                            "apiVersion": "v1",
                            "kind": "Namespace",
                            "metadata": {"name": ns, "labels": {"kubernetes.io/metadata.name": ns}},
                            "spec": {"finalizers": ["kubernetes"]},
                            "status": {"phase": "Active"},
                        },
                        "",
                        ns,
                    ),
                )
                self._after_write(
                    self.registry.resolve("namespaces"), None, self._objects["namespaces"][("", ns)]
                )
            pcs = self.registry.resolve("priorityclasses.scheduling.k8s.io")
            for pc_name, value in SYSTEM_PRIORITY_CLASSES.items():
                self._insert(
                    pcs,
                    self._new_object_meta(
                        pcs,
                        {
                            "apiVersion": pcs.api_version,
                            "kind": pcs.kind,
                            "metadata": {"name": pc_name},
                            "value": value,
                            "description": "Used for system critical pods that must not be moved "
                            "from their current node.",
                            "preemptionPolicy": "PreemptLowerPriority",
                        },
                        "",
                        pc_name,
                    ),
                )

    # ---- public: reads --------------------------------------------------------------------

    @property
    def resource_version(self) -> int:
        """The latest resourceVersion handed out (one counter for all resources)."""
        return self._rv

    def resolve(self, resource: str | ResourceType) -> ResourceType:
        try:
            return self.registry.resolve(resource)
        except KeyError:
            raise ApiError(
                404, "NotFound", f"the server could not find the requested resource ({resource})"
            ) from None

    async def get(
        self,
        resource: str | ResourceType,
        namespace: str | None,
        name: str,
        *,
        shared: bool = False,
    ) -> JSON:
        """One object. ``shared=True``: the stored object itself where it is already in
        the form asked for, read-only (the HTTP layer, which only serializes what it is
        given, saves a copy; the same holds for the writes' ``shared``)."""
        rt = self.resolve(resource)
        obj = self._bucket(rt).get(self._key(rt, namespace, name))
        if obj is None:
            raise not_found(rt.plural, rt.group, name)
        return self._out(rt, obj, shared)

    async def list(
        self,
        resource: str | ResourceType,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        shared: bool = False,
    ) -> tuple[builtins.list[JSON], str]:
        """All matching objects (sorted by namespace, name) and the list's resourceVersion."""
        page = await self.list_page(
            resource,
            namespace,
            label_selector=label_selector,
            field_selector=field_selector,
            shared=shared,
        )
        return page.items, page.resource_version

    async def list_page(
        self,
        resource: str | ResourceType,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_: str | None = None,
        shared: bool = False,
    ) -> ListResult:
        """One page of a list; ``continue_`` is the token from the previous page.

        A token older than the kept event history is 410 Expired, as in
        Kubernetes after compaction. Pages are read from the current state
        (not a snapshot at the first page's resourceVersion).
        """
        rt = self.resolve(resource)
        labels = parse_label_selector(label_selector)
        fields = parse_field_selector(
            conversion.translate_field_selector(rt, field_selector), rt.storage_key, rt.kind
        )
        start_after: Key | None = None
        list_rv = self._rv
        if continue_:
            start_after, list_rv = self._decode_continue(continue_)
        bucket = self._bucket(rt)
        keys = sorted(bucket)
        if namespace and rt.namespaced:
            keys = [k for k in keys if k[0] == namespace]
        if start_after is not None:
            keys = [k for k in keys if k > start_after]
        items: builtins.list[JSON] = []
        last: Key | None = None
        remaining = 0
        for i, k in enumerate(keys):
            obj = bucket[k]
            if not (labels_match(labels, obj) and fields_match(fields, obj)):
                continue
            if limit and len(items) >= limit:
                remaining = sum(
                    1
                    for k2 in keys[i:]
                    if labels_match(labels, bucket[k2]) and fields_match(fields, bucket[k2])
                )
                break
            items.append(self._out(rt, obj, shared))
            last = k
        token = None
        if remaining and last is not None:
            token = self._encode_continue(last, list_rv)
        return ListResult(items, str(list_rv), token, remaining if token else None)

    def watch(
        self,
        resource: str | ResourceType,
        namespace: str | None = None,
        *,
        resource_version: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        bookmark_interval: float | None = None,
        shared: bool = False,
    ) -> Watch:
        """Open a watch. Raises ApiError 410 at once if ``resource_version`` is expired.

        ``resource_version`` None, "" or "0": first an ADDED for every current
        object, then changes. Otherwise: every change after that version.
        ``bookmark_interval``: yield a BOOKMARK after that many idle seconds.
        ``shared=True``: events carry the stored objects themselves, read-only (the
        HTTP layer, which only serializes them, saves a copy per event).
        """
        rt = self.resolve(resource)
        labels = parse_label_selector(label_selector)
        fields = parse_field_selector(
            conversion.translate_field_selector(rt, field_selector), rt.storage_key, rt.kind
        )
        w = Watch(
            self,
            rt,
            namespace if rt.namespaced else None,
            labels,
            fields,
            bookmark_interval,
            shared=shared,
        )
        if resource_version in (None, "", "0"):
            for k in sorted(self._bucket(rt)):
                obj = self._bucket(rt)[k]
                if w._matches(obj):
                    w._put("ADDED", obj)
        else:
            since = self._parse_rv(resource_version)
            if since < self._compacted_rv:
                raise gone(f"too old resource version: {since} ({self._compacted_rv + 1})")
            for ev in self._history:
                if ev.rv > since and ev.storage_key == rt.storage_key:
                    w._offer(ev)
        self._watchers.setdefault(rt.storage_key, set()).add(w)
        return w

    def _forget_watch(self, watch: Watch) -> None:
        self._watchers.get(watch.resource.storage_key, set()).discard(watch)

    def close_watches(self, resource: str | ResourceType | None = None) -> int:
        """End open watches (all, or of one resource); returns how many were closed."""
        keys = [self.resolve(resource).storage_key] if resource else list(self._watchers)
        count = 0
        for k in keys:
            for w in list(self._watchers.get(k, ())):
                w.close()
                count += 1
        return count

    # ---- public: writes -------------------------------------------------------------------

    async def create(
        self,
        resource: str | ResourceType,
        obj: JSON,
        *,
        namespace: str | None = None,
        dry_run: bool = False,
        field_validation: str = "Warn",
        warnings: builtins.list[str] | None = None,
        take: bool = False,
        shared: bool = False,
    ) -> JSON:
        """Create an object; the namespace comes from ``namespace`` or the body.

        ``take=True`` hands ``obj`` over to the store (it is not copied, and the
        caller must not use it afterwards): the HTTP layer does so with bodies it
        has just parsed.

        ``field_validation`` is Strict (unknown fields: 400), Warn (appended to
        ``warnings``) or Ignore, as the query parameter of the same name.
        """
        rt = self.resolve(resource)
        if "create" not in rt.verbs:
            raise ApiError(405, "MethodNotAllowed", f"create is not supported on {rt.plural}")
        if not isinstance(obj, dict):
            raise bad_request("the body of the request was not a JSON object")
        if not take:
            obj = copy_json(obj)
        meta = obj.get("metadata")
        if meta is None:
            meta = obj["metadata"] = {}
        if not isinstance(meta, dict):
            raise bad_request("metadata must be an object")
        self._check_type(rt, obj)
        view, rt, obj = rt, *self._to_storage(rt, obj, creating=True)
        meta = obj["metadata"]
        ns = self._request_namespace(rt, namespace, meta)
        name = meta.get("name") or ""
        if not name and meta.get("generateName"):
            name = self._generate_name(rt, ns, str(meta["generateName"]))
        if not name:
            raise invalid(
                rt.kind,
                rt.group,
                "",
                [
                    FieldError(
                        "metadata.name", "FieldValueRequired", "name or generateName is required"
                    )
                ],
            )
        self._check_namespace_writable(rt, ns, name)
        obj = self._new_object_meta(rt, obj, ns, name)
        obj = self._prepare(rt, obj, None, field_validation, warnings)
        if rt.storage_key == "pods":
            self._admit_pod_priority(obj)
            self._admit_pod_runtime_class(obj)
        elif rt.storage_key == "persistentvolumeclaims":
            self._admit_claim_storage_class(obj)
        elif rt.storage_key == "services":
            self._allocate_cluster_ip(obj)
        if self.admission is not None:
            req = AdmissionRequest(
                "CREATE", rt, ns, name, obj, None, dry_run=dry_run, warnings=warnings
            )
            mutated = await self.admission.mutate(req)
            if mutated is not None:
                obj = self._prepare(rt, mutated, None, "Ignore", None)
        if rt.storage_key == "pods":
            self._check_pod_overhead(obj)  # a webhook may have changed it
        self._validate(rt, obj, None)
        if self.admission is not None:
            await self.admission.validate(
                AdmissionRequest(
                    "CREATE", rt, ns, name, obj, None, dry_run=dry_run, warnings=warnings
                )
            )
        key = (ns, name)
        if key in self._bucket(rt):
            raise already_exists(rt.plural, rt.group, name)
        self._check_namespace_writable(rt, ns, name)  # admission may have awaited
        if dry_run:
            return self._out(view, obj, shared)
        stored = self._insert(rt, obj)
        self._after_write(rt, None, stored)
        return self._out(view, stored, shared)

    async def update(
        self,
        resource: str | ResourceType,
        obj: JSON,
        *,
        namespace: str | None = None,
        dry_run: bool = False,
        field_validation: str = "Warn",
        warnings: builtins.list[str] | None = None,
        shared: bool = False,
    ) -> JSON:
        """Replace an object (PUT). A stale ``metadata.resourceVersion`` is 409 Conflict.

        Without a resourceVersion the update is unconditional, as Kubernetes
        allows for built-ins and custom resources. ``.status`` is kept from the
        stored object when the type has a status subresource.
        """
        return await self._replace_unless_named(
            resource, obj, namespace, "", dry_run, field_validation, warnings, shared
        )

    async def update_status(
        self,
        resource: str | ResourceType,
        obj: JSON,
        *,
        namespace: str | None = None,
        dry_run: bool = False,
        shared: bool = False,
    ) -> JSON:
        """PUT on the ``/status`` subresource: only ``.status`` changes (for pods, the
        metadata too but ownerReferences and deletionTimestamp, as on a real server)."""
        return await self._replace_unless_named(
            resource, obj, namespace, "status", dry_run, "Ignore", None, shared
        )

    async def _replace_unless_named(
        self,
        resource: str | ResourceType,
        obj: JSON,
        namespace: str | None,
        subresource: str,
        dry_run: bool,
        field_validation: str,
        warnings: builtins.list[str] | None,
        shared: bool,
    ) -> JSON:
        """A PUT: one without a resourceVersion is tried again after losing a race, as
        the real server's GuaranteedUpdate does (one with a resourceVersion gets 409)."""
        meta = obj.get("metadata") if isinstance(obj, dict) else None
        named = isinstance(meta, dict) and bool(meta.get("resourceVersion"))
        for attempt in range(_PATCH_ATTEMPTS):
            try:
                return await self._replace(
                    resource,
                    obj,
                    namespace,
                    subresource,
                    dry_run,
                    field_validation,
                    warnings,
                    shared=shared,
                )
            except _LostRace:
                if named or attempt + 1 == _PATCH_ATTEMPTS:
                    raise
        raise AssertionError("unreachable")

    async def patch(
        self,
        resource: str | ResourceType,
        namespace: str | None,
        name: str,
        patch: Any,
        patch_type: str = "merge",
        *,
        subresource: str = "",
        dry_run: bool = False,
        field_manager: str | None = None,
        force: bool = False,
        field_validation: str = "Warn",
        warnings: builtins.list[str] | None = None,
        shared: bool = False,
    ) -> JSON:
        """Patch an object.

        ``patch_type``: ``merge``, ``json``, ``strategic`` or ``apply`` (or the
        matching content types). ``apply`` (server-side apply) creates the
        object when it is missing and otherwise merges the applied
        configuration like a strategic merge; it does not track field
        ownership. ``subresource="status"`` patches only ``.status`` (pods: and metadata).
        """
        rt = self.resolve(resource)
        kind = PATCH_TYPES.get(patch_type.split(";")[0].strip())
        if kind is None:
            raise ApiError(
                415,
                "UnsupportedMediaType",
                f"the body of the request was in an unknown format - accepted "
                f"media types include: application/json-patch+json, "
                f"application/merge-patch+json, application/apply-patch+yaml "
                f"(got {patch_type})",
            )
        if kind == "strategic" and not rt.strategic_merge:
            raise ApiError(
                415,
                "UnsupportedMediaType",
                "the body of the request was in an unknown format - accepted "
                "media types include: application/json-patch+json, "
                "application/merge-patch+json, application/apply-patch+yaml",
            )
        ns = namespace or "" if rt.namespaced else ""
        for attempt in range(_PATCH_ATTEMPTS):
            try:
                return await self._patch_once(
                    rt,
                    ns,
                    name,
                    patch,
                    kind,
                    subresource,
                    dry_run,
                    field_manager,
                    field_validation,
                    warnings,
                    shared,
                )
            except _LostRace:
                # As the real server's GuaranteedUpdate: the patch is applied again to
                # the object that won (a patch naming a resourceVersion then gets 409).
                if attempt + 1 == _PATCH_ATTEMPTS:
                    raise
        raise AssertionError("unreachable")

    async def _patch_once(
        self,
        rt: ResourceType,
        ns: str,
        name: str,
        patch: Any,
        kind: str,
        subresource: str,
        dry_run: bool,
        field_manager: str | None,
        field_validation: str,
        warnings: builtins.list[str] | None,
        shared: bool,
    ) -> JSON:
        """One try of :meth:`patch` on the object as it is now."""
        current = self._bucket(rt).get(self._key(rt, ns, name))
        if current is None:
            if kind == "apply":
                if not isinstance(patch, dict):
                    raise bad_request("apply patches must be objects")
                body = copy_json(patch)
                body.setdefault("metadata", {}).setdefault("name", name)
                created = await self.create(
                    rt,
                    body,
                    namespace=ns or None,
                    dry_run=dry_run,
                    field_validation=field_validation,
                    warnings=warnings,
                    take=True,
                    shared=shared,
                )
                if not dry_run:
                    self._remember_apply(created, field_manager, patch)
                return created
            raise not_found(rt.plural, rt.group, name)
        base = self._present(rt, current)  # the patch is applied to a copy of its own
        if kind == "merge":
            if not isinstance(patch, dict):
                raise bad_request("json: cannot unmarshal into Go value of type map")
            patched = merge_patch(base, patch)
        elif kind == "json":
            patched = json_patch(base, patch)
        else:
            if not isinstance(patch, dict):
                raise bad_request("strategic merge and apply patches must be objects")
            body = copy_json(patch)
            if kind == "apply":
                self._check_type(rt, body)
                body.pop("apiVersion", None)
                body.pop("kind", None)
                (body.get("metadata") or {}).pop("resourceVersion", None)
                manager = field_manager or ""
                previous = self._applied.get(current["metadata"]["uid"], {}).get(manager)
                if previous is not None:
                    # Fields this manager applied before and has now dropped go away,
                    # as with server-side apply's field ownership.
                    drop_unapplied(base, previous, body, keyed_lists=not rt.custom)
            # Custom resources have no Go struct tags: their lists are atomic, so an
            # apply replaces them (x-kubernetes-list-type: map is not modelled).
            patched = merge_patch(base, body) if rt.custom else strategic_merge(base, body)
        if not isinstance(patched, dict):
            raise bad_request("the patch did not produce an object")
        # A patch is conditional only if it names a resourceVersion itself.
        patched_meta = patched.get("metadata")
        if (
            isinstance(patched_meta, dict)
            and patched_meta.get("resourceVersion") == (current["metadata"]["resourceVersion"])
        ):
            patched_meta.pop("resourceVersion", None)
        result = await self._replace(
            rt,
            patched,
            ns or None,
            subresource,
            dry_run,
            field_validation,
            warnings,
            expect_name=name,
            # merge_patch copies what it takes from the patch and the others start from
            # a copy of the patch: what they return is the store's own already.
            take=kind != "json",
            shared=shared,
        )
        if kind == "apply" and not dry_run:
            self._remember_apply(result, field_manager, patch)
        return result

    def _remember_apply(self, obj: JSON, manager: str | None, applied: Any) -> None:
        if isinstance(applied, dict):
            body = copy_json(applied)
            body.pop("apiVersion", None)
            body.pop("kind", None)
            self._applied.setdefault(obj["metadata"]["uid"], {})[manager or ""] = body

    async def delete(
        self,
        resource: str | ResourceType,
        namespace: str | None,
        name: str,
        *,
        grace_period_seconds: int | None = None,
        propagation_policy: str | None = None,
        preconditions: JSON | None = None,
        dry_run: bool = False,
    ) -> JSON:
        """Delete an object; returns it as it is after the call.

        With finalizers (or Foreground propagation, or a pod still on a node)
        the object stays, with ``deletionTimestamp`` set; check
        ``metadata.deletionTimestamp`` in the result to tell. ``propagation_policy``:
        Background (default for most types), Foreground or Orphan.
        """
        rt = self.resolve(resource)
        key = self._key(rt, namespace, name)
        current = self._bucket(rt).get(key)
        if current is None:
            raise not_found(rt.plural, rt.group, name)
        if preconditions:
            meta = current["metadata"]
            for field_name in ("uid", "resourceVersion"):
                want = preconditions.get(field_name)
                if want and want != meta.get(field_name):
                    raise conflict(
                        rt.plural,
                        rt.group,
                        name,
                        f"Precondition failed: {field_name.replace('rv', 'RV')} "
                        f"in precondition: {want}, {field_name} in object meta: "
                        f"{meta.get(field_name)}",
                    )
        if self.admission is not None:
            await self.admission.validate(
                AdmissionRequest(
                    "DELETE", rt, key[0], name, None, self._present(rt, current), dry_run=dry_run
                )
            )
            current = self._bucket(rt).get(key)
            if current is None:
                raise not_found(rt.plural, rt.group, name)
        if dry_run:
            return self._present(rt, current)
        policy = propagation_policy or (
            "Orphan" if rt.storage_key in _ORPHAN_BY_DEFAULT else "Background"
        )
        if policy not in ("Background", "Foreground", "Orphan"):
            raise invalid(
                "DeleteOptions",
                "",
                "",
                [
                    FieldError(
                        "propagationPolicy",
                        "FieldValueNotSupported",
                        'supported values: "Foreground", "Background", "Orphan", nil',
                        policy,
                    )
                ],
            )
        if rt.storage_key == "namespaces":
            return self._present(rt, self._delete_namespace(rt, current))
        grace = self._grace_period(rt, current, grace_period_seconds)
        meta = current["metadata"]
        updated = copy_json(current)
        umeta = updated["metadata"]
        if policy == "Orphan":
            self._orphan_dependents(meta["uid"])
        elif policy == "Foreground" and self._dependents.get(meta["uid"]):
            fins = umeta.setdefault("finalizers", [])
            if "foregroundDeletion" not in fins:
                fins.append("foregroundDeletion")
        if grace > 0 and key in self._terminated:
            grace = 0
        if grace == 0 and rt.storage_key == "pods":
            self._terminated.add(key)
        if not umeta.get("finalizers") and grace == 0:
            return self._present(rt, self._remove(rt, current, policy))
        shorter = grace < int(meta.get("deletionGracePeriodSeconds") or 0)
        if "deletionTimestamp" not in meta or shorter:
            umeta["deletionTimestamp"] = now_rfc3339(self.clock() + grace)
            umeta["deletionGracePeriodSeconds"] = grace
        elif umeta == meta:
            return self._present(rt, current)
        stored = self._write(rt, current, updated)
        if grace > 0 and rt.storage_key == "pods":
            self._arm_pod_timer(rt, stored, grace)
        if "foregroundDeletion" in (umeta.get("finalizers") or []):
            self._spawn(self._collect_foreground(meta["uid"]))
        return self._present(rt, stored)

    async def delete_collection(
        self,
        resource: str | ResourceType,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        grace_period_seconds: int | None = None,
        propagation_policy: str | None = None,
        dry_run: bool = False,
    ) -> builtins.list[JSON]:
        """DELETE on a collection: delete every matching object; returns them."""
        rt = self.resolve(resource)
        items, _ = await self.list(
            rt, namespace, label_selector=label_selector, field_selector=field_selector
        )
        out = []
        for item in items:
            meta = item["metadata"]
            with contextlib.suppress(ApiError):
                out.append(
                    await self.delete(
                        rt,
                        meta.get("namespace"),
                        meta["name"],
                        grace_period_seconds=grace_period_seconds,
                        propagation_policy=propagation_policy,
                        dry_run=dry_run,
                    )
                )
        return out

    async def bind_pod(
        self,
        namespace: str,
        name: str,
        node_name: str,
        *,
        uid: str | None = None,
        dry_run: bool = False,
        shared: bool = False,
    ) -> JSON:
        """The pods/binding subresource: set spec.nodeName and the PodScheduled condition.

        An already-bound pod is 409 Conflict ("pod X is already assigned to node Y"), and
        so is a pod with scheduling gates.
        A Binding whose ``metadata.uid`` names another pod than the one of that name
        (deleted and made again) is refused with 409, as kube-apiserver's UID
        precondition does.
        """
        rt = self.resolve("pods")
        current = self._bucket(rt).get((namespace, name))
        if current is None:
            raise not_found("pods", "", name)
        self._check_uid(current, uid, name)
        if self.admission is not None:
            binding = {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": name, "namespace": namespace},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node_name},
            }
            await self.admission.validate(
                AdmissionRequest(
                    "CREATE",
                    rt,
                    namespace,
                    name,
                    binding,
                    None,
                    subresource="binding",
                    dry_run=dry_run,
                )
            )
            current = self._bucket(rt).get((namespace, name))
            if current is None:
                raise not_found("pods", "", name)
            self._check_uid(current, uid, name)
        if current["metadata"].get("deletionTimestamp"):
            raise conflict(
                "pods/binding",
                "",
                name,
                f"pod {name} is being deleted, cannot be assigned to a host",
            )
        bound = (current.get("spec") or {}).get("nodeName")
        if bound:
            raise conflict(
                "pods/binding", "", name, f'pod {name} is already assigned to node "{bound}"'
            )
        if (current.get("spec") or {}).get("schedulingGates"):
            raise conflict(
                "pods/binding", "", name, f"pod {name} has non-empty .spec.schedulingGates"
            )
        if dry_run:
            return self._out(rt, current, shared)
        updated = copy_json(current)
        updated.setdefault("spec", {})["nodeName"] = node_name
        status = updated.setdefault("status", {})
        conditions = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
        conditions.append(
            {
                "type": "PodScheduled",
                "status": "True",
                "lastProbeTime": None,
                "lastTransitionTime": now_rfc3339(self.clock()),
            }
        )
        status["conditions"] = conditions
        return self._out(rt, self._write(rt, current, updated), shared)

    async def evict_pod(
        self,
        namespace: str,
        name: str,
        *,
        grace_period_seconds: int | None = None,
        preconditions: JSON | None = None,
        dry_run: bool = False,
    ) -> JSON:
        """The pods/eviction subresource: a graceful delete (PodDisruptionBudgets are not
        checked); ``deleteOptions.preconditions`` (uid, resourceVersion) are honoured."""
        rt = self.resolve("pods")
        if (namespace, name) not in self._bucket(rt):
            raise not_found("pods", "", name)
        if self.admission is not None:
            eviction = {
                "apiVersion": "policy/v1",
                "kind": "Eviction",
                "metadata": {"name": name, "namespace": namespace},
            }
            await self.admission.validate(
                AdmissionRequest(
                    "CREATE",
                    rt,
                    namespace,
                    name,
                    eviction,
                    None,
                    subresource="eviction",
                    dry_run=dry_run,
                )
            )
        return await self.delete(
            rt,
            namespace,
            name,
            grace_period_seconds=grace_period_seconds,
            preconditions=preconditions,
            dry_run=dry_run,
        )

    @staticmethod
    def _check_uid(current: JSON, uid: str | None, name: str) -> None:
        have = current["metadata"].get("uid")
        if uid and uid != have:
            raise conflict(
                "pods/binding",
                "",
                name,
                f"Precondition failed: UID in precondition: {uid}, UID in object meta: {have}",
            )

    async def pod_log(self, namespace: str, name: str, container: str | None = None) -> str:
        """The ``pods/log`` subresource: text, or 400 as the kubelet answers."""
        pod = await self.get("pods", namespace, name)
        names = [c.get("name", "") for c in (pod.get("spec") or {}).get("containers") or []]
        if container is None:
            if len(names) != 1:
                raise bad_request(
                    f"a container name must be specified for pod {name}, "
                    f"choose one of: [{' '.join(names)}]"
                )
            container = names[0]
        elif container not in names:
            raise bad_request(f"container {container} is not valid for pod {name}")
        statuses = {
            c.get("name"): c for c in (pod.get("status") or {}).get("containerStatuses") or []
        }
        state = (statuses.get(container) or {}).get("state") or {}
        if "running" not in state and "terminated" not in state:
            reason = (state.get("waiting") or {}).get("reason") or "ContainerCreating"
            raise bad_request(
                f'container "{container}" in pod "{name}" is waiting to start: {reason}'
            )
        return self.log_provider(pod, container) if self.log_provider is not None else ""

    async def get_scale(
        self, resource: str | ResourceType, namespace: str | None, name: str
    ) -> JSON:
        """The ``/scale`` subresource as an ``autoscaling/v1`` Scale."""
        rt = self.resolve(resource)
        if "scale" not in rt.subresources:
            raise not_found(rt.plural, rt.group, name)
        obj = await self.get(rt, namespace, name)
        spec_path, status_path, selector_path = _scale_paths(rt)
        meta = obj["metadata"]
        selector = _get_path(obj, selector_path) if selector_path else None
        if isinstance(selector, dict):
            selector = ",".join(f"{k}={v}" for k, v in (selector.get("matchLabels") or {}).items())
        status: JSON = {"replicas": int(_get_path(obj, status_path) or 0)}
        if selector:
            status["selector"] = selector
        return {
            "kind": "Scale",
            "apiVersion": "autoscaling/v1",
            "metadata": {
                k: meta[k]
                for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
                if k in meta
            },
            "spec": {"replicas": int(_get_path(obj, spec_path) or 0)},
            "status": status,
        }

    async def update_scale(
        self,
        resource: str | ResourceType,
        namespace: str | None,
        name: str,
        scale: JSON,
        *,
        dry_run: bool = False,
    ) -> JSON:
        """PUT ``/scale``: set the replicas (409 on a stale resourceVersion in the Scale)."""
        rt = self.resolve(resource)
        if "scale" not in rt.subresources:
            raise not_found(rt.plural, rt.group, name)
        replicas = (scale.get("spec") or {}).get("replicas")
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
            raise invalid(
                "Scale",
                "autoscaling",
                name,
                [
                    FieldError(
                        "spec.replicas",
                        "FieldValueInvalid",
                        "must be greater than or equal to 0",
                        replicas,
                    )
                ],
            )
        obj = await self.get(rt, namespace, name)
        want_rv = (scale.get("metadata") or {}).get("resourceVersion")
        if want_rv and want_rv != obj["metadata"]["resourceVersion"]:
            raise conflict(rt.plural, rt.group, name)
        spec_path = _scale_paths(rt)[0]
        _set_path(obj, spec_path, replicas)
        obj["metadata"].pop("resourceVersion", None)
        await self._replace(rt, obj, namespace, "", dry_run, "Ignore", None)
        return await self.get_scale(rt, namespace, name)

    # ---- public: kubelets, lifecycle ------------------------------------------------------

    def attach_kubelet(self, node_name: str) -> None:
        """A kubelet now serves this node: it confirms pod terminations itself."""
        self._kubelets.add(node_name)

    def detach_kubelet(self, node_name: str) -> None:
        self._kubelets.discard(node_name)
        pods = self.resolve("pods")
        for obj in list(self._bucket(pods).values()):
            if (obj.get("spec") or {}).get("nodeName") == node_name and obj["metadata"].get(
                "deletionTimestamp"
            ):
                self._arm_pod_timer(pods, obj, 0)

    def has_kubelet(self, node_name: str) -> bool:
        return node_name in self._kubelets

    async def wait_idle(self, timeout: float = 10.0) -> None:
        """Wait until background work (garbage collection, namespace cleanup) is done."""
        deadline = time.monotonic() + timeout
        while self._tasks:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("store background tasks did not finish")
            await asyncio.wait(list(self._tasks), timeout=remaining)

    def cancel_background(self) -> None:
        """Stop timers and background tasks (the server calls this when it stops)."""
        for handle in self._timers.values():
            handle.cancel()
        self._timers.clear()
        for task in list(self._tasks):
            task.cancel()

    def resume_background(self) -> None:
        """Re-arm pod grace timers and finish interrupted collection (e.g. on a new loop).

        Like the real garbage collector after a restart, dependents whose owners
        are gone are collected, foreground deletions and namespace cleanups resume.
        """
        pods = self.resolve("pods")
        for obj in list(self._bucket(pods).values()):
            if obj["metadata"].get("deletionTimestamp"):
                left = _parse_time(obj["metadata"]["deletionTimestamp"]) - self.clock()
                self._arm_pod_timer(pods, obj, max(0.0, left))
        if self._tasks:
            return  # still running on this loop
        for uid in [u for u in self._dependents if u not in self._uids]:
            self._spawn(self._collect_background(uid))
        for bucket in list(self._objects.values()):
            for obj in list(bucket.values()):
                meta = obj["metadata"]
                if meta.get("deletionTimestamp") and "foregroundDeletion" in (
                    meta.get("finalizers") or []
                ):
                    self._spawn(self._collect_foreground(meta["uid"]))
        for ns in list(self._objects.get("namespaces", {}).values()):
            if ns["metadata"].get("deletionTimestamp"):
                self._spawn(self._empty_namespace(ns["metadata"]["name"]))

    # ---- internals: objects ---------------------------------------------------------------

    def _bucket(self, rt: ResourceType) -> dict[Key, JSON]:
        bucket = self._objects.get(rt.storage_key)
        if bucket is None:
            bucket = self._objects[rt.storage_key] = {}
        return bucket

    def _key(self, rt: ResourceType, namespace: str | None, name: str) -> Key:
        return ((namespace or "") if rt.namespaced else "", name)

    def _present(self, rt: ResourceType, obj: JSON) -> JSON:
        out = conversion.from_storage(rt, obj)
        out["apiVersion"] = rt.api_version
        out["kind"] = rt.kind
        return out

    def _out(self, rt: ResourceType, obj: JSON, shared: bool) -> JSON:
        """What a call hands out: a copy of its own, or with ``shared`` the object
        itself (read-only) where it is already in ``rt``'s form. Stored objects are
        replaced, never changed, so a reader that only serializes them may share them."""
        if shared and obj.get("apiVersion") == rt.api_version and obj.get("kind") == rt.kind:
            return obj
        return self._present(rt, obj)

    def _next_rv(self) -> int:
        self._rv += 1
        return self._rv

    @staticmethod
    def _parse_rv(rv: str) -> int:
        try:
            return int(rv)
        except ValueError:
            raise bad_request(f"invalid resource version {rv!r}") from None

    def _encode_continue(self, last: Key, rv: int) -> str:
        raw = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": f"{last[0]}/{last[1]}"})
        return base64.urlsafe_b64encode(raw.encode()).decode()

    def _decode_continue(self, token: str) -> tuple[Key, int]:
        try:
            data = json.loads(base64.urlsafe_b64decode(token.encode()))
            ns, name = str(data["start"]).split("/", 1)
            rv = int(data["rv"])
        except (ValueError, KeyError, TypeError):
            raise bad_request(
                "continue key is not valid: incorrect encoded start "
                "resourceVersion (version meta.k8s.io/v1)"
            ) from None
        if rv < self._compacted_rv:
            raise ApiError(
                410,
                "Expired",
                "The provided continue parameter is too old to display a consistent "
                "list result. You can start a new list without the continue "
                "parameter, or use the continue token in this response to retrieve "
                "the remainder of the results. Continuing with the provided token "
                "results in an inconsistent list - objects that were created, "
                "modified, or deleted between the time the first chunk was returned "
                "and now may show up in the list.",
            )
        return (ns, name), rv

    def _check_type(self, rt: ResourceType, obj: JSON) -> None:
        api_version, kind = obj.get("apiVersion"), obj.get("kind")
        if kind and kind != rt.kind:
            raise bad_request(
                f"the kind of the object ({kind}) does not match the kind of the "
                f"resource ({rt.kind})"
            )
        if api_version:
            group = api_version.split("/")[0] if "/" in api_version else ""
            if group != rt.group:
                raise bad_request(
                    f"the API version in the data ({api_version}) does not match "
                    f"the expected API version ({rt.api_version})"
                )

    def _request_namespace(self, rt: ResourceType, namespace: str | None, meta: JSON) -> str:
        if not rt.namespaced:
            meta.pop("namespace", None)
            return ""
        body_ns = meta.get("namespace")
        if namespace and body_ns and body_ns != namespace:
            raise bad_request(
                "the namespace of the provided object does not match the "
                "namespace sent on the request"
            )
        ns = namespace or body_ns
        if not ns:
            raise bad_request("an empty namespace may not be set during creation")
        meta["namespace"] = ns
        return str(ns)

    def _check_namespace_writable(self, rt: ResourceType, ns: str, name: str) -> None:
        if not rt.namespaced:
            return
        ns_obj = self._objects.get("namespaces", {}).get(("", ns))
        if ns_obj is None:
            raise not_found("namespaces", "", ns)
        if ns_obj["metadata"].get("deletionTimestamp"):
            raise forbidden(
                rt.plural,
                rt.group,
                name,
                f"unable to create new content in namespace {ns} because it is being terminated",
            )

    def _generate_name(self, rt: ResourceType, ns: str, prefix: str) -> str:
        bucket = self._bucket(rt)
        for _ in range(100):
            name = prefix + "".join(random.choices(_NAME_CHARS, k=5))
            if (ns, name) not in bucket:
                return name
        raise ApiError(500, "AlreadyExists", "could not generate a unique name")

    def _new_object_meta(self, rt: ResourceType, obj: JSON, ns: str, name: str) -> JSON:
        meta = obj["metadata"]
        meta["name"] = name
        if rt.namespaced:
            meta["namespace"] = ns
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now_rfc3339(self.clock())
        for drop in (
            "resourceVersion",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "selfLink",
            "managedFields",
        ):
            meta.pop(drop, None)
        if rt.storage_key in _GENERATION_KEYS or rt.custom:
            meta["generation"] = 1
        else:
            meta.pop("generation", None)
        obj["apiVersion"], obj["kind"] = rt.api_version, rt.kind
        if rt.has_status and (rt.custom or rt.storage_key not in _STATUS_ON_CREATE):
            # As the real strategies' PrepareForCreate: status is written through /status
            # (only nodes register with theirs).
            obj.pop("status", None)
        return obj

    def _prepare(
        self,
        rt: ResourceType,
        obj: JSON,
        old: JSON | None,
        field_validation: str,
        warnings: builtins.list[str] | None,
    ) -> JSON:
        """Defaults and pruning for the stored form (schema and built-in defaults)."""
        if rt.schema is not None:
            unknown = schema.default_and_prune(rt.schema, obj)
            if unknown:
                if field_validation == "Strict":
                    paths = ", ".join(f'unknown field "{p}"' for p in unknown)
                    raise bad_request(
                        f'{rt.kind} in version "{rt.version}" cannot be handled '
                        f"as a {rt.kind}: strict decoding error: {paths}"
                    )
                if field_validation == "Warn" and warnings is not None:
                    warnings.extend(f'unknown field "{p}"' for p in unknown)
        builtin_validation.apply_defaults(rt, obj, old)
        return obj

    def _to_storage(self, rt: ResourceType, obj: JSON, creating: bool) -> tuple[ResourceType, JSON]:
        """The storage's type and form for an object written through ``rt``."""
        if not conversion.is_converted(rt):
            return rt, obj
        errors = conversion.validate_view(rt, obj, creating)
        if errors:
            raise invalid(rt.kind, rt.group, (obj.get("metadata") or {}).get("name", ""), errors)
        storage = self.registry.versions_of(rt.storage_key)
        target = next((t for t in storage if not conversion.is_converted(t)), rt)
        return target, conversion.to_storage(rt, obj)

    def _allocate_cluster_ip(self, svc: JSON) -> None:
        spec = svc.setdefault("spec", {})
        kind = spec.setdefault("type", "ClusterIP")
        if kind == "ExternalName" or spec.get("clusterIP"):
            return
        self._service_ips += 1
        ip = f"10.96.{self._service_ips // 250}.{self._service_ips % 250 + 1}"
        spec["clusterIP"], spec["clusterIPs"] = ip, [ip]

    def _admit_pod_priority(self, pod: JSON) -> None:
        """The Priority admission plugin: spec.priority from the PriorityClass."""
        spec = pod.setdefault("spec", {})
        classes = self._objects.get("priorityclasses.scheduling.k8s.io", {})
        name = spec.get("priorityClassName")
        if name:
            pc = classes.get(("", name))
            if pc is None:
                raise forbidden(
                    "pods",
                    "",
                    pod["metadata"]["name"],
                    f"no PriorityClass with name {name} was found",
                )
        else:
            pc = next((c for c in classes.values() if c.get("globalDefault")), None)
            if pc is not None:
                spec["priorityClassName"] = pc["metadata"]["name"]
        value = int(pc.get("value", 0)) if pc is not None else 0
        if "priority" in spec and spec["priority"] != value:
            raise forbidden(
                "pods",
                "",
                pod["metadata"]["name"],
                f"the integer value of priority ({spec['priority']}) must not be "
                f"provided in pod spec; priority admission controller computed "
                f"{value} from the given PriorityClass name",
            )
        spec["priority"] = value
        if pc is not None and pc.get("preemptionPolicy"):
            spec["preemptionPolicy"] = pc["preemptionPolicy"]

    def _admit_claim_storage_class(self, claim: JSON) -> None:
        """The DefaultStorageClass plugin: a claim naming no class gets the default one
        (the newest, if several are marked); an explicit "" stays."""
        spec = claim.get("spec")
        if not isinstance(spec, dict) or "storageClassName" in spec:
            return
        marked = [
            sc
            for sc in self._objects.get("storageclasses.storage.k8s.io", {}).values()
            if (sc["metadata"].get("annotations") or {}).get(_DEFAULT_CLASS) == "true"
        ]
        if marked:
            newest = max(
                marked,
                key=lambda sc: (sc["metadata"]["creationTimestamp"], sc["metadata"]["name"]),
            )
            spec["storageClassName"] = newest["metadata"]["name"]

    def _runtime_class(self, pod: JSON) -> JSON | None:
        """The pod's RuntimeClass; 403 as the RuntimeClass admission plugin if it is missing."""
        name = (pod.get("spec") or {}).get("runtimeClassName")
        if not name:
            return None
        rc = self._objects.get("runtimeclasses.node.k8s.io", {}).get(("", name))
        if rc is None:
            raise forbidden(
                "pods",
                "",
                pod["metadata"]["name"],
                f'pod rejected: RuntimeClass "{name}" not found',
            )
        return rc

    def _admit_pod_runtime_class(self, pod: JSON) -> None:
        """The RuntimeClass admission plugin: the class's overhead, nodeSelector, tolerations."""
        rc = self._runtime_class(pod)
        if rc is None:
            return
        spec, name = pod["spec"], pod["metadata"]["name"]
        fixed = (rc.get("overhead") or {}).get("podFixed")
        if fixed is not None:
            if spec.get("overhead") and not _same_quantities(spec["overhead"], fixed):
                raise forbidden(
                    "pods",
                    "",
                    name,
                    "pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead",
                )
            spec["overhead"] = copy_json(fixed)
        scheduling = rc.get("scheduling") or {}
        selector = scheduling.get("nodeSelector") or {}
        if selector:
            merged = dict(spec.get("nodeSelector") or {})
            for key, value in selector.items():
                if merged.get(key, value) != value:
                    raise forbidden(
                        "pods",
                        "",
                        name,
                        f"conflict: runtimeClass.scheduling.nodeSelector[{key}] = {value}; "
                        f"pod.spec.nodeSelector[{key}] = {merged[key]}",
                    )
                merged[key] = value
            spec["nodeSelector"] = merged
        tolerations = list(spec.get("tolerations") or [])
        for toleration in scheduling.get("tolerations") or []:
            if toleration not in tolerations:
                tolerations.append(copy_json(toleration))
        if tolerations:
            spec["tolerations"] = tolerations

    def _check_pod_overhead(self, pod: JSON) -> None:
        """The RuntimeClass plugin's validation: an overhead only as the class defines it."""
        rc = self._runtime_class(pod)
        fixed = (rc.get("overhead") or {}).get("podFixed") if rc is not None else None
        overhead = (pod.get("spec") or {}).get("overhead")
        if fixed is not None and not _same_quantities(overhead or {}, fixed):
            why = "Pod's Overhead doesn't match RuntimeClass's defined Overhead"
        elif fixed is None and overhead is not None:
            why = "Pod Overhead set without corresponding RuntimeClass defined Overhead"
        else:
            return
        raise forbidden("pods", "", pod["metadata"]["name"], f"pod rejected: {why}")

    def _validate(self, rt: ResourceType, obj: JSON, old: JSON | None) -> None:
        errors: builtins.list[FieldError] = []
        errors.extend(builtin_validation.validate_metadata(rt, obj, old))
        if rt.schema is not None:
            errors.extend(schema.validate(rt.schema, obj))
        errors.extend(builtin_validation.validate(rt, obj, old))
        if errors:
            raise invalid(
                rt.kind,
                rt.group,
                (obj.get("metadata") or {}).get("name", ""),
                errors,
            )

    async def _replace(
        self,
        resource: str | ResourceType,
        obj: JSON,
        namespace: str | None,
        subresource: str,
        dry_run: bool,
        field_validation: str,
        warnings: builtins.list[str] | None,
        expect_name: str | None = None,
        take: bool = False,
        shared: bool = False,
    ) -> JSON:
        """``take=True``: ``obj`` is the store's to keep and change (not copied)."""
        rt = self.resolve(resource)
        if not isinstance(obj, dict) or not isinstance(obj.get("metadata", {}), dict):
            raise bad_request("the body of the request was not a JSON object")
        if not take:
            obj = copy_json(obj)
        obj.setdefault("metadata", {})
        self._check_type(rt, obj)
        view, rt, obj = rt, *self._to_storage(rt, obj, creating=False)
        meta = obj["metadata"]
        name = meta.get("name") or expect_name or ""
        if expect_name and name != expect_name:
            raise bad_request(
                f"the name of the object ({name}) does not match the name on "
                f"the URL ({expect_name})"
            )
        ns = self._request_namespace(rt, namespace, meta) if rt.namespaced else ""
        key = (ns, name)
        current = self._bucket(rt).get(key)
        if current is None:
            raise not_found(rt.plural, rt.group, name)
        want_rv = meta.get("resourceVersion")
        if want_rv and want_rv != current["metadata"]["resourceVersion"]:
            raise conflict(rt.plural, rt.group, name)
        want_uid = meta.get("uid")
        if want_uid and want_uid != current["metadata"].get("uid"):
            # As kube-apiserver: a uid in an update or patch is a precondition, so a
            # write meant for an earlier object of the same name never lands.
            raise conflict(
                rt.plural,
                rt.group,
                name,
                f"Precondition failed: UID in precondition: {want_uid}, "
                f"UID in object meta: {current['metadata'].get('uid')}",
            )
        if subresource == "status":
            if not rt.has_status:
                raise not_found(rt.plural, rt.group, name)
            # The rest as stored (copied, since the write changes its metadata), the
            # status (and a pod's metadata, below) as given: obj is the store's own.
            given = ("status", "metadata") if rt.storage_key == "pods" else ("status",)
            new: JSON = {k: None if k in given else copy_json(v) for k, v in current.items()}
            if "status" in obj:
                new["status"] = obj["status"]
            else:
                new.pop("status", None)
            if rt.storage_key == "pods":
                # As the pod status strategy: it resets only the spec, deletionTimestamp
                # and ownerReferences, so labels and annotations are written too.
                new["metadata"] = obj["metadata"]
                self._keep_system_meta(current, new)
                refs = current["metadata"].get("ownerReferences")
                if refs is None:
                    new["metadata"].pop("ownerReferences", None)
                else:
                    new["metadata"]["ownerReferences"] = copy_json(refs)
                self._check_finalizers(rt, current, new)
        else:
            new = obj
            if rt.has_status and rt.storage_key != "namespaces":
                if "status" in current:
                    new["status"] = copy_json(current["status"])
                else:
                    new.pop("status", None)
            self._keep_system_meta(current, new)
            self._check_finalizers(rt, current, new)
        new = self._prepare(rt, new, current, field_validation, warnings)
        # The requests copy both objects: only built when some webhook is registered.
        admission = (
            self.admission if self.admission is not None and self.admission.active() else None
        )
        if admission is not None:
            req = AdmissionRequest(
                "UPDATE",
                rt,
                ns,
                name,
                self._present(rt, new),
                self._present(rt, current),
                subresource=subresource,
                dry_run=dry_run,
                warnings=warnings,
            )
            mutated = await admission.mutate(req)
            if mutated is not None:
                new = self._prepare(rt, mutated, current, "Ignore", None)
                self._keep_system_meta(current, new)
        self._validate(rt, new, current)
        if admission is not None:
            await admission.validate(
                AdmissionRequest(
                    "UPDATE",
                    rt,
                    ns,
                    name,
                    self._present(rt, new),
                    self._present(rt, current),
                    subresource=subresource,
                    dry_run=dry_run,
                    warnings=warnings,
                )
            )
            latest = self._bucket(rt).get(key)
            if latest is None:
                raise not_found(rt.plural, rt.group, name)
            if latest is not current:
                # Someone wrote while webhooks ran: a real server's etcd CAS fails too.
                lost = conflict(rt.plural, rt.group, name)
                raise _LostRace(lost.code, lost.reason, lost.message, details=lost.details)
        if dry_run:
            # What the write would store, without storing it: same resourceVersion,
            # the generation it would get.
            meta_out = new["metadata"]
            meta_out["resourceVersion"] = current["metadata"]["resourceVersion"]
            if "generation" in current["metadata"]:
                bump = _spec_of(new) != _spec_of(current)
                meta_out["generation"] = current["metadata"]["generation"] + int(bump)
            return self._out(view, new, shared)
        stored = self._write(rt, current, new)
        return self._out(view, stored, shared)

    @staticmethod
    def _keep_system_meta(current: JSON, new: JSON) -> None:
        meta, cur = new["metadata"], current["metadata"]
        for k in (
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
            "name",
            "namespace",
        ):
            if k in cur:
                meta[k] = cur[k]
            else:
                meta.pop(k, None)
        meta.pop("resourceVersion", None)
        meta.pop("managedFields", None)

    def _check_finalizers(self, rt: ResourceType, current: JSON, new: JSON) -> None:
        if not current["metadata"].get("deletionTimestamp"):
            return
        old = set(current["metadata"].get("finalizers") or [])
        added = [f for f in new["metadata"].get("finalizers") or [] if f not in old]
        if added:
            raise invalid(
                rt.kind,
                rt.group,
                current["metadata"]["name"],
                [
                    FieldError(
                        "metadata.finalizers",
                        "FieldValueForbidden",
                        "no new finalizers can be added if the object is being deleted, "
                        f"found new finalizers {json.dumps(added)}",
                    )
                ],
            )

    def _write(self, rt: ResourceType, current: JSON, new: JSON) -> JSON:
        """Store ``new`` in place of ``current``; removes it if deletion is complete."""
        meta = new["metadata"]
        cmeta = current["metadata"]
        for k in ("uid", "creationTimestamp", "name"):
            meta[k] = cmeta[k]
        if "generation" in cmeta:
            meta["generation"] = cmeta["generation"]
            if _spec_of(new) != _spec_of(current):
                meta["generation"] = cmeta["generation"] + 1
        if _without_rv(new) == _without_rv(current):
            return current  # a no-op write keeps the resourceVersion, as in Kubernetes
        if (
            meta.get("deletionTimestamp")
            and not meta.get("finalizers")
            and self._grace_done(rt, new)
        ):
            return self._remove(rt, current, "Background", final=new)
        meta["resourceVersion"] = str(self._next_rv())
        new["apiVersion"], new["kind"] = rt.api_version, rt.kind
        key = self._key(rt, meta.get("namespace"), meta["name"])
        self._bucket(rt)[key] = new
        self._reindex_owners(rt, key, current, new)
        self._emit(rt, "MODIFIED", new, current)
        self._after_write(rt, current, new)
        return new

    def _grace_done(self, rt: ResourceType, obj: JSON) -> bool:
        if rt.storage_key == "namespaces":
            return False  # namespaces go when emptied (_maybe_finish_namespace)
        if rt.storage_key != "pods":
            return True
        key = (obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
        return (
            key in self._terminated
            or int(obj["metadata"].get("deletionGracePeriodSeconds") or 0) == 0
        )

    def _insert(self, rt: ResourceType, obj: JSON) -> JSON:
        meta = obj["metadata"]
        meta["resourceVersion"] = str(self._next_rv())
        key = self._key(rt, meta.get("namespace"), meta["name"])
        self._bucket(rt)[key] = obj
        self._uids[meta["uid"]] = (rt.storage_key, key)
        self._reindex_owners(rt, key, None, obj)
        self._emit(rt, "ADDED", obj, None)
        return obj

    def _remove(
        self, rt: ResourceType, current: JSON, policy: str, final: JSON | None = None
    ) -> JSON:
        """Take the object out of the store (DELETED) and start garbage collection."""
        obj: JSON = copy_json(final if final is not None else current)
        meta = obj["metadata"]
        key = self._key(rt, meta.get("namespace"), meta["name"])
        if self._bucket(rt).get(key) is not current:
            return obj
        meta["resourceVersion"] = str(self._next_rv())
        del self._bucket(rt)[key]
        self._uids.pop(meta["uid"], None)
        self._applied.pop(meta["uid"], None)
        self._terminated.discard(key)
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        self._reindex_owners(rt, key, current, None)
        self._emit(rt, "DELETED", obj, None)
        if policy != "Orphan" and self._dependents.get(meta["uid"]):
            self._spawn(self._collect_background(meta["uid"]))
        for ref in meta.get("ownerReferences") or []:
            self._maybe_finish_foreground(ref.get("uid", ""))
        if rt.storage_key == "customresourcedefinitions.apiextensions.k8s.io":
            self._unregister_crd(obj)
        if rt.namespaced:
            self._maybe_finish_namespace(key[0])
        return obj

    def _emit(self, rt: ResourceType, event_type: str, obj: JSON, old: JSON | None) -> None:
        if len(self._history) == self._history.maxlen:
            self._compacted_rv = self._history[0].rv
        ev = StoredEvent(self._rv, rt.storage_key, event_type, obj, old)
        self._history.append(ev)
        for w in list(self._watchers.get(rt.storage_key, ())):
            w._offer(ev)

    def _after_write(self, rt: ResourceType, old: JSON | None, new: JSON) -> None:
        if rt.storage_key == "customresourcedefinitions.apiextensions.k8s.io":
            self._register_crd(rt, new)
        elif rt.storage_key == "namespaces" and old is None:
            # The service account controller's job: every namespace has "default".
            sa = self.registry.resolve("serviceaccounts")
            ns = new["metadata"]["name"]
            if (ns, "default") not in self._bucket(sa):
                self._insert(sa, self._new_object_meta(sa, {"metadata": {}}, ns, "default"))

    # ---- internals: deletion --------------------------------------------------------------

    def _grace_period(self, rt: ResourceType, obj: JSON, requested: int | None) -> int:
        if rt.storage_key != "pods":
            return 0
        spec = obj.get("spec") or {}
        phase = (obj.get("status") or {}).get("phase")
        if not spec.get("nodeName") or phase in ("Succeeded", "Failed"):
            return 0
        if requested is not None:
            return max(0, int(requested))
        return int(spec.get("terminationGracePeriodSeconds", 30))

    def _arm_pod_timer(self, rt: ResourceType, obj: JSON, grace: float) -> None:
        node = (obj.get("spec") or {}).get("nodeName")
        if node in self._kubelets:
            return
        key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
        old = self._timers.pop(key, None)
        if old is not None:
            old.cancel()
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._timers[key] = loop.call_later(grace, self._grace_expired, rt, key)

    def _grace_expired(self, rt: ResourceType, key: Key) -> None:
        self._timers.pop(key, None)
        current = self._bucket(rt).get(key)
        if current is None or not current["metadata"].get("deletionTimestamp"):
            return
        self._terminated.add(key)
        if not current["metadata"].get("finalizers"):
            self._remove(rt, current, "Background")

    def _delete_namespace(self, rt: ResourceType, current: JSON) -> JSON:
        if current["metadata"].get("deletionTimestamp"):
            return current
        updated = copy_json(current)
        updated["metadata"]["deletionTimestamp"] = now_rfc3339(self.clock())
        updated["metadata"]["deletionGracePeriodSeconds"] = 0
        updated.setdefault("status", {})["phase"] = "Terminating"
        ns = current["metadata"]["name"]
        stored = self._write(rt, current, updated)
        self._spawn(self._empty_namespace(ns))
        return stored

    async def _empty_namespace(self, ns: str) -> None:
        for rt_key, bucket in list(self._objects.items()):
            types = self.registry.versions_of(rt_key)
            if not types or not types[0].namespaced:
                continue
            for key in [k for k in bucket if k[0] == ns]:
                with contextlib.suppress(ApiError):
                    await self.delete(types[0], ns, key[1], grace_period_seconds=0)
        self._maybe_finish_namespace(ns)

    def _maybe_finish_namespace(self, ns: str) -> None:
        ns_rt = self.registry.resolve("namespaces")
        ns_obj = self._bucket(ns_rt).get(("", ns))
        if ns_obj is None or not ns_obj["metadata"].get("deletionTimestamp"):
            return
        for rt_key, bucket in self._objects.items():
            if rt_key != "namespaces" and any(k[0] == ns for k in bucket):
                return
        self._remove(ns_rt, ns_obj, "Background")

    # ---- internals: garbage collection ----------------------------------------------------

    def _reindex_owners(
        self, rt: ResourceType, key: Key, old: JSON | None, new: JSON | None
    ) -> None:
        ref = (rt.storage_key, key)
        for obj, add in ((old, False), (new, True)):
            if obj is None:
                continue
            for owner in obj["metadata"].get("ownerReferences") or []:
                uid = owner.get("uid")
                if not uid:
                    continue
                deps = self._dependents.setdefault(uid, set())
                if add:
                    deps.add(ref)
                    if uid not in self._uids and uid not in self._dangling:
                        self._dangling.add(uid)
                        self._spawn(self._collect_dangling(uid))
                else:
                    deps.discard(ref)
                    if not deps:
                        del self._dependents[uid]

    def _spawn(self, coro: Awaitable[Any]) -> None:
        try:
            task = asyncio.ensure_future(coro)
        except RuntimeError:
            return
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Future[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            # Background work must not fail silently: that would hide an emulator bug.
            log.error("emulator background task failed", exc_info=task.exception())

    def _dependent_objects(self, uid: str) -> builtins.list[tuple[ResourceType, JSON]]:
        out = []
        for storage_key, key in sorted(self._dependents.get(uid, ())):
            types = self.registry.versions_of(storage_key)
            obj = self._objects.get(storage_key, {}).get(key)
            if types and obj is not None:
                out.append((types[0], obj))
        return out

    async def _collect_dangling(self, owner_uid: str) -> None:
        """Dependents of an owner that does not exist go, as the real collector decides
        after it has looked the owner up."""
        try:
            await asyncio.sleep(DANGLING_OWNER_DELAY)
            if owner_uid not in self._uids:
                await self._collect_background(owner_uid)
        finally:
            self._dangling.discard(owner_uid)

    async def _collect_background(self, owner_uid: str) -> None:
        await asyncio.sleep(0)
        for rt, obj in self._dependent_objects(owner_uid):
            await self._collect_one(rt, obj, owner_uid, "Background")

    async def _collect_foreground(self, owner_uid: str) -> None:
        await asyncio.sleep(0)
        for rt, obj in self._dependent_objects(owner_uid):
            await self._collect_one(rt, obj, owner_uid, "Foreground")
        self._maybe_finish_foreground(owner_uid)

    async def _collect_one(self, rt: ResourceType, obj: JSON, owner_uid: str, policy: str) -> None:
        meta = obj["metadata"]
        others = [
            r
            for r in meta.get("ownerReferences") or []
            if r.get("uid") != owner_uid and r.get("uid") in self._uids
        ]
        if others:
            updated = copy_json(obj)
            updated["metadata"]["ownerReferences"] = [
                r for r in meta["ownerReferences"] if r.get("uid") != owner_uid
            ]
            self._write(rt, obj, updated)
            return
        if meta.get("deletionTimestamp") and policy == "Background":
            return
        with contextlib.suppress(ApiError):
            await self.delete(rt, meta.get("namespace"), meta["name"], propagation_policy=policy)

    def _maybe_finish_foreground(self, owner_uid: str) -> None:
        where = self._uids.get(owner_uid)
        if where is None or self._dependents.get(owner_uid):
            return
        storage_key, key = where
        owner = self._objects.get(storage_key, {}).get(key)
        types = self.registry.versions_of(storage_key)
        if owner is None or not types:
            return
        fins = owner["metadata"].get("finalizers") or []
        if "foregroundDeletion" not in fins or not owner["metadata"].get("deletionTimestamp"):
            return
        updated = copy_json(owner)
        updated["metadata"]["finalizers"] = [f for f in fins if f != "foregroundDeletion"]
        if not updated["metadata"]["finalizers"]:
            del updated["metadata"]["finalizers"]
        self._write(types[0], owner, updated)

    def _orphan_dependents(self, owner_uid: str) -> None:
        for rt, obj in self._dependent_objects(owner_uid):
            updated = copy_json(obj)
            refs = [
                r for r in obj["metadata"].get("ownerReferences") or [] if r.get("uid") != owner_uid
            ]
            if refs:
                updated["metadata"]["ownerReferences"] = refs
            else:
                updated["metadata"].pop("ownerReferences", None)
            self._write(rt, obj, updated)

    # ---- internals: CustomResourceDefinitions ---------------------------------------------

    def _register_crd(self, rt: ResourceType, crd: JSON) -> None:
        if crd["metadata"].get("deletionTimestamp"):
            return
        spec = crd.get("spec") or {}
        group, plural = spec.get("group", ""), (spec.get("names") or {}).get("plural", "")
        self.registry.remove_group_plural(group, plural)
        for t in types_from_crd(crd):
            self.registry.add(t)
        status = crd.get("status") or {}
        conds = {c.get("type"): c for c in status.get("conditions") or []}
        if conds.get("Established", {}).get("status") == "True" and status.get(
            "acceptedNames"
        ) == spec.get("names"):
            return
        updated = copy_json(crd)
        ts = now_rfc3339(self.clock())
        updated["status"] = {
            "acceptedNames": copy_json(spec.get("names") or {}),
            "conditions": [
                {
                    "type": "NamesAccepted",
                    "status": "True",
                    "reason": "NoConflicts",
                    "message": "no conflicts found",
                    "lastTransitionTime": ts,
                },
                {
                    "type": "Established",
                    "status": "True",
                    "reason": "InitialNamesAccepted",
                    "message": "the initial names have been accepted",
                    "lastTransitionTime": ts,
                },
            ],
            "storedVersions": [v["name"] for v in spec.get("versions") or [] if v.get("storage")],
        }
        self._write(rt, crd, updated)

    def _unregister_crd(self, crd: JSON) -> None:
        spec = crd.get("spec") or {}
        group, plural = spec.get("group", ""), (spec.get("names") or {}).get("plural", "")
        gone_types = self.registry.remove_group_plural(group, plural)
        if gone_types:
            storage_key = gone_types[0].storage_key
            for w in list(self._watchers.get(storage_key, ())):
                w.close()
            for obj in list(self._objects.pop(storage_key, {}).values()):
                self._uids.pop(obj["metadata"]["uid"], None)

    # ---- iteration helpers for controllers ------------------------------------------------

    def iter_objects(self, resource: str | ResourceType) -> Iterable[JSON]:
        """Read-only view of stored objects, without copies (do not mutate them)."""
        return list(self._bucket(self.resolve(resource)).values())


def _scale_paths(rt: ResourceType) -> tuple[str, str, str]:
    paths = rt.extra.get("scale") or {}
    return (
        paths.get("specReplicasPath", ".spec.replicas"),
        paths.get("statusReplicasPath", ".status.replicas"),
        paths.get("labelSelectorPath", "" if rt.custom else ".spec.selector"),
    )


def _get_path(obj: JSON, path: str) -> Any:
    cur: Any = obj
    for part in path.strip(".").split("."):
        if not isinstance(cur, dict):
            return None
        cur = cur.get(part)
    return cur


def _set_path(obj: JSON, path: str, value: Any) -> None:
    parts = path.strip(".").split(".")
    cur = obj
    for part in parts[:-1]:
        cur = cur.setdefault(part, {})
    cur[parts[-1]] = value


def _spec_of(obj: JSON) -> JSON:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}


def _without_rv(obj: JSON) -> JSON:
    out = dict(obj)
    meta = dict(out.get("metadata") or {})
    meta.pop("resourceVersion", None)
    out["metadata"] = meta
    out.pop("apiVersion", None)
    out.pop("kind", None)
    return out


def _parse_time(text: str) -> float:
    import calendar

    return float(calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%SZ")))


async def collect(
    aiter: AsyncIterator[tuple[str, JSON]], count: int, timeout: float = 5.0
) -> builtins.list[tuple[str, JSON]]:
    """Read ``count`` events from a watch (a test and controller convenience)."""
    out: builtins.list[tuple[str, JSON]] = []

    async def run() -> None:
        async for ev in aiter:
            out.append(ev)
            if len(out) >= count:
                return

    await asyncio.wait_for(run(), timeout)
    return out
