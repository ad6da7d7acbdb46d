"""The binder's client asks again after a transient API error, and only then."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from kai_py.apiclient.informer import AsyncTransport, attach_transport
from kai_py.apiclient.kube import KubeError, RetryingKube, load_api_client, path_of
from kai_py.emulator.apiserver.threaded import ThreadedServer, run_in_thread

T = TypeVar("T")


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


def test_a_threads_requests_go_over_the_attached_async_stack_and_retry_there(
    server: ThreadedServer,
) -> None:
    """Attached to a transport, requests from threads are sent by the event loop (over
    the transport: its User-Agent), still asked again after a transient error; once
    transport is closed they fail with code 0, and once the loop is closed they go
    over the client's own pool again."""
    kube = RetryingKube(load_api_client(server.kubeconfig_path), sleep=lambda _: None)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    def call(awaitable: Awaitable[T]) -> T:
        async def wrap() -> T:
            return await awaitable

        return asyncio.run_coroutine_threadsafe(wrap(), loop).result(10)

    try:

        async def attach() -> AsyncTransport:
            return attach_transport(kube)

        transport = call(attach())
        server.server.request_counts.clear()
        server.server.faults.add(verb="get", resource="namespaces", code=500, times=1)
        path = path_of("", "v1", "namespaces", None, "default")
        assert kube.get(path)["metadata"]["name"] == "default"
        assert server.server.request_counts["kai-py get namespaces"] == 2
        assert sum(server.server.request_counts.values()) == 2  # none over urllib3
        call(transport.close())
        with pytest.raises(KubeError) as err:
            kube.get(path)
        assert err.value.code == 0
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
    server.server.request_counts.clear()
    assert kube.get(path)["metadata"]["name"] == "default"  # the loop is gone: urllib3
    assert server.server.request_counts["kai-py get namespaces"] == 0
    assert sum(server.server.request_counts.values()) == 1
