"""Job, Deployment and ReplicaSet controllers and the default scheduler, in process."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from apiserver_helpers import StoredVersionsUntouched

from kai_py.api import keys
from kai_py.emulator import annotations as ann
from kai_py.emulator.cluster_spec import parse_cluster
from kai_py.emulator.controllers.deployment import HASH_LABEL
from kai_py.emulator.controllers.job import TRACKING_FINALIZER, format_indexes, parse_indexes
from kai_py.emulator.dev_cluster import DevCluster
from kai_py.emulator.storage.errors import ApiError
from kai_py.emulator.timesource import ManualClock

Json = dict[str, Any]

SPEC = parse_cluster(
    {
        "nodes": [
            {"name": "gpu", "count": 2, "gpus": 4, "cpu": "16", "memory": "64Gi"},
            {"name": "cpu", "count": 1, "cpu": "4", "memory": "8Gi"},
        ]
    }
)


def run(test: Callable[[DevCluster, ManualClock], Awaitable[None]], **options: Any) -> None:
    async def main() -> None:
        clock = ManualClock()
        options.setdefault("events", False)
        options.setdefault("job_failure_backoff", 0.0)
        async with DevCluster(SPEC, clock=clock, **options) as cluster:
            untouched = StoredVersionsUntouched(cluster.store)
            await test(cluster, clock)
        untouched.check()

    asyncio.run(asyncio.wait_for(main(), 30))


async def until(
    cluster: DevCluster,
    clock: ManualClock,
    check: Callable[[], Awaitable[Any]],
    step: float = 1.0,
    timeout: float = 10.0,
) -> Any:
    """Advance simulated time a step at a time until ``check`` holds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        result = await check()
        if result:
            return result
        if loop.time() > deadline:
            raise TimeoutError("condition not met")
        clock.advance(step)
        await asyncio.sleep(0.01)


def job(
    name: str,
    *,
    parallelism: int = 1,
    completions: int | None = 1,
    seconds: str = "1",
    gpus: int = 0,
    exit_code: int = 0,
    scheduler: str | None = None,
    extra: Json | None = None,
) -> Json:
    container: Json = {"name": "main", "image": "busybox:1.36"}
    if gpus:
        container["resources"] = {"limits": {keys.GPU_RESOURCE: str(gpus)}}
    annotations = {ann.RUN_SECONDS: seconds}
    if exit_code:
        annotations[ann.EXIT_CODE] = str(exit_code)
    pod_spec: Json = {"restartPolicy": "Never", "containers": [container]}
    if scheduler:
        pod_spec["schedulerName"] = scheduler
    spec: Json = {
        "parallelism": parallelism,
        "template": {"metadata": {"annotations": annotations}, "spec": pod_spec},
    }
    if completions is not None:
        spec["completions"] = completions
    spec.update(extra or {})
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    }


def deployment(name: str, replicas: int, image: str = "nginx:1.27") -> Json:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "containers": [
                        {"name": "web", "image": image, "resources": {"requests": {"cpu": "100m"}}}
                    ]
                },
            },
        },
    }


async def pods_of(cluster: DevCluster, selector: str) -> list[Json]:
    pods, _ = await cluster.store.list("pods", "default", label_selector=selector)
    return pods


def condition(obj: Json, kind: str) -> bool:
    return any(
        c["type"] == kind and c["status"] == "True"
        for c in (obj.get("status") or {}).get("conditions") or []
    )


def test_index_ranges_round_trip() -> None:
    assert format_indexes({0, 1, 2, 5, 7, 8}) == "0-2,5,7-8"
    assert parse_indexes("0-2,5,7-8") == {0, 1, 2, 5, 7, 8}
    assert parse_indexes("") == set()


def test_job_runs_parallelism_pods_until_completions() -> None:
    async def check(cluster: DevCluster, clock: ManualClock) -> None:
        created = await cluster.store.create("jobs", job("train", parallelism=2, completions=5))
        uid = created["metadata"]["uid"]

        async def two_running() -> bool:
            pods = await pods_of(cluster, "job-name=train")
            return sum(p["status"]["phase"] == "Running" for p in pods) == 2

        await cluster.wait_for(two_running)
        pods = await pods_of(cluster, "job-name=train")
        assert len(pods) == 2
        for p in pods:
            labels = p["metadata"]["labels"]
            assert labels["batch.kubernetes.io/job-name"] == "train"
            assert labels["controller-uid"] == uid
            (owner,) = p["metadata"]["ownerReferences"]
            assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
                "Job",
                "train",
                uid,
                True,
            )
            assert p["metadata"]["name"].startswith("train-")

        async def complete() -> Json | None:
            j = await cluster.store.get("jobs", "default", "train")
            return j if condition(j, "Complete") else None

        j = await until(cluster, clock, complete)
        assert j["status"]["succeeded"] == 5
        assert j["status"].get("failed", 0) == 0
        assert j["status"]["active"] == 0
        assert j["status"]["completionTime"]
        pods = await pods_of(cluster, "job-name=train")
        assert len(pods) == 5  # never a surplus pod
        assert all(p["status"]["phase"] == "Succeeded" for p in pods)
        # Counted pods lose the tracking finalizer, so they can be deleted.
        assert not any(TRACKING_FINALIZER in (p["metadata"].get("finalizers") or []) for p in pods)

    run(check)


