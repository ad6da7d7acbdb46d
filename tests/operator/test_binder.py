"""The binder's Kopf handlers against the emulated cluster, BindRequests written by hand.

One cluster and one operator (KopfRunner, in this process, on a registry of
its own holding only the binder's handlers) serve the whole module; each
test uses pods of its own names.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

import kopf
import pytest
from kopf.testing import KopfRunner
from operator_helpers import wait_for

from kai_py.api import keys
from kai_py.binder import reservation as rsv
from kai_py.binder.binding import BinderConfig
from kai_py.controllers import binder
from kai_py.controllers.webhooks import deviceaccess
from kai_py.emulator.cluster_spec import gpu_uuid, parse_cluster
from kai_py.emulator.dev_cluster import ThreadedDevCluster
from kai_py.emulator.storage.errors import ApiError

NS = "team-b"
RNS = keys.RESERVATION_NAMESPACE
CLUSTER = {
    "nodes": [{"name": "gpu", "count": 2, "gpus": 2, "cpu": "16", "memory": "64Gi"}],
    "namespaces": [NS],
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadedDevCluster]:
    path = tmp_path_factory.mktemp("binder") / "kubeconfig"
    spec = parse_cluster(CLUSTER, "test")
    with ThreadedDevCluster(spec, kubeconfig_path=path, bookmark_interval=1.0) as running:
        yield running


@pytest.fixture(scope="module")
def operator(cluster: ThreadedDevCluster) -> Iterator[KopfRunner]:
    registry = kopf.OperatorRegistry()
    kopf.on.login(registry=registry)(kopf.login_via_client)
    binder.register(registry)
    settings = kopf.OperatorSettings()
    settings.posting.level = logging.WARNING
    settings.scanning.disabled = True
    saved = binder.current_config()
    binder.configure(
        BinderConfig(
            retry_base_delay=0.05, reservation_timeout=10, poll_interval=0.05, sweep_period=3600
        )
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KUBECONFIG", cluster.kubeconfig_path)
        from kubernetes.config import kube_config

        mp.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", cluster.kubeconfig_path)
        for var in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):
            mp.delenv(var, raising=False)
        with KopfRunner(
            ["run", "--standalone", "-A"], registry=registry, settings=settings, timeout=30
        ) as runner:
            yield runner
    binder.configure(saved)
    assert runner.exception is None, runner.output
    assert "Traceback" not in runner.output, runner.output
    if __import__("os").environ.get("KAI_PY_OPERATOR_LOG"):
        print(runner.output)


def get(
    cluster: ThreadedDevCluster, plural: str, ns: str | None, name: str
) -> dict[str, Any] | None:
    try:
        return dict(cluster.call(cluster.store.get(plural, ns, name)))
    except ApiError as exc:
        if exc.code == 404:
            return None
        raise


#: The random part of KAI's ConfigMap prefix, fixed here so that names can be asserted.
TOKEN = "x7b2kq9"


def kai_configmaps(pod_name: str) -> tuple[str, str]:
    """KAI's two GPU ConfigMaps of a pod ``make_pod`` wired as the webhook does."""
    return f"{pod_name}-{TOKEN}-shared-gpu-0", f"{pod_name}-{TOKEN}-shared-gpu-0-evar"


def make_pod(
    name: str,
    *,
    fraction: str | None = None,
    env_ref: str | None = None,
    wired: bool = True,
    legacy: bool = False,
) -> dict[str, Any]:
    """A pod; a shared one wired by the pod webhook's own rules (KAI's two ConfigMaps),
    or, with ``env_ref`` or ``legacy``, reading its card from that ConfigMap or from
    ``<pod>-gpu`` (a pod admitted before kai-py took KAI's names)."""
    container: dict[str, Any] = {
        "name": "main",
        "image": "busybox",
        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
    }
    annotations: dict[str, str] = {"pod-group-name": f"pg-{name}"}
    if fraction:
        annotations[keys.GPU_FRACTION_ANNOTATION] = fraction
    if fraction and wired and (env_ref or legacy):
        container["env"] = [
            {
                "name": "NVIDIA_VISIBLE_DEVICES",
                "valueFrom": {
                    "configMapKeyRef": {
                        "name": env_ref or rsv.default_configmap_name(name),
                        "key": "NVIDIA_VISIBLE_DEVICES",
                    }
                },
            }
        ]
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "annotations": annotations},
        "spec": {"schedulerName": "kai-scheduler", "containers": [container]},
    }
    if fraction and wired and not (env_ref or legacy):
        mutation = deviceaccess.mutate(body, "kai-scheduler", token=lambda: TOKEN)
        assert mutation is not None
        body["spec"] = mutation.spec
        annotations.update(mutation.annotations)
    return body


