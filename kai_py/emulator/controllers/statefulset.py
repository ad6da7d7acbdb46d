"""The apps/v1 StatefulSet controller: pods ``<name>-<ordinal>`` with stable names and claims.

As upstream: each pod is named by its ordinal (from ``spec.ordinals.start``,
default 0), labelled with ``statefulset.kubernetes.io/pod-name``,
``apps.kubernetes.io/pod-index`` and ``controller-revision-hash``, gets
``hostname``/``subdomain``, and mounts the claims ``<template>-<set>-<ordinal>``
of ``volumeClaimTemplates``, which are created first when missing (and kept
when the pod or set goes, the default retention policy). With
``podManagementPolicy: OrderedReady`` (the default) pods are created one at a
time in ordinal order, each once the one before is Running and Ready, and
removed one at a time from the highest ordinal; with ``Parallel`` all at once.
A pod that is deleted or finishes is made again. A template change rolls
out (``RollingUpdate``, the default) by deleting the highest-ordinal pod of
an old revision once every pod is Running and Ready, down to
``rollingUpdate.partition``; ``OnDelete`` waits for the user to delete pods. No ControllerRevision objects are kept: the
revision is a hash of the template.
"""

from __future__ import annotations

import copy
import re

from kai_py.emulator.clientgo.client import (
    PODS,
    PVCS,
    STATEFULSETS,
    ClusterClient,
    Json,
    controller_ref,
)
from kai_py.emulator.clientgo.events import EventRecorder
from kai_py.emulator.clientgo.runtime import Informer, WorkQueue, enqueue_owner, enqueue_self
from kai_py.emulator.controllers.deployment import template_hash
from kai_py.emulator.controllers.pods import TERMINAL, is_deleting, is_ready, phase
from kai_py.emulator.controllers.replicaset import owned
from kai_py.emulator.storage.errors import ApiError
from kai_py.emulator.timesource import Clock

POD_NAME_LABEL = "statefulset.kubernetes.io/pod-name"
POD_INDEX_LABEL = "apps.kubernetes.io/pod-index"
REVISION_LABEL = "controller-revision-hash"


def _running_and_ready(pod: Json) -> bool:
    return phase(pod) == "Running" and is_ready(pod) and not is_deleting(pod)


