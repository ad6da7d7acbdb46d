"""Fixtures of the real-API-server tier: a backend (emulator or real), clients, the operator.

The operator tests' helpers (``operator_helpers``) and the chart's renderer
(``chart_helpers``) are reused by import.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "operator"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "chart"))

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from operator_helpers import Operator, start_operator, stop_operator
from probes import Target
from realapi_backends import AHEAD, BACKENDS, Backend, backend_cluster, require_binaries
from realapi_server import ADMIN_TOKEN, RealApiServer

from kai_py.emulator.apiserver.threaded import run_in_thread


@pytest.fixture(scope="session", autouse=True)
def _servers_ahead() -> Iterator[None]:
    """Stops the real API server started ahead for a test that did not come, and waits
    for those stopping in the background."""
    yield
    AHEAD.close()


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    with backend_cluster(request.param, tmp_path) as running:
        yield running


@pytest.fixture
def api(backend: Backend) -> Iterator[k8s.ApiClient]:
    api_client = k8s_config.new_client_from_config(config_file=backend.kubeconfig_path)
    yield api_client
    api_client.close()


@pytest.fixture
def core(api: k8s.ApiClient) -> k8s.CoreV1Api:
    return k8s.CoreV1Api(api)


@pytest.fixture
def custom(api: k8s.ApiClient) -> k8s.CustomObjectsApi:
    return k8s.CustomObjectsApi(api)


@pytest.fixture
def batch(api: k8s.ApiClient) -> k8s.BatchV1Api:
    return k8s.BatchV1Api(api)


@pytest.fixture
def operator_args() -> list[str]:
    return []


@pytest.fixture
def operator(backend: Backend, tmp_path: Path, operator_args: list[str]) -> Iterator[Operator]:
    running = start_operator(backend.kubeconfig_path, tmp_path / "operator.log", *operator_args)
    try:
        yield running
    finally:
        stop_operator(running)
        if os.environ.get("KAI_PY_OPERATOR_LOG"):
            print(running.log)
    assert "Traceback" not in running.log, running.log
    assert running.process.returncode == 0, running.log


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Target]]:
    """A real kube-apiserver (no controllers) and an emulator, bare but for what pods need."""
    server = RealApiServer(tmp_path_factory.mktemp("real"), require_binaries()).start()
    try:
        with run_in_thread() as emu:
            found = {
                "real": Target(server.url, ADMIN_TOKEN, server.ca_file),
                "emulator": Target(emu.url),
            }
            for target in found.values():
                # What the fixtures' pods name: the real server's admission checks both exist.
                target.call(
                    "POST",
                    "/api/v1/namespaces/default/serviceaccounts",
                    {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}},
                )
                target.call(
                    "POST",
                    "/apis/scheduling.k8s.io/v1/priorityclasses",
                    {
                        "apiVersion": "scheduling.k8s.io/v1",
                        "kind": "PriorityClass",
                        "metadata": {"name": "train"},
                        "value": 100,
                    },
                )
            yield found
    finally:
        server.stop()
