"""The simulated kubelets and device plugins, driven through the in-process store.

Time is a ManualClock: a pod that "runs for 30 s" finishes when the test
advances the clock, so these tests take milliseconds.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from apiserver_helpers import StoredVersionsUntouched

from kai_py.api import keys
from kai_py.emulator import annotations as ann
from kai_py.emulator.cluster_spec import gpu_uuid, parse_cluster
from kai_py.emulator.dev_cluster import DevCluster
from kai_py.emulator.storage.errors import ApiError
from kai_py.emulator.timesource import ManualClock

Json = dict[str, Any]
UUID_RE = re.compile(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")

SMALL = parse_cluster(
    {
        "nodes": [
            {"name": "gpu", "count": 2, "gpus": 4, "cpu": "8", "memory": "64Gi", "pods": 20},
            {"name": "cpu", "count": 1, "cpu": "2", "memory": "4Gi"},
        ]
    }
)


def run(test: Callable[[DevCluster, ManualClock], Awaitable[None]], **options: Any) -> None:
    async def main() -> None:
        clock = ManualClock()
        options.setdefault("events", False)
        async with DevCluster(SMALL, clock=clock, **options) as cluster:
            untouched = StoredVersionsUntouched(cluster.store)
            await test(cluster, clock)
        untouched.check()

    asyncio.run(asyncio.wait_for(main(), 20))


def pod(
    name: str,
    node: str | None = "gpu-0",
    *,
    gpus: int = 0,
    cpu: str | None = None,
    namespace: str = "default",
    annotations: dict[str, str] | None = None,
    restart: str = "Never",
    env: list[Json] | None = None,
) -> Json:
    container: Json = {"name": "main", "image": "busybox:1.36", "resources": {}}
    if gpus:
        container["resources"]["limits"] = {keys.GPU_RESOURCE: str(gpus)}
    if cpu:
        container["resources"]["requests"] = {"cpu": cpu}
    if env:
        container["env"] = env
    spec: Json = {"restartPolicy": restart, "containers": [container], "schedulerName": "nobody"}
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "annotations": annotations or {}},
        "spec": spec,
    }


async def get(cluster: DevCluster, name: str, namespace: str = "default") -> Json:
    return await cluster.store.get("pods", namespace, name)


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)
    await asyncio.sleep(0.02)


def test_nodes_are_registered_with_status_and_gpu_labels() -> None:
    async def check(cluster: DevCluster, clock: ManualClock) -> None:
        nodes, _ = await cluster.store.list("nodes")
        by_name = {n["metadata"]["name"]: n for n in nodes}
        assert sorted(by_name) == ["cpu-0", "gpu-0", "gpu-1"]
        gpu = by_name["gpu-0"]
        assert gpu["metadata"]["labels"][keys.GPU_COUNT_NODE_LABEL] == "4"
        assert gpu["metadata"]["labels"][keys.GPU_MEMORY_NODE_LABEL] == "81920"
        assert gpu["status"]["allocatable"][keys.GPU_RESOURCE] == "4"
        assert gpu["status"]["nodeInfo"]["kubeletVersion"].startswith("v1.")
        ready = [c for c in gpu["status"]["conditions"] if c["type"] == "Ready"]
        assert ready and ready[0]["status"] == "True"
        assert {"InternalIP", "Hostname"} <= {a["type"] for a in gpu["status"]["addresses"]}
        lease = await cluster.store.get("leases", "kube-node-lease", "gpu-0")
        assert lease["spec"]["holderIdentity"] == "gpu-0"

    run(check, heartbeat=True)


def test_bound_pod_runs_with_start_time_and_ready_containers() -> None:
    async def check(cluster: DevCluster, clock: ManualClock) -> None:
        await cluster.store.create("pods", pod("p", cpu="500m"))
        p = await cluster.wait_pod_phase("default", "p", "Running")
        status = p["status"]
        assert status["startTime"]
        assert status["hostIP"] and status["podIP"].startswith("10.244.")
        conditions = {c["type"]: c["status"] for c in status["conditions"]}
        for kind in ("Initialized", "Ready", "ContainersReady", "PodScheduled"):
            assert conditions[kind] == "True", kind
        (container,) = status["containerStatuses"]
        assert container["ready"] is True and container["started"] is True
        assert "running" in container["state"]
        assert container["containerID"].startswith("containerd://")

    run(check)


def test_unbound_pods_are_left_alone() -> None:
    async def check(cluster: DevCluster, clock: ManualClock) -> None:
        await cluster.store.create("pods", pod("p", node=None))
        await settle()
        assert (await get(cluster, "p"))["status"]["phase"] == "Pending"

    run(check)


def test_run_seconds_then_succeeded() -> None:
    async def check(cluster: DevCluster, clock: ManualClock) -> None:
        await cluster.store.create("pods", pod("p", annotations={ann.RUN_SECONDS: "30"}))
        await cluster.wait_pod_phase("default", "p", "Running")
        clock.advance(29)
        await settle()
        assert (await get(cluster, "p"))["status"]["phase"] == "Running"
        clock.advance(1)
        p = await cluster.wait_pod_phase("default", "p", "Succeeded")
        terminated = p["status"]["containerStatuses"][0]["state"]["terminated"]
        assert terminated["exitCode"] == 0 and terminated["reason"] == "Completed"
        ready = {c["type"]: c["status"] for c in p["status"]["conditions"]}["Ready"]
        assert ready == "False"

    run(check)


def test_exit_code_fails_a_never_restarting_pod() -> None:
    async def check(cluster: DevCluster, clock: ManualClock) -> None:
        annotations = {ann.RUN_SECONDS: "5", ann.EXIT_CODE: "3"}
        await cluster.store.create("pods", pod("p", annotations=annotations))
        await cluster.wait_pod_phase("default", "p", "Running")
        clock.advance(5)
        p = await cluster.wait_pod_phase("default", "p", "Failed")
        assert p["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 3

    run(check)


def test_restart_policy_always_restarts_the_container() -> None:
    async def check(cluster: DevCluster, clock: ManualClock) -> None:
        await cluster.store.create(
            "pods", pod("p", annotations={ann.RUN_SECONDS: "5"}, restart="Always")
        )
        await cluster.wait_pod_phase("default", "p", "Running")
        clock.advance(5)

        async def restarted() -> Json | None:
            p = await get(cluster, "p")
            return p if p["status"]["containerStatuses"][0]["restartCount"] == 1 else None

        p = await cluster.wait_for(restarted)
        assert p["status"]["phase"] == "Running"
        assert p["status"]["containerStatuses"][0]["lastState"]["terminated"]["exitCode"] == 0

    run(check)


def test_pod_that_does_not_fit_is_rejected_like_a_real_kubelet() -> None:
    async def check(cluster: DevCluster, clock: ManualClock) -> None:
        await cluster.store.create("pods", pod("big", gpus=4))
        await cluster.wait_pod_phase("default", "big", "Running")
        await cluster.store.create("pods", pod("extra", gpus=1))
        p = await cluster.wait_pod_phase("default", "extra", "Failed")
        assert p["status"]["reason"] == "OutOfnvidia.com/gpu"
        assert p["status"]["message"] == (
            "Pod was rejected: Node didn't have enough resource: nvidia.com/gpu, "
            "requested: 1, used: 4, capacity: 4"
        )
        await cluster.store.create("pods", pod("hog", node="cpu-0", cpu="3"))
        p = await cluster.wait_pod_phase("default", "hog", "Failed")
        assert p["status"]["reason"] == "OutOfcpu"
        assert "requested: 3000, used: 0, capacity: 2000" in p["status"]["message"]
        events, _ = await cluster.store.list("events", "default")
        reasons = {(e["involvedObject"]["name"], e["reason"], e["type"]) for e in events}
        assert ("extra", "OutOfnvidia.com/gpu", "Warning") in reasons

    run(check, events=True)


def test_node_selector_mismatch_is_rejected() -> None:
    async def check(cluster: DevCluster, clock: ManualClock) -> None:
        body = pod("p")
        body["spec"]["nodeSelector"] = {"disk": "ssd"}
        await cluster.store.create("pods", body)
        p = await cluster.wait_pod_phase("default", "p", "Failed")
        assert p["status"]["reason"] == "NodeAffinity"

    run(check)


def test_device_plugin_gives_lowest_free_cards_with_stable_uuids() -> None:
    async def check(cluster: DevCluster, clock: ManualClock) -> None:
        await cluster.store.create("pods", pod("a", gpus=2, annotations={ann.RUN_SECONDS: "10"}))
        a = await cluster.wait_pod_phase("default", "a", "Running")
        await cluster.store.create("pods", pod("b", gpus=1))
        b = await cluster.wait_pod_phase("default", "b", "Running")
        uuids = [gpu_uuid("gpu-0", i) for i in range(4)]
        assert all(UUID_RE.match(u) for u in uuids)
        assert a["metadata"]["annotations"][ann.VISIBLE_DEVICES] == ",".join(uuids[:2])
        assert b["metadata"]["annotations"][ann.VISIBLE_DEVICES] == uuids[2]
        # The kubelet's own record of the devices, in the real status field.
        (resource,) = b["status"]["containerStatuses"][0]["allocatedResourcesStatus"]
        assert resource["name"] == keys.GPU_RESOURCE
        assert [r["resourceID"] for r in resource["resources"]] == [uuids[2]]
        # a ends: its cards are free again and go to the next pod, lowest first.
        clock.advance(10)
        await cluster.wait_pod_phase("default", "a", "Succeeded")
        await cluster.store.create("pods", pod("c", gpus=3))
        c = await cluster.wait_pod_phase("default", "c", "Running")
        assert c["metadata"]["annotations"][ann.VISIBLE_DEVICES] == ",".join(
            [uuids[0], uuids[1], uuids[3]]
        )

    run(check)


def test_cards_are_never_handed_to_two_pods() -> None:
    """Random creates, deletes and completions; at every step no card has two owners."""
    import random

    rng = random.Random(7)

    async def check(cluster: DevCluster, clock: ManualClock) -> None:
        names: list[str] = []
        ran: set[str] = set()
        for step in range(40):
            action = rng.random()
            if action < 0.55 or not names:
                name = f"p{step}"
                node = rng.choice(["gpu-0", "gpu-1"])
                seconds = rng.choice(["3", "7", None])
                annotations = {ann.RUN_SECONDS: seconds} if seconds else {}
                body = pod(name, node, gpus=rng.randint(1, 3), annotations=annotations)
                await cluster.store.create("pods", body)
                names.append(name)
            elif action < 0.8:
                victim = names.pop(rng.randrange(len(names)))
                await cluster.store.delete("pods", "default", victim)
            else:
                clock.advance(4)
            await settle()
            pods, _ = await cluster.store.list("pods")
            holders: dict[str, str] = {}
            for p in pods:
                if p["status"].get("phase") != "Running":
                    continue
                for uuid in p["metadata"]["annotations"].get(ann.VISIBLE_DEVICES, "").split(","):
                    assert uuid not in holders, f"{uuid} held by {holders.get(uuid)} and {p}"
                    holders[uuid] = p["metadata"]["name"]
            # The device plugins hold exactly the cards the running pods report.
            held = {}
            for node in ("gpu-0", "gpu-1"):
                held.update(cluster.kubelet(node).plugin.allocations())
            by_uid = {p["metadata"]["uid"]: p["metadata"]["name"] for p in pods}
            assert {u: by_uid.get(uid) for u, uid in held.items()} == holders
            ran.update(holders.values())
        assert len(ran) >= 8  # the check above was not vacuous

    run(check)


def test_reservation_pod_reports_its_card_uuid() -> None:
    async def check(cluster: DevCluster, clock: ManualClock) -> None:
        await cluster.store.create("pods", pod("x", node="gpu-1", gpus=1))
        await cluster.wait_pod_phase("default", "x", "Running")
        body = pod(
            "gpu-reservation-gpu-1-abcde",
            node="gpu-1",
            gpus=1,
            namespace=keys.RESERVATION_NAMESPACE,
        )

        await cluster.store.create("pods", body)

        async def reported() -> Json | None:
            p = await get(cluster, body["metadata"]["name"], keys.RESERVATION_NAMESPACE)
            return p if keys.RESERVED_GPU_INDEX_ANNOTATION in p["metadata"]["annotations"] else None

        p = await cluster.wait_for(reported)
        assert p["metadata"]["annotations"][keys.RESERVED_GPU_INDEX_ANNOTATION] == gpu_uuid(
            "gpu-1", 1
        )

    run(check)


def test_shared_pod_sees_the_card_from_its_configmap() -> None:
    async def check(cluster: DevCluster, clock: ManualClock) -> None:
        env = [
            {
                "name": "NVIDIA_VISIBLE_DEVICES",
                "valueFrom": {
                    "configMapKeyRef": {"name": "shared-gpu", "key": "NVIDIA_VISIBLE_DEVICES"}
                },
            }
        ]
        await cluster.store.create("pods", pod("shared", env=env))

        async def waiting() -> Json | None:
            p = await get(cluster, "shared")
            statuses = p["status"].get("containerStatuses") or []
            return p if statuses and "waiting" in statuses[0]["state"] else None

        p = await cluster.wait_for(waiting)
        assert p["status"]["phase"] == "Pending"
        state = p["status"]["containerStatuses"][0]["state"]["waiting"]
        assert state == {
            "reason": "CreateContainerConfigError",
            "message": 'configmap "shared-gpu" not found',
        }
        uuid = gpu_uuid("gpu-0", 2)
        await cluster.store.create(
            "configmaps",
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "shared-gpu", "namespace": "default"},
                "data": {"NVIDIA_VISIBLE_DEVICES": uuid},
            },
        )
        clock.advance(1)  # the kubelet retries
        p = await cluster.wait_pod_phase("default", "shared", "Running")
        assert p["metadata"]["annotations"][ann.VISIBLE_DEVICES] == uuid

    run(check)


def test_deleted_pod_terminates_frees_its_cards_and_is_removed() -> None:
    async def check(cluster: DevCluster, clock: ManualClock) -> None:
        annotations = {ann.TERMINATION_SECONDS: "20"}
        await cluster.store.create("pods", pod("p", gpus=4, annotations=annotations))
        await cluster.wait_pod_phase("default", "p", "Running")
        await cluster.store.delete("pods", "default", "p")
        await settle()
        p = await get(cluster, "p")  # still there: containers get 20 s to stop
        assert p["metadata"]["deletionTimestamp"]
        assert cluster.kubelet("gpu-0").plugin.in_use() == 4
        clock.advance(20)

        async def gone() -> bool:
            try:
                await get(cluster, "p")
            except ApiError as exc:
                return exc.code == 404
            return False

        await cluster.wait_for(gone)
        assert cluster.kubelet("gpu-0").plugin.in_use() == 0
        await cluster.store.create("pods", pod("q", gpus=4))
        await cluster.wait_pod_phase("default", "q", "Running")

    run(check)


@pytest.mark.parametrize("phase", ["Running", "Succeeded"])
def test_kubelet_state_survives_a_restart(phase: str) -> None:
    async def check(cluster: DevCluster, clock: ManualClock) -> None:
        seconds = {ann.RUN_SECONDS: "50"} if phase == "Succeeded" else {}
        await cluster.store.create("pods", pod("a", gpus=3, annotations=seconds))
        before = await cluster.wait_pod_phase("default", "a", "Running")
        await cluster.restart()
        # After the restart the old pod's cards are still its own...
        await cluster.store.create("pods", pod("b", gpus=2))
        b = await cluster.wait_pod_phase("default", "b", "Failed")
        assert b["status"]["reason"] == "OutOfnvidia.com/gpu"
        assert "used: 3" in b["status"]["message"]
        await cluster.store.create("pods", pod("c", gpus=1))
        c = await cluster.wait_pod_phase("default", "c", "Running")
        assert c["metadata"]["annotations"][ann.VISIBLE_DEVICES] == gpu_uuid("gpu-0", 3)
        a = await get(cluster, "a")
        assert a["status"]["startTime"] == before["status"]["startTime"]
        if phase == "Succeeded":
            clock.advance(50)  # ... and its timer resumed from its start time
            await cluster.wait_pod_phase("default", "a", "Succeeded")

    run(check)


def test_active_deadline_fails_the_pod_and_frees_its_cards() -> None:
    async def check(cluster: DevCluster, clock: ManualClock) -> None:
        body = pod("p", gpus=2)
        body["spec"]["activeDeadlineSeconds"] = 15
        await cluster.store.create("pods", body)
        await cluster.wait_pod_phase("default", "p", "Running")
        clock.advance(15)
        p = await cluster.wait_pod_phase("default", "p", "Failed")
        assert p["status"]["reason"] == "DeadlineExceeded"
        assert cluster.kubelet("gpu-0").plugin.in_use() == 0

    run(check)


def test_repeated_exits_back_off_like_crash_loop() -> None:
    async def check(cluster: DevCluster, clock: ManualClock) -> None:
        annotations = {ann.RUN_SECONDS: "0", ann.EXIT_CODE: "1"}
        await cluster.store.create("pods", pod("p", annotations=annotations, restart="Always"))

        async def backing_off() -> Json | None:
            p = await get(cluster, "p")
            statuses = p["status"].get("containerStatuses") or []
            waiting = statuses[0]["state"].get("waiting", {}) if statuses else {}
            return p if waiting.get("reason") == "CrashLoopBackOff" else None

        p = await cluster.wait_for(backing_off)  # first restart at once, then a 10 s wait
        (container,) = p["status"]["containerStatuses"]
        assert container["restartCount"] == 1
        assert container["lastState"]["terminated"]["exitCode"] == 1
        assert p["status"]["phase"] == "Running"
        clock.advance(9)
        await settle()
        assert (await get(cluster, "p"))["status"]["containerStatuses"][0]["restartCount"] == 1
        clock.advance(1)

        async def restarted_twice() -> Json | None:
            p = await get(cluster, "p")
            return p if p["status"]["containerStatuses"][0]["restartCount"] == 2 else None

        await cluster.wait_for(restarted_twice)

    run(check)


def test_fractional_gpu_flow_as_the_binder_drives_it() -> None:
    """Reservation pod -> its card's UUID -> ConfigMap -> the shared pod sees that card."""

    async def check(cluster: DevCluster, clock: ManualClock) -> None:
        await cluster.store.create("pods", pod("whole", node="gpu-1", gpus=1))
        await cluster.wait_pod_phase("default", "whole", "Running")
        reservation = pod(
            "gpu-reservation-gpu-1-x1",
            node="gpu-1",
            gpus=1,
            namespace=keys.RESERVATION_NAMESPACE,
        )
        reservation["metadata"]["labels"] = {keys.GPU_GROUP_LABEL: "group-1"}
        await cluster.store.create("pods", reservation)

        async def reserved() -> str | None:
            p = await get(cluster, "gpu-reservation-gpu-1-x1", keys.RESERVATION_NAMESPACE)
            value = p["metadata"]["annotations"].get(keys.RESERVED_GPU_INDEX_ANNOTATION)
            return str(value) if value else None

        uuid = await cluster.wait_for(reserved)
        assert uuid == gpu_uuid("gpu-1", 1)  # card 0 was taken: the plugin chose card 1
        await cluster.store.create(
            "configmaps",
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "shared-0-gpu", "namespace": "default"},
                "data": {"NVIDIA_VISIBLE_DEVICES": uuid, "GPU_PORTION": "0.5"},
            },
        )
        shared = pod(
            "shared-0",
            node=None,
            env=[
                {
                    "name": "NVIDIA_VISIBLE_DEVICES",
                    "valueFrom": {
                        "configMapKeyRef": {"name": "shared-0-gpu", "key": "NVIDIA_VISIBLE_DEVICES"}
                    },
                }
            ],
        )
        shared["metadata"]["annotations"] = {keys.GPU_FRACTION_ANNOTATION: "0.5"}
        await cluster.store.create("pods", shared)
        await cluster.store.bind_pod("default", "shared-0", "gpu-1")
        p = await cluster.wait_pod_phase("default", "shared-0", "Running")
        assert p["metadata"]["annotations"][ann.VISIBLE_DEVICES] == uuid
        # The shared pod holds no card of its own: two cards in use on the node.
        assert cluster.kubelet("gpu-1").plugin.in_use() == 2

    run(check)


def test_a_wedged_node_stays_ready_and_starts_nothing_until_unwedged() -> None:
    async def check(cluster: DevCluster, clock: ManualClock) -> None:
        await cluster.store.create("pods", pod("before", cpu="100m"))
        await cluster.wait_pod_phase("default", "before", "Running")
        cluster.wedge_node("gpu-0")
        await cluster.store.create("pods", pod("after", cpu="100m"))
        await settle()
        assert (await get(cluster, "after"))["status"].get("phase", "Pending") == "Pending"
        assert (await get(cluster, "before"))["status"]["phase"] == "Running"
        node = await cluster.store.get("nodes", "", "gpu-0")
        (ready,) = [c for c in node["status"]["conditions"] if c["type"] == "Ready"]
        assert ready["status"] == "True"
        # A pod it was asked to start while wedged is deleted as usual.
        await cluster.store.delete("pods", "default", "after")
        await settle()
        with pytest.raises(ApiError):
            await get(cluster, "after")
        cluster.wedge_node("gpu-0", False)
        await cluster.store.create("pods", pod("later", cpu="100m"))
        await cluster.wait_pod_phase("default", "later", "Running")

    run(check)
