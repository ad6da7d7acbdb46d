"""Faults on demand: the emulated cluster's own agents and its clients survive them.

``cluster.node_faults`` makes the kubelets and controllers meet errors,
conflicts and latency; ``cluster.faults`` does the same to HTTP clients;
``drop_watches`` ends every watch; ``restart`` stops everything and starts
it again on the same state. Whatever happens, nothing is lost, nothing is
made twice, and no GPU is handed to two pods.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from kai_py.api import keys
from kai_py.emulator import annotations as ann
from kai_py.emulator.apiserver.faults import FaultSet
from kai_py.emulator.cluster_spec import parse_cluster
from kai_py.emulator.dev_cluster import DevCluster, ThreadedDevCluster
from kai_py.emulator.storage.store import Store
from kai_py.emulator.timesource import ManualClock

Json = dict[str, Any]

SPEC = parse_cluster(
    {"nodes": [{"name": "gpu", "count": 2, "gpus": 4, "cpu": "32", "memory": "128Gi"}]}
)


def run(test: Callable[[DevCluster, ManualClock], Awaitable[None]], **options: Any) -> None:
    async def main() -> None:
        clock = ManualClock()
        options.setdefault("events", False)
        options.setdefault("job_failure_backoff", 0.0)
        async with DevCluster(SPEC, clock=clock, **options) as cluster:
            await test(cluster, clock)

    asyncio.run(asyncio.wait_for(main(), 40))


def gpu_job(name: str, completions: int, parallelism: int, seconds: str = "2") -> Json:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "parallelism": parallelism,
            "completions": completions,
            "template": {
                "metadata": {"annotations": {ann.RUN_SECONDS: seconds}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "main",
                            "image": "busybox",
                            "resources": {"limits": {keys.GPU_RESOURCE: "1"}},
                        }
                    ],
                },
            },
        },
    }


async def job_complete(cluster: DevCluster, name: str) -> Json | None:
    job = await cluster.store.get("jobs", "default", name)
    conditions = (job.get("status") or {}).get("conditions") or []
    done = any(c["type"] == "Complete" and c["status"] == "True" for c in conditions)
    return job if done else None


async def no_card_twice(cluster: DevCluster) -> int:
    """Assert that no GPU is held by two live pods; returns how many cards are held."""
    pods, _ = await cluster.store.list("pods")
    holders: dict[str, str] = {}
    for pod in pods:
        if pod["status"].get("phase") in ("Succeeded", "Failed"):
            continue
        devices = (pod["metadata"].get("annotations") or {}).get(ann.VISIBLE_DEVICES, "")
        for uuid in filter(None, devices.split(",")):
            assert uuid not in holders, f"{uuid} given to {holders[uuid]} and {pod['metadata']}"
            holders[uuid] = pod["metadata"]["name"]
    return len(holders)


async def drive(
    cluster: DevCluster,
    clock: ManualClock,
    check: Callable[[], Awaitable[Any]],
    during: Callable[[int], Awaitable[None]] | None = None,
    timeout: float = 20.0,
) -> Any:
    """Advance time and run ``during`` each round until ``check`` holds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    round_ = 0
    while True:
        result = await check()
        if result:
            return result
        assert loop.time() < deadline, "condition not met in time"
        if during is not None:
            await during(round_)
        await no_card_twice(cluster)
        clock.advance(1)
        await asyncio.sleep(0.02)
        round_ += 1


def test_failed_pod_creates_are_retried_and_nothing_is_made_twice() -> None:
    async def check(cluster: DevCluster, clock: ManualClock) -> None:
        cluster.node_faults.add(verb="create", resource="pods", code=500, fraction=0.5)
        cluster.node_faults.add(verb="create", resource="pods", code=409, fraction=0.2)
        await cluster.store.create("jobs", gpu_job("retry", completions=6, parallelism=3))
        job = await drive(cluster, clock, lambda: job_complete(cluster, "retry"))
        assert job["status"]["succeeded"] == 6
        pods, _ = await cluster.store.list("pods", label_selector="job-name=retry")
        assert len(pods) == 6
        assert sum(f.fired for f in cluster.node_faults._faults) > 0

    run(check, node_faults=FaultSet(seed=11))


