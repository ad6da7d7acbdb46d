"""`helm install` then `helm uninstall` (Helm's own code, helm-python-sdk) on a real
kube-apiserver, with reservation pods holding cards at uninstall time.

After uninstall nothing may block pods: no webhook configuration (installed with
failurePolicy Fail, so one left behind would refuse kai-py's pods), no
reservation pod holding a card, and KAI's PriorityClasses still there (pods that
name ``train`` were refused when uninstall deleted them). kube-controller-manager
runs its garbage collector and namespace controller, as on a real cluster; kai-py's
simulated kubelets, Job controller and default scheduler run against the server.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import helm_python as helm
from chart_helpers import CHART, NAMESPACE
from realapi_backends import SimulatedNodes, require_binaries
from realapi_server import ADMIN_TOKEN, RealApiServer

from kai_py.api import install, keys
from kai_py.binder.reservation import reservation_pod_manifest
from kai_py.emulator.cluster_spec import parse_cluster

Json = dict[str, Any]

NS = "team-a"
RESERVATION = keys.RESERVATION_NAMESPACE


def _pod(name: str, namespace: str, **spec: Any) -> Json:
    container: Json = {"name": "main", "image": "busybox"}
    if "gpus" in spec:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(spec.pop("gpus"))}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"automountServiceAccountToken": False, "containers": [container], **spec},
    }


def _wait(check: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def _names(server: RealApiServer, path: str) -> set[str]:
    status, listing = server.request("GET", path)
    if status == 404:
        return set()
    assert status == 200, listing
    return {str(o["metadata"]["name"]) for o in listing["items"]}


def test_helm_uninstall_leaves_nothing_that_blocks_pods(tmp_path: Path) -> None:
    server = RealApiServer(tmp_path / "real", require_binaries())
    server.controllers = "garbage-collector-controller,namespace-controller"
    server.start()
    nodes: SimulatedNodes | None = None
    try:
        for ns in (NS, "default"):
            server.namespace(ns)
        spec = parse_cluster({"nodes": [{"name": "gpu", "count": 1, "gpus": 2}]}, "test")
        nodes = SimulatedNodes(server.url, ADMIN_TOKEN, server.ca_file, spec).start()
        config = helm.Config(kubeconfig_path=server.kubeconfig_path, namespace=NAMESPACE)
        values: Json = {
            "webhooks": {"failurePolicy": "Fail"},
            # The simulated kubelet runs no program: the CRD hook's pod ends after 1 s.
            "podAnnotations": {"kai-py.dev/run-seconds": "1"},
        }
        release = config.install(
            str(CHART), "kai", values, namespace=NAMESPACE, create_namespace=True, timeout=120
        )
        assert release["status"] == "deployed"
        assert "kai-webhooks" in _names(
            server, "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
        )
        # With the release installed and no webhook pod able to answer, kai-py's
        # pods are refused (failurePolicy Fail): the configurations are live.
        status, answer = server.request(
            "POST",
            f"/api/v1/namespaces/{NS}/pods",
            _pod("early", NS, schedulerName="kai-scheduler"),
        )
        assert status >= 400 and "failed calling webhook" in answer["message"], answer

        # Two cards held by reservation pods, as the binder makes them for shared pods
        # (the chart's admission policy lets nothing else into that namespace).
        for index in range(2):
            held = reservation_pod_manifest(
                "gpu-0",
                f"group-{index}",
                image=install.DEFAULT_IMAGE,
                namespace=RESERVATION,
                service_account="kai-resource-reservation",
            )
            server.must("POST", f"/api/v1/namespaces/{RESERVATION}/pods", held)

        def running() -> bool:
            pods = server.must("GET", f"/api/v1/namespaces/{RESERVATION}/pods")["items"]
            return len(pods) == 2 and all(p["status"].get("phase") == "Running" for p in pods)

        _wait(running, "the reservation pods to run")

        config.uninstall("kai", timeout=120)
        for kind in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
            assert _names(server, f"/apis/admissionregistration.k8s.io/v1/{kind}") == set()
        assert _names(server, f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments") == set()

        def reservations_gone() -> bool:
            status, _ = server.request("GET", f"/api/v1/namespaces/{RESERVATION}")
            return status == 404

        _wait(reservations_gone, "the reservation namespace and its pods to be deleted")
        # The cards are free: a pod asking for both runs on the node.
        server.must(
            "POST",
            f"/api/v1/namespaces/{NS}/pods",
            _pod("both-cards", NS, gpus=2, nodeName="gpu-0"),
        )

        def both_running() -> bool:
            pod = server.must("GET", f"/api/v1/namespaces/{NS}/pods/both-cards")
            return bool(pod["status"].get("phase") == "Running")

        _wait(both_running, "a 2-GPU pod to run on the freed cards")

        # Kept: KAI's PriorityClasses (a pod naming train is admitted), the default
        # queues and the CRDs; kai-py's own PriorityClass went with its pods.
        classes = _names(server, "/apis/scheduling.k8s.io/v1/priorityclasses")
        assert {"train", "build-preemptible", "build", "inference"} <= classes
        assert "kai-py-critical" not in classes
        later = _pod("later", NS, schedulerName="kai-scheduler", priorityClassName="train")
        status, answer = server.request("POST", f"/api/v1/namespaces/{NS}/pods", later)
        assert status == 201, answer
        assert _names(server, "/apis/scheduling.run.ai/v2/queues") == {
            "default-parent-queue",
            "default-queue",
        }
    finally:
        if nodes is not None:
            nodes.stop()
        server.stop()
