"""Fixtures for the operator's tests: an emulated cluster, clients, the operator process.

The operator runs as ``python -m kai_py.controllers.operator`` with
``KUBECONFIG`` pointing at the emulated cluster, exactly as ``kai-py dev``
starts it (and as it runs against a real cluster). A separate process keeps
Kopf's global handler registry out of the other tests' operators. Helpers
that tests import are in ``operator_helpers`` (a unique module name: the
emulator's tests have a conftest too).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from operator_helpers import SMALL_CLUSTER, Operator, start_operator, stop_operator

from kai_py.emulator.cluster_spec import parse_cluster
from kai_py.emulator.dev_cluster import ThreadedDevCluster


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ThreadedDevCluster]:
    spec = parse_cluster(SMALL_CLUSTER, "test")
    with ThreadedDevCluster(
        spec, kubeconfig_path=tmp_path / "kubeconfig", bookmark_interval=1.0
    ) as running:
        yield running


@pytest.fixture
def api(cluster: ThreadedDevCluster) -> Iterator[k8s.ApiClient]:
    api_client = k8s_config.new_client_from_config(config_file=cluster.kubeconfig_path)
    yield api_client
    api_client.close()


@pytest.fixture
def core(api: k8s.ApiClient) -> k8s.CoreV1Api:
    return k8s.CoreV1Api(api)


@pytest.fixture
def custom(api: k8s.ApiClient) -> k8s.CustomObjectsApi:
    return k8s.CustomObjectsApi(api)


@pytest.fixture
def operator_args() -> list[str]:
    """Extra command-line arguments of the operator (override in a test module)."""
    return []


@pytest.fixture
def operator(
    cluster: ThreadedDevCluster, tmp_path: Path, operator_args: list[str]
) -> Iterator[Operator]:
    running = start_operator(cluster.kubeconfig_path, tmp_path / "operator.log", *operator_args)
    try:
        yield running
    finally:
        stop_operator(running)
        if os.environ.get("KAI_PY_OPERATOR_LOG"):
            print(running.log)
    # No cycle may fail and no handler may crash, whatever the test did to the API.
    assert "Traceback" not in running.log, running.log
    assert running.process.returncode == 0, running.log