def test_kubelet_retries_conflicting_status_writes() -> None:
    async def check(cluster: DevCluster, clock: ManualClock) -> None:
        fault = cluster.node_faults.add(verb="patch", resource="pods/status", code=409, times=5)
        await cluster.store.create(
            "pods",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "p", "namespace": "default"},
                "spec": {
                    "nodeName": "gpu-0",
                    "schedulerName": "none",
                    "containers": [
                        {
                            "name": "c",
                            "image": "busybox",
                            "resources": {"limits": {keys.GPU_RESOURCE: "2"}},
                        }
                    ],
                },
            },
        )
        pod = await cluster.wait_pod_phase("default", "p", "Running")
        assert fault.fired == 5
        assert await no_card_twice(cluster) == 2
        assert cluster.kubelet("gpu-0").plugin.in_use() == 2  # retries did not take more cards
        del pod

    run(check)


def test_latency_slows_but_does_not_break_the_controllers() -> None:
    async def check(cluster: DevCluster, clock: ManualClock) -> None:
        cluster.node_faults.add(latency=0.005)
        await cluster.store.create("jobs", gpu_job("slow", completions=3, parallelism=3))
        job = await drive(cluster, clock, lambda: job_complete(cluster, "slow"))
        assert job["status"]["succeeded"] == 3

    run(check)


def test_controllers_recover_from_dropped_watches() -> None:
    async def check(cluster: DevCluster, clock: ManualClock) -> None:
        await cluster.store.create("jobs", gpu_job("drops", completions=8, parallelism=4))

        async def drop(_round: int) -> None:
            assert cluster.drop_watches() > 0

        job = await drive(cluster, clock, lambda: job_complete(cluster, "drops"), during=drop)
        assert job["status"]["succeeded"] == 8
        pods, _ = await cluster.store.list("pods", label_selector="job-name=drops")
        assert len(pods) == 8

    run(check)


def test_watch_gap_past_the_history_is_healed_by_a_relist() -> None:
    async def check(cluster: DevCluster, clock: ManualClock) -> None:
        assert cluster.fleet is not None
        relists = cluster.fleet.pods.relists
        # The kubelets cannot watch for a while; meanwhile a pod is created and
        # far more changes happen than the store keeps history for.
        outage = cluster.node_faults.add(verb="watch", code=500, times=50)
        cluster.drop_watches()
        await cluster.store.create(
            "pods",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "p", "namespace": "default"},
                "spec": {
                    "nodeName": "gpu-1",
                    "schedulerName": "none",
                    "containers": [{"name": "c", "image": "busybox"}],
                },
            },
        )
        for i in range(80):
            await cluster.store.create(
                "configmaps",
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": f"cm-{i}", "namespace": "default"},
                },
            )
        cluster.node_faults.remove(outage)
        await cluster.wait_pod_phase("default", "p", "Running")
        assert cluster.fleet.pods.relists > relists  # 410 Gone -> list again

    run(check, store=Store(history_size=40))


def test_restart_keeps_state_and_never_double_allocates() -> None:
    async def check(cluster: DevCluster, clock: ManualClock) -> None:
        await cluster.store.create(
            "jobs", gpu_job("long", completions=12, parallelism=6, seconds="3")
        )
        seen: dict[str, str] = {}

        async def restart_sometimes(round_: int) -> None:
            pods, _ = await cluster.store.list("pods", label_selector="job-name=long")
            for pod in pods:  # a pod's cards never change, restart or not
                devices = (pod["metadata"].get("annotations") or {}).get(ann.VISIBLE_DEVICES)
                if devices:
                    assert seen.setdefault(pod["metadata"]["name"], devices) == devices
            if round_ % 2 == 0:
                await cluster.restart()

        job = await drive(
            cluster, clock, lambda: job_complete(cluster, "long"), during=restart_sometimes
        )
        assert job["status"]["succeeded"] == 12
        assert job["status"].get("failed", 0) == 0
        pods, _ = await cluster.store.list("pods", label_selector="job-name=long")
        assert len(pods) == 12  # no pod made twice across restarts
        assert len(seen) == 12

    run(check)


