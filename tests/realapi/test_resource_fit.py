"""Every pod kai-py binds is one the kubelet admits: resources beyond CPU, memory and GPUs
(a device plugin's rdma/ib, hugepages, ephemeral-storage) and a pod's request as
kube-scheduler computes it (sidecars and init containers) are counted against the node's
allocatable, on both backends. A pod no node can hold stays Pending with the reason."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from operator_helpers import (
    Operator,
    create_pod,
    create_podgroup,
    create_queues,
    events_of,
    pod,
    podgroup,
    queue,
    wait_for,
)
from realapi_backends import BACKENDS, Backend, backend_cluster

NS = "team-a"
# Two CPU nodes alike but for what the second advertises besides CPU and memory.
CLUSTER = {
    "nodes": [
        {"name": "plain", "count": 1, "cpu": "16", "memory": "64Gi", "ephemeralStorage": "10Gi"},
        {
            "name": "rdma",
            "count": 1,
            "cpu": "16",
            "memory": "64Gi",
            "ephemeralStorage": "1Ti",
            "extendedResources": {"rdma/ib": "1", "hugepages-2Mi": "1Gi"},
        },
    ],
    "namespaces": [NS],
}


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    with backend_cluster(request.param, tmp_path, CLUSTER) as running:
        yield running


def _pod(name: str, requests: dict[str, str], limits: dict[str, str] | None = None) -> Any:
    body = pod(name, NS, name, gpus=0)
    resources = body["spec"]["containers"][0]["resources"]
    resources["requests"].update(requests)
    if limits:
        resources["limits"] = limits
    return body


def _start(custom: k8s.CustomObjectsApi, core: k8s.CoreV1Api, body: Any) -> None:
    name = body["metadata"]["name"]
    create_podgroup(custom, podgroup(name, NS, "team-a"))
    create_pod(core, body)


def _running_on(core: k8s.CoreV1Api, name: str) -> str | None:
    p = core.read_namespaced_pod(name, NS)
    return str(p.spec.node_name) if p.status.phase == "Running" else None


def _unschedulable(core: k8s.CoreV1Api, operator: Operator, name: str) -> str:
    def found() -> list[Any]:
        return [e for e in events_of(core, NS, name) if e.reason == "Unschedulable"]

    what = f"an Unschedulable event\n{operator.log}"
    (event, *_) = wait_for(found, timeout=30, what=what)
    p = core.read_namespaced_pod(name, NS)
    assert p.spec.node_name is None and p.status.phase == "Pending"  # never bound
    return str(event.message)


def _fill_4_cpus(custom: k8s.CustomObjectsApi, core: k8s.CoreV1Api, operator: Operator) -> None:
    """A running pod of 4 CPUs on each node: 12 of each node's 16 left."""
    for node in ("plain-0", "rdma-0"):
        filler = _pod(f"filler-{node}", {"cpu": "4"})
        filler["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
        _start(custom, core, filler)
    for node in ("plain-0", "rdma-0"):
        running = functools.partial(_running_on, core, f"filler-{node}")
        assert wait_for(running, timeout=40, what=operator.log) == node


@pytest.mark.parametrize("only_limits", [False, True], ids=["requests", "limits-only"])
def test_a_pod_asking_for_rdma_lands_where_it_is_and_the_next_waits_with_the_numbers(
    backend: Backend,
    operator: Operator,
    core: k8s.CoreV1Api,
    custom: k8s.CustomObjectsApi,
    only_limits: bool,
) -> None:
    """Limits only: the request is the limit (the API server defaults it so; kai-py reads
    it so either way)."""
    create_queues(custom, queue("root"), queue("team-a", parent="root"))
    rdma = {"rdma/ib": "1"}
    requests: dict[str, str] = {} if only_limits else rdma
    _start(custom, core, _pod("first", requests, rdma))
    node = wait_for(lambda: _running_on(core, "first"), timeout=40, what=operator.log)
    assert node == "rdma-0"

    _start(custom, core, _pod("second", requests, rdma))
    message = _unschedulable(core, operator, "second")
    assert "Insufficient rdma/ib (requested 1, free 0 of 0)" in message  # plain-0
    assert "Insufficient rdma/ib (requested 1, free 0 of 1)" in message  # rdma-0, held


@pytest.mark.parametrize(
    ("resource", "amount"),
    [("hugepages-2Mi", "512Mi"), ("ephemeral-storage", "100Gi")],
)
def test_hugepages_and_ephemeral_storage_land_only_where_there_is_room(
    backend: Backend,
    operator: Operator,
    core: k8s.CoreV1Api,
    custom: k8s.CustomObjectsApi,
    resource: str,
    amount: str,
) -> None:
    create_queues(custom, queue("root"), queue("team-a", parent="root"))
    # Huge pages must be asked for with equal limits (API validation).
    limits = {resource: amount} if resource.startswith("hugepages-") else None
    _start(custom, core, _pod("fits", {resource: amount}, limits))
    node = wait_for(lambda: _running_on(core, "fits"), timeout=40, what=operator.log)
    assert node == "rdma-0"
    _start(custom, core, _pod("too-big", {resource: "2Ti"}, {resource: "2Ti"}))
    message = _unschedulable(core, operator, "too-big")
    assert f"Insufficient {resource}" in message


def test_sidecars_and_init_containers_count_as_kube_scheduler_counts_them(
    backend: Backend, operator: Operator, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi
) -> None:
    create_queues(custom, queue("root"), queue("team-a", parent="root"))
    _fill_4_cpus(custom, core, operator)
    # App 1 CPU + a 6-CPU sidecar = 7; the init container after it runs beside the
    # sidecar: 8 + 6 = 14 CPUs, more than either node has free (the kubelet would
    # refuse it: OutOfcpu).
    body = _pod("sidecar", {"cpu": "1"})
    body["spec"]["initContainers"] = [
        {
            "name": "proxy",
            "image": "busybox",
            "restartPolicy": "Always",
            "resources": {"requests": {"cpu": "6", "memory": "64Mi"}},
        },
        {
            "name": "migrate",
            "image": "busybox",
            "resources": {"requests": {"cpu": "8", "memory": "64Mi"}},
        },
    ]
    _start(custom, core, body)
    message = _unschedulable(core, operator, "sidecar")
    assert "2 Insufficient cpu" in message


def test_runtimeclass_overhead_counts_with_the_containers(
    operator: Operator,
    api: k8s.ApiClient,
    core: k8s.CoreV1Api,
    custom: k8s.CustomObjectsApi,
) -> None:
    create_queues(custom, queue("root"), queue("team-a", parent="root"))
    # The API server's RuntimeClass admission copies the class's overhead into the pod.
    k8s.NodeV1Api(api).create_runtime_class(
        {
            "apiVersion": "node.k8s.io/v1",
            "kind": "RuntimeClass",
            "metadata": {"name": "vm"},
            "handler": "runc",
            "overhead": {"podFixed": {"cpu": "4", "memory": "1Gi"}},
        }
    )
    # 10 CPUs: with the 4 of overhead, more than a node's 16 less a filler's 4 (the
    # kubelet counts the overhead too: OutOfcpu).
    _fill_4_cpus(custom, core, operator)
    body = _pod("vm", {"cpu": "10"})
    body["spec"]["runtimeClassName"] = "vm"
    _start(custom, core, body)
    assert core.read_namespaced_pod("vm", NS).spec.overhead == {"cpu": "4", "memory": "1Gi"}
    message = _unschedulable(core, operator, "vm")
    assert "2 Insufficient cpu" in message
    # Without the overhead it fits: 10 of the 12 CPUs free.
    _start(custom, core, _pod("plain", {"cpu": "10"}))
    wait_for(lambda: _running_on(core, "plain"), timeout=40, what=operator.log)
