"""The pinned bind in process, against the emulated cluster, BindRequests written by hand:
what happens when an allowed card is taken by a pod the scheduler could not see."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import config as k8s_config
from operator_helpers import wait_for

from kai_py.api import keys
from kai_py.apiclient.kube import Kube
from kai_py.binder.binding import Binder, BinderConfig
from kai_py.binder.pinned_binding import BLOCKER_LABEL, sweep_blockers
from kai_py.emulator.cluster_spec import gpu_uuid, parse_cluster
from kai_py.emulator.dev_cluster import ThreadedDevCluster

NS = "team-a"
NODE = "gpu-0"
CLUSTER = {"nodes": [{"name": "gpu", "count": 1, "gpus": 4}], "namespaces": [NS]}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ThreadedDevCluster]:
    with ThreadedDevCluster(
        parse_cluster(CLUSTER, "test"), kubeconfig_path=tmp_path / "kubeconfig"
    ) as running:
        yield running


def _pod(name: str, cards: list[str], node: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": "kai-scheduler" if node is None else "default-scheduler",
        "containers": [
            {"name": "c", "image": "x", "resources": {"limits": {keys.GPU_RESOURCE: "1"}}}
        ],
    }
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NS,
            "annotations": {keys.USE_GPU_UUID_ANNOTATION: ",".join(cards)} if cards else {},
        },
        "spec": spec,
    }


def _bind_request(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.run.ai/v1alpha2",
        "kind": "BindRequest",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "podName": name,
            "selectedNode": NODE,
            "receivedResourceType": "Regular",
            "receivedGPU": {"count": 1, "portion": "1"},
            "backoffLimit": 3,
        },
    }


def test_a_pinned_card_held_by_an_unseen_pod_rolls_back_then_binds(
    cluster: ThreadedDevCluster,
) -> None:
    store = cluster.store
    card = [gpu_uuid(NODE, i) for i in range(4)]
    # Another scheduler's pod already holds card 0 (the plugin's first choice).
    cluster.call(store.create("pods", _pod("holder", [], node=NODE)))
    wait_for(
        lambda: (
            (cluster.call(store.get("pods", NS, "holder")).get("status") or {}).get("phase")
            == "Running"
        ),
        10,
        "holder Running",
    )
    cluster.call(store.create("pods", _pod("pinned", [card[0]])))
    br = cluster.call(store.create("bindrequests", _bind_request("pinned")))
    kube = Kube(k8s_config.new_client_from_config(config_file=cluster.kubeconfig_path))
    binder = Binder(kube, BinderConfig(reservation_timeout=10, poll_interval=0.05))

    outcome = binder.reconcile(br)
    assert outcome.phase == "Pending"  # retried later
    assert f"card(s) {card[0]} on node {NODE} are held by other pods" in outcome.reason
    assert not cluster.call(store.get("pods", NS, "pinned"))["spec"].get("nodeName")

    def blockers() -> list[dict[str, Any]]:
        pods, _ = cluster.call(store.list("pods", keys.RESERVATION_NAMESPACE))
        return [p for p in pods if (p["metadata"].get("labels") or {}).get(BLOCKER_LABEL)]

    wait_for(lambda: not blockers(), 10, "the failed attempt's blockers gone")

    # The holder leaves: the next attempt lands the pod on card 0, with 4 blockers.
    cluster.call(store.delete("pods", NS, "holder", grace_period_seconds=0))
    outcome = binder.reconcile(cluster.call(store.get("bindrequests", NS, "pinned")))
    assert outcome.phase == "Succeeded", outcome.reason
    pod = wait_for(
        lambda: (lambda p: p if (p.get("status") or {}).get("phase") == "Running" else None)(
            cluster.call(store.get("pods", NS, "pinned"))
        ),
        10,
        "pinned Running",
    )
    assert pod["metadata"]["annotations"]["kai-py.dev/visible-devices"] == card[0]
    assert pod["metadata"]["annotations"][keys.GPU_UUIDS_ANNOTATION] == card[0]
    wait_for(lambda: not blockers(), 10, "no blocker left")


def test_blocker_sweep_keeps_this_process_s_live_blockers(cluster: ThreadedDevCluster) -> None:
    from kai_py.binder.pinned_binding import INSTANCE, blocker_manifest

    store = cluster.store
    mine = blocker_manifest(
        NODE, "a/b", 0, image="x", namespace=keys.RESERVATION_NAMESPACE, ttl=600, now=2e9
    )
    theirs = blocker_manifest(
        NODE, "a/b", 1, image="x", namespace=keys.RESERVATION_NAMESPACE, ttl=600, now=2e9
    )
    theirs["metadata"]["annotations"]["kai.scheduler/blocker-holder"] = "someone-else"
    expired = blocker_manifest(
        NODE, "a/b", 2, image="x", namespace=keys.RESERVATION_NAMESPACE, ttl=1, now=0
    )
    assert mine["metadata"]["annotations"]["kai.scheduler/blocker-holder"] == INSTANCE
    for body in (mine, theirs, expired):
        cluster.call(store.create("pods", body))
    kube = Kube(k8s_config.new_client_from_config(config_file=cluster.kubeconfig_path))
    ns = keys.RESERVATION_NAMESPACE
    assert sweep_blockers(kube, ns, startup=False, now=2e9) == [expired["metadata"]["name"]]
    assert sweep_blockers(kube, ns, startup=True, now=2e9) == [theirs["metadata"]["name"]]


def test_a_standby_leaves_the_leader_s_blockers_and_sweeps_them_once_it_leads(
    cluster: ThreadedDevCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replica that starts while another leads must not delete the leader's blockers
    (its start-up sweep did: they belong to another process); it deletes them at the
    start of its own term, when the old leader no longer binds."""
    import asyncio

    from kai_py.binder.pinned_binding import blocker_manifest
    from kai_py.controllers import leadership, pinning
    from kai_py.controllers.settings import OperatorSettings

    theirs = blocker_manifest(
        NODE, "a/b", 1, image="x", namespace=keys.RESERVATION_NAMESPACE, ttl=600, now=4e9
    )
    theirs["metadata"]["annotations"]["kai.scheduler/blocker-holder"] = "the-leader"
    cluster.call(cluster.store.create("pods", theirs))
    name = theirs["metadata"]["name"]

    def present() -> bool:
        pods, _ = cluster.call(cluster.store.list("pods", keys.RESERVATION_NAMESPACE))
        return any(p["metadata"]["name"] == name for p in pods)

    monkeypatch.setenv("KUBECONFIG", str(cluster.kubeconfig_path))
    leadership.configure(OperatorSettings(leader_elect=True))

    async def main() -> None:
        memo: dict[str, Any] = {}
        await pinning.start(memo)  # a standby
        try:
            await asyncio.sleep(0.3)
            assert present()
            leadership.current().set(True)  # its term starts
            for _ in range(50):
                if not present():
                    break
                await asyncio.sleep(0.1)
            assert not present()
        finally:
            await pinning.stop(memo)

    try:
        asyncio.run(main())
    finally:
        leadership.configure(OperatorSettings())
