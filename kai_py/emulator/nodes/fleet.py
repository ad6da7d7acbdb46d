"""All simulated nodes of a cluster: Node objects, kubelets, heartbeats.

One pod informer and one work queue serve every kubelet: a real cluster has
one watch per kubelet, but thousands of in-process watches would only cost
memory. Each pod key goes to the kubelet of its node (or of the node that
last ran it, so a deleted pod's cards are freed).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from functools import partial

from kai_py.api import keys
from kai_py.emulator.clientgo.client import (
    LEASES,
    NODES,
    PODS,
    ClusterClient,
    Json,
    obj_key,
    with_retries,
)
from kai_py.emulator.clientgo.runtime import Informer, WorkQueue
from kai_py.emulator.cluster_spec import ClusterSpec, node_conditions, node_ip, node_manifest
from kai_py.emulator.nodes.devices import DevicePlugin
from kai_py.emulator.nodes.kubelet import Kubelet
from kai_py.emulator.storage.errors import ApiError
from kai_py.emulator.timesource import Clock, rfc3339

log = logging.getLogger(__name__)

UNREACHABLE = "node.kubernetes.io/unreachable"
# The kubelet's defaults: renew the node Lease every 10 s, valid for 40 s.
LEASE_RENEW_SECONDS = 10.0
LEASE_DURATION_SECONDS = 40


def _micro_time(seconds: float) -> str:
    """metav1.MicroTime, what Lease.spec.renewTime holds."""
    whole = rfc3339(seconds)[:-1]
    return f"{whole}.{int((seconds % 1) * 1_000_000):06d}Z"


class NodeFleet:
    """Registers the nodes of ``spec`` and runs their kubelets until cancelled."""

    def __init__(
        self,
        client: ClusterClient,
        spec: ClusterSpec,
        clock: Clock,
        *,
        events: bool = True,
        heartbeat: bool = True,
        down: set[str] | None = None,
    ) -> None:
        self.client = client
        self.spec = spec
        self.clock = clock
        self.heartbeat = heartbeat
        self.pods = Informer(client, PODS)
        self.nodes = Informer(client, NODES)
        self.queue = WorkQueue(self._reconcile, name="kubelet")
        self.kubelets: dict[str, Kubelet] = {}
        self._ran_on: dict[str, str] = {}  # pod key -> node whose kubelet knows it
        self.ready = asyncio.Event()
        # Nodes whose kubelet is "unreachable"; shared with the owner, so it
        # outlives a restart of the fleet.
        self.down: set[str] = down if down is not None else set()
        for index, (name, group) in enumerate(spec.node_groups().items()):
            self.kubelets[name] = Kubelet(
                name,
                group,
                index,
                client,
                clock,
                get_pod=self.pods.get,
                wake=self.queue.add,
                remember=self.pods.remember,
                host_ip=node_ip(index),
                events=events,
            )
        self.pods.add_handler(self._on_pod)
        self.nodes.add_handler(self._on_node)

    def kubelet_of(self, node: str) -> Kubelet | None:
        return self.kubelets.get(node)

    def _on_pod(self, _type: str, obj: Json, old: Json | None) -> None:
        key = obj_key(obj)
        node = (obj.get("spec") or {}).get("nodeName")
        if node in self.kubelets or key in self._ran_on:
            self.queue.add(key)

    def _on_node(self, _type: str, obj: Json, _old: Json | None) -> None:
        kubelet = self.kubelets.get(str((obj.get("metadata") or {}).get("name")))
        if kubelet is not None:
            kubelet.labels = dict((obj.get("metadata") or {}).get("labels") or {})

    async def _reconcile(self, key: str) -> None:
        pod = self.pods.get(key)
        node = (pod.get("spec") or {}).get("nodeName") if pod else None
        previous = self._ran_on.get(key)
        if previous is not None and previous != node:
            self.kubelets[previous].drop(key)
            del self._ran_on[key]
        kubelet = self.kubelets.get(str(node)) if node else None
        if kubelet is None or kubelet.name in self.down:
            return
        await kubelet.reconcile(key)
        if key in kubelet.records:
            self._ran_on[key] = kubelet.name
        else:
            self._ran_on.pop(key, None)

    async def register(self) -> None:
        """Create the Node objects; on a restart, keep what is there and refresh status."""
        now = rfc3339(self.clock.time())
        attach = getattr(self.client, "attach_kubelet", None)
        for index, (name, group) in enumerate(self.spec.node_groups().items()):
            manifest = node_manifest(name, group, index, now)
            try:
                stored = await with_retries(partial(self.client.create, NODES, manifest))
            except ApiError as exc:
                if exc.code != 409:
                    raise
                stored = await with_retries(partial(self.client.get, NODES, name))
            self.kubelets[name].labels = dict(stored["metadata"].get("labels") or {})
            if name in self.down:
                continue  # an unreachable kubelet does not post status
            # Create may drop status (it does for some types); write it as the kubelet does.
            status = dict(manifest["status"])
            status["conditions"] = node_conditions(now)
            await with_retries(
                partial(self.client.patch, NODES, name, {"status": status}, subresource="status")
            )
            if attach is not None:
                attach(name)

    async def run(self) -> None:
        await self.register()
        tasks: list[asyncio.Task[None]] = []
        try:
            async with asyncio.TaskGroup() as group:
                tasks.append(group.create_task(self.nodes.run()))
                tasks.append(group.create_task(self.pods.run()))
                await self.pods.synced.wait()
                self._restore()
                tasks.append(group.create_task(self.queue.run()))
                if self.heartbeat:
                    tasks.append(group.create_task(self._heartbeat()))
                self.ready.set()
        finally:
            # The nodes stay attached: a stop is usually a restart, and the next
            # kubelets finish what these began. Call detach() for nodes that go away.
            for kubelet in self.kubelets.values():
                kubelet.close()

    def detach(self) -> None:
        """The nodes are gone for good: the API server finishes pod deletions itself."""
        detach = getattr(self.client, "detach_kubelet", None)
        if detach is not None:
            for name in self.kubelets:
                detach(name)

    async def fail_node(self, name: str) -> None:
        """The node's kubelet stops answering, as when a machine dies.

        Its pods are left as they are (they keep their cards and room), the
        Lease is no longer renewed, and the node shows what the node lifecycle
        controller writes: Ready=Unknown and the ``unreachable`` taints.
        """
        kubelet = self.kubelets[name]
        self.down.add(name)
        kubelet.close()
        now = rfc3339(self.clock.time())
        conditions = [
            {
                **c,
                "status": "Unknown",
                "reason": "NodeStatusUnknown",
                "message": "Kubelet stopped posting node status.",
                "lastTransitionTime": now,
            }
            for c in node_conditions(now)
        ]
        await with_retries(
            partial(
                self.client.patch,
                NODES,
                name,
                {"status": {"conditions": conditions}},
                subresource="status",
            )
        )
        node = await with_retries(partial(self.client.get, NODES, name))
        taints = [
            t for t in (node.get("spec") or {}).get("taints") or [] if t.get("key") != UNREACHABLE
        ]
        taints += [
            {"key": UNREACHABLE, "effect": "NoSchedule", "timeAdded": now},
            {"key": UNREACHABLE, "effect": "NoExecute", "timeAdded": now},
        ]
        await with_retries(partial(self.client.patch, NODES, name, {"spec": {"taints": taints}}))

    def wedge_node(self, name: str, wedged: bool = True) -> None:
        """The node stays Ready (its Lease and status are kept up) but its kubelet
        starts no new pod, until ``wedged`` is False again."""
        kubelet = self.kubelets[name]
        kubelet.starts_nothing = wedged
        if not wedged:
            for pod in self.pods.values():
                if (pod.get("spec") or {}).get("nodeName") == name:
                    self.queue.add(obj_key(pod))

    async def recover_node(self, name: str) -> None:
        """The kubelet is back: it takes up its pods from their recorded state."""
        kubelet = self.kubelets[name]
        now = rfc3339(self.clock.time())
        node = await with_retries(partial(self.client.get, NODES, name))
        taints = [
            t for t in (node.get("spec") or {}).get("taints") or [] if t.get("key") != UNREACHABLE
        ]
        await with_retries(
            partial(self.client.patch, NODES, name, {"spec": {"taints": taints or None}})
        )
        await with_retries(
            partial(
                self.client.patch,
                NODES,
                name,
                {"status": {"conditions": node_conditions(now)}},
                subresource="status",
            )
        )
        for key in list(kubelet.records):
            kubelet.records.pop(key)
        kubelet.plugin = DevicePlugin(name, kubelet.group.gpus, keys.GPU_RESOURCE)
        mine = [p for p in self.pods.values() if (p.get("spec") or {}).get("nodeName") == name]
        kubelet.restore(mine)
        self.down.discard(name)
        for pod in mine:
            self.queue.add(obj_key(pod))

    def _restore(self) -> None:
        by_node: dict[str, list[Json]] = {}
        for pod in self.pods.values():
            node = (pod.get("spec") or {}).get("nodeName")
            if node in self.kubelets:
                by_node.setdefault(str(node), []).append(pod)
        for name, pods in by_node.items():
            kubelet = self.kubelets[name]
            kubelet.restore(pods)
            for key in kubelet.records:
                self._ran_on[key] = name
            for pod in pods:
                self.queue.add(obj_key(pod))

    async def _heartbeat(self) -> None:
        """Renew each node's Lease in kube-node-lease, as kubelets do every 10 s."""
        while True:
            for name in self.kubelets:
                if name in self.down:
                    continue
                with contextlib.suppress(Exception):
                    await self._renew_lease(name)
            await self.clock.sleep(LEASE_RENEW_SECONDS)

    async def _renew_lease(self, name: str) -> None:
        now = _micro_time(self.clock.time())
        spec = {
            "holderIdentity": name,
            "leaseDurationSeconds": LEASE_DURATION_SECONDS,
            "renewTime": now,
        }
        try:
            await self.client.patch(LEASES, name, {"spec": spec}, namespace="kube-node-lease")
        except ApiError as exc:
            if exc.code != 404:
                raise
            node = self.nodes.get(name) or {}
            lease: Json = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": name, "namespace": "kube-node-lease"},
                "spec": spec,
            }
            uid = (node.get("metadata") or {}).get("uid")
            if uid:
                lease["metadata"]["ownerReferences"] = [
                    {"apiVersion": "v1", "kind": "Node", "name": name, "uid": uid}
                ]
            await self.client.create(LEASES, lease, namespace="kube-node-lease")
