"""The apps/v1 Deployment controller: Deployment -> ReplicaSet -> Pods.

Each pod template gets one ReplicaSet named ``<deployment>-<pod-template-hash>``
(the hash labels its pods too, as upstream). Scaling changes the current
ReplicaSet's replicas; a template change rolls out by the strategy:
``RollingUpdate`` respects maxSurge / maxUnavailable against *ready* pods,
so a rollout waits for the scheduler and the kubelets like a real one;
``Recreate`` scales the old ReplicaSets to zero first.
"""

from __future__ import annotations

import copy
import json
import math

from kai_py.emulator.clientgo.client import (
    DEPLOYMENTS,
    REPLICASETS,
    ClusterClient,
    Json,
    controller_ref,
)
from kai_py.emulator.clientgo.events import EventRecorder
from kai_py.emulator.clientgo.runtime import Informer, WorkQueue, enqueue_owner, enqueue_self
from kai_py.emulator.controllers.replicaset import owned
from kai_py.emulator.storage.errors import ApiError
from kai_py.emulator.timesource import Clock, rfc3339

HASH_LABEL = "pod-template-hash"
REVISION = "deployment.kubernetes.io/revision"
DESIRED = "deployment.kubernetes.io/desired-replicas"
MAX_REPLICAS = "deployment.kubernetes.io/max-replicas"
_SAFE = "bcdfghjklmnpqrstvwxz2456789"


def template_hash(template: Json, collisions: int = 0) -> str:
    """FNV-1a of the template, spelled with upstream's 'safe' alphabet (no vowels)."""
    data = json.dumps(template, sort_keys=True, separators=(",", ":")).encode()
    if collisions:
        data += str(collisions).encode()
    value = 0x811C9DC5
    for byte in data:
        value ^= byte
        value = (value * 0x01000193) & 0xFFFFFFFF
    return "".join(_SAFE[ord(ch) % len(_SAFE)] for ch in str(value))


def _resolve(value: object, total: int, round_up: bool) -> int:
    if isinstance(value, str) and value.endswith("%"):
        exact = total * int(value[:-1]) / 100
        return math.ceil(exact) if round_up else math.floor(exact)
    return int(value) if isinstance(value, int | str) else 0


