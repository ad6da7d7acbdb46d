"""The apps/v1 ReplicaSet controller: keep ``replicas`` active pods.

Surplus pods are deleted in upstream's order (unassigned, then pending, then
not ready, newest first), so scaling down a Deployment removes the pods a
user expects. Failed pods are not active: they are replaced (and left for
the user to read, as upstream leaves them to the pod garbage collector).
"""

from __future__ import annotations

from kai_py.emulator.clientgo.client import (
    PODS,
    REPLICASETS,
    ClusterClient,
    Json,
    controller_ref,
)
from kai_py.emulator.clientgo.events import EventRecorder
from kai_py.emulator.clientgo.runtime import Informer, WorkQueue, enqueue_owner, enqueue_self
from kai_py.emulator.controllers.pods import deletion_rank, is_active, is_ready, pod_from_template
from kai_py.emulator.storage.errors import ApiError
from kai_py.emulator.timesource import Clock

# Upstream creates at most this many pods per sync (slow start batches).
BURST = 500


def owned(pods: Informer, owner: Json) -> list[Json]:
    m = owner.get("metadata") or {}
    uid, ns = m.get("uid"), m.get("namespace")
    out = []
    for pod in pods.values():
        pm = pod.get("metadata") or {}
        if pm.get("namespace") != ns:
            continue
        if any(
            r.get("controller") and r.get("uid") == uid for r in pm.get("ownerReferences") or []
        ):
            out.append(pod)
    return out


class ReplicaSetController:
    def __init__(
        self,
        client: ClusterClient,
        replicasets: Informer,
        pods: Informer,
        clock: Clock,
        *,
        events: bool = True,
    ) -> None:
        self.client = client
        self.replicasets = replicasets
        self.pods = pods
        self.queue = WorkQueue(self.reconcile, name="replicaset-controller")
        self.recorder = EventRecorder(client, clock, "replicaset-controller", enabled=events)
        replicasets.add_handler(enqueue_self(self.queue))
        pods.add_handler(enqueue_owner(self.queue, "ReplicaSet"))

    async def reconcile(self, key: str) -> None:
        rs = self.replicasets.get(key)
        if rs is None or (rs.get("metadata") or {}).get("deletionTimestamp"):
            return
        m = rs.get("metadata") or {}
        spec = rs.get("spec") or {}
        wanted = int(spec.get("replicas", 1))
        pods = owned(self.pods, rs)
        active = [p for p in pods if is_active(p)]
        if len(active) < wanted:
            for _ in range(min(BURST, wanted - len(active))):
                pod = pod_from_template(
                    spec.get("template") or {},
                    generate_name=f"{m.get('name')}-",
                    namespace=str(m.get("namespace")),
                    owner_ref=controller_ref(rs, "ReplicaSet", "apps/v1"),
                )
                created = await self.client.create(PODS, pod, namespace=m.get("namespace"))
                self.pods.remember(created)
                active.append(created)
                await self.recorder.record(
                    rs, "SuccessfulCreate", f"Created pod: {created['metadata']['name']}"
                )
        elif len(active) > wanted:
            surplus = sorted(active, key=deletion_rank)[: len(active) - wanted]
            for pod in surplus:
                pm = pod.get("metadata") or {}
                try:
                    await self.client.delete(
                        PODS,
                        str(pm.get("name")),
                        namespace=pm.get("namespace"),
                        uid=str(pm.get("uid")),
                    )
                except ApiError as exc:
                    if exc.code != 404:
                        raise
                await self.recorder.record(rs, "SuccessfulDelete", f"Deleted pod: {pm.get('name')}")
            active = [p for p in active if p not in surplus]
        ready = sum(1 for p in active if is_ready(p))
        status: Json = {
            "replicas": len(active),
            "fullyLabeledReplicas": len(active),
            "readyReplicas": ready,
            "availableReplicas": ready,
            "observedGeneration": m.get("generation", 1),
        }
        current = rs.get("status") or {}
        if any(current.get(k, 0) != v for k, v in status.items()):
            updated = await self.client.patch(
                REPLICASETS,
                str(m.get("name")),
                {"status": status},
                namespace=m.get("namespace"),
                subresource="status",
            )
            self.replicasets.remember(updated)
