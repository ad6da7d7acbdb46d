"""Leader election on a ``coordination.k8s.io/v1`` Lease, as client-go does it.

One replica holds the Lease and renews it every ``retry_period``; the others
watch it. A holder whose renewals stop (killed, partitioned, paused) is replaced
once the Lease has not changed for ``lease_duration`` by the observer's own clock
(no trust in the holder's clock). Every write names the ``resourceVersion`` it
read, so two replicas never both win one Lease.

Fencing: a leader is deposed ``renew_deadline`` after the START of its last
successful renewal, by its own monotonic clock, whether or not its elector got
to run (``Leadership.is_leader`` reads the clock). The renewal reached the API
server after it started and others measure ``lease_duration`` from when they saw
it change, so this is at least ``lease_duration - renew_deadline`` before another
replica can take the Lease. Each renewal request has a timeout of a third of
``renew_deadline`` and no client retries (a renewal stuck in retries kept a
cut-off leader leading for 10 s), and a round is abandoned at the deadline.
``Leadership.fence``, set on the roles' API clients (``Kube(fence=...)``),
refuses every write at the moment it would be sent once this process does not
lead; at the loss the roles reset their writes still in flight
(``HttpPool.abort_writes``), so the kernel does not send them on. What it cannot
stop: a write whose bytes the network itself delays for longer than
``lease_duration - renew_deadline``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from kai_py.apiclient.kube import Kube, KubeError, NotLeader, path_of

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
    retry_period: float = 0.5

    @property
    def request_timeout(self) -> float:
        """Each election request's timeout: two (a GET and a PUT) fit in a deadline."""
        return self.renew_deadline / 3


class Leadership:
    """Whether this process leads, and a way to wait for it. Without election: always.

    An elected leader leads until ``renewed``'s deadline by ``clock`` (monotonic),
    even when nobody calls ``set(False)`` in time (the event loop busy, the process
    paused): ``is_leader`` and ``fence`` read the clock each time.
    """

    def __init__(self, elected: bool = False, clock: Callable[[], float] = time.monotonic) -> None:
        self.elected = elected
        self._leading = not elected
        self._clock = clock
        #: Until when (by ``clock``) the leadership holds; None: no deadline.
        self.deadline: float | None = None
        #: Bumped each time leadership is taken: work of an earlier term is stale.
        self.term = 0 if elected else 1
        # Set (and replaced) at every change; asyncio.Event binds to no loop until awaited.
        self._changed = asyncio.Event()
        self._listeners: list[Callable[[bool], None]] = []

    @property
    def is_leader(self) -> bool:
        return self._leading and (self.deadline is None or self._clock() < self.deadline)

    @property
    def lapsed(self) -> bool:
        """Led until a deadline that passed, and not yet told (``set(False)``)."""
        return self._leading and not self.is_leader

    def fence(self, method: str, path: str) -> None:
        """Refuse (``NotLeader``) a write about to be sent while this process does not lead."""
        if not self.is_leader:
            raise NotLeader(method, path)

    def renewed(self, deadline: float) -> None:
        """The Lease was renewed: lead until ``deadline`` (a lapsed leadership renewed
        late starts a new term: work of the lapsed one was cancelled)."""
        if self.lapsed:
            self.set(False)
        self.deadline = deadline
        self.set(True)

    def _event(self) -> asyncio.Event:
        return self._changed

    def on_change(self, listener: Callable[[bool], None]) -> None:
        self._listeners.append(listener)

    def set(self, leading: bool) -> None:
        if leading == self._leading:
            return
        self._leading = leading
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

    async def while_leading(self, work: Awaitable[None], term: int) -> None:
        """Run ``work`` until it ends or term ``term`` does (the process stops leading,
        or leads again in a new term); then it is cancelled, so no work of a lapsed
        term goes on (its writes would be refused by the fence anyway)."""
        task = asyncio.ensure_future(work)
        try:
            while not task.done():
                if not self.is_leader or self.term != term:
                    return
                changed = asyncio.ensure_future(self._event().wait())
                # Also at the deadline: the elector marks the loss then, but may be late.
                left = None if self.deadline is None else max(0.0, self.deadline - self._clock())
                await asyncio.wait(
                    {task, changed}, timeout=left, return_when=asyncio.FIRST_COMPLETED
                )
                changed.cancel()
        finally:
            if not task.done():
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


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
        self._observed_duration = config.lease_duration
        # Threads of its own: the loop's default pool may be busy with others' work
        # (a renewal waiting there for a free thread would let the leadership lapse).
        # Two: a round abandoned at the deadline may still hold one until it times out.
        self._threads = ThreadPoolExecutor(2, thread_name_prefix="kai-py-leader-election")

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
        self._observed_duration = duration
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
            log.info("could not release the lease", extra={"error": str(exc)})

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
        lead = self.leadership
        while True:
            started = self._clock()
            # A round may take until the deadline while leading (then the leadership
            # lapses); its requests time out sooner (the elector's Kube).
            limit = 2 * c.renew_deadline
            if lead.is_leader and lead.deadline is not None:
                limit = max(0.0, lead.deadline - started)
            try:
                round_ = asyncio.get_running_loop().run_in_executor(self._threads, self.try_once)
                held = await asyncio.wait_for(round_, limit)
            except (KubeError, TimeoutError) as exc:
                log.debug(
                    "leader election: not renewed",
                    extra={"error": str(exc) or "no answer before the deadline"},
                )
                held = False
            if held:
                if not lead.is_leader:
                    log.info(
                        "leading",
                        extra={"lease": f"{c.namespace}/{c.name}", "identity": c.identity},
                    )
                # From the round's start: the renewal reached the API server after it.
                lead.renewed(started + c.renew_deadline)
                self._renewed_at = started
            elif lead.lapsed:
                log.warning(
                    "lost the lease: no longer leading",
                    extra={
                        "lease": f"{c.namespace}/{c.name}",
                        "unrenewed_s": round(self._clock() - (self._renewed_at or started), 3),
                    },
                )
                lead.set(False)
            pause = c.retry_period - (self._clock() - started)
            if lead.is_leader and lead.deadline is not None:
                # Wake at the deadline at the latest, to mark the loss on time.
                pause = min(pause, lead.deadline - self._clock())
            elif self._observed is not None and self._observed[0] not in (None, c.identity):
                # A standby tries again the moment another's Lease expires, not up to
                # a retry_period later.
                left = self._observed_at + self._observed_duration - self._clock()
                if left > 0:
                    pause = min(pause, left + 0.01)
            await asyncio.sleep(max(0.0, pause))