def test_job_fails_after_backoff_limit() -> None:
    async def check(cluster: DevCluster, clock: ManualClock) -> None:
        await cluster.store.create("jobs", job("bad", exit_code=1, extra={"backoffLimit": 2}))

        async def failed() -> Json | None:
            j = await cluster.store.get("jobs", "default", "bad")
            return j if condition(j, "Failed") else None

        j = await until(cluster, clock, failed)
        assert j["status"]["failed"] == 3
        reasons = {c["type"]: c.get("reason") for c in j["status"]["conditions"]}
        assert reasons["Failed"] == "BackoffLimitExceeded"
        assert len(await pods_of(cluster, "job-name=bad")) == 3

    run(check)


def test_indexed_job_gives_each_pod_its_index() -> None:
    async def check(cluster: DevCluster, clock: ManualClock) -> None:
        body = job("idx", parallelism=3, completions=3, extra={"completionMode": "Indexed"})
        await cluster.store.create("jobs", body)

        async def three() -> list[Json] | None:
            pods = await pods_of(cluster, "job-name=idx")
            return pods if len(pods) == 3 else None

        pods = await cluster.wait_for(three)
        indexes = sorted(
            p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] for p in pods
        )
        assert indexes == ["0", "1", "2"]
        for p in pods:
            index = p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]
            assert p["spec"]["hostname"] == f"idx-{index}"
            env = p["spec"]["containers"][0]["env"]
            assert {"name": "JOB_COMPLETION_INDEX", "value": index} in env

        async def complete() -> Json | None:
            j = await cluster.store.get("jobs", "default", "idx")
            return j if condition(j, "Complete") else None

        j = await until(cluster, clock, complete)
        assert j["status"]["completedIndexes"] == "0-2"

    run(check)


def test_kai_scheduler_pods_stay_pending_until_bound() -> None:
    async def check(cluster: DevCluster, clock: ManualClock) -> None:
        await cluster.store.create(
            "jobs", job("kai", gpus=1, scheduler=keys.DEFAULT_SCHEDULER_NAME)
        )

        async def one() -> list[Json] | None:
            pods = await pods_of(cluster, "job-name=kai")
            return pods if pods else None

        (p,) = await cluster.wait_for(one)
        assert p["spec"]["schedulerName"] == keys.DEFAULT_SCHEDULER_NAME
        await asyncio.sleep(0.05)
        p = await cluster.store.get("pods", "default", p["metadata"]["name"])
        assert p["status"]["phase"] == "Pending" and not p["spec"].get("nodeName")
        # What kai-scheduler's binder does: the Binding subresource.
        await cluster.store.bind_pod("default", p["metadata"]["name"], "gpu-1")
        p = await cluster.wait_pod_phase("default", p["metadata"]["name"], "Running")
        assert p["metadata"]["annotations"][ann.VISIBLE_DEVICES].startswith("GPU-")

    run(check)


def test_suspended_job_makes_no_pods() -> None:
    async def check(cluster: DevCluster, clock: ManualClock) -> None:
        await cluster.store.create("jobs", job("later", extra={"suspend": True}))

        async def suspended() -> Json | None:
            j = await cluster.store.get("jobs", "default", "later")
            return j if condition(j, "Suspended") else None

        await cluster.wait_for(suspended)
        assert await pods_of(cluster, "job-name=later") == []
        await cluster.store.patch("jobs", "default", "later", {"spec": {"suspend": False}})

        async def made() -> bool:
            return len(await pods_of(cluster, "job-name=later")) == 1

        await cluster.wait_for(made)

    run(check)


