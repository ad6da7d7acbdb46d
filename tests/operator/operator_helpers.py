"""Helpers of the operator's tests: the operator process, waiting, manifests, reads."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from kubernetes import client as k8s

from kai_py.controllers.webhooks import deviceaccess

REPO = Path(__file__).resolve().parents[2]
T = TypeVar("T")

SMALL_CLUSTER = {
    "nodes": [
        {"name": "gpu", "count": 2, "gpus": 4, "cpu": "32", "memory": "256Gi"},
        {"name": "cpu", "count": 1, "gpus": 0, "cpu": "16", "memory": "64Gi"},
    ],
    "namespaces": ["team-a"],
}


@dataclass
class Operator:
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def start_operator(
    kubeconfig: str, log_path: Path, *args: str, extra_env: dict[str, str] | None = None
) -> Operator:
    env = {**os.environ, "KUBECONFIG": kubeconfig, **(extra_env or {})}
    for var in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):
        env.pop(var, None)
    out = log_path.open("wb")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kai_py.controllers.operator",
            "--schedule-period",
            "0.2",
            "--event-refresh",
            "1",
            *args,
        ],
        stdout=out,
        stderr=subprocess.STDOUT,
        cwd=REPO,
        env=env,
    )
    out.close()
    return Operator(process, log_path)


def stop_operator(operator: Operator) -> None:
    if operator.process.poll() is None:
        operator.process.send_signal(signal.SIGINT)
        try:
            operator.process.wait(10)
        except subprocess.TimeoutExpired:
            operator.process.kill()
            operator.process.wait(5)


def wait_for(check: Callable[[], T | None], timeout: float = 10.0, what: str = "") -> T:
    """Poll ``check`` until it returns something truthy."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            result = check()
        except k8s.ApiException as exc:
            if exc.status != 404:
                raise
            result = None
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or check}")
        time.sleep(0.05)


# ---------------------------------------------------------------- manifests
def queue(
    name: str, *, parent: str | None = None, gpu_quota: float = -1, gpu_limit: float = -1
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "resources": {
            "gpu": {"quota": gpu_quota, "limit": gpu_limit, "overQuotaWeight": 1},
            "cpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
            "memory": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
        }
    }
    if parent:
        spec["parentQueue"] = parent
    return {
        "apiVersion": "scheduling.run.ai/v2",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": spec,
    }


def podgroup(
    name: str, namespace: str, queue_name: str, min_member: int = 1, priority_class: str = "train"
) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "minMember": min_member,
            "queue": queue_name,
            "priorityClassName": priority_class,
        },
    }


def pod(
    name: str,
    namespace: str,
    group: str,
    *,
    gpus: int = 1,
    cpu: str = "1",
    scheduler: str = "kai-scheduler",
) -> dict[str, Any]:
    resources: dict[str, Any] = {"requests": {"cpu": cpu, "memory": "1Gi"}}
    if gpus:
        resources["limits"] = {"nvidia.com/gpu": str(gpus)}
        resources["requests"]["nvidia.com/gpu"] = str(gpus)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "annotations": {"pod-group-name": group},
            "labels": {"kai.scheduler/queue": "team-a"},
        },
        "spec": {
            "schedulerName": scheduler,
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "busybox", "resources": resources}],
        },
    }


def gpu_job(
    name: str, namespace: str, *, parallelism: int = 1, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    """A batch Job of ``parallelism`` one-GPU pods in queue team-a."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "annotations": annotations or {},
            "labels": {"kai.scheduler/queue": "team-a"},
        },
        "spec": {
            "parallelism": parallelism,
            "completions": parallelism,
            "template": {
                "spec": {
                    "schedulerName": "kai-scheduler",
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "main",
                            "image": "busybox",
                            "resources": {"limits": {"nvidia.com/gpu": "1"}},
                        }
                    ],
                }
            },
        },
    }


def kai_shared(body: dict[str, Any], fraction: str, token: str = "x7b2kq9") -> dict[str, Any]:
    """``body`` as a shared pod the pod webhook admitted (its own rules, with ``token``
    as the random part): KAI's ``runai/shared-gpu-configmap`` annotation, env from
    ``<prefix>-0``, envFrom of ``<prefix>-0-evar`` and a volume of the first."""
    body["metadata"]["annotations"]["gpu-fraction"] = fraction
    mutation = deviceaccess.mutate(body, body["spec"]["schedulerName"], token=lambda: token)
    assert mutation is not None
    body["spec"] = mutation.spec
    body["metadata"]["annotations"].update(mutation.annotations)
    return body


def shared(body: dict[str, Any], fraction: str) -> dict[str, Any]:
    """``body`` as a shared pod wired as the pod webhook wired one before kai-py took
    KAI's names: its container reads ``NVIDIA_VISIBLE_DEVICES`` from ``<pod>-gpu``."""
    body["metadata"]["annotations"]["gpu-fraction"] = fraction
    body["spec"]["containers"][0]["env"] = [
        {
            "name": "NVIDIA_VISIBLE_DEVICES",
            "valueFrom": {
                "configMapKeyRef": {
                    "name": f"{body['metadata']['name']}-gpu",
                    "key": "NVIDIA_VISIBLE_DEVICES",
                }
            },
        }
    ]
    return body


def create_queues(custom: k8s.CustomObjectsApi, *queues: dict[str, Any]) -> None:
    for q in queues:
        custom.create_cluster_custom_object("scheduling.run.ai", "v2", "queues", q)


def create_podgroup(custom: k8s.CustomObjectsApi, pg: dict[str, Any]) -> None:
    custom.create_namespaced_custom_object(
        "scheduling.run.ai", "v2alpha2", pg["metadata"]["namespace"], "podgroups", pg
    )


def create_pod(core: k8s.CoreV1Api, body: dict[str, Any]) -> None:
    core.create_namespaced_pod(body["metadata"]["namespace"], body)  # type: ignore[arg-type]


def bindrequests(custom: k8s.CustomObjectsApi, namespace: str) -> dict[str, dict[str, Any]]:
    listing = custom.list_namespaced_custom_object(
        "scheduling.run.ai", "v1alpha2", namespace, "bindrequests"
    )
    return {item["metadata"]["name"]: item for item in listing["items"]}


def events_of(core: k8s.CoreV1Api, namespace: str, name: str) -> list[Any]:
    listing = core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}")
    return list(listing.items)
