"""Consolidation end to end, on both backends (the emulator and a real kube-apiserver).

KAI's own end-to-end case, "node level consolidation": both GPU nodes are filled
with one-GPU Jobs, one Job is deleted on each node (two GPUs free, but on
different nodes), and a two-GPU pod is created. One Job's pod is moved (evicted;
its Job makes a new pod, which runs on the other node), the two-GPU pod runs, and
no other pod is moved: exactly one Evict event.
"""

from __future__ import annotations

import time
from typing import Any

from kubernetes import client as k8s
from operator_helpers import (
    Operator,
    create_pod,
    create_podgroup,
    create_queues,
    gpu_job,
    pod,
    podgroup,
    queue,
    wait_for,
)
from realapi_backends import Backend

NS = "team-a"
JOBS = 8  # the two 4-GPU nodes of the small cluster, full


def _job_pods(core: k8s.CoreV1Api) -> dict[str, list[Any]]:
    """Each Job's live pods (not being deleted), by Job name."""
    found: dict[str, list[Any]] = {}
    for p in core.list_namespaced_pod(NS, label_selector="job-name").items:
        if p.metadata.deletion_timestamp is None:
            found.setdefault(p.metadata.labels["job-name"], []).append(p)
    return found


def _evictions(core: k8s.CoreV1Api) -> list[Any]:
    return [e for e in core.list_namespaced_event(NS).items if e.reason == "Evict"]


def test_node_level_consolidation_moves_one_pod(
    backend: Backend,
    operator: Operator,
    core: k8s.CoreV1Api,
    custom: k8s.CustomObjectsApi,
    batch: k8s.BatchV1Api,
) -> None:
    create_queues(custom, queue("root"), queue("team-a", parent="root"))
    for i in range(JOBS):
        batch.create_namespaced_job(NS, gpu_job(f"fill-{i}", NS))

    def all_running() -> dict[str, list[Any]] | None:
        pods = _job_pods(core)
        ok = len(pods) == JOBS and all(
            len(ps) == 1 and ps[0].status.phase == "Running" for ps in pods.values()
        )
        return pods if ok else None

    pods = wait_for(all_running, timeout=60, what=f"the filler Jobs Running\n{operator.log}")
    by_node: dict[str, str] = {}  # node -> the Job deleted there
    for name, (p,) in sorted(pods.items()):
        by_node.setdefault(p.spec.node_name, name)
    assert len(by_node) == 2, by_node
    for name in by_node.values():
        batch.delete_namespaced_job(name, NS, propagation_policy="Background")
    wait_for(
        lambda: not any(n in _job_pods(core) for n in by_node.values()) or None,
        timeout=30,
        what="the deleted Jobs' pods gone",
    )

    create_podgroup(custom, podgroup("big", NS, "team-a"))
    create_pod(core, pod("big-0", NS, "big", gpus=2))
    wait_for(
        lambda: core.read_namespaced_pod("big-0", NS).status.phase == "Running" or None,
        timeout=60,
        what=f"big-0 Running\n{operator.log}",
    )
    left = JOBS - len(by_node)

    def rest_running() -> dict[str, list[Any]] | None:
        pods = _job_pods(core)
        ok = len(pods) == left and all(
            len(ps) == 1 and ps[0].status.phase == "Running" for ps in pods.values()
        )
        return pods if ok else None

    wait_for(rest_running, timeout=60, what=f"the other Jobs Running again\n{operator.log}")
    time.sleep(3)  # a few more cycles: nothing else may move
    evictions = _evictions(core)
    assert len(evictions) == 1, [e.message for e in evictions]
    assert "consolidation" in evictions[0].message, evictions[0].message
    assert "team-a/big" in evictions[0].message, evictions[0].message
    assert rest_running() is not None