def test_deployment_makes_a_replicaset_and_scales() -> None:
    async def check(cluster: DevCluster, clock: ManualClock) -> None:
        await cluster.store.create("deployments", deployment("web", 3))

        async def ready(count: int) -> Json | None:
            d = await cluster.store.get("deployments", "default", "web")
            status = d.get("status") or {}
            pods = [
                p
                for p in await pods_of(cluster, "app=web")
                if not p["metadata"].get("deletionTimestamp")
            ]
            ok = status.get("readyReplicas") == count and len(pods) == count
            return d if ok else None

        d = await cluster.wait_for(lambda: ready(3))
        assert condition(d, "Available")
        (rs,) = (await cluster.store.list("replicasets", "default"))[0]
        pod_hash = rs["metadata"]["labels"][HASH_LABEL]
        assert rs["metadata"]["name"] == f"web-{pod_hash}"
        assert rs["metadata"]["ownerReferences"][0]["kind"] == "Deployment"
        for p in await pods_of(cluster, "app=web"):
            assert p["metadata"]["labels"][HASH_LABEL] == pod_hash
            assert p["metadata"]["ownerReferences"][0]["name"] == rs["metadata"]["name"]
            assert p["status"]["phase"] == "Running"  # placed by the default scheduler
        await cluster.store.patch("deployments", "default", "web", {"spec": {"replicas": 5}})
        await cluster.wait_for(lambda: ready(5))
        await cluster.store.patch("deployments", "default", "web", {"spec": {"replicas": 1}})
        await cluster.wait_for(lambda: ready(1))

    run(check)


def test_deployment_rolls_out_a_new_template() -> None:
    async def check(cluster: DevCluster, clock: ManualClock) -> None:
        await cluster.store.create("deployments", deployment("web", 4))

        async def settled(image: str) -> list[Json] | None:
            pods = [
                p
                for p in await pods_of(cluster, "app=web")
                if not p["metadata"].get("deletionTimestamp")
            ]
            images = {p["spec"]["containers"][0]["image"] for p in pods}
            running = all(p["status"]["phase"] == "Running" for p in pods)
            return pods if len(pods) == 4 and images == {image} and running else None

        await cluster.wait_for(lambda: settled("nginx:1.27"))
        await cluster.store.patch(
            "deployments",
            "default",
            "web",
            {
                "spec": {
                    "template": {
                        "spec": {
                            "containers": [
                                {
                                    "name": "web",
                                    "image": "nginx:1.28",
                                    "resources": {"requests": {"cpu": "100m"}},
                                }
                            ]
                        }
                    }
                }
            },
        )
        await cluster.wait_for(lambda: settled("nginx:1.28"))
        sets, _ = await cluster.store.list("replicasets", "default")
        assert sorted(rs["spec"]["replicas"] for rs in sets) == [0, 4]
        d = await cluster.store.get("deployments", "default", "web")
        assert d["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "2"

    run(check)


def test_default_scheduler_explains_and_retries() -> None:
    async def check(cluster: DevCluster, clock: ManualClock) -> None:
        big = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "big", "namespace": "default"},
            "spec": {
                "containers": [
                    {
                        "name": "main",
                        "image": "busybox",
                        "resources": {"limits": {keys.GPU_RESOURCE: "4"}},
                    }
                ]
            },
        }
        await cluster.store.create(
            "pods", {**big, "metadata": {"name": "a", "namespace": "default"}}
        )
        await cluster.store.create(
            "pods", {**big, "metadata": {"name": "b", "namespace": "default"}}
        )
        await cluster.wait_pod_phase("default", "a", "Running")
        await cluster.wait_pod_phase("default", "b", "Running")
        await cluster.store.create("pods", big)

        async def unschedulable() -> str | None:
            p = await cluster.store.get("pods", "default", "big")
            for c in p["status"].get("conditions") or []:
                if c["type"] == "PodScheduled" and c["status"] == "False":
                    return str(c["message"])
            return None

        message = await cluster.wait_for(unschedulable)
        assert message == "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
        await cluster.store.delete("pods", "default", "a")
        p = await cluster.wait_pod_phase("default", "big", "Running")
        assert p["spec"]["nodeName"] == "gpu-0"

    run(check)


