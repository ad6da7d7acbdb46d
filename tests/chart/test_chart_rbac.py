"""Each role runs under the chart's ServiceAccount and RBAC, enforced by the emulated API server.

The chart is applied to the emulator, RBAC is switched on, and the scheduler,
the binder and the pod-grouper run as three processes, each with the token
of its own ServiceAccount. A gang Job and a shared-GPU pod must end up
Running, and the server must have refused nothing: every call the code
makes is granted, and (checked directly) what a role must not do is refused.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml
from chart_helpers import NAMESPACE, Applier, render

from kai_py.apiclient.kube import Kube, KubeError, load_api_client, path_of
from kai_py.emulator.apiserver.rbac import Authorizer
from kai_py.emulator.cluster_spec import parse_cluster
from kai_py.emulator.dev_cluster import ThreadedDevCluster

pytestmark = pytest.mark.slow

T = TypeVar("T")
ROLES = ("scheduler", "binder", "podgrouper")
NS = "team-a"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ThreadedDevCluster]:
    spec = parse_cluster(
        {"nodes": [{"name": "gpu", "count": 2, "gpus": 4}], "namespaces": [NS]}, "test"
    )
    with ThreadedDevCluster(
        spec, kubeconfig_path=tmp_path / "kubeconfig", bookmark_interval=1.0
    ) as running:
        yield running


@dataclass
class Running:
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def start_operator(kubeconfig: str, log_path: Path, *args: str) -> Running:
    """``kai-py run`` as a process, as the chart's Deployments run it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    env["KUBECONFIG"] = kubeconfig
    with log_path.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "kai_py.cli", "run", "--schedule-period", "0.2", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    return Running(process, log_path)


def stop_operator(running: Running) -> None:
    if running.process.poll() is None:
        running.process.send_signal(signal.SIGINT)
        try:
            running.process.wait(10)
        except subprocess.TimeoutExpired:
            running.process.kill()
            running.process.wait(5)


def wait_for(check: Callable[[], T | None], timeout: float, what: str) -> T:
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def _kubeconfig_with_token(source: str, token: str, path: Path) -> str:
    config = yaml.safe_load(Path(source).read_text())
    for user in config["users"]:
        user["user"] = {"token": token}
    path.write_text(yaml.safe_dump(config))
    return str(path)


def _job() -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "train",
            "namespace": NS,
            "annotations": {"kai.scheduler/batch-min-member": "2"},
        },
        "spec": {
            "parallelism": 2,
            "completions": 2,
            "template": {
                "metadata": {"labels": {"kai.scheduler/queue": "default-queue"}},
                "spec": {
                    "schedulerName": "kai-scheduler",
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "main",
                            "image": "busybox",
                            "resources": {"limits": {"nvidia.com/gpu": "2"}},
                        }
                    ],
                },
            },
        },
    }


def _shared_pod() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "notebook",
            "namespace": NS,
            "labels": {"kai.scheduler/queue": "default-queue"},
            "annotations": {"gpu-fraction": "0.5"},
        },
        "spec": {
            "schedulerName": "kai-scheduler",
            # As the device-access webhook wires it (no webhook pod runs here): the binder
            # binds no shared pod whose container does not read its card from <pod>-gpu.
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "env": [
                        {
                            "name": "NVIDIA_VISIBLE_DEVICES",
                            "valueFrom": {
                                "configMapKeyRef": {
                                    "name": "notebook-gpu",
                                    "key": "NVIDIA_VISIBLE_DEVICES",
                                }
                            },
                        }
                    ],
                }
            ],
        },
    }


def test_roles_work_under_their_own_least_privilege(
    cluster: ThreadedDevCluster, tmp_path: Path
) -> None:
    admin = Kube(load_api_client(cluster.kubeconfig_path))
    admin.create(
        path_of("", "v1", "namespaces"),
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
    )
    applier = Applier(admin)
    for obj in render():
        # No webhook pod runs here, and the emulator serves no ValidatingAdmissionPolicy
        # (tests/realapi/test_operator_rbac.py runs the roles under them).
        if "WebhookConfiguration" not in obj["kind"] and "AdmissionPolicy" not in obj["kind"]:
            applier.apply(obj)
    tokens = {f"token-{role}": (NAMESPACE, f"kai-py-{role}") for role in ROLES}
    authorizer = Authorizer(cluster.store, tokens)
    cluster.cluster.server.rbac = authorizer

    # Enforcement is real: the scheduler may not bind, the binder may.
    scheduler = Kube(
        load_api_client(
            _kubeconfig_with_token(cluster.kubeconfig_path, "token-scheduler", tmp_path / "s")
        )
    )
    binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "x"}}
    with pytest.raises(KubeError) as refused:
        scheduler.create(path_of("", "v1", "pods", NS, "x", "binding"), binding)
    assert refused.value.code == 403
    assert 'cannot create resource "pods/binding"' in refused.value.message
    authorizer.denials.clear()

    operators = []
    try:
        for role in ROLES:
            kubeconfig = _kubeconfig_with_token(
                cluster.kubeconfig_path, f"token-{role}", tmp_path / f"{role}.kubeconfig"
            )
            operators.append(
                start_operator(kubeconfig, tmp_path / f"{role}.log", "--controllers", role)
            )
        admin.create(path_of("batch", "v1", "jobs", NS), _job())
        admin.create(path_of("", "v1", "pods", NS), _shared_pod())

        def all_running() -> bool | None:
            pods = admin.get(path_of("", "v1", "pods", NS))["items"]
            phases = [p.get("status", {}).get("phase") for p in pods]
            return True if len(phases) == 3 and set(phases) == {"Running"} else None

        logs = lambda: "\n".join(op.log for op in operators)  # noqa: E731
        wait_for(all_running, timeout=30, what=f"3 pods Running\n{authorizer.denials}\n{logs()}")
    finally:
        for op in operators:
            stop_operator(op)
        cluster.cluster.server.rbac = None
    assert authorizer.denials == [], authorizer.denials
    # Each role did use its own permissions (grants used in this run, for the record).
    for role in ROLES:
        used = sorted(
            f"{verb} {group or 'core'}/{resource}"
            for account, verb, group, resource in authorizer.allowed
            if account.endswith(f":kai-py-{role}")
        )
        print(f"\n{role} used: {', '.join(used)}")
        assert used
    binder_used = {(v, r) for a, v, _, r in authorizer.allowed if a.endswith("kai-py-binder")}
    assert ("create", "pods/binding") in binder_used
    for op in operators:
        assert "Traceback" not in op.log, op.log
        # A refusal, not the digits of a timestamp ("05.754403Z").
        assert not re.search(r"\b403\b|Forbidden", op.log), op.log
