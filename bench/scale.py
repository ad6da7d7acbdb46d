"""Benchmark the operator's cycle at scale, from a cache fed the way watch events feed it.

The operator's ``ClusterCache`` is filled with full API objects (Nodes, Queues,
PodGroups, Pods with their conditions and container statuses, each with the
``metadata.managedFields`` a real API server adds), one ``observe`` per object,
as the watches deliver them. The cluster is one kai-py
(or KAI) has scheduled before: the PodGroups of running workloads carry the
status the scheduler writes; the pending ones have none yet. Then one operator cycle
is timed stage by stage, exactly as ``kai_py.controllers.scheduling`` runs it:
``view`` (cache -> builder input), ``build`` (the Snapshot), ``run_cycle`` (the
actions), ``plan`` (decisions -> API writes). Each figure is the min / median
of 3 runs.

- **full**: a cycle over the freshly filled cache (3 runs over the same state; the
  first, which parses every object, is also given alone: the operator's first
  cycle after a start or a take-over);
- **settle**: the full cycle's writes are applied to the cache as the API
  server and binder would echo them (BindRequests made and the pods bound,
  status patches, evictions as deletions); then a cycle, whose writes are
  applied in turn; the number of writes of the second cycle should be 0 when
  nothing changed;
- **idle**: a cycle when nothing changed since (the operator skips it when the
  cache's generation is unchanged and no timer is due);
- **churn**: 1% of the pods change (half of them are re-delivered with a new
  resourceVersion, half of the running ones finish); then a cycle.

Peak RSS is the process's (``ru_maxrss``); it includes the full objects this
benchmark keeps as the API server's copy. ``--memory`` measures the operator's
share alone: the cache is filled with objects kept nowhere else, then one full
cycle runs. ``--sizes`` runs one process per size, with the pods and pending
pods scaled from the 4,000-node figures.

``--warm-up`` times the operator's start (and each new leader's): the same objects
as the pages of JSON a paginated LIST answers (500 a page), decoded and loaded
into an empty cache, as ``warm_up`` does: with the garbage collector paused for
the load and the survivors frozen after (``kai_py.state.gcpause``), and, for
the ratio, with the collector left on. Each way min / median of 3, alternating,
with the full collections the load made and how long one full collection takes
after it (the pause the process then meets from time to time).

    python bench/scale.py --nodes 1000 --pods 35000 --pending 2000
    python bench/scale.py --nodes 4000 --pods 140000 --pending 8000 --queues 100 --json
    python bench/scale.py --sizes 1000,2000,4000
    python bench/scale.py --nodes 4000 --queues 100 --memory
    python bench/scale.py --nodes 4000 --queues 100 --warm-up
    python bench/scale.py --nodes 4000 --extended 0.1   # a tenth ask for rdma/ib and storage
    python bench/scale.py --nodes 4000 --queues 100 --topology

``--topology``: the nodes carry block and rack labels (20 nodes a rack, 25 racks a
block: 8 blocks x 25 racks x 20 nodes at 4,000 nodes) and a Topology names them; a
third of the pending gangs (two pods or more) require a rack, a third require a
block and prefer a rack, a third prefer a rack. The same cluster is filled again
without the Topology and the constraints, in the same process; the two caches' full
cycles are taken in turn, and each is given (min / median of 3) with their ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import random
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from figures import MinMedian

from kai_py.api import collector, jsoncodec, keys
from kai_py.api.objects import meta
from kai_py.controllers.usage import UsageSource
from kai_py.scheduler import build_name
from kai_py.scheduler.cycle import configured_actions, run_cycle
from kai_py.scheduler.model import Config
from kai_py.scheduler.resources import Res
from kai_py.scheduler.timeshare.settings import UsageDB
from kai_py.state.cache import (
    BINDREQUESTS,
    NODES,
    PODGROUPS,
    PODS,
    PRIORITY_CLASSES,
    QUEUES,
    TOPOLOGIES,
    ClusterCache,
)
from kai_py.state.convert import pod_requests
from kai_py.state.gcpause import load_then_freeze, paused_gc
from kai_py.state.idle import IdleGate
from kai_py.state.partition import Partition
from kai_py.writes.writer import (
    EventRecorder,
    JobResources,
    Write,
    plan,
    podgroup_status_patch,
    rfc3339,
)

Json = dict[str, Any]
NOW = 1_800_000_000.0
SCHEDULER = keys.DEFAULT_SCHEDULER_NAME
TOPOLOGY_BLOCK = "example.com/block"
TOPOLOGY_RACK = "example.com/rack"
RACK_NODES = 20
BLOCK_RACKS = 25
#: The constraints of --topology's pending gangs, in turn.
TOPOLOGY_CONSTRAINTS: tuple[Json, ...] = (
    {"topology": "network", "requiredTopologyLevel": "rack"},
    {"topology": "network", "requiredTopologyLevel": "block", "preferredTopologyLevel": "rack"},
    {"topology": "network", "preferredTopologyLevel": "rack"},
)


class _Discard(dict[Any, Json]):
    """A store that keeps nothing: the objects live in the cache only."""

    def __setitem__(self, key: Any, value: Json) -> None:
        pass


class Cluster:
    """A synthetic cluster's objects, and a tiny API server that echoes writes."""

    def __init__(
        self, cache: ClusterCache, seed: int, keep: bool = True, pool: str | None = None
    ) -> None:
        self.cache = cache
        #: The node pool of a shard's cluster: its Nodes and PodGroups carry the label
        #: (its pods do not: a pod's pool is its PodGroup's).
        self.pool_labels = {keys.NODE_POOL_LABEL: pool} if pool else {}
        self.rng = random.Random(seed)
        self.rv = 1000
        # The full objects, as stored (not kept when only the cache's memory is measured).
        self.pods: dict[tuple[str, str], Json] = {} if keep else _Discard()
        self.podgroups: dict[tuple[str, str], Json] = {} if keep else _Discard()
        self.queues: dict[str, Json] = {} if keep else _Discard()
        self.uid = 0

    def next_rv(self) -> str:
        self.rv += 1
        return str(self.rv)

    def next_uid(self) -> str:
        self.uid += 1
        return f"00000000-0000-0000-0000-{self.uid:012d}"

    def send(self, kind: str, event: str, body: Json) -> None:
        # Delivered with managedFields, as a real API server sends every object; the
        # copy kept here as the API server's goes without (it is not the operator's).
        m = body.get("metadata") or {}
        if self.pool_labels and kind in (NODES, PODGROUPS):
            m = {**m, "labels": {**(m.get("labels") or {}), **self.pool_labels}}
            body["metadata"] = m  # the API server's copy has them too
        sent = {**body, "metadata": {**m, "managedFields": managed_fields(body)}}
        self.cache.observe(kind, event, sent)


