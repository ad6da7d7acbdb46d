"""The webhook role (`kai-py run --controllers webhooks`) called by the emulated API server."""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from operator_helpers import Operator, pod, queue, start_operator, stop_operator, wait_for

from kai_py.api.queue import MAX_QUEUE_DEPTH
from kai_py.emulator.dev_cluster import ThreadedDevCluster

NS = "team-a"
pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _certificate(folder: Path) -> Path:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make the webhook's self-signed certificate")
    folder.mkdir()
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-keyout", str(folder / "tls.key"), "-out", str(folder / "tls.crt")),
            *("-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"),
        ],
        check=True,
        capture_output=True,
    )
    shutil.copy(folder / "tls.crt", folder / "ca.crt")
    return folder


@pytest.fixture
def webhooks(
    cluster: ThreadedDevCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Operator]:
    monkeypatch.setenv("KAI_PY_WEBHOOK_CERT_DIR", str(_certificate(tmp_path / "tls")))
    monkeypatch.setenv("KAI_PY_WEBHOOK_ADDR", "127.0.0.1")
    monkeypatch.setenv("KAI_PY_WEBHOOK_PORT", str(_free_port()))
    monkeypatch.setenv("KAI_PY_WEBHOOK_MANAGED", "kai-py.test")
    monkeypatch.setenv("KAI_PY_FRACTION_RUNTIME_CLASS", "nvidia")
    # The class that names, as the NVIDIA GPU operator makes it: the API server's
    # RuntimeClass admission refuses a pod naming a class that does not exist.
    cluster.call(
        cluster.store.create(
            "runtimeclasses",
            {
                "apiVersion": "node.k8s.io/v1",
                "kind": "RuntimeClass",
                "metadata": {"name": "nvidia"},
                "handler": "nvidia",
            },
        )
    )
    running = start_operator(
        cluster.kubeconfig_path, tmp_path / "webhooks.log", "--controllers", "webhooks"
    )
    try:
        yield running
    finally:
        stop_operator(running)
    assert "Traceback" not in running.log, running.log


def _wait_until_served(
    cluster: ThreadedDevCluster, core: k8s.CoreV1Api, operator: Operator
) -> None:
    """Kopf registers its configurations, then listens: probe with a harmless pod."""

    def registered() -> bool | None:
        # Kopf creates each configuration empty, then fills in its webhooks once its
        # server listens: wait for both to have them, or a probe would pass unchecked.
        for kind in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
            found, _ = cluster.call(cluster.store.list(kind))
            if not any(c.get("webhooks") for c in found):
                return None
        return True

    wait_for(registered, timeout=30, what=f"the webhook configurations\n{operator.log}")

    def admitted() -> bool | None:
        body = pod("probe", NS, "g", gpus=1)
        try:
            core.create_namespaced_pod(NS, body, dry_run="All")
        except k8s.ApiException as exc:
            if "failed calling webhook" in str(exc.body):
                return None
            raise
        return True

    wait_for(admitted, timeout=30, what=f"the webhooks to answer\n{operator.log}")


def _shared(name: str, annotation: dict[str, str]) -> dict[str, Any]:
    body = pod(name, NS, "g", gpus=0)
    body["metadata"]["annotations"].update(annotation)
    body["spec"]["containers"].append({"name": "logger", "image": "busybox"})
    return body


def test_shared_pods_get_their_card_from_the_binders_configmap(
    cluster: ThreadedDevCluster, webhooks: Operator, core: k8s.CoreV1Api
) -> None:
    _wait_until_served(cluster, core, webhooks)
    core.create_namespaced_pod(NS, _shared("half", {"gpu-fraction": "0.5"}))
    created = core.read_namespaced_pod("half", NS)
    main, logger = created.spec.containers
    env = {e.name: e for e in main.env}
    # KAI's wiring, through the API server: the annotation names the prefix.
    prefix = created.metadata.annotations["runai/shared-gpu-configmap"]
    assert re.fullmatch(r"half-[bcdfghjklmnpqrstvwxz2456789]{7}-shared-gpu", prefix), prefix
    assert env["NVIDIA_VISIBLE_DEVICES"].value_from.config_map_key_ref.name == f"{prefix}-0"
    assert env["GPU_PORTION"].value_from.config_map_key_ref.key == "GPU_PORTION"
    assert env["RUNAI_NUM_OF_GPUS"].value_from.config_map_key_ref.name == f"{prefix}-0"
    assert [s.config_map_ref.name for s in main.env_from] == [f"{prefix}-0-evar"]
    assert [(v.name, v.config_map.name) for v in created.spec.volumes or [] if v.config_map] == [
        (f"{prefix}-0-vol", f"{prefix}-0")
    ]
    assert [(e.name, e.value) for e in logger.env] == [("NVIDIA_VISIBLE_DEVICES", "void")]
    assert created.spec.runtime_class_name == "nvidia"


