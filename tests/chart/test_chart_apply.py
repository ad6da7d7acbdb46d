"""The rendered chart, applied to the emulated cluster through its API, then uninstalled."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from chart_helpers import NAMESPACE, OTHER_VALUES, Applier, render

from kai_py.apiclient.kube import Kube, KubeError, load_api_client, path_of
from kai_py.emulator.cluster_spec import parse_cluster
from kai_py.emulator.dev_cluster import ThreadedDevCluster

Json = dict[str, Any]

pytestmark = pytest.mark.slow


@pytest.fixture
def cluster(tmp_path: Any) -> Iterator[ThreadedDevCluster]:
    spec = parse_cluster(
        {"nodes": [{"name": "gpu", "count": 1, "gpus": 2}], "namespaces": ["team-a"]}, "test"
    )
    with ThreadedDevCluster(spec, kubeconfig_path=tmp_path / "kubeconfig") as running:
        yield running


def _pod(name: str) -> Json:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]},
    }


@pytest.mark.parametrize("values", [{}, OTHER_VALUES], ids=["default", "second-set"])
def test_chart_installs_and_uninstalls_on_the_emulator(
    cluster: ThreadedDevCluster, values: Json
) -> None:
    kube = Kube(load_api_client(cluster.kubeconfig_path))
    applier = Applier(kube)
    # ServiceMonitor needs the Prometheus operator's CRD, which this cluster lacks; the
    # emulator serves no ValidatingAdmissionPolicy (tests/realapi/test_security_policies.py
    # applies them to a real API server).
    objects = [
        o
        for o in render(values)
        if o["kind"] != "ServiceMonitor" and not o["kind"].startswith("ValidatingAdmissionPolicy")
    ]
    kube.create(
        path_of("", "v1", "namespaces"),
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
    )
    for obj in objects:
        applier.apply(obj)
    queues = kube.get(path_of("scheduling.run.ai", "v2", "queues"))["items"]
    assert {q["metadata"]["name"] for q in queues} >= {"default-parent-queue", "default-queue"}
    # With failurePolicy Ignore, a webhook that is not there (no webhook pod runs
    # here) does not stop pod creation; with Fail it stops kai-py's pods, and says
    # why. Pods of other schedulers never go to kai-py's webhooks (matchConditions).
    ours = _pod("ours")
    ours["spec"]["schedulerName"] = values.get("schedulerName", "kai-scheduler")
    if values.get("webhooks", {}).get("failurePolicy") == "Fail":
        with pytest.raises(KubeError) as err:
            kube.create(path_of("", "v1", "pods", "team-a"), ours)
        assert "kai-py" in err.value.message
    else:
        kube.create(path_of("", "v1", "pods", "team-a"), ours)
    kube.create(path_of("", "v1", "pods", "team-a"), _pod("admitted"))

    # Uninstall: Helm deletes what it rendered, except what it is told to keep.
    for obj in reversed(objects):
        if obj["metadata"].get("annotations", {}).get("helm.sh/resource-policy") != "keep":
            applier.delete(obj)
    for kind in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
        assert kube.get(path_of("admissionregistration.k8s.io", "v1", kind))["items"] == []
    kube.create(path_of("", "v1", "pods", "team-a"), _pod("after-uninstall"))
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            kube.get(path_of("", "v1", "namespaces", None, "kai-resource-reservation"))
        except KubeError as exc:
            assert exc.code == 404
            break
        time.sleep(0.1)
    else:
        raise AssertionError("the reservation namespace outlived the release")
