"""A pod's request as kube-scheduler computes it (and the kubelet admits by): init
containers, sidecars, RuntimeClass overhead, limits standing for missing requests; and
every resource besides CPU, memory and GPUs carried as the task's ``extended``."""

from __future__ import annotations

from typing import Any

import pytest

from kai_py.api.objects import WorkloadError
from kai_py.scheduler.model import TaskStatus
from kai_py.scheduler.resources import Res
from kai_py.state.builder import build
from kai_py.state.cache import NODES, PODGROUPS, PODS, QUEUES, ClusterCache
from kai_py.state.convert import node_from_manifest, pod_requests, task_from_pod
from kai_py.state.documents import Document

GI = 2**30


def _container(name: str, requests: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = requests
    if "limits" in extra:
        resources["limits"] = extra.pop("limits")
    return {"name": name, "image": "busybox", "resources": resources, **extra}


def _pod(
    containers: list[dict[str, Any]],
    init: list[dict[str, Any]] | None = None,
    overhead: dict[str, Any] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": containers}
    if init is not None:
        spec["initContainers"] = init
    if overhead is not None:
        spec["overhead"] = overhead
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
        "spec": spec,
    }


def _task(pod: dict[str, Any]) -> Any:
    return task_from_pod(pod, "job", TaskStatus.PENDING, 0.0)


def test_an_init_container_counts_alone_the_pod_needs_the_larger() -> None:
    pod = _pod(
        [_container("a", {"cpu": "1", "memory": "1Gi"}), _container("b", {"cpu": "1"})],
        init=[_container("i1", {"cpu": "3"}), _container("i2", {"memory": "4Gi"})],
    )
    assert pod_requests(pod) == Res(3000, 4 * GI, 0)


def test_sidecars_add_to_the_sum_and_to_each_init_container_started_after_them() -> None:
    always = {"restartPolicy": "Always"}
    pod = _pod(
        [_container("app", {"cpu": "1"})],
        init=[
            _container("setup", {"cpu": "2"}),  # before any sidecar: 2 alone
            _container("proxy", {"cpu": "500m"}, **always),
            _container("migrate", {"cpu": "2"}),  # beside the proxy: 2.5
        ],
    )
    # Sum: app 1 + proxy 0.5 = 1.5; the largest init step: migrate 2 + proxy 0.5 = 2.5.
    assert pod_requests(pod).cpu == 2500
    no_migrate = _pod(pod["spec"]["containers"], init=pod["spec"]["initContainers"][:2])
    assert pod_requests(no_migrate).cpu == 2000  # setup alone beats 1.5


def test_runtimeclass_overhead_is_added() -> None:
    pod = _pod(
        [_container("a", {"cpu": "1", "memory": "1Gi"})],
        overhead={"cpu": "250m", "memory": "120Mi"},
    )
    assert pod_requests(pod) == Res(1250, GI + 120 * 2**20, 0)
    assert _task(pod).request == Res(1250, GI + 120 * 2**20, 0)  # what the queue counts too


def test_limits_stand_for_missing_requests_per_resource() -> None:
    pod = _pod(
        [
            _container(
                "a",
                {"cpu": "1"},
                limits={"cpu": "2", "memory": "2Gi", "nvidia.com/gpu": "1", "rdma/ib": "1"},
            )
        ]
    )
    task = _task(pod)
    assert task.request == Res(1000, 2 * GI, 1)
    assert task.extended == {"rdma/ib": 1}


def test_every_other_resource_is_extended_and_the_usual_pod_has_none() -> None:
    plain = _task(_pod([_container("a", {"cpu": "1", "nvidia.com/gpu": "2"})]))
    assert plain.extended is None
    pod = _pod(
        [
            _container(
                "a",
                {
                    "cpu": "1",
                    "rdma/ib": "1",
                    "ephemeral-storage": "10Gi",
                    "hugepages-2Mi": "1Gi",
                    "nvidia.com/mig-1g.10gb": "2",
                    "amd.com/gpu": "0",  # nothing asked: left out
                },
            ),
            _container("b", {"rdma/ib": "1"}),
        ],
        overhead={"ephemeral-storage": "1Gi"},
    )
    assert _task(pod).extended == {
        "rdma/ib": 2,
        "ephemeral-storage": 11 * GI,
        "hugepages-2Mi": GI,
        "nvidia.com/mig-1g.10gb": 2,
    }


def test_a_bad_quantity_names_the_pod_the_field_and_the_value() -> None:
    pod = _pod([_container("a", {"rdma/ib": "lots"})])
    with pytest.raises(WorkloadError) as caught:
        _task(pod)
    text = str(caught.value)
    assert "ns/p" in text and "spec.containers[0].resources.requests.rdma/ib" in text
    assert "lots" in text


def test_a_nodes_extended_allocatable() -> None:
    node = node_from_manifest(
        {
            "kind": "Node",
            "metadata": {"name": "n1"},
            "status": {
                "allocatable": {
                    "cpu": "8",
                    "memory": "32Gi",
                    "pods": "110",
                    "nvidia.com/gpu": "4",
                    "rdma/ib": "4",
                    "ephemeral-storage": "100Gi",
                    "hugepages-2Mi": "0",
                }
            },
        }
    )
    assert node.allocatable == Res(8000, 32 * GI, 4) and node.max_pods == 110
    assert node.extended == {"rdma/ib": 4, "ephemeral-storage": 100 * GI, "hugepages-2Mi": 0}


def test_the_watch_cache_keeps_what_the_request_depends_on() -> None:
    """The cache keeps a projection of each pod: sidecars' restartPolicy and the overhead
    must survive it, for our pods and for other schedulers' (which hold their node)."""
    bodies: list[dict[str, Any]] = [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "n", "uid": "n", "resourceVersion": "1"},
            "status": {"allocatable": {"cpu": "16", "memory": "64Gi", "rdma/ib": "2"}},
        },
        {
            "apiVersion": "scheduling.run.ai/v2",
            "kind": "Queue",
            "metadata": {"name": "q", "uid": "q", "resourceVersion": "1"},
            "spec": {
                "resources": {
                    r: {"quota": -1, "limit": -1, "overQuotaWeight": 1}
                    for r in ("gpu", "cpu", "memory")
                }
            },
        },
        {
            "apiVersion": "scheduling.run.ai/v2alpha2",
            "kind": "PodGroup",
            "metadata": {"name": "pg", "namespace": "ns", "uid": "pg", "resourceVersion": "1"},
            "spec": {"minMember": 1, "queue": "q"},
        },
    ]
    sidecar = _container("proxy", {"cpu": "2", "rdma/ib": "1"}, restartPolicy="Always")
    for name, scheduler, node in (("ours", "kai-scheduler", ""), ("theirs", "other", "n")):
        body = _pod([_container("app", {"cpu": "1"})], init=[sidecar], overhead={"cpu": "1"})
        body["metadata"].update(
            name=name, uid=name, resourceVersion="1", annotations={"pod-group-name": "pg"}
        )
        body["spec"].update(schedulerName=scheduler, nodeName=node)
        body["status"] = {"phase": "Running" if node else "Pending"}
        bodies.append(body)
    cache = ClusterCache()
    for body in bodies:
        cache.observe(
            {"Node": NODES, "Queue": QUEUES, "PodGroup": PODGROUPS}.get(body["kind"], PODS),
            "ADDED",
            body,
        )
    snapshot = cache.view(0.0).build(0.0).snapshot
    (task,) = [t for j in snapshot.jobs for t in j.tasks]
    assert task.request.cpu == 4000 and task.extended == {"rdma/ib": 1}
    (node,) = snapshot.nodes
    assert node.allocatable.cpu == 12_000  # theirs holds 1 + 2 + 1 CPUs
    assert node.extended == {"rdma/ib": 1}  # and one of the two rdma/ib

    # Read from files (kai-py simulate), the same.
    files = build([Document("f", body) for body in bodies], 0.0).snapshot
    (task,) = [t for j in files.jobs for t in j.tasks]
    assert task.request.cpu == 4000 and task.extended == {"rdma/ib": 1}
    (node,) = files.nodes
    assert node.allocatable.cpu == 12_000 and node.extended == {"rdma/ib": 1}