def test_restart_finishes_a_deletion_in_flight() -> None:
    async def check(cluster: DevCluster, clock: ManualClock) -> None:
        await cluster.store.create(
            "pods",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": "p",
                    "namespace": "default",
                    "annotations": {ann.TERMINATION_SECONDS: "5"},
                },
                "spec": {
                    "nodeName": "gpu-0",
                    "schedulerName": "none",
                    "containers": [
                        {
                            "name": "c",
                            "image": "busybox",
                            "resources": {"limits": {keys.GPU_RESOURCE: "4"}},
                        }
                    ],
                },
            },
        )
        await cluster.wait_pod_phase("default", "p", "Running")
        await cluster.store.delete("pods", "default", "p")
        await asyncio.sleep(0.02)
        await cluster.restart()
        assert cluster.kubelet("gpu-0").plugin.in_use() == 4  # still stopping: cards held

        async def gone() -> bool:
            pods, _ = await cluster.store.list("pods")
            return not pods

        await drive(cluster, clock, gone)
        assert cluster.kubelet("gpu-0").plugin.in_use() == 0

    run(check)


@pytest.fixture(scope="module")
def threaded() -> Any:
    with ThreadedDevCluster(SPEC, events=False) as cluster:
        yield cluster


def test_http_faults_reach_clients_and_a_retrying_client_succeeds(threaded: Any) -> None:
    from kubernetes import client, config
    from kubernetes.client.rest import ApiException

    api = client.CoreV1Api(config.new_client_from_config(threaded.kubeconfig_path))
    threaded.cluster.faults.add(verb="create", resource="pods", code=500, times=2)
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "http-pod"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }
    failures = 0
    for _attempt in range(5):
        try:
            api.create_namespaced_pod("default", body)
            break
        except ApiException as exc:
            assert exc.status == 500
            failures += 1
    assert failures == 2
    threaded.call(threaded.cluster.wait_pod_phase("default", "http-pod", "Running"))
    threaded.cluster.faults.clear()


def test_an_unreachable_node_keeps_its_pods_until_it_recovers() -> None:
    async def check(cluster: DevCluster, clock: ManualClock) -> None:
        def bound(name: str, seconds: str | None = None) -> Json:
            annotations = {ann.RUN_SECONDS: seconds} if seconds else {}
            return {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": "default", "annotations": annotations},
                "spec": {
                    "nodeName": "gpu-1",
                    "schedulerName": "none",
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "c",
                            "image": "busybox",
                            "resources": {"limits": {keys.GPU_RESOURCE: "2"}},
                        }
                    ],
                },
            }

        await cluster.store.create("pods", bound("old", seconds="5"))
        before = await cluster.wait_pod_phase("default", "old", "Running")
        await cluster.fail_node("gpu-1")
        node = await cluster.store.get("nodes", "", "gpu-1")
        ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
        assert (ready["status"], ready["reason"]) == ("Unknown", "NodeStatusUnknown")
        taints = {(t["key"], t["effect"]) for t in node["spec"]["taints"]}
        assert taints == {
            ("node.kubernetes.io/unreachable", "NoSchedule"),
            ("node.kubernetes.io/unreachable", "NoExecute"),
        }
        await cluster.store.create("pods", bound("new"))
        clock.advance(10)
        await asyncio.sleep(0.05)
        assert (await cluster.store.get("pods", "default", "old"))["status"]["phase"] == "Running"
        assert (await cluster.store.get("pods", "default", "new"))["status"]["phase"] == "Pending"
        await cluster.restart()  # still down after a restart
        await asyncio.sleep(0.05)
        assert (await cluster.store.get("pods", "default", "new"))["status"]["phase"] == "Pending"
        await cluster.recover_node("gpu-1")
        await cluster.wait_pod_phase("default", "new", "Running")
        old = await cluster.wait_pod_phase("default", "old", "Succeeded")  # its time had passed
        assert old["metadata"]["annotations"] == before["metadata"]["annotations"]
        assert await no_card_twice(cluster) == 2
        node = await cluster.store.get("nodes", "", "gpu-1")
        assert not node["spec"].get("taints")

    run(check)