class DeploymentController:
    def __init__(
        self,
        client: ClusterClient,
        deployments: Informer,
        replicasets: Informer,
        clock: Clock,
        *,
        events: bool = True,
    ) -> None:
        self.client = client
        self.deployments = deployments
        self.replicasets = replicasets
        self.clock = clock
        self.queue = WorkQueue(self.reconcile, name="deployment-controller")
        self.recorder = EventRecorder(client, clock, "deployment-controller", enabled=events)
        deployments.add_handler(enqueue_self(self.queue))
        replicasets.add_handler(enqueue_owner(self.queue, "Deployment"))

    async def reconcile(self, key: str) -> None:
        deploy = self.deployments.get(key)
        if deploy is None or (deploy.get("metadata") or {}).get("deletionTimestamp"):
            return
        spec = deploy.get("spec") or {}
        desired = int(spec.get("replicas", 1))
        template: Json = spec.get("template") or {}
        pod_hash = template_hash(template)
        sets = owned(self.replicasets, deploy)
        new = next(
            (
                rs
                for rs in sets
                if ((rs["metadata"].get("labels") or {}).get(HASH_LABEL)) == pod_hash
            ),
            None,
        )
        olds = [rs for rs in sets if rs is not new]
        revision = 1 + max(
            (int((rs["metadata"].get("annotations") or {}).get(REVISION, "0")) for rs in sets),
            default=0,
        )
        if new is None:
            new = await self._create_rs(deploy, template, pod_hash, revision, olds, desired)
        if not spec.get("paused"):
            await self._roll(deploy, new, olds, desired)
        await self._cleanup(deploy, olds)
        await self._write_status(deploy, new, [*olds, new], desired)

    async def _create_rs(
        self,
        deploy: Json,
        template: Json,
        pod_hash: str,
        revision: int,
        olds: list[Json],
        desired: int,
    ) -> Json:
        m = deploy.get("metadata") or {}
        spec = deploy.get("spec") or {}
        rs_template = copy.deepcopy(template)
        labels = rs_template.setdefault("metadata", {}).setdefault("labels", {})
        labels[HASH_LABEL] = pod_hash
        selector = copy.deepcopy(spec.get("selector") or {})
        selector.setdefault("matchLabels", {})[HASH_LABEL] = pod_hash
        strategy = (spec.get("strategy") or {}).get("type", "RollingUpdate")
        surge = _resolve(
            ((spec.get("strategy") or {}).get("rollingUpdate") or {}).get("maxSurge", "25%"),
            desired,
            True,
        )
        # Nothing old to replace (or Recreate): start at full size; else grow by the rollout.
        initial = desired if not olds or strategy != "RollingUpdate" else 0
        if strategy == "Recreate" and any(
            int((o.get("spec") or {}).get("replicas", 0)) for o in olds
        ):
            initial = 0
        rs: Json = {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {
                "name": f"{m.get('name')}-{pod_hash}",
                "namespace": m.get("namespace"),
                "labels": dict(labels),
                "annotations": {
                    REVISION: str(revision),
                    DESIRED: str(desired),
                    MAX_REPLICAS: str(desired + surge),
                },
                "ownerReferences": [controller_ref(deploy, "Deployment", "apps/v1")],
            },
            "spec": {
                "replicas": initial,
                "minReadySeconds": spec.get("minReadySeconds", 0),
                "selector": selector,
                "template": rs_template,
            },
        }
        try:
            created = await self.client.create(REPLICASETS, rs, namespace=m.get("namespace"))
        except ApiError as exc:
            if exc.code != 409:
                raise
            created = await self.client.get(
                REPLICASETS, str(rs["metadata"]["name"]), namespace=m.get("namespace")
            )
        self.replicasets.remember(created)
        await self.recorder.record(
            deploy,
            "ScalingReplicaSet",
            f"Scaled up replica set {created['metadata']['name']} from 0 to {initial}",
        )
        return created

    async def _scale(self, deploy: Json, rs: Json, replicas: int) -> Json:
        current = int((rs.get("spec") or {}).get("replicas", 0))
        if current == replicas:
            return rs
        m = rs.get("metadata") or {}
        updated = await self.client.patch(
            REPLICASETS,
            str(m.get("name")),
            {
                "spec": {"replicas": replicas},
                "metadata": {
                    "annotations": {DESIRED: str((deploy.get("spec") or {}).get("replicas", 1))}
                },
            },
            namespace=m.get("namespace"),
        )
        self.replicasets.remember(updated)
        verb = "up" if replicas > current else "down"
        await self.recorder.record(
            deploy,
            "ScalingReplicaSet",
            f"Scaled {verb} replica set {m.get('name')} from {current} to {replicas}",
        )
        return updated

    async def _roll(self, deploy: Json, new: Json, olds: list[Json], desired: int) -> None:
        spec = deploy.get("spec") or {}
        strategy = spec.get("strategy") or {}
        old_total = sum(int((rs.get("spec") or {}).get("replicas", 0)) for rs in olds)
        if not olds or old_total == 0:
            await self._scale(deploy, new, desired)
            return
        if strategy.get("type") == "Recreate":
            for rs in olds:
                await self._scale(deploy, rs, 0)
            if all(int((rs.get("status") or {}).get("replicas", 0)) == 0 for rs in olds):
                await self._scale(deploy, new, desired)
            return
        rolling = strategy.get("rollingUpdate") or {}
        surge = _resolve(rolling.get("maxSurge", "25%"), desired, True)
        unavailable = _resolve(rolling.get("maxUnavailable", "25%"), desired, False)
        if surge == 0 and unavailable == 0:
            unavailable = 1
        new_replicas = int((new.get("spec") or {}).get("replicas", 0))
        # Scale the new set up within the surge budget.
        room = desired + surge - (old_total + new_replicas)
        if room > 0 and new_replicas < desired:
            new_replicas = min(desired, new_replicas + room)
            new = await self._scale(deploy, new, new_replicas)
        # Scale old sets down while enough pods stay available.
        available = sum(
            int((rs.get("status") or {}).get("availableReplicas", 0)) for rs in [new, *olds]
        )
        can_remove = available - (desired - unavailable)
        # Old pods that are not available can always go (they give no service).
        for rs in sorted(olds, key=lambda r: str(r["metadata"].get("creationTimestamp", ""))):
            replicas = int((rs.get("spec") or {}).get("replicas", 0))
            if replicas == 0:
                continue
            dead = replicas - int((rs.get("status") or {}).get("availableReplicas", 0))
            cut = min(replicas, max(0, can_remove) + max(0, dead))
            if cut <= 0:
                continue
            await self._scale(deploy, rs, replicas - cut)
            can_remove -= max(0, cut - max(0, dead))

    async def _cleanup(self, deploy: Json, olds: list[Json]) -> None:
        limit = int((deploy.get("spec") or {}).get("revisionHistoryLimit", 10))
        idle = [
            rs
            for rs in olds
            if int((rs.get("spec") or {}).get("replicas", 0)) == 0
            and int((rs.get("status") or {}).get("replicas", 0)) == 0
        ]
        idle.sort(key=lambda rs: int((rs["metadata"].get("annotations") or {}).get(REVISION, "0")))
        for rs in idle[: max(0, len(idle) - limit)]:
            m = rs.get("metadata") or {}
            try:
                await self.client.delete(
                    REPLICASETS,
                    str(m.get("name")),
                    namespace=m.get("namespace"),
                    uid=str(m.get("uid")),
                )
            except ApiError as exc:
                if exc.code != 404:
                    raise

    async def _write_status(self, deploy: Json, new: Json, sets: list[Json], desired: int) -> None:
        m = deploy.get("metadata") or {}
        replicas = sum(int((rs.get("status") or {}).get("replicas", 0)) for rs in sets)
        ready = sum(int((rs.get("status") or {}).get("readyReplicas", 0)) for rs in sets)
        available = sum(int((rs.get("status") or {}).get("availableReplicas", 0)) for rs in sets)
        updated_replicas = int((new.get("status") or {}).get("replicas", 0))
        spec = deploy.get("spec") or {}
        unavailable_allowed = _resolve(
            ((spec.get("strategy") or {}).get("rollingUpdate") or {}).get("maxUnavailable", "25%"),
            desired,
            False,
        )
        now = rfc3339(self.clock.time())
        old_conditions = {
            c.get("type"): c for c in (deploy.get("status") or {}).get("conditions") or []
        }

        def condition(kind: str, ok: bool, reason: str, message: str) -> Json:
            before = old_conditions.get(kind)
            status = "True" if ok else "False"
            since = (
                before.get("lastTransitionTime", now)
                if before and before.get("status") == status
                else now
            )
            same = before and before.get("status") == status and before.get("reason") == reason
            return {
                "type": kind,
                "status": status,
                "reason": reason,
                "message": message,
                "lastUpdateTime": before.get("lastUpdateTime", now) if same and before else now,
                "lastTransitionTime": since,
            }

        complete = updated_replicas == desired and available >= desired and replicas == desired
        rs_name = (new.get("metadata") or {}).get("name")
        conditions = [
            condition(
                "Available",
                available >= desired - unavailable_allowed,
                "MinimumReplicasAvailable"
                if available >= desired - unavailable_allowed
                else "MinimumReplicasUnavailable",
                "Deployment has minimum availability."
                if available >= desired - unavailable_allowed
                else "Deployment does not have minimum availability.",
            ),
            condition(
                "Progressing",
                True,
                "NewReplicaSetAvailable" if complete else "ReplicaSetUpdated",
                f'ReplicaSet "{rs_name}" has successfully progressed.'
                if complete
                else f'ReplicaSet "{rs_name}" is progressing.',
            ),
        ]
        status: Json = {
            "observedGeneration": m.get("generation", 1),
            "replicas": replicas,
            "updatedReplicas": updated_replicas,
            "readyReplicas": ready,
            "availableReplicas": available,
            "unavailableReplicas": max(0, desired - available),
            "conditions": conditions,
        }
        current = deploy.get("status") or {}
        if any(current.get(k) != v for k, v in status.items()):
            revision = (new.get("metadata") or {}).get("annotations", {}).get(REVISION)
            if revision and (m.get("annotations") or {}).get(REVISION) != revision:
                patched = await self.client.patch(
                    DEPLOYMENTS,
                    str(m.get("name")),
                    {"metadata": {"annotations": {REVISION: revision}}},
                    namespace=m.get("namespace"),
                )
                self.deployments.remember(patched)
            updated = await self.client.patch(
                DEPLOYMENTS,
                str(m.get("name")),
                {"status": status},
                namespace=m.get("namespace"),
                subresource="status",
            )
            self.deployments.remember(updated)
