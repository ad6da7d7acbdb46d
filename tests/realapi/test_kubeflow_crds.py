"""The Kubeflow job CRDs ``kai-py dev`` installs: valid on a real kube-apiserver, and a
PyTorchJob as KAI's examples write it is accepted by both servers alike."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from realapi_backends import require_binaries
from realapi_server import ADMIN_TOKEN, RealApiServer

from kai_py.emulator.apiserver.threaded import run_in_thread
from kai_py.emulator.dev_cluster import ThreadedDevCluster
from kai_py.emulator.kubeflow import kubeflow_crds

from probes import Target  # isort: skip (a module of this folder)

PYTORCHJOB: dict[str, Any] = {
    "apiVersion": "kubeflow.org/v1",
    "kind": "PyTorchJob",
    "metadata": {"name": "pytorch-simple", "labels": {"kai.scheduler/queue": "default-queue"}},
    "spec": {
        "pytorchReplicaSpecs": {
            role: {
                "replicas": replicas,
                "restartPolicy": "OnFailure",
                "template": {
                    "spec": {
                        "schedulerName": "kai-scheduler",
                        "containers": [
                            {
                                "name": "pytorch",
                                "image": "kubeflow/pytorch-dist-mnist:latest",
                                "resources": {"limits": {"nvidia.com/gpu": 1}},
                            }
                        ],
                    }
                },
            }
            for role, replicas in (("Master", 1), ("Worker", 2))
        }
    },
}
PATH = "/apis/kubeflow.org/v1/namespaces/default/pytorchjobs"


def _roundtrip(target: Target) -> dict[str, Any]:
    status, created = target.call("POST", PATH, PYTORCHJOB)
    assert status == 201, created
    status, got = target.call("GET", f"{PATH}/pytorch-simple")
    assert status == 200, got
    return dict(got["spec"])


def test_a_pytorchjob_applies_alike_on_the_emulator_and_a_real_server(tmp_path: Path) -> None:
    server = RealApiServer(tmp_path / "real", require_binaries()).start()
    try:
        server.apply_crds(kubeflow_crds())  # a real server accepts the definitions
        real = _roundtrip(Target(server.url, ADMIN_TOKEN, server.ca_file))
    finally:
        server.stop()
    with ThreadedDevCluster(
        None, kubeconfig_path=tmp_path / "kubeconfig", kubeflow_crds=True
    ) as cluster:
        emulated = _roundtrip(Target(cluster.cluster.url))
    assert emulated == real == PYTORCHJOB["spec"]


def test_without_the_crds_the_kind_is_unknown() -> None:
    with run_in_thread() as srv:
        status, _ = Target(srv.url).call("POST", PATH, PYTORCHJOB)
    assert status == 404