def _fields_v1(value: Any) -> Json:
    """FieldsV1 of a value: each map key as ``f:<key>``, nested (lists as leaves: a real
    server names their items too, so this is the smaller of the two)."""
    if isinstance(value, dict):
        return {f"f:{k}": _fields_v1(v) for k, v in value.items()}
    return {}


def managed_fields(body: Json) -> list[Json]:
    """What a real API server adds to every object it sends: the fields each writer set.
    Here the creator's metadata and spec, and the status writer's status."""
    m = body.get("metadata") or {}
    stamp = m.get("creationTimestamp") or rfc3339(NOW)
    owned = {k: m[k] for k in ("labels", "annotations", "ownerReferences") if k in m}
    entry = {
        "apiVersion": body.get("apiVersion") or "v1",
        "fieldsType": "FieldsV1",
        "operation": "Update",
        "time": stamp,
    }
    made = [
        {
            **entry,
            "manager": "kube-controller-manager",
            "fieldsV1": _fields_v1({"metadata": owned, "spec": body.get("spec") or {}}),
        }
    ]
    if body.get("status"):
        made.append(
            {
                **entry,
                "manager": "kubelet",
                "subresource": "status",
                "fieldsV1": _fields_v1({"status": body["status"]}),
            }
        )
    return made


def node_body(c: Cluster, i: int, gpus: int, extended: bool = False) -> Json:
    name = f"node-{i:05d}"
    body: Json = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": c.next_uid(),
            "resourceVersion": c.next_rv(),
            "creationTimestamp": rfc3339(NOW - 86400),
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "node.kubernetes.io/instance-type": "p5.48xlarge",
                "nvidia.com/gpu.memory": "81920",
                "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                "topology.kubernetes.io/zone": f"zone-{i % 4}",
                # --topology's levels (on every node, so both runs see the same nodes).
                TOPOLOGY_BLOCK: f"block-{i // (RACK_NODES * BLOCK_RACKS)}",
                TOPOLOGY_RACK: f"rack-{i // RACK_NODES}",
            },
            "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": {"podCIDR": f"10.{i // 256}.{i % 256}.0/24"},
        "status": {
            "allocatable": {
                "cpu": "190",
                "memory": "2000Gi",
                keys.GPU_RESOURCE: str(gpus),
                "pods": "250",
            },
            "capacity": {"cpu": "192", "memory": "2048Gi", keys.GPU_RESOURCE: str(gpus)},
            "conditions": [
                {
                    "type": t,
                    "status": "True" if t == "Ready" else "False",
                    "lastHeartbeatTime": rfc3339(NOW - 30),
                    "lastTransitionTime": rfc3339(NOW - 86000),
                    "reason": f"Kubelet{t}",
                    "message": f"kubelet reports {t}",
                }
                for t in ("MemoryPressure", "DiskPressure", "PIDPressure", "Ready")
            ],
        },
    }
    if extended:
        for part in ("allocatable", "capacity"):
            body["status"][part].update(EXTENDED_NODE)
    return body


#: ``--extended``: what each node advertises besides CPU, memory and GPUs, and what the
#: chosen fraction of the pods asks for of it.
EXTENDED_NODE: Json = {"rdma/ib": "16", "ephemeral-storage": "7Ti"}
EXTENDED_POD: Json = {"rdma/ib": "1", "ephemeral-storage": "50Gi"}