def test_bad_objects_are_refused_with_object_field_and_value(
    cluster: ThreadedDevCluster,
    webhooks: Operator,
    core: k8s.CoreV1Api,
    custom: k8s.CustomObjectsApi,
) -> None:
    _wait_until_served(cluster, core, webhooks)
    with pytest.raises(k8s.ApiException) as refused:
        core.create_namespaced_pod(NS, _shared("too-much", {"gpu-fraction": "1.5"}))
    assert refused.value.status == 422
    assert "Pod team-a/too-much: metadata.annotations[gpu-fraction]" in refused.value.body
    assert "got '1.5'" in refused.value.body
    # A GPU container that would see every card of its node (KAI refuses it too).
    everything = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "all-cards", "namespace": NS},
        "spec": {
            "schedulerName": "kai-scheduler",
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                    "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}],
                }
            ],
        },
    }
    with pytest.raises(k8s.ApiException) as refused:
        core.create_namespaced_pod(NS, everything)
    assert refused.value.status == 422
    assert (
        'pod team-a/all-cards: spec.containers[0] (main) env NVIDIA_VISIBLE_DEVICES is \\"all\\"'
        in refused.value.body
    ), refused.value.body

    # A child before its parent and a PodGroup before its queue are admitted (GitOps
    # order; the warnings are the webhook's, test_webhooks_rules.py); a loop is not.
    custom.create_cluster_custom_object(
        "scheduling.run.ai", "v2", "queues", queue("lost", parent="nowhere")
    )
    with pytest.raises(k8s.ApiException) as loop:
        custom.create_cluster_custom_object(
            "scheduling.run.ai", "v2", "queues", queue("nowhere", parent="lost")
        )
    assert 'Queue \\"nowhere\\": spec.parentQueue: \\"lost\\" makes the parents a cycle' in (
        loop.value.body
    )
    group = {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": "g", "namespace": NS},
        "spec": {"minMember": 1, "queue": "ghost"},
    }
    custom.create_namespaced_custom_object("scheduling.run.ai", "v2alpha2", NS, "podgroups", group)

    both = {**group, "metadata": {"name": "both", "namespace": NS}}
    both["spec"] = {**group["spec"], "minSubGroup": 1, "subGroups": [{"name": "a", "minMember": 1}]}
    with pytest.raises(k8s.ApiException) as exclusive:
        custom.create_namespaced_custom_object(
            "scheduling.run.ai", "v2alpha2", NS, "podgroups", both
        )
    assert "minMember and minSubGroup are mutually exclusive" in exclusive.value.body