def make_bindrequest(
    cluster: ThreadedDevCluster,
    pod_name: str,
    node: str,
    *,
    groups: list[str] | None = None,
    portion: str = "0.5",
    backoff_limit: int = 2,
) -> dict[str, Any]:
    pod = get(cluster, "pods", NS, pod_name)
    assert pod is not None
    spec: dict[str, Any] = {
        "podName": pod_name,
        "selectedNode": node,
        "receivedResourceType": "Fraction" if groups else "Regular",
        "receivedGPU": {"count": 1, "portion": portion if groups else "1"},
        "backoffLimit": backoff_limit,
    }
    if groups:
        spec["selectedGPUGroups"] = groups
    return {
        "apiVersion": "scheduling.run.ai/v1alpha2",
        "kind": "BindRequest",
        "metadata": {
            "name": pod_name,
            "namespace": NS,
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Pod", "name": pod_name, "uid": pod["metadata"]["uid"]}
            ],
        },
        "spec": spec,
    }


def create(cluster: ThreadedDevCluster, plural: str, body: dict[str, Any]) -> None:
    cluster.call(cluster.store.create(plural, body))


def phase_of(cluster: ThreadedDevCluster, name: str) -> str | None:
    br = get(cluster, "bindrequests", NS, name)
    return ((br or {}).get("status") or {}).get("phase")


def events(cluster: ThreadedDevCluster, name: str, reason: str) -> list[dict[str, Any]]:
    items, _ = cluster.call(
        cluster.store.list("events", NS, field_selector=f"involvedObject.name={name}")
    )
    return [e for e in items if e.get("reason") == reason]


def running(cluster: ThreadedDevCluster, name: str) -> dict[str, Any] | None:
    pod = get(cluster, "pods", NS, name)
    return pod if pod and (pod.get("status") or {}).get("phase") == "Running" else None


def test_regular_request_binds_the_pod_and_succeeds(
    cluster: ThreadedDevCluster, operator: KopfRunner
) -> None:
    create(cluster, "pods", make_pod("plain"))
    create(cluster, "bindrequests", make_bindrequest(cluster, "plain", "gpu-1"))
    wait_for(lambda: phase_of(cluster, "plain") == "Succeeded", what="BindRequest Succeeded")
    pod = wait_for(lambda: running(cluster, "plain"), what="pod Running")
    assert pod["spec"]["nodeName"] == "gpu-1"
    # A plain bind posts no Event of its own (the scheduler's Scheduled Event names the
    # node; the BindRequest's status is the outcome); binds onto named cards do (below).
    time.sleep(0.5)  # binder Events are posted from a background thread
    assert events(cluster, "plain", "Bound") == []
    # Kopf wrote nothing on the pod.
    meta = pod["metadata"]
    assert not meta.get("finalizers")
    assert not [k for k in meta.get("annotations") or {} if "kopf" in k]


def test_a_pod_bound_already_to_that_node_counts_as_done(
    cluster: ThreadedDevCluster, operator: KopfRunner
) -> None:
    create(cluster, "pods", make_pod("prebound"))
    cluster.call(cluster.store.bind_pod(NS, "prebound", "gpu-0"))
    create(cluster, "bindrequests", make_bindrequest(cluster, "prebound", "gpu-0"))
    wait_for(lambda: phase_of(cluster, "prebound") == "Succeeded", what="Succeeded")