def queue_bodies(c: Cluster, count: int, total_gpus: int) -> list[Json]:
    def queue(name: str, parent: str | None, gpu_quota: float) -> Json:
        spec: Json = {
            "resources": {
                "gpu": {"quota": gpu_quota, "limit": -1, "overQuotaWeight": 1},
                "cpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
                "memory": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
            }
        }
        if parent:
            spec["parentQueue"] = parent
        return {
            "apiVersion": f"{keys.GROUP}/{keys.QUEUE_VERSION}",
            "kind": "Queue",
            "metadata": {
                "name": name,
                "uid": c.next_uid(),
                "resourceVersion": c.next_rv(),
                "creationTimestamp": rfc3339(NOW - 86400),
            },
            "spec": spec,
        }

    # Deserved quotas share 90% of the cluster's GPUs out among the leaf queues (the
    # rest is over-quota room), as an operator of a large shared cluster sets them.
    departments = max(1, count // 10)
    out = [queue(f"dept-{d}", None, -1) for d in range(departments)]
    share = float(int(total_gpus * 0.9 / max(1, count)))
    out += [queue(f"q-{i:03d}", f"dept-{i % departments}", share) for i in range(count)]
    return out


def podgroup_body(c: Cluster, ns: str, name: str, queue: str, min_member: int) -> Json:
    return {
        "apiVersion": f"{keys.GROUP}/{keys.PODGROUP_VERSION}",
        "kind": "PodGroup",
        "metadata": {
            "name": name,
            "namespace": ns,
            "uid": c.next_uid(),
            "resourceVersion": c.next_rv(),
            "creationTimestamp": rfc3339(NOW - 3600),
            "labels": {keys.QUEUE_LABEL: queue},
            "ownerReferences": [
                {"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": c.next_uid()}
            ],
        },
        "spec": {"minMember": min_member, "queue": queue, "priorityClassName": "train"},
    }


def running_status(podgroup: Json, pods: list[Json]) -> Json:
    """The status kai-py writes on a PodGroup whose pods all run: the cluster has been
    scheduled by it (or by KAI) before, so a cycle finds these statuses right."""
    held = Res()
    for pod in pods:
        held.add(pod_requests(pod))
    # priorityClassName "train" (50) is below 100: preemptible, nothing non-preemptible.
    patch = podgroup_status_patch(podgroup, [], JobResources(held, Res(), held), NOW, "Running")
    assert patch is not None
    return dict(patch["status"])


def pod_body(
    c: Cluster,
    ns: str,
    name: str,
    *,
    scheduler: str,
    node: str | None,
    cpu: str,
    memory: str,
    gpus: int,
    group: str | None,
    queue: str | None,
    extended: bool = False,
) -> Json:
    """A pod as the API server stores it: conditions, container statuses and all."""
    running = node is not None
    labels = {"app": name.rsplit("-", 1)[0], "batch.kubernetes.io/job-name": name}
    annotations: Json = {"kubectl.kubernetes.io/default-container": "main"}
    if group:
        annotations[keys.POD_GROUP_ANNOTATION] = group
    if queue:
        labels[keys.QUEUE_LABEL] = queue
    requests: Json = {"cpu": cpu, "memory": memory}
    limits: Json = {"memory": memory}
    if gpus:
        limits[keys.GPU_RESOURCE] = str(gpus)
    if extended:
        requests.update(EXTENDED_POD)
        limits.update(EXTENDED_POD)
    created = NOW - 1800
    conditions = [
        {
            "type": t,
            "status": "True" if running else "False",
            "lastProbeTime": None,
            "lastTransitionTime": rfc3339(created + 5),
        }
        for t in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady")
    ]
    conditions.append(
        {
            "type": "PodScheduled",
            "status": "True" if running else "False",
            "lastProbeTime": None,
            "lastTransitionTime": rfc3339(created + 1),
        }
    )
    status: Json = {"phase": "Running" if running else "Pending", "conditions": conditions}
    if running:
        status.update(
            {
                "hostIP": "10.0.0.1",
                "podIP": "10.1.2.3",
                "podIPs": [{"ip": "10.1.2.3"}],
                "startTime": rfc3339(created + 2),
                "qosClass": "Burstable",
                "containerStatuses": [
                    {
                        "name": "main",
                        "ready": True,
                        "restartCount": 0,
                        "started": True,
                        "image": "registry.example.com/team/trainer:1.2.3",
                        "imageID": "registry.example.com/team/trainer@sha256:" + "ab" * 32,
                        "containerID": "containerd://" + "cd" * 32,
                        "state": {"running": {"startedAt": rfc3339(created + 4)}},
                    }
                ],
            }
        )
    spec: Json = {
        "schedulerName": scheduler,
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "default",
        "priorityClassName": "train" if scheduler == SCHEDULER else None,
        "containers": [
            {
                "name": "main",
                "image": "registry.example.com/team/trainer:1.2.3",
                "command": ["python", "-m", "train"],
                "args": ["--epochs", "10", "--data", "/data"],
                "env": [{"name": f"VAR_{k}", "value": f"value-{k}"} for k in range(4)],
                "resources": {"requests": requests, "limits": limits},
                "volumeMounts": [
                    {
                        "name": "kube-api-access",
                        "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                        "readOnly": True,
                    }
                ],
                "terminationMessagePath": "/dev/termination-log",
                "imagePullPolicy": "IfNotPresent",
            }
        ],
        "tolerations": [
            {
                "key": "node.kubernetes.io/not-ready",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            },
            {
                "key": "node.kubernetes.io/unreachable",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            },
        ],
    }
    if spec["priorityClassName"] is None:
        del spec["priorityClassName"]
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": ns,
            "uid": c.next_uid(),
            "resourceVersion": c.next_rv(),
            "creationTimestamp": rfc3339(created),
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": name,
                    "uid": c.next_uid(),
                    "controller": True,
                }
            ],
        },
        "spec": spec,
        "status": status,
    }


def fill(
    c: Cluster,
    nodes: int,
    gpus: int,
    pods: int,
    pending: int,
    queues: int,
    foreign_share: float,
    busy_gpus: int = 6,
    extended: float = 0.0,
    topology: bool = False,
) -> dict[str, int]:
    """Fill the cache: nodes, queues, a priority class, running and pending workloads.
    ``extended``: the fraction of our pods (running and pending) that ask for
    ``EXTENDED_POD``, which every node then advertises."""
    rng = c.rng
    # A generator of its own: the cluster is otherwise the same with or without it.
    ext_rng = random.Random(0x5EED)
    for i in range(nodes):
        c.send(NODES, "ADDED", node_body(c, i, gpus, extended > 0))
    if topology:
        levels = [
            {"nodeLabel": TOPOLOGY_BLOCK, "alias": "block"},
            {"nodeLabel": TOPOLOGY_RACK, "alias": "rack"},
        ]
        c.send(
            TOPOLOGIES,
            "ADDED",
            {
                "apiVersion": f"{keys.TOPOLOGY_GROUP}/{keys.TOPOLOGY_VERSION}",
                "kind": "Topology",
                "metadata": {
                    "name": "network",
                    "uid": c.next_uid(),
                    "resourceVersion": c.next_rv(),
                },
                "spec": {"levels": levels},
            },
        )
    constrained = 0
    for q in queue_bodies(c, queues, nodes * gpus):
        c.queues[meta(q)["name"]] = q
        c.send(QUEUES, "ADDED", q)
    c.send(
        PRIORITY_CLASSES,
        "ADDED",
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": "train", "uid": c.next_uid(), "resourceVersion": c.next_rv()},
            "value": 50,
        },
    )
    leaves = [f"q-{i:03d}" for i in range(queues)]
    running = pods - pending
    foreign = int(running * foreign_share)
    ours_running = running - foreign
    # Our running pods hold whole GPUs, up to ``busy_gpus`` of each node's cards.
    free_gpus = [min(gpus, busy_gpus)] * nodes
    made_ours = 0
    job = 0
    while made_ours < ours_running:
        size = min(rng.randint(1, 8), ours_running - made_ours)
        queue = rng.choice(leaves)
        ns = f"team-{queue}"
        name = f"run-{job:06d}"
        job += 1
        pg = podgroup_body(c, ns, name, queue, size)
        bodies = []
        for t in range(size):
            n = rng.randrange(nodes)
            use_gpu = free_gpus[n] > 0
            if use_gpu:
                free_gpus[n] -= 1
            bodies.append(
                pod_body(
                    c,
                    ns,
                    f"{name}-{t}",
                    scheduler=SCHEDULER,
                    node=f"node-{n:05d}",
                    cpu="4",
                    memory="64Gi",
                    gpus=1 if use_gpu else 0,
                    group=name,
                    queue=queue,
                    extended=ext_rng.random() < extended,
                )
            )
        pg["status"] = running_status(pg, bodies)
        c.podgroups[(ns, name)] = pg
        c.send(PODGROUPS, "ADDED", pg)
        for body in bodies:
            c.pods[(ns, meta(body)["name"])] = body
            c.send(PODS, "ADDED", body)
        made_ours += size
    for i in range(foreign):
        n = rng.randrange(nodes)
        body = pod_body(
            c,
            "other",
            f"svc-{i:06d}",
            scheduler="default-scheduler",
            node=f"node-{n:05d}",
            cpu="500m",
            memory="2Gi",
            gpus=0,
            group=None,
            queue=None,
        )
        c.pods[("other", f"svc-{i:06d}")] = body
        c.send(PODS, "ADDED", body)
    made = 0
    while made < pending:
        size = min(rng.choice((1, 1, 2, 4, 8)), pending - made)
        queue = rng.choice(leaves)
        ns = f"team-{queue}"
        name = f"new-{job:06d}"
        job += 1
        pg = podgroup_body(c, ns, name, queue, size)
        if topology and size > 1:
            # No draw from the generator: the cluster is the same with or without.
            pg["spec"]["topologyConstraint"] = TOPOLOGY_CONSTRAINTS[constrained % 3]
            constrained += 1
        c.podgroups[(ns, name)] = pg
        c.send(PODGROUPS, "ADDED", pg)
        for t in range(size):
            body = pod_body(
                c,
                ns,
                f"{name}-{t}",
                scheduler=SCHEDULER,
                node=None,
                cpu="4",
                memory="64Gi",
                gpus=1,
                group=name,
                queue=queue,
                extended=ext_rng.random() < extended,
            )
            c.pods[(ns, f"{name}-{t}")] = body
            c.send(PODS, "ADDED", body)
        made += size
    return {
        "ours_running": ours_running,
        "foreign": foreign,
        "pending": pending,
        "constrained_gangs": constrained,
    }