def test_a_gated_pod_is_not_bound_until_its_gates_are_removed() -> None:
    async def check(cluster: DevCluster, clock: ManualClock) -> None:
        gated = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "gated", "namespace": "default"},
            "spec": {
                "schedulingGates": [{"name": "example.com/wait"}],
                "containers": [{"name": "main", "image": "busybox"}],
            },
        }
        created = await cluster.store.create("pods", gated)
        (scheduled,) = created["status"]["conditions"]
        assert (scheduled["type"], scheduled["status"], scheduled["reason"]) == (
            "PodScheduled",
            "False",
            "SchedulingGated",
        )
        with pytest.raises(ApiError) as refused:  # as kube-apiserver answers
            await cluster.store.bind_pod("default", "gated", "gpu-0")
        assert refused.value.code == 409
        assert "pod gated has non-empty .spec.schedulingGates" in refused.value.message
        await asyncio.sleep(0.2)  # the default scheduler leaves it alone
        assert not (await cluster.store.get("pods", "default", "gated"))["spec"].get("nodeName")
        await cluster.store.patch("pods", "default", "gated", {"spec": {"schedulingGates": None}})
        await cluster.wait_pod_phase("default", "gated", "Running")

    run(check)


def test_job_active_deadline_and_ttl_after_finished() -> None:
    async def check(cluster: DevCluster, clock: ManualClock) -> None:
        body = job(
            "slow",
            seconds="100",
            extra={
                "activeDeadlineSeconds": 10,
                "ttlSecondsAfterFinished": 30,
            },
        )
        await cluster.store.create("jobs", body)

        async def failed() -> Json | None:
            j = await cluster.store.get("jobs", "default", "slow")
            return j if condition(j, "Failed") else None

        j = await until(cluster, clock, failed)
        reasons = {c["type"]: c.get("reason") for c in j["status"]["conditions"]}
        assert reasons["Failed"] == "DeadlineExceeded"
        pods = await pods_of(cluster, "job-name=slow")
        assert all(
            p["status"]["phase"] == "Failed" or p["metadata"].get("deletionTimestamp") for p in pods
        )

        async def deleted() -> bool:
            jobs, _ = await cluster.store.list("jobs", "default")
            return not jobs

        clock.advance(29)
        await asyncio.sleep(0.05)
        assert not await deleted()
        await until(cluster, clock, deleted)

    run(check)


def statefulset(name: str, replicas: int, policy: str = "OrderedReady") -> Json:
    body = deployment(name, replicas)
    body["kind"] = "StatefulSet"
    body["spec"].update(
        {
            "serviceName": name,
            "podManagementPolicy": policy,
            "volumeClaimTemplates": [
                {
                    "metadata": {"name": "data"},
                    "spec": {
                        "accessModes": ["ReadWriteOnce"],
                        "resources": {"requests": {"storage": "1Gi"}},
                    },
                }
            ],
        }
    )
    return body


async def _pod_events(watch: Any) -> list[tuple[str, Json]]:
    """What a watch has seen so far (it stops at the first pause)."""
    events: list[tuple[str, Json]] = []
    while True:
        try:
            events.append(await asyncio.wait_for(watch.__anext__(), 0.2))
        except TimeoutError:
            return events


def _running_and_ready(pod: Json) -> bool:
    ready = any(
        c["type"] == "Ready" and c["status"] == "True"
        for c in pod.get("status", {}).get("conditions") or []
    )
    return pod.get("status", {}).get("phase") == "Running" and ready


async def _statefulset_ready(cluster: DevCluster, name: str, count: int) -> Json | None:
    sts = await cluster.store.get("statefulsets", "default", name)
    status = sts.get("status") or {}
    live = [
        p
        for p in await pods_of(cluster, f"app={name}")
        if not p["metadata"].get("deletionTimestamp")
    ]
    ok = status.get("readyReplicas") == count == len(live) and status.get("replicas") == count
    return sts if ok else None


def test_statefulset_makes_its_pods_in_order_with_their_claims() -> None:
    async def check(cluster: DevCluster, clock: ManualClock) -> None:
        watch = cluster.store.watch("pods", "default")
        created = await cluster.store.create("statefulsets", statefulset("db", 3))
        sts = await cluster.wait_for(lambda: _statefulset_ready(cluster, "db", 3))
        pods = sorted(await pods_of(cluster, "app=db"), key=lambda p: p["metadata"]["name"])
        assert [p["metadata"]["name"] for p in pods] == ["db-0", "db-1", "db-2"]
        revision = sts["status"]["updateRevision"]
        for ordinal, pod in enumerate(pods):
            name = f"db-{ordinal}"
            labels = pod["metadata"]["labels"]
            assert labels["statefulset.kubernetes.io/pod-name"] == name
            assert labels["apps.kubernetes.io/pod-index"] == str(ordinal)
            assert labels["controller-revision-hash"] == revision
            (owner,) = pod["metadata"]["ownerReferences"]
            assert (owner["kind"], owner["uid"]) == ("StatefulSet", created["metadata"]["uid"])
            assert (pod["spec"]["hostname"], pod["spec"]["subdomain"]) == (name, "db")
            claim = f"data-db-{ordinal}"
            assert {"name": "data", "persistentVolumeClaim": {"claimName": claim}} in pod["spec"][
                "volumes"
            ]
            pvc = await cluster.store.get("persistentvolumeclaims", "default", claim)
            assert pvc["metadata"]["labels"] == {"app": "db"}
            assert pvc["spec"]["resources"] == {"requests": {"storage": "1Gi"}}
        status = sts["status"]
        assert (status["currentReplicas"], status["updatedReplicas"]) == (3, 3)
        assert status["availableReplicas"] == 3 and status["currentRevision"] == revision
        # OrderedReady: each pod was made only after the one before it ran and was ready.
        ready_seen: set[str] = set()
        for kind, pod in await _pod_events(watch):
            name = pod["metadata"]["name"]
            if kind == "ADDED" and name != "db-0":
                assert f"db-{int(name[-1]) - 1}" in ready_seen, name
            if _running_and_ready(pod):
                ready_seen.add(name)
        watch.close()

    run(check)


