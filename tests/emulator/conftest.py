"""Shared fixtures for the emulator's tests: a server in a thread, clients, kubectl."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from apiserver_helpers import KUBECTL, Kubectl
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from kai_py.emulator.apiserver.threaded import ThreadedServer, run_in_thread


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ThreadedServer]:
    with run_in_thread(kubeconfig_path=tmp_path / "kubeconfig", bookmark_interval=0.5) as srv:
        yield srv


@pytest.fixture
def api(server: ThreadedServer) -> Iterator[k8s.ApiClient]:
    api_client = k8s_config.new_client_from_config(config_file=server.kubeconfig_path)
    yield api_client
    api_client.close()


@pytest.fixture
def core(api: k8s.ApiClient) -> k8s.CoreV1Api:
    return k8s.CoreV1Api(api)


@pytest.fixture
def custom(api: k8s.ApiClient) -> k8s.CustomObjectsApi:
    return k8s.CustomObjectsApi(api)


@pytest.fixture
def kubectl(server: ThreadedServer, tmp_path: Path) -> Kubectl:
    if KUBECTL is None:
        pytest.skip("the kubectl binary is not installed (shutil.which('kubectl') is None)")
    return Kubectl(server.kubeconfig_path, tmp_path / "kubectl-cache")
