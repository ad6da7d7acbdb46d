"""The narrow API the simulated nodes and controllers talk to the cluster through.

Kubelets and controllers only need a handful of verbs. Writing them against
this protocol, rather than against the store directly, keeps them honest:
they see the same failures a real kubelet sees (errors, conflicts, dropped
watches), and they could be pointed at a real API server over HTTP.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from kai_py.emulator.storage.errors import ApiError

Json = dict[str, Any]
T = TypeVar("T")


@dataclass(frozen=True)
class Kind:
    """One resource type, as the controllers address it."""

    group: str
    version: str
    plural: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


PODS = Kind("", "v1", "pods")
NODES = Kind("", "v1", "nodes", namespaced=False)
NAMESPACES = Kind("", "v1", "namespaces", namespaced=False)
EVENTS = Kind("", "v1", "events")
LEASES = Kind("coordination.k8s.io", "v1", "leases")
JOBS = Kind("batch", "v1", "jobs")
CRONJOBS = Kind("batch", "v1", "cronjobs")
DEPLOYMENTS = Kind("apps", "v1", "deployments")
REPLICASETS = Kind("apps", "v1", "replicasets")
STATEFULSETS = Kind("apps", "v1", "statefulsets")
PVCS = Kind("", "v1", "persistentvolumeclaims")
PVS = Kind("", "v1", "persistentvolumes", namespaced=False)
STORAGECLASSES = Kind("storage.k8s.io", "v1", "storageclasses", namespaced=False)
CRDS = Kind("apiextensions.k8s.io", "v1", "customresourcedefinitions", namespaced=False)


@dataclass(frozen=True)
class WatchEvent:
    type: str  # ADDED, MODIFIED, DELETED, BOOKMARK
    object: Json


class ClusterClient(Protocol):
    """What a kubelet or controller may ask of the API server."""

    async def create(self, kind: Kind, body: Json, namespace: str | None = None) -> Json: ...

    async def get(self, kind: Kind, name: str, namespace: str | None = None) -> Json: ...

    async def list(
        self,
        kind: Kind,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> tuple[list[Json], str]:
        """The objects and the list's resourceVersion (to watch from)."""

    async def patch(
        self,
        kind: Kind,
        name: str,
        patch: Json,
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> Json:
        """A JSON merge patch (RFC 7386); ``subresource="status"`` for status."""

    async def delete(
        self,
        kind: Kind,
        name: str,
        namespace: str | None = None,
        grace_period_seconds: int | None = None,
        uid: str | None = None,
        propagation_policy: str | None = None,
    ) -> Json | None:
        """Delete, with an optional uid precondition (a recreated object is left alone)."""

    async def bind(self, namespace: str, name: str, node: str, uid: str | None = None) -> None:
        """POST pods/binding, as a scheduler does."""

    def watch(
        self,
        kind: Kind,
        resource_version: str,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> AsyncIterator[WatchEvent]:
        """Changes after ``resource_version``; ends (or raises) when the connection drops."""


# Codes worth trying again: the server had a bad moment, or told us to slow down.
RETRYABLE_CODES = frozenset({429, 500, 502, 503, 504})


def is_retryable(exc: BaseException) -> bool:
    if isinstance(exc, ApiError):
        return exc.code in RETRYABLE_CODES
    return isinstance(exc, ConnectionError | TimeoutError | OSError)


async def with_retries(
    call: Callable[[], Awaitable[T]],
    *,
    attempts: int = 8,
    base_delay: float = 0.01,
    max_delay: float = 0.5,
) -> T:
    """Retry transient failures with jittered exponential backoff, like client-go's."""
    for attempt in range(attempts):
        try:
            return await call()
        except Exception as exc:
            if attempt == attempts - 1 or not is_retryable(exc):
                raise
            delay = min(max_delay, base_delay * 2**attempt)
            await asyncio.sleep(delay * (0.5 + random.random()))
    raise AssertionError("unreachable")


def obj_key(obj: Json) -> str:
    """namespace/name, or name for cluster-scoped objects."""
    m = obj.get("metadata") or {}
    ns = m.get("namespace")
    return f"{ns}/{m.get('name')}" if ns else str(m.get("name"))


def controller_ref(owner: Json, kind: str, api_version: str) -> Json:
    m = owner.get("metadata") or {}
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": m.get("name"),
        "uid": m.get("uid"),
        "controller": True,
        "blockOwnerDeletion": True,
    }