# ------------------------------------------------------------ the echo of writes
def _merge(target: Json, patch: Json) -> Json:
    out = dict(target)
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        elif isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = v
    return out


def apply_writes(c: Cluster, writes: list[Write]) -> dict[str, int]:
    """What the API server (and the binder) would make of the writes, as watch events."""
    counts: dict[str, int] = {}
    for w in writes:
        kind = w.what.split(" ", 1)[0]
        counts[kind] = counts.get(kind, 0) + 1
        parts = w.path.strip("/").split("/")
        body = w.body or {}
        if w.method == "POST" and parts[-1] == "bindrequests":
            ns = meta(body)["namespace"]
            name = meta(body)["name"]
            br = {**body, "metadata": {**meta(body), "uid": c.next_uid()}}
            br["metadata"]["resourceVersion"] = c.next_rv()
            br["status"] = {"phase": "Succeeded"}
            c.send(BINDREQUESTS, "ADDED", br)
            pod = c.pods.get((ns, name))
            if pod is not None:  # the binder binds it, the kubelet starts it
                pod = _merge(pod, {"spec": {"nodeName": body["spec"]["selectedNode"]}})
                pod = _merge(pod, {"status": {"phase": "Running", "startTime": rfc3339(NOW)}})
                pod["metadata"] = {**pod["metadata"], "resourceVersion": c.next_rv()}
                c.pods[(ns, name)] = pod
                c.send(PODS, "MODIFIED", pod)
        elif w.method == "POST" and parts[-1] == "eviction":
            ns, name = parts[parts.index("namespaces") + 1], parts[-2]
            pod = c.pods.pop((ns, name), None)
            if pod is not None:
                c.send(PODS, "DELETED", pod)
        elif w.method == "PATCH" and "podgroups" in parts:
            ns, name = parts[parts.index("namespaces") + 1], parts[parts.index("podgroups") + 1]
            patch = {k: v for k, v in body.items() if k != "metadata"}
            if "metadata" in body:
                patch["metadata"] = {k: v for k, v in body["metadata"].items() if k != "uid"}
            pg = _merge(c.podgroups[(ns, name)], patch)
            pg["metadata"] = {**pg["metadata"], "resourceVersion": c.next_rv()}
            c.podgroups[(ns, name)] = pg
            c.send(PODGROUPS, "MODIFIED", pg)
        elif w.method == "PATCH" and "queues" in parts:
            name = parts[parts.index("queues") + 1]
            q = _merge(c.queues[name], {"status": body["status"]})
            q["metadata"] = {**q["metadata"], "resourceVersion": c.next_rv()}
            c.queues[name] = q
            c.send(QUEUES, "MODIFIED", q)
        elif w.method == "PATCH" and "pods" in parts:
            ns, name = parts[parts.index("namespaces") + 1], parts[parts.index("pods") + 1]
            pod = c.pods.get((ns, name))
            if pod is None:
                continue
            status = dict(pod.get("status") or {})
            for cond in (body.get("status") or {}).get("conditions") or []:
                kept = [x for x in status.get("conditions") or [] if x["type"] != cond["type"]]
                status["conditions"] = [*kept, cond]
            if "nominatedNodeName" in (body.get("status") or {}):
                status["nominatedNodeName"] = body["status"]["nominatedNodeName"]
            pod = {**pod, "status": status}
            pod["metadata"] = {**pod["metadata"], "resourceVersion": c.next_rv()}
            c.pods[(ns, name)] = pod
            c.send(PODS, "MODIFIED", pod)
    return counts


def churn(c: Cluster, share: float) -> int:
    """``share`` of the pods change: half re-delivered with a new version, half finish."""
    keys_ = list(c.pods)
    picked = c.rng.sample(keys_, max(2, int(len(keys_) * share)))
    for i, key in enumerate(picked):
        pod = c.pods[key]
        if i % 2 == 0 or not (pod.get("spec") or {}).get("nodeName"):
            status = dict(pod["status"])
            status["conditions"] = [
                {**x, "lastProbeTime": rfc3339(NOW + i)} for x in status.get("conditions") or []
            ]
            pod = {**pod, "status": status}
            pod["metadata"] = {**pod["metadata"], "resourceVersion": c.next_rv()}
            c.pods[key] = pod
            c.send(PODS, "MODIFIED", pod)
        else:
            del c.pods[key]
            c.send(PODS, "DELETED", pod)
    return len(picked)