def test_fractions_share_one_reservation_pod_which_goes_with_the_last_of_them(
    cluster: ThreadedDevCluster, operator: KopfRunner
) -> None:
    # Wired as KAI's webhook wires it, by the user's own ConfigMap, and as kai-py
    # wired pods before it took KAI's names (<pod>-gpu): each gets its card.
    create(cluster, "pods", make_pod("half-a", fraction="0.5"))
    create(cluster, "pods", make_pod("half-b", fraction="0.25", env_ref="custom-gpu-env"))
    create(cluster, "pods", make_pod("half-c", fraction="0.25", legacy=True))
    for pod_name, portion in (("half-a", "0.5"), ("half-b", "0.25"), ("half-c", "0.25")):
        br = make_bindrequest(cluster, pod_name, "gpu-0", groups=["g1"], portion=portion)
        create(cluster, "bindrequests", br)
        wait_for(lambda p=pod_name: phase_of(cluster, p) == "Succeeded", what=f"{pod_name} bound")

    name = rsv.reservation_pod_name("gpu-0", "g1")
    assert name == "gpu-reservation-gpu-0-g1"
    reservations, _ = cluster.call(cluster.store.list("pods", RNS))
    assert [p["metadata"]["name"] for p in reservations] == [name]  # one pod for all
    holder = reservations[0]
    assert holder["spec"]["nodeName"] == "gpu-0"
    assert holder["metadata"]["labels"][keys.GPU_GROUP_LABEL] == "g1"
    assert holder["spec"]["containers"][0]["resources"]["limits"][keys.GPU_RESOURCE] == "1"
    uuid = holder["metadata"]["annotations"][keys.RESERVED_GPU_INDEX_ANNOTATION]
    assert uuid.startswith("GPU-") and uuid in {gpu_uuid("gpu-0", i) for i in range(2)}

    first, evar = kai_configmaps("half-a")
    expected = {
        "half-a": {
            first: {
                "NVIDIA_VISIBLE_DEVICES": uuid,
                "GPU_PORTION": "0.5",
                "RUNAI_NUM_OF_GPUS": "0.5",
            },
            evar: {},
        },
        "half-b": {"custom-gpu-env": {"NVIDIA_VISIBLE_DEVICES": uuid, "GPU_PORTION": "0.25"}},
        "half-c": {"half-c-gpu": {"NVIDIA_VISIBLE_DEVICES": uuid, "GPU_PORTION": "0.25"}},
    }
    for pod_name, configmaps in expected.items():
        pod = wait_for(lambda p=pod_name: running(cluster, p), what=f"{pod_name} Running")
        for cm_name, data in configmaps.items():
            cm = get(cluster, "configmaps", NS, cm_name)
            assert cm is not None, cm_name
            assert cm.get("data", {}) == data, cm_name
            assert [
                {k: r.get(k) for k in ("apiVersion", "kind", "name", "uid")}
                for r in cm["metadata"]["ownerReferences"]
            ] == [
                {"apiVersion": "v1", "kind": "Pod", "name": pod_name, "uid": pod["metadata"]["uid"]}
            ]
        assert pod["spec"]["nodeName"] == "gpu-0"
        assert pod["metadata"]["labels"][keys.GPU_GROUP_LABEL] == "g1"
        # What the emulated kubelet gave the containers as NVIDIA_VISIBLE_DEVICES.
        assert pod["metadata"]["annotations"]["kai-py.dev/visible-devices"] == uuid
        # Binder events are posted from a background thread: they may trail the pod.
        bound = wait_for(
            lambda p=pod_name: events(cluster, p, "Bound"), what=f"{pod_name}'s Bound event"
        )
        assert "gpu-0" in bound[0]["message"] and uuid in bound[0]["message"]
    a = get(cluster, "pods", NS, "half-a")
    assert a is not None
    assert (
        a["metadata"]["annotations"]["runai/shared-gpu-configmap"] == f"half-a-{TOKEN}-shared-gpu"
    )
    assert get(cluster, "configmaps", NS, "half-a-gpu") is None  # only KAI's names written
    # The shared pods hold no card of their own: only the reservation pod does.
    assert cluster.cluster.kubelet("gpu-0").plugin.in_use() == 1

    for gone in ("half-a", "half-c"):
        cluster.call(cluster.store.delete("pods", NS, gone))
        wait_for(lambda g=gone: get(cluster, "pods", NS, g) is None, what=f"{gone} gone")
    time.sleep(0.5)
    assert get(cluster, "pods", RNS, name) is not None  # half-b still uses the card
    cluster.call(cluster.store.delete("pods", NS, "half-b"))
    wait_for(lambda: get(cluster, "pods", RNS, name) is None, what="reservation pod deleted")


