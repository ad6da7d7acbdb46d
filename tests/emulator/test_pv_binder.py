"""The PersistentVolume binder in process: static binding, waiting classes, provisioning,
reclaiming, and the Events a user reads with ``kubectl describe``."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from kai_py.emulator.cluster_spec import parse_cluster
from kai_py.emulator.controllers.volumes import (
    BIND_COMPLETED,
    BOUND_BY_CONTROLLER,
    PROVISIONED_BY,
    SELECTED_NODE,
)
from kai_py.emulator.dev_cluster import DevCluster
from kai_py.emulator.storage.errors import ApiError
from kai_py.emulator.timesource import ManualClock

Json = dict[str, Any]
SPEC = parse_cluster({"nodes": [{"name": "cpu", "count": 2, "cpu": "4", "memory": "8Gi"}]})


def run(test: Callable[[DevCluster], Awaitable[None]]) -> None:
    async def main() -> None:
        async with DevCluster(SPEC, clock=ManualClock()) as cluster:
            await test(cluster)

    asyncio.run(asyncio.wait_for(main(), 30))


async def until(check: Callable[[], Awaitable[Any]], timeout: float = 5.0) -> Any:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        result = await check()
        if result:
            return result
        if loop.time() > deadline:
            raise TimeoutError("condition not met")
        await asyncio.sleep(0.02)


def pv(
    name: str,
    size: str = "1Gi",
    cls: str | None = "manual",
    modes: tuple[str, ...] = ("ReadWriteOnce",),
    **spec: Any,
) -> Json:
    labels = spec.pop("labels", {})
    body: Json = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "capacity": {"storage": size},
            "accessModes": list(modes),
            "hostPath": {"path": "/tmp"},
            **spec,
        },
    }
    if cls is not None:
        body["spec"]["storageClassName"] = cls
    return body


def pvc(
    name: str,
    size: str = "1k",
    cls: str | None = "manual",
    modes: tuple[str, ...] = ("ReadWriteOnce",),
    **spec: Any,
) -> Json:
    body: Json = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "accessModes": list(modes),
            "resources": {"requests": {"storage": size}},
            **spec,
        },
    }
    if cls is not None:
        body["spec"]["storageClassName"] = cls
    return body


def storage_class(name: str, provisioner: str, mode: str = "Immediate", **extra: Any) -> Json:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": name},
        "provisioner": provisioner,
        "volumeBindingMode": mode,
        **extra,
    }


async def claim(cluster: DevCluster, name: str) -> Json:
    return await cluster.store.get("persistentvolumeclaims", "default", name)


async def volume(cluster: DevCluster, name: str) -> Json:
    return await cluster.store.get("persistentvolumes", None, name)


def phase(obj: Json) -> str:
    return str((obj.get("status") or {}).get("phase"))


async def bound(cluster: DevCluster, name: str) -> Json | None:
    c = await claim(cluster, name)
    return c if phase(c) == "Bound" else None


async def events_of(cluster: DevCluster, name: str) -> list[tuple[str, str]]:
    items, _ = await cluster.store.list("events", "default")
    return [(e["reason"], e["message"]) for e in items if e["involvedObject"].get("name") == name]


def test_a_claim_of_a_class_with_no_storageclass_binds_to_the_smallest_fitting_volume() -> None:
    async def body(cluster: DevCluster) -> None:
        for v in (
            pv("big", "10Gi"),
            pv("small", "1Gi"),
            pv("tiny", "500"),  # smaller than the request
            pv("other-class", "1Gi", cls="fast"),
            pv("no-class", "1Gi", cls=None),
            pv("rwx", "1Gi", modes=("ReadWriteMany",)),
        ):
            await cluster.store.create("persistentvolumes", v)
        await cluster.store.create("persistentvolumeclaims", pvc("data"))
        c = await until(lambda: bound(cluster, "data"))
        assert c["spec"]["volumeName"] == "small"
        assert c["metadata"]["annotations"][BIND_COMPLETED] == "yes"
        assert c["metadata"]["annotations"][BOUND_BY_CONTROLLER] == "yes"
        assert c["status"]["capacity"] == {"storage": "1Gi"}
        assert c["status"]["accessModes"] == ["ReadWriteOnce"]
        v = await until(
            lambda: _phase_is(cluster, "small", "Bound"),
        )
        ref = v["spec"]["claimRef"]
        assert ref["kind"] == "PersistentVolumeClaim" and ref["apiVersion"] == "v1"
        assert (ref["namespace"], ref["name"], ref["uid"]) == (
            "default",
            "data",
            c["metadata"]["uid"],
        )
        assert ref["resourceVersion"]
        assert v["metadata"]["annotations"][BOUND_BY_CONTROLLER] == "yes"
        for other in ("big", "tiny", "other-class", "no-class", "rwx"):
            left = await until(lambda o=other: _phase_is(cluster, o, "Available"))
            assert "claimRef" not in left["spec"]

    run(body)


async def _phase_is(cluster: DevCluster, name: str, want: str) -> Json | None:
    v = await volume(cluster, name)
    return v if phase(v) == want else None


def test_selector_volume_mode_and_prebinding_are_honoured() -> None:
    async def body(cluster: DevCluster) -> None:
        await cluster.store.create("persistentvolumes", pv("a", "1Gi", labels={"tier": "a"}))
        await cluster.store.create("persistentvolumes", pv("b", "5Gi", labels={"tier": "b"}))
        await cluster.store.create("persistentvolumes", pv("block", "1Gi", volumeMode="Block"))
        await cluster.store.create(
            "persistentvolumes",
            pv("reserved", "9Gi", claimRef={"namespace": "default", "name": "mine"}),
        )
        await cluster.store.create(
            "persistentvolumeclaims", pvc("picky", selector={"matchLabels": {"tier": "b"}})
        )
        await cluster.store.create("persistentvolumeclaims", pvc("raw", volumeMode="Block"))
        await cluster.store.create("persistentvolumeclaims", pvc("mine"))
        await cluster.store.create("persistentvolumeclaims", pvc("named", volumeName="a"))
        assert (await until(lambda: bound(cluster, "picky")))["spec"]["volumeName"] == "b"
        assert (await until(lambda: bound(cluster, "raw")))["spec"]["volumeName"] == "block"
        # A volume pre-bound to the claim wins over a smaller one.
        assert (await until(lambda: bound(cluster, "mine")))["spec"]["volumeName"] == "reserved"
        named = await until(lambda: bound(cluster, "named"))
        # The user named the volume: only bind-completed is the controller's.
        assert BOUND_BY_CONTROLLER not in named["metadata"]["annotations"]
        assert named["metadata"]["annotations"][BIND_COMPLETED] == "yes"

    run(body)


def test_a_claim_with_no_match_waits_with_an_event_and_binds_when_a_volume_comes() -> None:
    async def body(cluster: DevCluster) -> None:
        await cluster.store.create("persistentvolumeclaims", pvc("late", cls=""))
        await cluster.store.create("persistentvolumeclaims", pvc("nosc", cls="missing"))
        want = (
            "FailedBinding",
            "no persistent volumes available for this claim and no storage class is set",
        )
        await until(lambda: _has_event(cluster, "late", want))
        await until(
            lambda: _has_event(
                cluster,
                "nosc",
                ("ProvisioningFailed", 'storageclass.storage.k8s.io "missing" not found'),
            )
        )
        assert phase(await claim(cluster, "late")) == "Pending"
        await cluster.store.create("persistentvolumes", pv("later", cls=""))
        assert (await until(lambda: bound(cluster, "late")))["spec"]["volumeName"] == "later"

    run(body)


async def _has_event(cluster: DevCluster, name: str, want: tuple[str, str]) -> bool:
    return want in await events_of(cluster, name)


def test_deleting_a_bound_claim_releases_or_deletes_its_volume() -> None:
    async def body(cluster: DevCluster) -> None:
        await cluster.store.create("persistentvolumes", pv("keep", "1Gi"))
        await cluster.store.create(
            "persistentvolumes", pv("drop", "2Gi", persistentVolumeReclaimPolicy="Delete")
        )
        await cluster.store.create("persistentvolumeclaims", pvc("one"))
        await until(lambda: bound(cluster, "one"))
        await cluster.store.create("persistentvolumeclaims", pvc("two"))
        assert (await until(lambda: bound(cluster, "two")))["spec"]["volumeName"] == "drop"
        await cluster.store.delete("persistentvolumeclaims", "default", "one")
        released = await until(lambda: _phase_is(cluster, "keep", "Released"))
        assert released["spec"]["claimRef"]["name"] == "one"  # Retain keeps the reference
        await cluster.store.delete("persistentvolumeclaims", "default", "two")

        async def gone() -> bool:
            try:
                await volume(cluster, "drop")
            except ApiError as exc:
                return exc.code == 404
            return False

        await until(gone)
        # A Released volume is not bound again to a new claim of the same name.
        await cluster.store.create("persistentvolumeclaims", pvc("one"))
        await asyncio.sleep(0.3)
        assert phase(await claim(cluster, "one")) == "Pending"

    run(body)


def test_deleting_the_volume_of_a_bound_claim_makes_the_claim_lost() -> None:
    async def body(cluster: DevCluster) -> None:
        await cluster.store.create("persistentvolumes", pv("v"))
        await cluster.store.create("persistentvolumeclaims", pvc("c"))
        await until(lambda: bound(cluster, "c"))
        await cluster.store.delete("persistentvolumes", None, "v")

        async def lost() -> bool:
            return phase(await claim(cluster, "c")) == "Lost"

        await until(lost)
        want = (
            "ClaimLost",
            "Bound claim has lost its PersistentVolume. Data on the volume is lost!",
        )
        await until(lambda: _has_event(cluster, "c", want))

    run(body)


def test_a_waiting_class_binds_on_the_selected_node_or_provisions_there() -> None:
    async def body(cluster: DevCluster) -> None:
        nodes, _ = await cluster.store.list("nodes")
        first, second = sorted(n["metadata"]["name"] for n in nodes)
        await cluster.store.create(
            "storageclasses",
            storage_class("local", "kubernetes.io/no-provisioner", "WaitForFirstConsumer"),
        )
        await cluster.store.create(
            "storageclasses", storage_class("dyn", "example.com/csi", "WaitForFirstConsumer")
        )
        pinned = {
            "required": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "kubernetes.io/hostname", "operator": "In", "values": [second]}
                        ]
                    }
                ]
            }
        }
        await cluster.store.create(
            "persistentvolumes", pv("on-second", cls="local", nodeAffinity=pinned)
        )
        await cluster.store.create("persistentvolumeclaims", pvc("wait", cls="local"))
        want = ("WaitForFirstConsumer", "waiting for first consumer to be created before binding")
        await until(lambda: _has_event(cluster, "wait", want))
        assert phase(await claim(cluster, "wait")) == "Pending"
        # The scheduler chose the other node: the volume there does not fit.
        await cluster.store.patch(
            "persistentvolumeclaims",
            "default",
            "wait",
            {"metadata": {"annotations": {SELECTED_NODE: first}}},
        )
        await asyncio.sleep(0.3)
        assert phase(await claim(cluster, "wait")) == "Pending"
        await cluster.store.patch(
            "persistentvolumeclaims",
            "default",
            "wait",
            {"metadata": {"annotations": {SELECTED_NODE: second}}},
        )
        assert (await until(lambda: bound(cluster, "wait")))["spec"]["volumeName"] == "on-second"

        await cluster.store.create(
            "persistentvolumeclaims",
            pvc("made", size="3Gi", cls="dyn"),
        )
        await cluster.store.patch(
            "persistentvolumeclaims",
            "default",
            "made",
            {"metadata": {"annotations": {SELECTED_NODE: first}}},
        )
        c = await until(lambda: bound(cluster, "made"))
        v = await volume(cluster, c["spec"]["volumeName"])
        assert v["metadata"]["name"] == f"pvc-{c['metadata']['uid']}"
        assert v["metadata"]["annotations"][PROVISIONED_BY] == "example.com/csi"
        assert v["spec"]["capacity"] == {"storage": "3Gi"}
        assert v["spec"]["persistentVolumeReclaimPolicy"] == "Delete"
        term = v["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]
        assert term["matchExpressions"][0]["values"] == [first]
        # Delete (the class's policy): the made volume goes with its claim.
        await cluster.store.delete("persistentvolumeclaims", "default", "made")

        async def gone() -> bool:
            try:
                await volume(cluster, v["metadata"]["name"])
            except ApiError as exc:
                return exc.code == 404
            return False

        await until(gone)

    run(body)


def test_a_claim_naming_a_volume_that_does_not_fit_waits_and_recycle_frees_a_volume() -> None:
    async def body(cluster: DevCluster) -> None:
        await cluster.store.create(
            "persistentvolumes", pv("tiny", "500", persistentVolumeReclaimPolicy="Recycle")
        )
        await cluster.store.create("persistentvolumeclaims", pvc("big", volumeName="tiny"))
        want = (
            "VolumeMismatch",
            'Cannot bind to requested volume "tiny": requested PV is too small',
        )
        await until(lambda: _has_event(cluster, "big", want))
        assert phase(await claim(cluster, "big")) == "Pending"
        await cluster.store.delete("persistentvolumeclaims", "default", "big")
        await cluster.store.create("persistentvolumeclaims", pvc("fits", size="100"))
        await until(lambda: bound(cluster, "fits"))
        await cluster.store.delete("persistentvolumeclaims", "default", "fits")
        free = await until(lambda: _phase_is(cluster, "tiny", "Available"))
        assert "claimRef" not in free["spec"]
        assert BOUND_BY_CONTROLLER not in (free["metadata"].get("annotations") or {})

    run(body)
