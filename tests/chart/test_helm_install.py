"""`helm install` and `helm uninstall` (Helm v4's own code, through helm-python-sdk) on the emulator.

The cluster starts bare (no CRDs, no install objects): Helm installs the
chart's crds/ and templates as it would on a real cluster. Uninstalling
leaves nothing that could block pods or hold cards.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
from chart_helpers import CHART, NAMESPACE, OTHER_VALUES

from kai_py.emulator.cluster_spec import parse_cluster
from kai_py.emulator.dev_cluster import ThreadedDevCluster

pytestmark = pytest.mark.slow


@pytest.fixture
def bare(tmp_path: Path) -> Iterator[ThreadedDevCluster]:
    spec = parse_cluster({"nodes": [{"name": "gpu", "count": 1, "gpus": 2}]}, "test")
    with ThreadedDevCluster(
        spec, kubeconfig_path=tmp_path / "kubeconfig", apply_crds=False
    ) as running:
        # A real cluster has no reservation namespace before kai-py is installed.
        running.call(running.store.delete("namespaces", None, "kai-resource-reservation"))
        yield running


def _names(cluster: ThreadedDevCluster, resource: str, namespace: str | None = None) -> set[str]:
    found, _ = cluster.call(cluster.store.list(resource, namespace))
    return {str(o["metadata"]["name"]) for o in found}


def _wait_gone(cluster: ThreadedDevCluster, resource: str, name: str) -> bool:
    deadline = time.monotonic() + 10
    while name in _names(cluster, resource):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


@pytest.mark.parametrize(
    "values",
    [{}, {**OTHER_VALUES, "metrics": {"serviceMonitor": {"enabled": False}}}],
    ids=["default", "second-set"],
)
def test_helm_install_then_uninstall(bare: ThreadedDevCluster, values: dict[str, Any]) -> None:
    config = helm.Config(kubeconfig_path=bare.kubeconfig_path, namespace=NAMESPACE)
    # The emulated kubelet runs no program: the CRD hook Job's pod ends after 1 s
    # (what the program does is tested in tests/realapi/test_chart_crd_upgrade.py).
    values = {**values, "podAnnotations": {"kai-py.dev/run-seconds": "1"}}
    # The emulator serves no ValidatingAdmissionPolicy: installed without the policies,
    # as on a cluster older than 1.30 (tests/realapi/test_security_policies.py has them).
    values = {**values, "security": {"admissionPolicies": False}}
    release = config.install(
        str(CHART), "kai", values, namespace=NAMESPACE, create_namespace=True, timeout=60
    )
    assert release["status"] == "deployed"
    crds = _names(bare, "customresourcedefinitions")
    assert {"queues.scheduling.run.ai", "podgroups.scheduling.run.ai"} <= crds
    assert {"train", "build-preemptible", "build", "inference"} <= _names(bare, "priorityclasses")
    assert _names(bare, "queues") == {"default-parent-queue", "default-queue"}
    # The CRD hook ran (Helm waits for its Job) and, having succeeded, is gone with its RBAC.
    assert "kai-py-crds" not in _names(bare, "jobs", NAMESPACE)
    assert "kai-crds" not in _names(bare, "clusterroles")
    deployments = _names(bare, "deployments", NAMESPACE)
    assert "kai-py-webhooks" in deployments and len(deployments) in (2, 4)

    # A card held by a reservation pod while kai-py is installed ...
    held = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "gpu-reservation-gpu-0-0", "namespace": "kai-resource-reservation"},
        "spec": {
            "nodeName": "gpu-0",
            "containers": [
                {
                    "name": "reservation",
                    "image": "ghcr.io/kai-py/kai-py:0.1.0",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }
            ],
        },
    }
    bare.call(bare.store.create("pods", held))

    uninstalled = config.uninstall("kai", timeout=60)
    assert "default-queue" in str(uninstalled.get("info"))  # kept, as KAI keeps them
    assert _names(bare, "mutatingwebhookconfigurations") == set()
    assert _names(bare, "validatingwebhookconfigurations") == set()
    assert _names(bare, "deployments", NAMESPACE) == set()
    assert _names(bare, "clusterroles") & {"kai-scheduler", "kai-binder"} == set()
    # ... is released with the namespace: no card stays held.
    assert _wait_gone(bare, "namespaces", "kai-resource-reservation")
    assert _names(bare, "pods", "kai-resource-reservation") == set()
    assert _names(bare, "queues") == {"default-parent-queue", "default-queue"}
    # KAI's PriorityClasses stay (a later pod naming train would be refused without
    # them); kai-py's own class goes with kai-py's pods.
    classes = _names(bare, "priorityclasses")
    assert {"train", "build-preemptible", "build", "inference"} <= classes
    assert "kai-py-critical" not in classes