def test_a_quota_above_its_limit_is_admitted_with_a_warning_and_a_too_deep_queue_is_not(
    cluster: ThreadedDevCluster,
    webhooks: Operator,
    core: k8s.CoreV1Api,
    custom: k8s.CustomObjectsApi,
) -> None:
    _wait_until_served(cluster, core, webhooks)
    # Accepted, as KAI accepts it, with the webhook's warning passed on to the client
    # in a Warning header, as the real API server does (kubectl prints it).
    over = queue("over", gpu_quota=8, gpu_limit=4)
    _, status, headers = custom.create_cluster_custom_object_with_http_info(
        "scheduling.run.ai", "v2", "queues", over
    )
    assert status == 201
    assert "spec.resources.gpu.quota" in headers["Warning"] and "limit" in headers["Warning"]

    custom.create_cluster_custom_object("scheduling.run.ai", "v2", "queues", queue("level-1"))
    for i in range(2, MAX_QUEUE_DEPTH + 1):
        body = queue(f"level-{i}", parent=f"level-{i - 1}")
        custom.create_cluster_custom_object("scheduling.run.ai", "v2", "queues", body)
    deeper = queue("deeper", parent=f"level-{MAX_QUEUE_DEPTH}")
    with pytest.raises(k8s.ApiException) as refused:
        custom.create_cluster_custom_object("scheduling.run.ai", "v2", "queues", deeper)
    assert refused.value.status == 422
    assert f"level {MAX_QUEUE_DEPTH + 1} of the queue tree" in refused.value.body
    assert f"at most {MAX_QUEUE_DEPTH} levels deep" in refused.value.body


def test_topologies_are_checked_by_the_webhook_on_create_and_update(
    cluster: ThreadedDevCluster,
    webhooks: Operator,
    core: k8s.CoreV1Api,
    custom: k8s.CustomObjectsApi,
) -> None:
    _wait_until_served(cluster, core, webhooks)
    api = ("kai.scheduler", "v1alpha1", "topologies")

    def topology(name: str, levels: list[dict[str, str]]) -> dict[str, Any]:
        return {
            "apiVersion": "kai.scheduler/v1alpha1",
            "kind": "Topology",
            "metadata": {"name": name},
            "spec": {"levels": levels},
        }

    # The emulator does not run the CRD's CEL rules: the webhook says the same.
    with pytest.raises(k8s.ApiException) as clash:
        custom.create_cluster_custom_object(
            *api,
            topology(
                "clash",
                [
                    {"nodeLabel": "example.com/rack", "alias": "kubernetes.io/hostname"},
                    {"nodeLabel": "kubernetes.io/hostname"},
                ],
            ),
        )
    assert clash.value.status == 422
    assert (
        "spec.levels[0].alias: 'kubernetes.io/hostname' is the nodeLabel of levels[1]"
        in clash.value.body
    )
    custom.create_cluster_custom_object(
        *api, topology("network", [{"nodeLabel": "example.com/rack"}])
    )
    renamed = topology("network", [{"nodeLabel": "example.com/rack", "alias": "rack"}])
    custom.patch_cluster_custom_object(*api, "network", {"spec": renamed["spec"]})
    moved = {"spec": {"levels": [{"nodeLabel": "example.com/zone"}]}}
    with pytest.raises(k8s.ApiException) as changed:
        custom.patch_cluster_custom_object(*api, "network", moved)
    assert "spec.levels: the nodeLabels cannot change (only aliases may)" in changed.value.body
    stored = custom.get_cluster_custom_object(*api, "network")
    assert stored["spec"]["levels"] == [{"nodeLabel": "example.com/rack", "alias": "rack"}]


def test_with_the_webhooks_on_a_pod_of_a_missing_queue_is_told_why_on_the_pod(
    cluster: ThreadedDevCluster, webhooks: Operator, core: k8s.CoreV1Api, tmp_path: Path
) -> None:
    # The chart's set-up: the webhooks admit the grouper's PodGroup of a queue not made
    # yet (GitOps order), and the scheduler says why the pod waits, on the pod itself.
    _wait_until_served(cluster, core, webhooks)
    operator = start_operator(cluster.kubeconfig_path, tmp_path / "operator.log")
    try:
        body = pod("lost", NS, "unused", gpus=1)
        del body["metadata"]["annotations"]["pod-group-name"]
        body["metadata"]["labels"]["kai.scheduler/queue"] = "nowhere"
        core.create_namespaced_pod(NS, body)

        def told() -> list[Any]:
            events = core.list_namespaced_event(NS, field_selector="involvedObject.name=lost").items
            return [e for e in events if e.type == "Warning" and "nowhere" in e.message]

        (event, *_) = wait_for(told, timeout=30, what=f"a Warning on the pod\n{operator.log}")
        assert "queue 'nowhere' does not exist (QueueDoesNotExist)" in event.message, event
    finally:
        stop_operator(operator)