class StatefulSetController:
    def __init__(
        self,
        client: ClusterClient,
        statefulsets: Informer,
        pods: Informer,
        clock: Clock,
        *,
        events: bool = True,
    ) -> None:
        self.client = client
        self.statefulsets = statefulsets
        self.pods = pods
        self.queue = WorkQueue(self.reconcile, name="statefulset-controller")
        self.recorder = EventRecorder(client, clock, "statefulset-controller", enabled=events)
        statefulsets.add_handler(enqueue_self(self.queue))
        pods.add_handler(enqueue_owner(self.queue, "StatefulSet"))

    async def reconcile(self, key: str) -> None:
        sts = self.statefulsets.get(key)
        if sts is None or is_deleting(sts):
            return
        m, spec = sts.get("metadata") or {}, sts.get("spec") or {}
        name = str(m.get("name"))
        replicas = int(spec.get("replicas", 1))
        start = int((spec.get("ordinals") or {}).get("start", 0))
        parallel = spec.get("podManagementPolicy") == "Parallel"
        revision = f"{name}-{template_hash(spec.get('template') or {})}"
        pattern = re.compile(rf"^{re.escape(name)}-(\d+)$")
        by_ordinal: dict[int, Json] = {}
        for pod in owned(self.pods, sts):
            match = pattern.match(str((pod.get("metadata") or {}).get("name")))
            if match:
                by_ordinal[int(match.group(1))] = pod
        wanted = range(start, start + replicas)

        # Pods that finished are made again: delete them first (upstream does the same).
        for finished in by_ordinal.values():
            if phase(finished) in TERMINAL and not is_deleting(finished):
                await self._delete(sts, finished)
        # Make the missing pods, in order; OrderedReady waits for each to be ready.
        for ordinal in wanted:
            existing = by_ordinal.get(ordinal)
            if existing is None:
                created = await self._create(sts, ordinal, revision)
                by_ordinal[ordinal] = created
                if not parallel:
                    break
            elif not parallel and not _running_and_ready(existing):
                break
        else:
            await self._scale_down_or_update(sts, by_ordinal, wanted, parallel, revision)
        await self._write_status(sts, by_ordinal, wanted, revision)

    async def _scale_down_or_update(
        self,
        sts: Json,
        by_ordinal: dict[int, Json],
        wanted: range,
        parallel: bool,
        revision: str,
    ) -> None:
        surplus = sorted((o for o in by_ordinal if o not in wanted), reverse=True)
        if surplus:
            if any(is_deleting(by_ordinal[o]) for o in surplus) and not parallel:
                return  # one at a time: wait until the last one is gone
            for ordinal in surplus if parallel else surplus[:1]:
                if not is_deleting(by_ordinal[ordinal]):
                    await self._delete(sts, by_ordinal[ordinal])
            return
        strategy = (sts.get("spec") or {}).get("updateStrategy") or {}
        if strategy.get("type") == "OnDelete":
            return
        partition = int((strategy.get("rollingUpdate") or {}).get("partition", 0))
        current = [by_ordinal[o] for o in wanted if o in by_ordinal]
        if len(current) < len(wanted) or not all(_running_and_ready(p) for p in current):
            return
        for ordinal in reversed(wanted):
            if ordinal < partition:
                return  # pods below the partition keep their revision
            pod = by_ordinal[ordinal]
            if (pod["metadata"].get("labels") or {}).get(REVISION_LABEL) != revision:
                await self._delete(sts, pod)
                return

    async def _create(self, sts: Json, ordinal: int, revision: str) -> Json:
        m, spec = sts["metadata"], sts.get("spec") or {}
        name, ns = str(m["name"]), str(m["namespace"])
        pod_name = f"{name}-{ordinal}"
        template = spec.get("template") or {}
        tmeta = copy.deepcopy(template.get("metadata") or {})
        pod_spec = copy.deepcopy(template.get("spec") or {})
        labels = dict(tmeta.get("labels") or {})
        labels.update(
            {POD_NAME_LABEL: pod_name, POD_INDEX_LABEL: str(ordinal), REVISION_LABEL: revision}
        )
        pod_spec["hostname"] = pod_name
        if spec.get("serviceName"):
            pod_spec["subdomain"] = spec["serviceName"]
        volumes = list(pod_spec.get("volumes") or [])
        for claim in spec.get("volumeClaimTemplates") or []:
            template_name = str((claim.get("metadata") or {}).get("name"))
            claim_name = f"{template_name}-{name}-{ordinal}"
            await self._ensure_claim(sts, claim, claim_name, pod_name)
            volumes = [v for v in volumes if v.get("name") != template_name]
            volumes.append(
                {"name": template_name, "persistentVolumeClaim": {"claimName": claim_name}}
            )
        if volumes:
            pod_spec["volumes"] = volumes
        metadata: Json = {
            "name": pod_name,
            "namespace": ns,
            "labels": labels,
            "ownerReferences": [controller_ref(sts, "StatefulSet", "apps/v1")],
        }
        if tmeta.get("annotations"):
            metadata["annotations"] = dict(tmeta["annotations"])
        body = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": pod_spec}
        created = await self.client.create(PODS, body, namespace=ns)
        self.pods.remember(created)
        await self.recorder.record(
            sts, "SuccessfulCreate", f"create Pod {pod_name} in StatefulSet {name} successful"
        )
        return created

    async def _ensure_claim(self, sts: Json, claim: Json, claim_name: str, pod_name: str) -> None:
        m = sts["metadata"]
        selector = ((sts.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
        cmeta = copy.deepcopy(claim.get("metadata") or {})
        labels = {**(cmeta.get("labels") or {}), **selector}
        body: Json = {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": claim_name, "namespace": m["namespace"], "labels": labels},
            "spec": copy.deepcopy(claim.get("spec") or {}),
        }
        if cmeta.get("annotations"):
            body["metadata"]["annotations"] = cmeta["annotations"]
        try:
            await self.client.create(PVCS, body, namespace=m["namespace"])
        except ApiError as exc:
            if exc.code != 409:
                raise
            return  # kept from an earlier pod of this ordinal
        await self.recorder.record(
            sts,
            "SuccessfulCreate",
            f"create Claim {claim_name} Pod {pod_name} in StatefulSet {m['name']} success",
        )

    async def _delete(self, sts: Json, pod: Json) -> None:
        pm = pod.get("metadata") or {}
        try:
            await self.client.delete(
                PODS, str(pm.get("name")), namespace=pm.get("namespace"), uid=str(pm.get("uid"))
            )
        except ApiError as exc:
            if exc.code != 404:
                raise
        await self.recorder.record(
            sts,
            "SuccessfulDelete",
            f"delete Pod {pm.get('name')} in StatefulSet {sts['metadata']['name']} successful",
        )

    async def _write_status(
        self, sts: Json, by_ordinal: dict[int, Json], wanted: range, revision: str
    ) -> None:
        m = sts["metadata"]
        live = [p for p in by_ordinal.values() if not is_deleting(p)]
        ready = sum(1 for p in live if is_ready(p))
        updated = sum(
            1 for p in live if (p["metadata"].get("labels") or {}).get(REVISION_LABEL) == revision
        )
        current_status = sts.get("status") or {}
        current_revision = current_status.get("currentRevision") or revision
        if updated == len(live) == len(wanted):
            current_revision = revision  # the rollout is over
        current = sum(
            1
            for p in live
            if (p["metadata"].get("labels") or {}).get(REVISION_LABEL) == current_revision
        )
        status: Json = {
            "observedGeneration": m.get("generation", 1),
            "replicas": len(live),
            "readyReplicas": ready,
            "availableReplicas": ready,
            "currentReplicas": current,
            "updatedReplicas": updated,
            "currentRevision": current_revision,
            "updateRevision": revision,
            "collisionCount": 0,
        }
        if any(current_status.get(k) != v for k, v in status.items()):
            written = await self.client.patch(
                STATEFULSETS,
                str(m["name"]),
                {"status": status},
                namespace=m["namespace"],
                subresource="status",
            )
            self.statefulsets.remember(written)