# ------------------------------------------------------------------ the cycle
class Runner:
    """One operator cycle's stages, as ``kai_py.controllers.scheduling`` runs them."""

    def __init__(
        self, cache: ClusterCache, config: Config, usage: UsageSource | None = None
    ) -> None:
        self.cache = cache
        self.config = config
        self.recorder = EventRecorder()
        self.gate = IdleGate()
        #: Time-based fair share's source, as the operator's loop runs it (--time-based-fairshare).
        self.usage = usage

    def cycle(self, now: float) -> tuple[dict[str, float], list[Write], dict[str, int]]:
        with paused_gc():  # as the operator runs a cycle
            return self._cycle(now)

    def _cycle(self, now: float) -> tuple[dict[str, float], list[Write], dict[str, int]]:
        t: dict[str, float] = {}
        start, cpu = time.perf_counter(), time.process_time()
        view = self.cache.view(now)
        t["view"] = time.perf_counter() - start
        mark = time.perf_counter()
        built = view.build(now, self.config)
        t["build"] = time.perf_counter() - mark
        mark = time.perf_counter()
        queues = self.cache.objects[QUEUES]
        if self.usage is not None:
            by_name = {meta(q).get("name", ""): q for q in queues.values()}
            self.usage.load(by_name)
            self.usage.apply(built.snapshot, now)
        decisions = run_cycle(built.snapshot, configured_actions(self.config))
        t["run_cycle"] = time.perf_counter() - mark
        mark = time.perf_counter()
        writes = plan(view, built, decisions, now, self.recorder, None)
        if self.usage is not None:
            writes.extend(self.usage.after(built.snapshot, now, by_name))
        t["plan"] = time.perf_counter() - mark
        t["total"] = time.perf_counter() - start
        # The process's CPU: on a shared machine, what the cycle costs whatever else runs.
        t["cpu"] = time.process_time() - cpu
        quiet = not (decisions.binds or decisions.evictions or decisions.pipelined)
        self.gate.ran(view.generation, now, view.wake_at, quiet)
        info = {
            "binds": len(decisions.binds),
            "evictions": len(decisions.evictions),
            "pipelined": len(decisions.pipelined),
            "writes": len(writes),
        }
        return t, writes, info


def stats(values: list[float]) -> MinMedian:
    return MinMedian(values)


def summarize(runs: list[dict[str, float]]) -> dict[str, MinMedian]:
    return {k: stats([r[k] for r in runs]) for k in runs[0]}


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def fill_as_asked(c: Cluster, args: argparse.Namespace) -> dict[str, int]:
    return fill(
        c,
        args.nodes,
        args.gpus,
        args.pods,
        args.pending,
        args.queues,
        args.foreign_share,
        args.busy_gpus,
        args.extended,
        getattr(args, "with_topology", False),
    )


def rss_now_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def run_memory(args: argparse.Namespace) -> dict[str, Any]:
    """The operator's memory: a cache filled with objects nothing else keeps, then a cycle."""
    partition = Partition(keys.NODE_POOL_LABEL, args.pool or "")
    cache = ClusterCache(SCHEDULER, partition=partition)
    c = Cluster(cache, args.seed, keep=False, pool=args.pool)
    base = rss_now_mb()
    made = fill_as_asked(c, args)
    gc.collect()
    filled = rss_now_mb()
    Runner(cache, replace(Config(), placement="binpack")).cycle(NOW)
    return {
        "nodes": args.nodes,
        "pods": args.pods,
        "pending": args.pending,
        **made,
        "rss_before_fill_mb": round(base),
        "rss_after_fill_mb": round(filled),
        "peak_rss_mb": round(rss_mb()),
    }


class _Pages:
    """Stands in for the cache while filling: keeps each object as JSON, per kind."""

    def __init__(self) -> None:
        self.by_kind: dict[str, list[bytes]] = {}

    def observe(self, kind: str, event: str, body: Json) -> None:
        self.by_kind.setdefault(kind, []).append(jsoncodec.dumps(body))

    def pages(self, size: int = 500) -> list[tuple[str, bytes]]:
        out = []
        for kind, items in self.by_kind.items():
            for i in range(0, len(items), size):
                out.append((kind, b'{"items":[' + b",".join(items[i : i + size]) + b"]}"))
        return out


def run_warm_up(args: argparse.Namespace) -> dict[str, Any]:
    """The cache loaded from LIST pages, as warm_up loads it, and with the collector on."""
    recorder = _Pages()
    fill_as_asked(Cluster(recorder, args.seed, keep=False), args)  # type: ignore[arg-type]
    pages = recorder.pages()
    del recorder

    def load() -> ClusterCache:
        cache = ClusterCache(SCHEDULER)
        for kind, page in pages:
            for item in jsoncodec.loads(page)["items"]:
                cache.observe(kind, "ADDED", item)
        return cache

    async def frozen() -> ClusterCache:
        async with load_then_freeze():
            return load()

    ways: dict[str, Callable[[], ClusterCache]] = {
        "paused_then_frozen": lambda: asyncio.run(frozen()),
        "collector_on": load,
    }
    figures: dict[str, dict[str, list[float]]] = {
        w: {"seconds": [], "full_collections": [], "full_collection_after_s": []} for w in ways
    }
    for _ in range(3):
        for way, run in ways.items():
            gc.collect()
            full_before = gc.get_stats()[2]["collections"]
            mark = time.perf_counter()
            cache = run()
            seconds = time.perf_counter() - mark
            full = gc.get_stats()[2]["collections"] - full_before
            mark = time.perf_counter()
            gc.collect()
            after = time.perf_counter() - mark
            f = figures[way]
            f["seconds"].append(seconds)
            f["full_collections"].append(full)
            f["full_collection_after_s"].append(after)
            del cache
            gc.unfreeze()  # the next load starts as the process did
    return {
        "nodes": args.nodes,
        "pods": args.pods,
        "pages": len(pages),
        **{way: {k: MinMedian(v) for k, v in f.items()} for way, f in figures.items()},
    }


