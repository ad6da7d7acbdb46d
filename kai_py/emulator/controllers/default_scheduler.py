"""A trivial stand-in for kube-scheduler, for pods of ``default-scheduler``.

A real cluster always runs kube-scheduler next to KAI, so plain workloads
(a Deployment without ``schedulerName``) run in ``kai-py dev`` too. It is
deliberately simple: nodes in name order, the first that fits wins (no
scoring, no preemption). It checks what kube-scheduler's filters check and
a user would notice: unschedulable nodes, untolerated NoSchedule/NoExecute
taints, nodeSelector and required node affinity, and resources against
allocatable minus the pods already on the node. A pod that fits nowhere
gets ``PodScheduled=False`` / ``Unschedulable`` and a FailedScheduling event
worded like kube-scheduler's ("0/6 nodes are available: ..."), and is
tried again whenever a pod or node changes.

It never touches pods of other schedulers: those (``kai-scheduler``) stay
Pending until their scheduler binds them.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from kai_py.emulator.clientgo.client import PODS, ClusterClient, Json, obj_key
from kai_py.emulator.clientgo.events import EventRecorder
from kai_py.emulator.clientgo.runtime import Informer, WorkQueue
from kai_py.emulator.controllers.pods import TERMINAL, is_deleting, phase
from kai_py.emulator.nodes.resources import (
    Resources,
    check_fit,
    parse_resource_map,
    pod_requests,
)
from kai_py.emulator.storage.errors import ApiError
from kai_py.emulator.timesource import Clock, rfc3339

DEFAULT_SCHEDULER = "default-scheduler"
UNSCHEDULABLE_FLUSH_SECONDS = 0.1


def tolerates(tolerations: list[Json], taint: Json) -> bool:
    for tol in tolerations:
        effect = tol.get("effect")
        if effect and effect != taint.get("effect"):
            continue
        key = tol.get("key")
        operator = tol.get("operator") or "Equal"
        if not key:
            if operator == "Exists":
                return True
            continue
        if key != taint.get("key"):
            continue
        if operator == "Exists" or (tol.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def _expression_matches(expr: Json, labels: dict[str, str]) -> bool:
    key = str(expr.get("key"))
    op = expr.get("operator")
    values = [str(v) for v in expr.get("values") or []]
    have = labels.get(key)
    if op == "In":
        return have is not None and have in values
    if op == "NotIn":
        return have is None or have not in values
    if op == "Exists":
        return have is not None
    if op == "DoesNotExist":
        return have is None
    if op in ("Gt", "Lt") and have is not None and values:
        try:
            left, right = int(have), int(values[0])
        except ValueError:
            return False
        return left > right if op == "Gt" else left < right
    return False


def affinity_matches(pod: Json, node: Json) -> bool:
    spec = pod.get("spec") or {}
    meta = node.get("metadata") or {}
    labels: dict[str, str] = dict(meta.get("labels") or {})
    for key, value in (spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms") or []
    if not terms:
        return True
    fields = {"metadata.name": str(meta.get("name"))}
    for term in terms:
        exprs = term.get("matchExpressions") or []
        field_exprs = term.get("matchFields") or []
        if not exprs and not field_exprs:
            continue
        if all(_expression_matches(e, labels) for e in exprs) and all(
            _expression_matches(e, fields) for e in field_exprs
        ):
            return True
    return False


def _node_ready(node: Json) -> bool:
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return bool(condition.get("status") == "True")
    return False


class DefaultScheduler:
    def __init__(
        self,
        client: ClusterClient,
        pods: Informer,
        nodes: Informer,
        clock: Clock,
        *,
        events: bool = True,
    ) -> None:
        self.client = client
        self.pods = pods
        self.nodes = nodes
        self.clock = clock
        self.queue = WorkQueue(self.reconcile, name="default-scheduler")
        self.recorder = EventRecorder(client, clock, "default-scheduler", enabled=events)
        self._unschedulable: set[str] = set()
        self._flush_planned = False
        # What each pod takes from its node, kept up to date from pod events so
        # that a placement costs O(nodes), not O(pods).
        self._placed: dict[str, tuple[str, Resources]] = {}
        self._usage: dict[str, tuple[Resources, int]] = {}
        # Nodes in name order with their parsed allocatable, rebuilt when a node changes.
        self._nodes: list[tuple[Json, Resources]] | None = None
        pods.add_handler(self._on_pod)
        nodes.add_handler(self._on_node)

    def _wants(self, pod: Json) -> bool:
        spec = pod.get("spec") or {}
        return (
            spec.get("schedulerName", DEFAULT_SCHEDULER) in (DEFAULT_SCHEDULER, "")
            and not spec.get("nodeName")
            and not spec.get("schedulingGates")  # kube-scheduler waits for them to go
            and not is_deleting(pod)
            and phase(pod) not in TERMINAL
        )

    def _account(self, key: str, pod: Json | None) -> None:
        """Move a pod's requests onto (or off) the node it now takes room on."""
        node = (pod.get("spec") or {}).get("nodeName") if pod is not None else None
        holds = pod is not None and bool(node) and phase(pod) not in TERMINAL
        before = self._placed.get(key)
        if before is not None and (not holds or before[0] != node):
            self._add_usage(before[0], before[1], -1)
            del self._placed[key]
            before = None
        if holds and before is None and pod is not None:
            requests = pod_requests(pod)
            self._placed[key] = (str(node), requests)
            self._add_usage(str(node), requests, 1)

    def _add_usage(self, node: str, requests: Resources, sign: int) -> None:
        used, count = self._usage.get(node, ({}, 0))
        for name, amount in requests.items():
            used[name] = used.get(name, 0) + sign * amount
        self._usage[node] = (used, count + sign)

    def _on_pod(self, kind: str, obj: Json, old: Json | None) -> None:
        self._account(obj_key(obj), None if kind == "DELETED" else obj)
        if self._wants(obj) and kind != "DELETED":
            self.queue.add(obj_key(obj))
        freed = kind == "DELETED" or phase(obj) in TERMINAL or is_deleting(obj)
        if freed and (obj.get("spec") or {}).get("nodeName"):
            self._retry_unschedulable()

    def _on_node(self, _kind: str, _obj: Json, _old: Json | None) -> None:
        self._nodes = None
        self._retry_unschedulable()

    def _sorted_nodes(self) -> list[tuple[Json, Resources]]:
        if self._nodes is None:
            nodes = sorted(self.nodes.values(), key=lambda n: str(n["metadata"].get("name")))
            self._nodes = [
                (n, parse_resource_map((n.get("status") or {}).get("allocatable"))) for n in nodes
            ]
        return self._nodes

    def _retry_unschedulable(self) -> None:
        """Try the unschedulable pods again soon, batched: one flush for a burst of events.

        Like kube-scheduler's unschedulable queue, this keeps a full cluster from
        re-trying every pending pod on every single pod event.
        """
        if self._flush_planned or not self._unschedulable:
            return
        self._flush_planned = True

        def flush() -> None:
            self._flush_planned = False
            for key in list(self._unschedulable):
                self.queue.add(key)

        asyncio.get_running_loop().call_later(UNSCHEDULABLE_FLUSH_SECONDS, flush)

    def _filter(
        self, pod: Json, node: Json, allocatable: Resources, requests: Resources
    ) -> str | None:
        """None if the pod fits the node, else kube-scheduler's reason."""
        spec = node.get("spec") or {}
        if spec.get("unschedulable"):
            return "node(s) were unschedulable"
        tolerations = (pod.get("spec") or {}).get("tolerations") or []
        if not _node_ready(node):
            taint = {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}
            if not tolerates(tolerations, taint):
                return "node(s) had untolerated taint {node.kubernetes.io/not-ready: }"
        for taint in spec.get("taints") or []:
            if taint.get("effect") in ("NoSchedule", "NoExecute") and not tolerates(
                tolerations, taint
            ):
                return (
                    f"node(s) had untolerated taint {{{taint.get('key')}: "
                    f"{taint.get('value') or ''}}}"
                )
        if not affinity_matches(pod, node):
            return "node(s) didn't match Pod's node affinity/selector"
        name = str((node.get("metadata") or {}).get("name"))
        used, count = self._usage.get(name, ({}, 0))
        rejection = check_fit(requests, used, allocatable, count)
        if rejection is None:
            return None
        resource = rejection.reason.removeprefix("OutOf")
        return "Too many pods" if resource == "pods" else f"Insufficient {resource}"

    async def reconcile(self, key: str) -> None:
        pod = self.pods.get(key)
        if pod is None or not self._wants(pod):
            self._unschedulable.discard(key)
            return
        requests = pod_requests(pod)
        nodes = self._sorted_nodes()
        reasons: Counter[str] = Counter()
        for node, allocatable in nodes:
            reason = self._filter(pod, node, allocatable, requests)
            if reason is not None:
                reasons[reason] += 1
                continue
            await self._bind(pod, str(node["metadata"]["name"]))
            return
        await self._mark_unschedulable(pod, len(nodes), reasons)

    async def _bind(self, pod: Json, node: str) -> None:
        m = pod.get("metadata") or {}
        ns, name = str(m.get("namespace")), str(m.get("name"))
        try:
            await self.client.bind(ns, name, node, uid=str(m.get("uid")))
        except ApiError as exc:
            if exc.code != 409:
                raise
            # 409 is "already bound" only if the pod says so; else a conflict to retry.
            current = await self.client.get(PODS, name, ns)
            if not (current.get("spec") or {}).get("nodeName"):
                raise
            return
        assumed: dict[str, Any] = {**pod, "spec": {**(pod.get("spec") or {}), "nodeName": node}}
        self.pods.remember(assumed)
        self._account(obj_key(pod), assumed)  # the next pod sees this one's room taken at once
        self._unschedulable.discard(obj_key(pod))
        await self.recorder.record(pod, "Scheduled", f"Successfully assigned {ns}/{name} to {node}")

    async def _mark_unschedulable(self, pod: Json, total: int, reasons: Counter[str]) -> None:
        key = obj_key(pod)
        self._unschedulable.add(key)
        detail = ", ".join(f"{count} {reason}" for reason, count in sorted(reasons.items()))
        message = (
            f"0/{total} nodes are available: {detail}."
            if detail
            else (f"0/{total} nodes are available.")
        )
        status = pod.get("status") or {}
        conditions = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
        current = next(
            (c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"), None
        )
        if current and current.get("message") == message and current.get("status") == "False":
            return
        conditions.append(
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": message,
                "lastProbeTime": None,
                "lastTransitionTime": rfc3339(self.clock.time()),
            }
        )
        m = pod.get("metadata") or {}
        updated = await self.client.patch(
            PODS,
            str(m.get("name")),
            {"status": {"conditions": conditions}},
            namespace=m.get("namespace"),
            subresource="status",
        )
        self.pods.remember(updated)
        await self.recorder.record(pod, "FailedScheduling", message, type="Warning")
