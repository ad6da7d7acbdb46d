"""The binder's client asks again after a transient API error, and only then."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kai_py.cluster.kube import KubeError, RetryingKube, load_api_client, path_of
from kai_py.emulator.threaded import ThreadedServer, run_in_thread


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ThreadedServer]:
    with run_in_thread(kubeconfig_path=tmp_path / "kubeconfig") as srv:
        yield srv


def test_transient_errors_are_asked_again_and_others_are_not(server: ThreadedServer) -> None:
    slept: list[float] = []
    kube = RetryingKube(load_api_client(server.kubeconfig_path), sleep=slept.append)
    server.server.faults.add(verb="get", resource="namespaces", code=500, times=2)
    assert (
        kube.get(path_of("", "v1", "namespaces", None, "default"))["metadata"]["name"] == "default"
    )
    assert slept == [0.2, 0.4]
    server.server.faults.add(verb="get", resource="namespaces", code=503, times=3)
    with pytest.raises(KubeError) as err:
        kube.get(path_of("", "v1", "namespaces", None, "default"))
    assert err.value.code == 503  # three tries, then the error
    slept.clear()
    with pytest.raises(KubeError) as err:
        kube.get(path_of("", "v1", "namespaces", None, "missing"))
    assert err.value.code == 404 and slept == []


@pytest.mark.parametrize(
    ("namespace", "name", "path"),
    [
        ("team-a", "pod-0.x_y~", "/api/v1/namespaces/team-a/pods/pod-0.x_y~/status"),
        ("a b", "x/y", "/api/v1/namespaces/a%20b/pods/x%2Fy/status"),
        ("ns", "ünï%+", "/api/v1/namespaces/ns/pods/%C3%BCn%C3%AF%25%2B/status"),
    ],
)
def test_path_segments_are_quoted_unless_plain(namespace: str, name: str, path: str) -> None:
    assert path_of("", "v1", "pods", namespace, name, "status") == path
