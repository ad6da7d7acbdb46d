"""A pod's request as kube-scheduler computes it (and the kubelet admits by): init
containers, sidecars, RuntimeClass overhead, limits standing for missing requests; and
every resource besides CPU, memory and GPUs carried as the task's ``extended``."""

from __future__ import annotations

from typing import Any

import pytest

from kai_py.api.objects import WorkloadError
from kai_py.scheduler.model import TaskStatus
from kai_py.scheduler.resources import Res
from kai_py.state.convert import node_from_manifest, pod_requests, task_from_pod

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
