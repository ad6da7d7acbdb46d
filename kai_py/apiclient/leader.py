"""Leader election on a ``coordination.k8s.io/v1`` Lease, as client-go does it.

One replica holds the Lease and renews it every ``retry_period``; the others
watch it. A holder whose renewals stop (killed, partitioned) is replaced once
the Lease has not changed for ``lease_duration`` by the observer's own clock
(no trust in the holder's clock). A leader that could not renew for
``renew_deadline`` stops leading at once (it may no longer be the only one);
it competes again like any other replica. Every write names the
``resourceVersion`` it read, so two replicas never both win one Lease.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from kai_py.apiclient.kube import Kube, KubeError, path_of

log = logging.getLogger(__name__)
Json = dict[str, Any]

DEFAULT_LEASE_NAME: Final = "kai-py-operator"
DEFAULT_LEASE_NAMESPACE: Final = "kai-scheduler"


def micro_time(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def default_identity() -> str:
    return f"{socket.gethostname()}_{os.getpid()}_{uuid.uuid4().hex[:8]}"


@dataclass(slots=True)
class ElectionConfig:
    name: str = DEFAULT_LEASE_NAME
    namespace: str = DEFAULT_LEASE_NAMESPACE
    identity: str = field(default_factory=default_identity)
    lease_duration: float = 8.0
    renew_deadline: float = 6.0
    retry_period: float = 1.0


class Leadership:
    """Whether this process leads, and a way to wait for it. Without election: always."""

    def __init__(self, elected: bool = False) -> None:
        self.elected = elected
        self.is_leader = not elected
        #: Bumped each time leadership is taken: work of an earlier term is stale.
        self.term = 0 if elected else 1
        # Set (and replaced) at every change; asyncio.Event binds to no loop until awaited.
        self._changed = asyncio.Event()
        self._listeners: list[Callable[[bool], None]] = []

    def _event(self) -> asyncio.Event:
        return self._changed

    def on_change(self, listener: Callable[[bool], None]) -> None:
        self._listeners.append(listener)

    def set(self, leading: bool) -> None:
        if leading == self.is_leader:
            return
        self.is_leader = leading
        if leading:
            self.term += 1
        event, self._changed = self._changed, asyncio.Event()
        event.set()
        for listener in self._listeners:
            try:
                listener(leading)
            except Exception:
                log.exception("leadership listener failed")

    async def wait_leading(self) -> int:
        """Until this process leads; returns the term."""
        while not self.is_leader:
            await self._event().wait()
        return self.term

    async def wait_change(self) -> None:
        await self._event().wait()


class LeaderElector:
    def __init__(
        self,
        kube: Kube,
        config: ElectionConfig,
        leadership: Leadership,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.kube = kube
        self.config = config
        self.leadership = leadership
        self._clock = clock
        self._wall = wall
        self._observed: tuple[Any, ...] | None = None  # (holder, renewTime, resourceVersion)
        self._observed_at = 0.0
        self._renewed_at: float | None = None

    @property
    def path(self) -> str:
        c = self.config
        return path_of("coordination.k8s.io", "v1", "leases", c.namespace, c.name)

    def _spec(self, previous: Json | None) -> Json:
        now = micro_time(self._wall())
        prev = previous or {}
        transitions = int(prev.get("leaseTransitions") or 0)
        same = prev.get("holderIdentity") == self.config.identity
        return {
            "holderIdentity": self.config.identity,
            "leaseDurationSeconds": max(1, round(self.config.lease_duration)),
            "acquireTime": prev.get("acquireTime") if same else now,
            "renewTime": now,
            "leaseTransitions": transitions
            if same or not prev.get("holderIdentity")
            else transitions + 1,
        }

    def try_once(self) -> bool:
        """One round: acquire or renew; True when this process holds the Lease now."""
        c = self.config
        try:
            lease = self.kube.get(self.path)
        except KubeError as exc:
            if exc.code != 404:
                raise
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": c.name, "namespace": c.namespace},
                "spec": self._spec(None),
            }
            leases = path_of("coordination.k8s.io", "v1", "leases", c.namespace)
            try:
                try:
                    self.kube.create(leases, body)
                except KubeError as missing:
                    # The namespace is made only when it is missing: in a pod it is the
                    # pod's own, so the Lease needs no right to create namespaces.
                    if missing.code != 404:
                        raise
                    self._ensure_namespace()
                    self.kube.create(leases, body)
            except KubeError as exc2:
                if exc2.code == 409:
                    return False
                raise
            return True
        spec = lease.get("spec") or {}
        m = lease.get("metadata") or {}
        holder = spec.get("holderIdentity")
        seen = (holder, spec.get("renewTime"), m.get("resourceVersion"))
        if seen != self._observed:
            self._observed, self._observed_at = seen, self._clock()
        duration = float(spec.get("leaseDurationSeconds") or c.lease_duration)
        expired = self._clock() - self._observed_at >= duration
        if holder and holder != c.identity and not expired:
            return False
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {**m, "name": c.name, "namespace": c.namespace},
            "spec": {**spec, **self._spec(spec)},
        }
        try:
            self.kube.request("PUT", self.path, body)
        except KubeError as exc:
            if exc.code == 409:  # someone else wrote it first
                return False
            raise
        return True

    def release(self) -> None:
        """Give the Lease up (on a clean stop), so another replica takes over at once."""
        try:
            lease = self.kube.get(self.path)
            spec = lease.get("spec") or {}
            if spec.get("holderIdentity") != self.config.identity:
                return
            lease["spec"] = {**spec, "holderIdentity": None, "leaseDurationSeconds": 1}
            self.kube.request("PUT", self.path, lease)
        except KubeError as exc:
            log.info("could not release the lease: %s", exc)

    def _ensure_namespace(self) -> None:
        try:
            self.kube.create(
                path_of("", "v1", "namespaces"),
                {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {"name": self.config.namespace},
                },
            )
        except KubeError as exc:
            if exc.code != 409:
                raise

    async def run(self) -> None:
        """Forever: keep or seek the Lease and tell ``leadership`` what is true."""
        c = self.config
        while True:
            try:
                held = await asyncio.to_thread(self.try_once)
            except KubeError as exc:
                log.debug("leader election: %s", exc)
                held = False
            now = self._clock()
            if held:
                self._renewed_at = now
                if not self.leadership.is_leader:
                    log.info("leading (lease %s/%s as %s)", c.namespace, c.name, c.identity)
                self.leadership.set(True)
            elif self.leadership.is_leader and (
                self._renewed_at is None or now - self._renewed_at >= c.renew_deadline
            ):
                log.warning("lost the lease %s/%s: no longer leading", c.namespace, c.name)
                self.leadership.set(False)
            await asyncio.sleep(c.retry_period)