def test_statefulset_parallel_scales_recreates_and_keeps_claims() -> None:
    async def check(cluster: DevCluster, clock: ManualClock) -> None:
        await cluster.store.create("statefulsets", statefulset("db", 3, "Parallel"))
        await cluster.wait_for(lambda: _statefulset_ready(cluster, "db", 3))
        await cluster.store.patch("statefulsets", "default", "db", {"spec": {"replicas": 1}})
        await cluster.wait_for(lambda: _statefulset_ready(cluster, "db", 1))
        (pod,) = await pods_of(cluster, "app=db")
        assert pod["metadata"]["name"] == "db-0"
        claims, _ = await cluster.store.list("persistentvolumeclaims", "default")
        assert sorted(c["metadata"]["name"] for c in claims) == [
            "data-db-0",
            "data-db-1",
            "data-db-2",
        ]
        await cluster.store.delete("pods", "default", "db-0", grace_period_seconds=0)

        async def recreated() -> Json | None:
            pods = await pods_of(cluster, "app=db")
            fresh = [p for p in pods if p["metadata"]["uid"] != pod["metadata"]["uid"]]
            return fresh[0] if fresh and _running_and_ready(fresh[0]) else None

        again = await cluster.wait_for(recreated)
        assert again["metadata"]["name"] == "db-0"
        await cluster.store.patch("statefulsets", "default", "db", {"spec": {"replicas": 2}})
        await cluster.wait_for(lambda: _statefulset_ready(cluster, "db", 2))

    run(check)


def test_statefulset_rolls_a_new_template_out() -> None:
    async def check(cluster: DevCluster, clock: ManualClock) -> None:
        await cluster.store.create("statefulsets", statefulset("db", 2))
        first = await cluster.wait_for(lambda: _statefulset_ready(cluster, "db", 2))
        template = {"metadata": {"labels": {"app": "db", "v": "2"}}}
        await cluster.store.patch("statefulsets", "default", "db", {"spec": {"template": template}})

        async def rolled() -> Json | None:
            sts = await _statefulset_ready(cluster, "db", 2)
            if sts is None or sts["status"]["updateRevision"] == first["status"]["updateRevision"]:
                return None
            pods = await pods_of(cluster, "app=db")
            done = all(p["metadata"]["labels"].get("v") == "2" for p in pods)
            return (
                sts
                if done and sts["status"]["currentRevision"] == sts["status"]["updateRevision"]
                else None
            )

        sts = await cluster.wait_for(rolled)
        assert sts["status"]["updatedReplicas"] == 2
        # A partition keeps the pods below it on their revision.
        template = {"metadata": {"labels": {"app": "db", "v": "3"}}}
        strategy = {"type": "RollingUpdate", "rollingUpdate": {"partition": 1}}
        await cluster.store.patch(
            "statefulsets",
            "default",
            "db",
            {"spec": {"template": template, "updateStrategy": strategy}},
        )

        async def partly() -> Json | None:
            pods = {p["metadata"]["name"]: p for p in await pods_of(cluster, "app=db")}
            versions = {n: p["metadata"]["labels"].get("v") for n, p in pods.items()}
            ready = all(_running_and_ready(p) for p in pods.values())
            return pods if ready and versions == {"db-0": "2", "db-1": "3"} else None

        await cluster.wait_for(partly)
        for _ in range(5):
            clock.advance(1)
            await asyncio.sleep(0.05)
        pods = await pods_of(cluster, "app=db")
        assert sorted(p["metadata"]["labels"]["v"] for p in pods) == ["2", "3"]

    run(check)