def run_size(args: argparse.Namespace) -> dict[str, Any]:
    # A shard (--pool) is fed its pool's objects only, as its filtered watches are.
    partition = Partition(keys.NODE_POOL_LABEL, args.pool or "")
    cache = ClusterCache(SCHEDULER, partition=partition)
    c = Cluster(cache, args.seed, pool=args.pool)
    mark = time.perf_counter()
    made = fill_as_asked(c, args)
    fill_s = time.perf_counter() - mark
    gc.collect()
    rss_filled = rss_mb()
    config = replace(Config(), placement="binpack")
    runner = Runner(cache, config)
    result: dict[str, Any] = {
        "scheduler": build_name(),
        "pool": args.pool or "",
        "nodes": args.nodes,
        "pods": args.pods,
        "pending": args.pending,
        "queues": args.queues,
        "foreign_share": args.foreign_share,
        "extended": args.extended,
        **made,
        "fill_s": round(fill_s, 2),
        "rss_after_fill_mb": round(rss_filled),
    }

    runs: list[dict[str, float]] = []
    for _ in range(3):
        t, writes, info = runner.cycle(NOW)
        runs.append(t)
    # The first run parses every object (the view's pod facts, the build's Jobs and
    # Tasks); the other two find them kept. Both are the operator's: the first is its
    # first cycle after a start or a take-over, the others any later one.
    first = {k: round(v, 6) for k, v in runs[0].items()}
    result["full"] = {"seconds": summarize(runs), "first_seconds": first, **info}
    # The writes come back as watch events; then the next cycle should write nothing new.
    apply_writes(c, writes)
    t, writes2, info2 = runner.cycle(NOW)
    result["after_own_writes"] = {
        "seconds": {k: round(v, 6) for k, v in t.items()},
        **info2,
        "write_kinds": _kinds(writes2),
    }
    apply_writes(c, writes2)
    t, writes3, info3 = runner.cycle(NOW)
    result["settled"] = {
        "seconds": {k: round(v, 6) for k, v in t.items()},
        **info3,
        "write_kinds": _kinds(writes3),
    }
    apply_writes(c, writes3)
    idle_runs = []
    for _ in range(3):
        mark = time.perf_counter()
        skipped = idle_cycle(runner, cache, NOW)
        idle_runs.append(time.perf_counter() - mark)
    result["idle"] = {"seconds": stats(idle_runs), "skipped": skipped}

    churn_runs = []
    churn_info: dict[str, int] = {}
    for _ in range(3):
        changed = churn(c, 0.01)
        t, w, churn_info = runner.cycle(NOW)
        apply_writes(c, w)
        churn_runs.append(t)
    result["churn_1pct"] = {"seconds": summarize(churn_runs), "changed": changed, **churn_info}
    result["peak_rss_mb"] = round(rss_mb())
    return result


def run_topology(args: argparse.Namespace) -> dict[str, Any]:
    """The full cycle of the same cluster without and with the topology constraints,
    both caches filled first and their cycles taken in turn, so that a load elsewhere
    on the machine weighs on both alike."""
    runners: dict[str, Runner] = {}
    made: dict[str, dict[str, int]] = {}
    keep = []
    for way, flag in (("without", False), ("with", True)):
        cache = ClusterCache(SCHEDULER)
        c = Cluster(cache, args.seed)
        args.with_topology = flag
        made[way] = fill_as_asked(c, args)
        keep.append(c)
        runners[way] = Runner(cache, replace(Config(), placement="binpack"))
    gc.collect()
    runs: dict[str, list[dict[str, float]]] = {"without": [], "with": []}
    info: dict[str, dict[str, int]] = {}
    for _ in range(3):
        for way, runner in runners.items():
            t, _writes, info[way] = runner.cycle(NOW)
            runs[way].append(t)
    out: dict[str, Any] = {
        way: {"seconds": summarize(runs[way]), **info[way], **made[way]} for way in runners
    }
    out["ratio_min"] = min(r["total"] for r in runs["with"]) / min(
        r["total"] for r in runs["without"]
    )
    return out


def run_time_based_fairshare(args: argparse.Namespace) -> dict[str, Any]:
    """The full cycle of the same cluster without and with time-based fair share (the
    embedded usage source, each queue with a usage over a one-week window, written back
    to the Queues' status in the measured cycles), both caches filled first and their
    cycles taken in turn, so that a load elsewhere on the machine weighs on both alike."""
    runners: dict[str, Runner] = {}
    made: dict[str, dict[str, int]] = {}
    keep = []
    params = UsageDB(fetch_interval=1.0)  # KAI's defaults; a status write every cycle
    for way in ("without", "with"):
        cache = ClusterCache(SCHEDULER)
        c = Cluster(cache, args.seed)
        made[way] = fill_as_asked(c, args)
        keep.append(c)
        config = replace(Config(), placement="binpack")
        usage = None
        if way == "with":
            config.usage_db = params
            usage = UsageSource.make(params)
            assert usage.history is not None
            # A week of history: each queue held a random share of the GPUs, in turn.
            names = [meta(q).get("name", "") for q in cache.objects[QUEUES].values()]
            capacity = Res(gpu=float(args.nodes * args.gpus))
            for hour in range(7 * 24, 0, -6):
                held = {n: Res(gpu=c.rng.random() * args.gpus) for n in names}
                usage.history.record(NOW - hour * 3600.0, held, capacity)
        runners[way] = Runner(cache, config, usage)
    gc.collect()
    runs: dict[str, list[dict[str, float]]] = {"without": [], "with": []}
    info: dict[str, dict[str, int]] = {}
    for i in range(3):
        for way, runner in runners.items():
            t, _writes, info[way] = runner.cycle(NOW + i * 2.0)
            runs[way].append(t)
    out: dict[str, Any] = {
        way: {"seconds": summarize(runs[way]), **info[way], **made[way]} for way in runners
    }
    out["ratio_min"] = min(r["total"] for r in runs["with"]) / min(
        r["total"] for r in runs["without"]
    )
    out["ratio_median"] = (
        sorted(r["total"] for r in runs["with"])[1] / sorted(r["total"] for r in runs["without"])[1]
    )
    return out


