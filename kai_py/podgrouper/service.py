"""The pod-grouper's API work: fetch a pod's owners, create its PodGroup, annotate it.

``PodGrouperService.handle(pod)`` runs the pure ``group_pod`` on the pod and
its owner chain (fetched by ownerReference through the API, cached for a
few seconds) and then

- creates the PodGroup when it is missing (owned by the top owner, or by the
  pod for Deployment pods; 409 AlreadyExists is fine),
- writes ``pod-group-name`` into the pod's annotations with a merge patch,
  only when it is missing or different, and
- posts each warning as a Warning Event ``PodGrouperWarning`` on the object
  the warning names (once per pod and message).

Nothing else is written to pods: no finalizers, no bookkeeping annotations.
A pod whose annotation is what the grouper wrote and whose group is known to
exist is skipped without any API call.

The service runs on the event loop: its requests go straight to the operator's
async HTTP stack (``kube.send``), with no thread to hand them over from. Its memory
(groups known, pods done, warnings posted, pods to try again) is the loop's alone.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from kai_py.api import keys
from kai_py.api.objects import meta
from kai_py.apiclient.eventpost import apost_event
from kai_py.apiclient.kube import MERGE_PATCH, Kube, KubeError, list_all, path_of, send
from kai_py.podgrouper.grouping import owner_walk
from kai_py.podgrouper.rules import (
    Grouped,
    GrouperWarning,
    GroupingFailed,
    ObjectRef,
    group_pod,
    related_objects,
)
from kai_py.scheduler.tenancy import access

Json = dict[str, Any]
log = logging.getLogger(__name__)

COMPONENT: Final = "kai-py-pod-grouper"
PODGROUPS: Final = "podgroups"


class _Lru:
    """A small bounded set/map (recently used entries survive)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.data: OrderedDict[Any, Any] = OrderedDict()

    def get(self, key: Any) -> Any:
        if key in self.data:
            self.data.move_to_end(key)
            return self.data[key]
        return None

    def put(self, key: Any, value: Any) -> None:
        self.data[key] = value
        self.data.move_to_end(key)
        while len(self.data) > self.size:
            self.data.popitem(last=False)

    def drop(self, key: Any) -> None:
        self.data.pop(key, None)


def split_api_version(api_version: str) -> tuple[str, str]:
    group, _, version = api_version.rpartition("/")
    return group, version


#: Answers that mean "no such owner for us" (gone, or not ours to read): a miss, kept
#: like a found owner. Any other error (5xx, no answer, throttling) is raised instead,
#: so the pod is tried again in seconds (the quick pass), not after a remembered miss.
_MISSING: Final = (403, 404)


def _reading(exc: KubeError, what: str) -> KubeError:
    return KubeError(exc.code, exc.reason, f"reading {what}: {exc.message}")


#: Why an owner's kind cannot be read at all (not: this one object is gone).
FORBIDDEN: Final = "forbidden"
NOT_SERVED: Final = "not served"


@dataclass(frozen=True, slots=True)
class Unreadable:
    """An owner (or an object a kind reads) whose kind the pod-grouper cannot read:
    ``why`` is FORBIDDEN (no RBAC right) or NOT_SERVED (its CRD is not installed)."""

    api_version: str
    kind: str
    why: str


