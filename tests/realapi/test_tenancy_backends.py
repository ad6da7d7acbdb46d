"""Tenants held to what an admin gave them, on both backends, with kai-py's own webhooks
(``kai-py run --controllers webhooks``): the attacks of a tenant of team-a are refused
at admission with the object, the field, the value and what the queue allows."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from operator_helpers import (
    Operator,
    events_of,
    pod,
    queue,
    start_operator,
    stop_operator,
    wait_for,
)
from realapi_backends import Backend

from kai_py.emulator.cluster_spec import gpu_uuid

NS = "team-a"
GROUP, VERSION = "scheduling.run.ai", "v2"


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
    backend: Backend, api: k8s.ApiClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Operator]:
    monkeypatch.setenv("KAI_PY_WEBHOOK_CERT_DIR", str(_certificate(tmp_path / "tls")))
    monkeypatch.setenv("KAI_PY_WEBHOOK_ADDR", "127.0.0.1")
    monkeypatch.setenv("KAI_PY_WEBHOOK_PORT", str(_free_port()))
    monkeypatch.setenv("KAI_PY_WEBHOOK_MANAGED", "kai-py.test")
    scheduling = k8s.SchedulingV1Api(api)
    for name, value in (("train", 50), ("inference", 125)):
        # The API server's Priority admission refuses a pod naming a class that does
        # not exist: the classes exist, so a refusal below is the webhook's.
        with contextlib.suppress(k8s.ApiException):
            scheduling.create_priority_class(
                {
                    "apiVersion": "scheduling.k8s.io/v1",
                    "kind": "PriorityClass",
                    "metadata": {"name": name},
                    "value": value,
                }
            )
    running = start_operator(
        backend.kubeconfig_path, tmp_path / "webhooks.log", "--controllers", "webhooks"
    )
    try:
        _wait_until_served(api, running)
        yield running
    finally:
        stop_operator(running)
    assert "Traceback" not in running.log, running.log


def _wait_until_served(api: k8s.ApiClient, operator: Operator) -> None:
    """Until a pod the webhook has always refused (a bad gpu-fraction) is refused."""
    core = k8s.CoreV1Api(api)

    def refusing() -> bool | None:
        body = pod("probe", NS, "g", gpus=0)
        body["metadata"]["annotations"]["gpu-fraction"] = "abc"
        try:
            core.create_namespaced_pod(NS, body, dry_run="All")
        except k8s.ApiException as exc:
            return True if exc.status == 422 else None
        return None

    wait_for(refusing, timeout=60, what=f"the webhooks to answer\n{operator.log}")


def _tenant_queues(custom: k8s.CustomObjectsApi) -> None:
    team_a = queue("team-a")
    team_a["spec"].update(namespaces=[NS], priorityClasses=["train"])
    team_b = queue("team-b")
    team_b["spec"]["namespaces"] = ["team-b"]
    for body in (team_a, team_b):
        custom.create_cluster_custom_object(GROUP, VERSION, "queues", body)


def _refusal(create: Any) -> str:
    with pytest.raises(k8s.ApiException) as refused:
        create()
    assert refused.value.status == 422, refused.value.body
    return str(refused.value.body).replace('\\"', '"')


def test_a_tenant_may_not_use_another_teams_queue(
    webhooks: Operator, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi
) -> None:
    _tenant_queues(custom)
    stolen = pod("stolen", NS, "g")
    stolen["metadata"]["labels"]["kai.scheduler/queue"] = "team-b"
    message = _refusal(lambda: core.create_namespaced_pod(NS, stolen))
    assert (
        'Pod "team-a/stolen": metadata.labels["kai.scheduler/queue"]: queue "team-b" does not '
        'take namespace "team-a": spec.namespaces of queue "team-b" allows team-b'
    ) in message
    group = {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": "stolen", "namespace": NS},
        "spec": {"minMember": 1, "queue": "team-b"},
    }
    message = _refusal(
        lambda: custom.create_namespaced_custom_object(GROUP, "v2alpha2", NS, "podgroups", group)
    )
    assert 'PodGroup "team-a/stolen": spec.queue: queue "team-b" does not take namespace' in (
        message
    )
    # Its own queue still takes it.
    core.create_namespaced_pod(NS, pod("own", NS, "g"), dry_run="All")
    # A group made before its queue's list changed still takes writes that keep its
    # queue (the scheduler holds it instead); moving it to a queue it may not use is not.
    mine = {**group, "metadata": {"name": "mine", "namespace": NS}, "spec": {"queue": "team-a"}}
    custom.create_namespaced_custom_object(GROUP, "v2alpha2", NS, "podgroups", mine)
    custom.patch_cluster_custom_object(
        GROUP, VERSION, "queues", "team-a", {"spec": {"namespaces": ["team-c"]}}
    )
    custom.patch_namespaced_custom_object(
        GROUP, "v2alpha2", NS, "podgroups", "mine", {"metadata": {"labels": {"x": "y"}}}
    )
    message = _refusal(
        lambda: custom.patch_namespaced_custom_object(
            GROUP, "v2alpha2", NS, "podgroups", "mine", {"spec": {"queue": "team-b"}}
        )
    )
    assert 'PodGroup "team-a/mine": spec.queue: queue "team-b" does not take namespace' in message


@pytest.mark.parametrize("priority_class", ["inference", "system-cluster-critical"])
def test_a_priority_class_the_queue_does_not_allow_is_refused_with_the_list(
    webhooks: Operator, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, priority_class: str
) -> None:
    _tenant_queues(custom)
    jumper = pod("jumper", NS, "g")
    jumper["spec"]["priorityClassName"] = priority_class
    message = _refusal(lambda: core.create_namespaced_pod(NS, jumper))
    assert (
        f'Pod "team-a/jumper": spec.priorityClassName: priority class "{priority_class}" is '
        'not allowed in queue "team-a": spec.priorityClasses of queue "team-a" allows train'
    ) in message
    allowed = pod("steady", NS, "g")
    allowed["spec"]["priorityClassName"] = "train"
    core.create_namespaced_pod(NS, allowed, dry_run="All")


def test_a_pod_pinned_to_another_queues_card_is_refused(
    webhooks: Operator, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi
) -> None:
    _tenant_queues(custom)
    custom.patch_cluster_custom_object(
        GROUP, VERSION, "queues", "team-b", {"spec": {"cards": [{"node": "gpu-1", "index": 0}]}}
    )
    theirs = gpu_uuid("gpu-1", 0)
    pinned = pod("pinned", NS, "g")
    pinned["metadata"]["annotations"]["nvidia.com/use-gpuuuid"] = theirs
    message = _refusal(lambda: core.create_namespaced_pod(NS, pinned))
    assert (
        f'Pod "team-a/pinned": metadata.annotations: the GPU pin nvidia.com/use-gpuuuid="{theirs}" '
        'allows card(s) owned by another queue, which queue "team-a" may not use: '
        f"{theirs} on node gpu-1"
    ) in message
    # Another card of the same node, owned by nobody, may be pinned.
    pinned["metadata"]["annotations"]["nvidia.com/use-gpuuuid"] = gpu_uuid("gpu-1", 1)
    core.create_namespaced_pod(NS, pinned, dry_run="All")


def test_without_the_webhook_the_scheduler_holds_a_job_its_queue_does_not_take(
    operator: Operator, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi
) -> None:
    # No webhook (it was down): a team-a tenant's PodGroup in team-b's queue is stored,
    # and the scheduler keeps its pod pending with a Warning naming the queue and list,
    # while a pod of team-a's own queue runs.
    _tenant_queues(custom)
    group = {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": "stolen", "namespace": NS},
        "spec": {"minMember": 1, "queue": "team-b"},
    }
    custom.create_namespaced_custom_object(GROUP, "v2alpha2", NS, "podgroups", group)
    core.create_namespaced_pod(NS, pod("stolen-0", NS, "stolen"))
    own = {**group, "metadata": {"name": "own", "namespace": NS}, "spec": {"queue": "team-a"}}
    custom.create_namespaced_custom_object(GROUP, "v2alpha2", NS, "podgroups", own)
    core.create_namespaced_pod(NS, pod("own-0", NS, "own"))

    def told() -> list[Any] | None:
        found = [
            e
            for e in core.list_namespaced_event(NS).items
            if 'queue "team-b" does not take namespace "team-a"' in (e.message or "")
        ]
        return found or None

    (event, *_) = wait_for(told, timeout=30, what=f"the scheduler's Warning\n{operator.log}")
    assert event.type == "Warning"
    assert 'spec.namespaces of queue "team-b" allows team-b' in event.message
    wait_for(
        lambda: core.read_namespaced_pod("own-0", NS).spec.node_name,
        timeout=30,
        what=f"team-a's own pod bound\n{operator.log}",
    )
    assert core.read_namespaced_pod("stolen-0", NS).spec.node_name is None
    conditions = custom.get_namespaced_custom_object(GROUP, "v2alpha2", NS, "podgroups", "stolen")
    reasons = [
        r["reason"]
        for c in conditions.get("status", {}).get("schedulingConditions", [])
        for r in c.get("reasons", [])
    ]
    assert "NotAllowedInQueue" in reasons, conditions


def test_the_pod_grouper_makes_no_podgroup_in_a_queue_the_namespace_may_not_use(
    operator: Operator, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi
) -> None:
    _tenant_queues(custom)
    body = pod("lost", NS, "unused")
    del body["metadata"]["annotations"]["pod-group-name"]  # the pod-grouper groups it
    body["metadata"]["labels"]["kai.scheduler/queue"] = "team-b"
    core.create_namespaced_pod(NS, body)

    def warned() -> list[Any]:
        return [e for e in events_of(core, NS, "lost") if e.reason == "PodGroupNotCreated"]

    (event,) = wait_for(warned, timeout=30, what=f"the pod's Warning\n{operator.log}")
    assert event.type == "Warning"
    assert 'as its queue does not allow it: PodGroup "team-a/pg-lost-' in event.message
    assert 'spec.queue: queue "team-b" does not take namespace "team-a"' in event.message
    groups = custom.list_namespaced_custom_object(GROUP, "v2alpha2", NS, "podgroups")["items"]
    assert groups == []
    assert "pod-group-name" not in (core.read_namespaced_pod("lost", NS).metadata.annotations or {})