def _kinds(writes: list[Write]) -> dict[str, int]:
    out: dict[str, int] = {}
    for w in writes:
        kind = w.what.split(" ", 1)[0]
        out[kind] = out.get(kind, 0) + 1
    return out


def idle_cycle(runner: Runner, cache: ClusterCache, now: float) -> bool:
    """A cycle with nothing new: skipped when the operator would skip it, else run."""
    if not runner.gate.due(cache.generation, now):
        return True
    runner.cycle(now)
    return False


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--pods", type=int, default=None, help="default: 35 per node")
    parser.add_argument("--pending", type=int, default=None, help="default: 2 per node")
    parser.add_argument("--queues", type=int, default=100)
    parser.add_argument("--foreign-share", type=float, default=0.75)
    parser.add_argument(
        "--busy-gpus",
        type=int,
        default=6,
        help="GPUs per node our running pods hold (default 6 of 8: the pending pods fit; "
        "7 leaves pending gangs that reclaim, which is slow: see docs/benchmarks)",
    )
    parser.add_argument(
        "--extended",
        type=float,
        default=0.0,
        help="fraction of our pods that ask for rdma/ib and ephemeral-storage (every node "
        "then advertises them); default 0: CPU, memory and GPUs only",
    )
    parser.add_argument("--sizes", default=None, help="e.g. 1000,2000,4000: one process each")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--memory",
        action="store_true",
        help="measure the cache's memory only: objects kept nowhere else, one full cycle",
    )
    parser.add_argument(
        "--warm-up",
        action="store_true",
        help="time loading the cache from LIST pages, as the operator starts (see above)",
    )
    parser.add_argument(
        "--topology",
        action="store_true",
        help="the full cycle with block/rack constraints on the pending gangs beside the "
        "same cluster without (see above)",
    )
    parser.add_argument(
        "--time-based-fairshare",
        action="store_true",
        help="the full cycle with time-based fair share on (embedded usage, every queue "
        "with a usage) beside the same cluster without",
    )
    parser.add_argument(
        "--pool",
        default=None,
        help="run as the scheduler shard of this node pool: its Nodes and PodGroups carry "
        "the pool label, the cache keeps that pool only",
    )
    parser.add_argument(
        "--shards",
        type=int,
        default=None,
        help="scale-out: one process at --nodes with one pool, then N shard processes of "
        "--nodes each (pool-0, ...), one after another; with --whole also one process "
        "serving all N x --nodes",
    )
    parser.add_argument("--whole", action="store_true", help="with --shards: see above")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.shards:
        return run_shards(args)
    if args.sizes:
        results = []
        for size in [int(s) for s in args.sizes.split(",") if s]:
            cmd = [
                sys.executable,
                __file__,
                "--nodes",
                str(size),
                "--queues",
                str(args.queues),
                "--foreign-share",
                str(args.foreign_share),
                "--seed",
                str(args.seed),
                "--busy-gpus",
                str(args.busy_gpus),
                "--extended",
                str(args.extended),
                "--json",
            ]
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            results.append(json.loads(out.strip().splitlines()[-1]))
            if not args.json:
                show(results[-1])
        if args.json:
            print(json.dumps(results))
        return 0
    args.pods = args.pods if args.pods is not None else 35 * args.nodes
    args.pending = args.pending if args.pending is not None else 2 * args.nodes
    collector.tune()  # the collector's pace of the operator's process (eventloop.run)
    if args.memory:
        mem = run_memory(args)
        print(
            json.dumps(mem)
            if args.json
            else f"memory at {mem['nodes']} nodes, {mem['pods']} pods: RSS "
            f"{mem['rss_before_fill_mb']} MB before the cache is filled, "
            f"{mem['rss_after_fill_mb']} MB after, {mem['peak_rss_mb']} MB peak in a full cycle"
        )
        return 0
    if args.warm_up:
        warm = run_warm_up(args)
        if args.json:
            print(json.dumps(warm))
            return 0
        print(
            f"warm-up at {warm['nodes']} nodes, {warm['pods']} pods ({warm['pages']} LIST "
            "pages), min / median of 3:"
        )
        for way in ("paused_then_frozen", "collector_on"):
            w = warm[way]
            print(
                f"  {way:19} load {w['seconds']} s, "
                f"{w['full_collections']['median']:.0f} full collections during it, one full "
                f"collection after it {w['full_collection_after_s']} s"
            )
        ratio = (
            warm["collector_on"]["seconds"]["min"] / warm["paused_then_frozen"]["seconds"]["min"]
        )
        print(f"  collector on / paused then frozen (min): {ratio:.2f}x")
        return 0
    if args.time_based_fairshare:
        compared = run_time_based_fairshare(args)
        if args.json:
            print(json.dumps(compared))
            return 0
        print(
            f"time-based fair share at {args.nodes} nodes, {args.pods} pods ({args.pending} "
            f"pending, {args.queues} queues); scheduler {build_name()}; full cycle, seconds, "
            "min / median of 3:"
        )
        for way in ("without", "with"):
            r = compared[way]
            print(
                f"  {way:8} time-based fair share  {r['seconds']['total']}  (view "
                f"{r['seconds']['view']}, build {r['seconds']['build']}, run_cycle "
                f"{r['seconds']['run_cycle']}, plan {r['seconds']['plan']}); {r['binds']} "
                f"binds, {r['writes']} writes"
            )
        print(
            f"  with / without: {compared['ratio_min']:.3f}x (min), "
            f"{compared['ratio_median']:.3f}x (median)"
        )
        return 0
    if args.topology:
        compared = run_topology(args)
        if args.json:
            print(json.dumps(compared))
            return 0
        print(
            f"topology at {args.nodes} nodes, {args.pods} pods ({args.pending} pending, "
            f"{compared['with']['constrained_gangs']} gangs constrained); scheduler "
            f"{build_name()}; full cycle, seconds, min / median of 3:"
        )
        for way in ("without", "with"):
            r = compared[way]
            print(
                f"  {way:8} topology  {r['seconds']['total']}  (view {r['seconds']['view']}, "
                f"build {r['seconds']['build']}, run_cycle {r['seconds']['run_cycle']}, "
                f"plan {r['seconds']['plan']}); {r['binds']} binds, {r['writes']} writes"
            )
        print(f"  with / without (min): {compared['ratio_min']:.2f}x")
        return 0
    result = run_size(args)
    if args.json:
        print(json.dumps(result))
    else:
        show(result)
    return 0