class OwnerResolver:
    """Fetches owners by ownerReference: discovery finds the plural, GETs are cached
    for ``ttl`` seconds (misses too, so a missing owner is not asked for per event).
    An API error other than a miss raises ``KubeError`` and is not cached. A kind it
    may not read, or that the API server does not serve, is remembered in
    ``unreadable`` by (apiVersion, kind) until a read of it succeeds."""

    def __init__(
        self, kube: Kube, ttl: float = 10.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.kube = kube
        self.ttl = ttl
        self.clock = clock
        self._plurals: dict[str, dict[str, tuple[str, bool]]] = {}
        self._objects = _Lru(4096)
        self.unreadable: dict[tuple[str, str], Unreadable] = {}

    async def resource(self, api_version: str, kind: str) -> tuple[str, bool] | None:
        """(plural, namespaced) of ``kind`` in ``api_version``, from discovery."""
        known = self._plurals.get(api_version)
        if known is None:
            group, version = split_api_version(api_version)
            path = f"/apis/{group}/{version}" if group else f"/api/{version}"
            try:
                listing = await send(self.kube, "GET", path)
            except KubeError as exc:
                if exc.code not in _MISSING:
                    raise _reading(exc, f"the API {api_version}") from exc
                log.debug("discovery failed", extra={"api_version": api_version, "error": str(exc)})
                why = FORBIDDEN if exc.code == 403 else NOT_SERVED
                self.unreadable[(api_version, kind)] = Unreadable(api_version, kind, why)
                return None
            known = {
                str(r.get("kind")): (str(r.get("name")), bool(r.get("namespaced")))
                for r in listing.get("resources") or []
                if "/" not in str(r.get("name"))
            }
            self._plurals[api_version] = known
        found = known.get(kind)
        if found is None:
            self.unreadable[(api_version, kind)] = Unreadable(api_version, kind, NOT_SERVED)
        elif self.unreadable:
            self.unreadable.pop((api_version, kind), None)  # served now: a 404 is one object
        return found

    async def fetch(self, namespace: str, ref: Mapping[str, Any]) -> Mapping[str, Any] | None:
        api_version, kind, name = (str(ref.get(k) or "") for k in ("apiVersion", "kind", "name"))
        uid = str(ref.get("uid") or "")
        key = (namespace, api_version, kind, name)
        now = self.clock()
        cached = self._objects.get(key)
        if cached is not None and now - cached[0] < self.ttl:
            obj: Mapping[str, Any] | None = cached[1]
        else:
            obj = await self._get(namespace, api_version, kind, name)
            self._objects.put(key, (now, obj))
        if obj is None:
            return None
        if uid and meta(obj).get("uid") and meta(obj).get("uid") != uid:
            return None  # the owner was replaced by another object of the same name
        return obj

    async def _get(self, namespace: str, api_version: str, kind: str, name: str) -> Json | None:
        found = await self.resource(api_version, kind)
        if found is None or not name:
            return None
        plural, namespaced = found
        group, version = split_api_version(api_version)
        try:
            obj = await send(
                self.kube,
                "GET",
                path_of(group, version, plural, namespace if namespaced else None, name),
            )
        except KubeError as exc:
            if exc.code not in _MISSING:
                raise _reading(exc, f"owner {kind} {namespace}/{name}") from exc
            if exc.code == 403:
                self.unreadable[(api_version, kind)] = Unreadable(api_version, kind, FORBIDDEN)
            return None
        self.unreadable.pop((api_version, kind), None)
        obj.setdefault("apiVersion", api_version)
        obj.setdefault("kind", kind)
        return obj

    async def chain(self, pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
        """The pod's owners, nearest first (``grouping.owner_walk``)."""
        return (await self.walk(pod))[0]

    def why_unreadable(self, ref: Mapping[str, Any]) -> Unreadable | None:
        """Whether the kind of ``ref`` is one the pod-grouper cannot read."""
        return self.unreadable.get((str(ref.get("apiVersion") or ""), str(ref.get("kind") or "")))

    async def walk(
        self, pod: Mapping[str, Any]
    ) -> tuple[list[Mapping[str, Any]], Unreadable | None]:
        """The pod's owners, nearest first, and, when the walk stopped at an owner
        whose kind cannot be read, that kind."""
        walk = owner_walk(pod)
        stopped: Unreadable | None = None
        try:
            wanted = next(walk)
            while True:
                found = await self.fetch(*wanted)
                stopped = self.why_unreadable(wanted[1]) if found is None else None
                wanted = walk.send(found)
        except StopIteration as done:
            chain: list[Mapping[str, Any]] = done.value
            return chain, stopped


@dataclass(slots=True)
class GroupingOutcome:
    """What ``handle`` did, for logs and tests."""

    group: str | None = None
    created: bool = False
    annotated: bool = False
    resized: bool = False  # an existing group's gang fields were rewritten
    skipped: str | None = None
    warnings: list[str] = field(default_factory=list)


#: A group's gang fields: minMember, minSubGroup, subGroups (what a scaling workload changes).
_Gang = tuple[Any, Any, Any]


def _gang(manifest: Mapping[str, Any]) -> _Gang:
    spec = manifest.get("spec") or {}
    return spec.get("minMember"), spec.get("minSubGroup"), spec.get("subGroups")


def _pod_waits(pod: Mapping[str, Any], ns: str, uid: str, why: GrouperWarning) -> GrouperWarning:
    """The pod's own warning when its workload cannot be grouped (``why``)."""
    name = str(meta(pod).get("name"))
    return GrouperWarning(
        ObjectRef("v1", "Pod", name, ns, uid),
        f'metadata.annotations["{keys.POD_GROUP_ANNOTATION}"]',
        f"not set, so the pod is not scheduled, until its PodGroup can be made: {why.message}",
    )


def _refused(exc: KubeError) -> bool:
    """A 4xx that waiting alone will not cure (not a conflict, not throttling)."""
    return 400 <= exc.code < 500 and exc.code not in (409, 429)


def _group_refused(
    pod: Mapping[str, Any], ns: str, uid: str, manifest: Json, exc: KubeError
) -> GrouperWarning:
    """The pod's warning when the API server refuses its PodGroup (``exc``)."""
    name = str(meta(pod).get("name"))
    group = manifest["metadata"]["name"]
    queue = (manifest.get("spec") or {}).get("queue") or ""
    return GrouperWarning(
        ObjectRef("v1", "Pod", name, ns, uid),
        f'metadata.annotations["{keys.POD_GROUP_ANNOTATION}"]',
        f'not set, so the pod is not scheduled: its PodGroup {ns}/{group} (queue "{queue}") '
        f"was refused by the API server ({exc.code} {exc.reason}): {exc.message}",
    )


def warning_ref(warning: GrouperWarning) -> Json:
    obj = warning.involved
    ref: Json = {"apiVersion": obj.api_version, "kind": obj.kind, "name": obj.name}
    if obj.namespace:
        ref["namespace"] = obj.namespace
    if obj.uid:
        ref["uid"] = obj.uid
    return ref


#: The Queues' resource (the pod-grouper lists them before it makes a PodGroup).
QUEUES: Final = "queues"
#: ``GroupingOutcome.skipped`` of a pod whose PodGroup its queue does not allow.
NOT_ALLOWED: Final = "not allowed in its queue"
#: The reason of the Warning on a pod whose workload cannot be grouped.
POD_WAITS_REASON: Final = "PodGroupNotCreated"
#: The reason of the one Warning per owner kind the pod-grouper cannot read.
OWNER_UNREADABLE_REASON: Final = "PodGrouperOwnerUnreadable"


class PodGrouperService:
    def __init__(
        self,
        kube: Kube,
        *,
        scheduler_name: Callable[[], str] | str = keys.DEFAULT_SCHEDULER_NAME,
        default_queue: str = keys.DEFAULT_QUEUE,
        default_priority_class: str = keys.DEFAULT_PRIORITY_CLASS,
        owners: OwnerResolver | None = None,
        pool_label: Callable[[], str] | str = keys.NODE_POOL_LABEL,
    ) -> None:
        self.kube = kube
        self._scheduler_name = scheduler_name
        # The node-pool label key (KAI's Config may change it while running).
        self._pool_label = pool_label
        self.default_queue = default_queue
        self.default_priority_class = default_priority_class
        self.owners = owners or OwnerResolver(kube)
        self._groups = _Lru(8192)  # (namespace, name) of PodGroups known to exist
        self._done = _Lru(65536)  # pod uid -> the group name written on it
        self._warned = _Lru(8192)  # (object, message) already posted
        # pod uid -> (namespace, name, last try met an API error): to try again later
        self._pending = _Lru(4096)
        self._unreadable_told: set[tuple[str, str]] = set()  # kinds warned about, once each

    @property
    def scheduler_name(self) -> str:
        name = self._scheduler_name
        return name() if callable(name) else name

    def wants(self, pod: Mapping[str, Any]) -> bool:
        """Is this pod the grouper's business at all (cheap; no API calls)?"""
        return (pod.get("spec") or {}).get("schedulerName") == self.scheduler_name and not meta(
            pod
        ).get("deletionTimestamp")

    def needs_work(self, pod: Mapping[str, Any]) -> bool:
        """``wants`` and not already grouped by this service (cheap; no API calls)."""
        if not self.wants(pod):
            return False
        m = meta(pod)
        uid = str(m.get("uid") or f"{m.get('namespace') or 'default'}/{m.get('name')}")
        done = self._done.get(uid)
        annotation = (m.get("annotations") or {}).get(keys.POD_GROUP_ANNOTATION)
        return done is None or annotation != done[1]

    def group_deleted(self, namespace: str, name: str) -> None:
        """A PodGroup went: the next event of its pods creates it again."""
        self._groups.drop((namespace, name))
        for uid, (group, _written) in list(self._done.data.items()):
            if group == (namespace, name):
                self._done.drop(uid)

    async def handle(self, pod: Mapping[str, Any]) -> GroupingOutcome:
        if not self.wants(pod):
            return GroupingOutcome(skipped="not ours")
        m = meta(pod)
        ns = str(m.get("namespace") or "default")
        uid = str(m.get("uid") or f"{ns}/{m.get('name')}")
        annotation = (m.get("annotations") or {}).get(keys.POD_GROUP_ANNOTATION)
        done = self._done.get(uid)
        if done is not None and annotation == done[1]:
            return GroupingOutcome(group=str(annotation), skipped="already grouped")
        name = str(m.get("name"))
        self._pending.put(uid, (ns, name, False))
        try:
            outcome = await self._group(pod, ns, uid, annotation)
        except KubeError:
            self._pending.put(uid, (ns, name, True))
            raise
        # Tried again later: a fixed Job or Queue does not make its pods change.
        if outcome.skipped not in ("grouping failed", NOT_ALLOWED):
            self._pending.drop(uid)
        return outcome

    @property
    def api_failed(self) -> int:
        """Pods waiting to be tried again after an API error (not a bad annotation)."""
        return sum(1 for _ns, _name, failed in self._pending.data.values() if failed)

    async def retry_pending(self, api_failed_only: bool = False) -> list[GroupingOutcome]:
        """Group again the pods whose grouping failed (a bad Job annotation since fixed,
        an owner not readable then, an API error): pod events alone may not come.
        ``api_failed_only``: only those whose last try met an API error."""
        outcomes = []
        for uid, (ns, name, api_failed) in list(self._pending.data.items()):
            if api_failed_only and not api_failed:
                continue
            try:
                pod = await send(self.kube, "GET", path_of("", "v1", "pods", ns, name))
            except KubeError as exc:
                if exc.code == 404:
                    self._pending.drop(uid)
                continue
            if str(meta(pod).get("uid") or "") != uid or not self.wants(pod):
                self._pending.drop(uid)
                continue
            try:
                outcomes.append(await self.handle(pod))
            except KubeError as exc:
                log.warning("pod-grouper: failed", extra={"pod": f"{ns}/{name}", "error": str(exc)})
        return outcomes

    async def group_all(self) -> list[GroupingOutcome]:
        """Group every pod of a fresh LIST that needs it (a new leader's first pass)."""
        # Only the scheduler's pods (a field the API server filters pods on). Once per
        # term of leadership: the paged LIST runs in a thread, as the other parts' do.
        listing = await asyncio.to_thread(
            list_all,
            self.kube,
            path_of("", "v1", "pods"),
            query=[("fieldSelector", f"spec.schedulerName={self.scheduler_name}")],
        )
        outcomes = []
        for pod in listing.get("items") or []:
            if not self.needs_work(pod):
                continue
            try:
                outcome = await self.handle(pod)
            except KubeError as exc:
                log.warning(
                    "pod-grouper: failed",
                    extra={
                        "pod": f"{meta(pod).get('namespace')}/{meta(pod).get('name')}",
                        "error": str(exc),
                    },
                )
                continue
            if outcome.annotated or outcome.created:
                outcomes.append(outcome)
        return outcomes

    async def _group(
        self, pod: Mapping[str, Any], ns: str, uid: str, annotation: str | None
    ) -> GroupingOutcome:
        m = meta(pod)
        chain, stopped = await self.owners.walk(pod)
        if stopped is not None:
            await self._cannot_read(stopped, pod, ns, uid)
        related: dict[tuple[str, str], Mapping[str, Any] | None] = {}
        for api_version, kind, name in related_objects(pod, chain, stopped is not None):
            ref = {"apiVersion": api_version, "kind": kind, "name": name}
            related[(kind, name)] = found = await self.owners.fetch(ns, ref)
            if found is None and (why := self.owners.why_unreadable(ref)) is not None:
                await self._cannot_read(why, pod, ns, uid)
        result = group_pod(
            pod,
            chain,
            scheduler_name=self.scheduler_name,
            default_queue=self.default_queue,
            default_priority_class=self.default_priority_class,
            related=lambda _v, kind, name: related.get((kind, name)),
            top_unreadable=stopped is not None,
            pool_label=self._pool_label() if callable(self._pool_label) else self._pool_label,
        )
        outcome = GroupingOutcome(group=result.group_name)
        for warning in result.warnings:
            outcome.warnings.append(warning.message)
            await self._warn(warning)
        if isinstance(result, GroupingFailed):
            outcome.skipped = "grouping failed"
            # The warning is on the workload (once); the pod waits without a PodGroup,
            # so the scheduler never sees it: the pod itself says why, where its user
            # looks (kubectl describe pod).
            for warning in result.warnings:
                await self._warn(_pod_waits(pod, ns, uid, warning), POD_WAITS_REASON)
            return outcome
        if not isinstance(result, Grouped):
            outcome.skipped = "left alone"
            return outcome
        manifest = result.pod_group.to_manifest()
        if self._groups.get((ns, result.group_name)) is None and not await self._allowed(
            pod, ns, uid, manifest
        ):
            outcome.skipped = NOT_ALLOWED
            return outcome
        try:
            outcome.created, outcome.resized = await self._ensure_group(ns, manifest)
        except KubeError as exc:
            if _refused(exc):
                # A refusal (an admission webhook's, the schema's) is only in the
                # operator's log otherwise: the pod says why it waits, where its user
                # looks. Once per pod and message; the pod is still tried again.
                await self._warn(_group_refused(pod, ns, uid, manifest, exc), POD_WAITS_REASON)
            raise
        sub_group = result.sub_group
        labelled = (
            sub_group is None or (m.get("labels") or {}).get(keys.SUBGROUP_LABEL) == sub_group
        )
        if annotation != result.group_name or not labelled:
            patch: Json = {"annotations": {keys.POD_GROUP_ANNOTATION: result.group_name}}
            if sub_group is not None:
                # The pod's subgroup in its PodGroup, as KAI's pod-grouper labels it.
                patch["labels"] = {keys.SUBGROUP_LABEL: sub_group}
            await send(
                self.kube,
                "PATCH",
                path_of("", "v1", "pods", ns, str(m.get("name"))),
                {"metadata": patch},
                content_type=MERGE_PATCH,
            )
            outcome.annotated = True
        self._done.put(uid, ((ns, result.group_name), result.group_name))
        return outcome

    async def _allowed(self, pod: Mapping[str, Any], ns: str, uid: str, manifest: Json) -> bool:
        """Whether the PodGroup's queue takes its namespace and priority class (the
        webhook's rules, ``scheduler/tenancy``); if not, no PodGroup is made and the pod
        says why. Asked only before a group is made, so the Queues are read then only."""
        try:
            listing = await send(self.kube, "GET", path_of(keys.GROUP, keys.QUEUE_VERSION, QUEUES))
        except KubeError as exc:
            # The PodGroup webhook and the scheduler still hold a job its queue does not take.
            log.warning("pod-grouper: cannot list queues to check a PodGroup's queue: %s", exc)
            return True
        errors = access.podgroup_errors(manifest, access.queue_tree(listing.get("items") or []))
        if not errors:
            return True
        name, group = str(meta(pod).get("name")), manifest["metadata"]["name"]
        await self._warn(
            GrouperWarning(
                ObjectRef("v1", "Pod", name, ns, uid),
                f'metadata.annotations["{keys.POD_GROUP_ANNOTATION}"]',
                f"not set, so the pod is not scheduled: its PodGroup {ns}/{group} is not "
                f"made, as its queue does not allow it: {'; '.join(errors)}",
            ),
            POD_WAITS_REASON,
        )
        return False

    async def _ensure_group(self, namespace: str, manifest: Json) -> tuple[bool, bool]:
        """Make the group if it is missing; (created, resized). A group that exists
        with other gang fields (a workload that scaled: a Ray group's minReplicas, a
        LeaderReady LWS group once its leader is placed) has them rewritten."""
        name = str(manifest["metadata"]["name"])
        gang = _gang(manifest)
        known = self._groups.get((namespace, name))
        if known is not None:
            resized = known != gang and await self._resize(namespace, name, gang)
            return False, resized
        created, resized = True, False
        try:
            await send(
                self.kube,
                "POST",
                path_of(keys.GROUP, keys.PODGROUP_VERSION, PODGROUPS, namespace),
                manifest,
            )
            # The grouper's own line for the pod says "(created)": one INFO line per pod.
            log.debug("created PodGroup", extra={"podgroup": f"{namespace}/{name}"})
        except KubeError as exc:
            if exc.code != 409:
                raise
            # A 409 is not proof that the group exists (a Conflict rather than
            # AlreadyExists, or one deleted since): remember it only once it is read.
            stored = await send(
                self.kube,
                "GET",
                path_of(keys.GROUP, keys.PODGROUP_VERSION, PODGROUPS, namespace, name),
            )
            created = False
            # A group read without a spec says nothing of its gang: taken as it is.
            if stored.get("spec") is not None and _gang(stored) != gang:
                resized = await self._resize(namespace, name, gang)
        self._groups.put((namespace, name), gang)
        return created, resized

    async def _resize(self, namespace: str, name: str, gang: _Gang) -> bool:
        min_member, min_sub_group, sub_groups = gang
        # A merge patch: null drops the field the new gang does not use.
        patch = {"minMember": min_member, "minSubGroup": min_sub_group, "subGroups": sub_groups}
        await send(
            self.kube,
            "PATCH",
            path_of(keys.GROUP, keys.PODGROUP_VERSION, PODGROUPS, namespace, name),
            {"spec": patch},
            content_type=MERGE_PATCH,
        )
        log.info(
            "pod-grouper: PodGroup resized",
            extra={
                "podgroup": f"{namespace}/{name}",
                "min_member": min_member,
                "min_sub_group": min_sub_group,
                "subgroups": len(sub_groups or []),
            },
        )
        self._groups.put((namespace, name), gang)
        return True

    async def _cannot_read(
        self, what: Unreadable, pod: Mapping[str, Any], ns: str, uid: str
    ) -> None:
        """Once per kind for the pod-grouper's life: a log line and a Warning Event on
        the first pod met, saying which right (or CRD) is missing and what is done."""
        key = (what.api_version, what.kind)
        if key in self._unreadable_told:
            return
        self._unreadable_told.add(key)
        group = what.api_version.rpartition("/")[0] or "core"
        if what.why == FORBIDDEN:
            cause = (
                f"the pod-grouper may not read them (grant get on {what.kind} of API group "
                f'"{group}", e.g. the chart\'s podgrouper.extraOwnerGroups)'
            )
        else:
            cause = (
                f"the API server does not serve {what.api_version} {what.kind} (CRD not installed?)"
            )
        message = (
            f"{what.kind} objects cannot be read: {cause}; pods owned through one are grouped "
            f"by their nearest readable owner, or alone (said once per kind; first seen on "
            f"this pod)"
        )
        log.warning(
            "pod-grouper: not grouped",
            extra={"pod": f"{ns}/{meta(pod).get('name')}", "reason": message},
        )
        name = str(meta(pod).get("name"))
        await self._warn(
            GrouperWarning(
                ObjectRef("v1", "Pod", name, ns, uid), "metadata.ownerReferences", message
            ),
            OWNER_UNREADABLE_REASON,
        )

    async def _warn(self, warning: GrouperWarning, reason: str = GrouperWarning.REASON) -> None:
        # Once per object and message: a Job with a bad annotation and 100 pods gets one.
        key = (warning.involved.uid or warning.involved.ref, warning.message)
        if self._warned.get(key):
            return
        self._warned.put(key, True)
        await apost_event(
            self.kube,
            warning_ref(warning),
            GrouperWarning.EVENT_TYPE,
            reason,
            warning.message,
            COMPONENT,
        )