def test_a_missing_node_fails_after_the_retries_and_rolls_back(
    cluster: ThreadedDevCluster, operator: KopfRunner
) -> None:
    create(cluster, "pods", make_pod("lost", fraction="0.5"))
    create(
        cluster,
        "bindrequests",
        make_bindrequest(cluster, "lost", "no-such-node", groups=["g9"], backoff_limit=2),
    )
    wait_for(lambda: phase_of(cluster, "lost") == "Failed", timeout=15, what="Failed")
    br = get(cluster, "bindrequests", NS, "lost")
    assert br is not None
    assert br["status"]["failedAttempts"] == 2
    assert br["status"]["reason"] == 'node "no-such-node" not found'
    # Events go out from a background thread and may land after the Failed status.
    wait_for(lambda: len(events(cluster, "lost", "BindingError")) >= 2, what="two BindingErrors")
    errors = events(cluster, "lost", "BindingError")
    assert len(errors) == 2
    assert all(e["type"] == "Warning" and "no-such-node" in e["message"] for e in errors)
    pod = get(cluster, "pods", NS, "lost")
    assert pod is not None and not pod["spec"].get("nodeName")
    assert keys.GPU_GROUP_LABEL not in (pod["metadata"].get("labels") or {})
    assert all(get(cluster, "configmaps", NS, cm) is None for cm in kai_configmaps("lost"))
    assert get(cluster, "configmaps", NS, "lost-gpu") is None
    assert get(cluster, "pods", RNS, rsv.reservation_pod_name("no-such-node", "g9")) is None


def test_a_reservation_pod_deleted_under_a_shared_pod_is_made_again_on_its_card(
    cluster: ThreadedDevCluster, operator: KopfRunner
) -> None:
    # A bare shared pod deleted would be lost for good: its card is held again instead,
    # the same card, though the device plugin would hand out a lower free one first.
    occupier = make_pod("occupier")
    occupier["spec"]["nodeName"] = "gpu-1"
    occupier["spec"]["containers"][0]["resources"]["limits"] = {keys.GPU_RESOURCE: "1"}
    create(cluster, "pods", occupier)
    wait_for(lambda: running(cluster, "occupier"), what="occupier Running")
    create(cluster, "pods", make_pod("orphan", fraction="0.5"))
    create(cluster, "bindrequests", make_bindrequest(cluster, "orphan", "gpu-1", groups=["g7"]))
    wait_for(lambda: running(cluster, "orphan"), what="orphan Running")
    name = rsv.reservation_pod_name("gpu-1", "g7")
    first = get(cluster, "pods", RNS, name)
    assert first is not None
    card = first["metadata"]["annotations"][keys.RESERVED_GPU_INDEX_ANNOTATION]
    assert card == gpu_uuid("gpu-1", 1)  # the occupier has card 0
    cluster.call(cluster.store.delete("pods", NS, "occupier", grace_period_seconds=0))
    plugin = cluster.cluster.kubelet("gpu-1").plugin
    wait_for(lambda: plugin.in_use() == 1, what="card 0 free")
    cluster.call(cluster.store.delete("pods", RNS, name))

    def made_again() -> dict[str, Any] | None:
        now = get(cluster, "pods", RNS, name)
        if not now or now["metadata"]["uid"] == first["metadata"]["uid"]:
            return None
        return now if rsv.reserved_uuid(now) else None

    again = wait_for(made_again, what="the reservation pod made again")
    assert again["spec"]["nodeName"] == "gpu-1"
    assert rsv.reserved_uuid(again) == card
    warning = wait_for(lambda: events(cluster, "orphan", "GPUReservationLost"), what="its Warning")
    assert warning[0]["type"] == "Warning" and name in warning[0]["message"]
    assert f"holds its card {card} again" in warning[0]["message"]
    assert running(cluster, "orphan") is not None  # not deleted
    wait_for(lambda: plugin.in_use() == 1, what="the blockers gone")


def test_a_shared_pod_admitted_without_the_webhook_is_not_bound(
    cluster: ThreadedDevCluster, operator: KopfRunner
) -> None:
    # Created while the pod webhook was down: its container would see every card.
    create(cluster, "pods", make_pod("unwired", fraction="0.5", wired=False))
    create(cluster, "bindrequests", make_bindrequest(cluster, "unwired", "gpu-1", groups=["g5"]))
    wait_for(lambda: phase_of(cluster, "unwired") == "Failed", what="Failed")
    br = get(cluster, "bindrequests", NS, "unwired")
    assert br is not None and 'container "main"' in br["status"]["reason"]
    assert br["status"]["failedAttempts"] == 1  # no retry: the pod's env cannot change
    error = wait_for(lambda: events(cluster, "unwired", "BindingError"), what="its Warning")
    message = error[0]["message"]
    assert error[0]["type"] == "Warning"
    assert "pod team-b/unwired" in message and "NVIDIA_VISIBLE_DEVICES" in message
    assert "delete the pod" in message
    pod = get(cluster, "pods", NS, "unwired")
    assert pod is not None and not pod["spec"].get("nodeName")  # left Pending
    assert get(cluster, "pods", RNS, rsv.reservation_pod_name("gpu-1", "g5")) is None