def _child(
    args: argparse.Namespace, nodes: int, seed: int, pool: str | None, *more: str
) -> dict[str, Any]:
    cmd = [
        sys.executable,
        __file__,
        "--nodes",
        str(nodes),
        "--queues",
        str(args.queues),
        "--foreign-share",
        str(args.foreign_share),
        "--seed",
        str(seed),
        "--busy-gpus",
        str(args.busy_gpus),
        "--json",
        *(["--pool", pool] if pool else []),
        *more,
    ]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def _figures(args: argparse.Namespace, nodes: int, seed: int, pool: str | None) -> dict[str, Any]:
    """A process's full cycle (``run_size``) and, in another, its cache's memory
    (``--memory``: objects kept nowhere else, the peak of a full cycle)."""
    r = _child(args, nodes, seed, pool)
    memory = _child(args, nodes, seed, pool, "--memory")
    cpu_mid = r["full"]["seconds"]["cpu"]["median"]
    return {
        "pool": r["pool"] or ("(one pool)" if nodes == args.nodes else "(all, one)"),
        "nodes": r["nodes"],
        "pods": r["pods"],
        "cycle_s": r["full"]["seconds"]["total"],
        "cycle_cpu_s": r["full"]["seconds"]["cpu"],
        "binds": r["full"]["binds"],
        "peak_rss_mb": memory["peak_rss_mb"],
        # Placements a second: the binds of a full cycle over its (median) CPU time, the
        # time it takes on a machine of its own (this one is shared).
        "placements_per_s": r["full"]["binds"] / cpu_mid,
        "scheduler": r["scheduler"],
    }


def run_shards(args: argparse.Namespace) -> int:
    """One pool at --nodes, then --shards shards of --nodes each, one process each."""
    base = _figures(args, args.nodes, args.seed, None)
    # Each shard's pool is the one pool's cluster (the same seed), labelled: the figures
    # differ by what the shard does besides, nothing else.
    shards = [_figures(args, args.nodes, args.seed, f"pool-{k}") for k in range(args.shards)]
    whole = _figures(args, args.nodes * args.shards, args.seed, None) if args.whole else None
    result = {"one_pool": base, "shards": shards, "whole": whole}
    if args.json:
        print(json.dumps(result))
        return 0
    print(
        f"{args.shards} shards of {args.nodes} nodes ({args.shards * args.nodes} nodes, "
        f"{sum(s['pods'] for s in shards)} pods), one process each, run one after another "
        f"(2 cores: they would each have their own machine); {base['scheduler']}; "
        "full cycle min / median of 3"
    )
    rows = [base, *shards, *([whole] if whole else [])]
    for r in rows:
        low, mid = r["cycle_s"]["min"], r["cycle_s"]["median"]
        cpu_low, cpu_mid = r["cycle_cpu_s"]["min"], r["cycle_cpu_s"]["median"]
        print(
            f"  {r['pool']:12} {r['nodes']:6} nodes {r['pods']:7} pods: cycle {low:.3f} / "
            f"{mid:.3f} s ({mid / base['cycle_s']['median']:.2f}x one pool), CPU {cpu_low:.3f} / "
            f"{cpu_mid:.3f} s ({cpu_mid / base['cycle_cpu_s']['median']:.2f}x), peak RSS "
            f"{r['peak_rss_mb']} MB ({r['peak_rss_mb'] / base['peak_rss_mb']:.2f}x), "
            f"{r['binds']} binds, {r['placements_per_s']:.0f} placements/s"
        )
    total = sum(s["placements_per_s"] for s in shards)
    print(f"  cluster, {args.shards} shards at once: {total:.0f} placements/s")
    if whole:
        print(
            f"  cluster, one process for all {whole['nodes']} nodes: "
            f"{whole['placements_per_s']:.0f} placements/s ({total / whole['placements_per_s']:.2f}x)"
        )
    return 0


def show(r: dict[str, Any]) -> None:
    print(
        f"cluster: {r['nodes']} nodes, {r['pods']} pods ({r['pending']} pending, "
        f"{r['foreign']} of other schedulers), {r['queues']} queues, "
        f"{r.get('extended', 0.0):g} of ours asking for {EXTENDED_POD}; cache filled in "
        f"{r['fill_s']} s, RSS {r['rss_after_fill_mb']} MB; scheduler {r['scheduler']}"
    )
    print("seconds, min / median of 3:")
    full = r["full"]
    print(
        f"  full cycle        {full['seconds']['total']}  (view {full['seconds']['view']}, "
        f"build {full['seconds']['build']}, run_cycle {full['seconds']['run_cycle']}, "
        f"plan {full['seconds']['plan']}); {full['binds']} binds, {full['evictions']} "
        f"evictions, {full['writes']} writes"
    )
    cold = full["first_seconds"]
    print(
        f"    the first of the 3 (nothing parsed yet): {cold['total']:.3f}  (view "
        f"{cold['view']:.3f}, build {cold['build']:.3f}, run_cycle {cold['run_cycle']:.3f}, "
        f"plan {cold['plan']:.3f})"
    )
    for label, key in (("after own writes", "after_own_writes"), ("settled", "settled")):
        x = r[key]
        print(
            f"  {label:17} {x['seconds']['total']:.3f}  (one run); {x['binds']} binds, "
            f"{x['evictions']} evictions, {x['writes']} writes {x['write_kinds']}"
        )
    print(f"  nothing new       {r['idle']['seconds']}  (skipped: {r['idle']['skipped']})")
    ch = r["churn_1pct"]
    print(
        f"  1% pods changed   {ch['seconds']['total']}  (view {ch['seconds']['view']}, build "
        f"{ch['seconds']['build']}, run_cycle {ch['seconds']['run_cycle']}, plan "
        f"{ch['seconds']['plan']}); {ch['changed']} pods changed, {ch['binds']} binds, "
        f"{ch['evictions']} evictions"
    )
    print(f"peak RSS: {r['peak_rss_mb']} MB")


if __name__ == "__main__":
    raise SystemExit(main())
