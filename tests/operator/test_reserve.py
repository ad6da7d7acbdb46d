"""`kai-py reserve` against the emulated API server: it reports its card and names what is wrong."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kai_py.api import keys
from kai_py.binder.reserve import ReserveError, card_of
from kai_py.cli import main
from kai_py.emulator.apiserver.threaded import ThreadedServer, run_in_thread

NS = keys.RESERVATION_NAMESPACE


@pytest.fixture(scope="module")
def server() -> Iterator[ThreadedServer]:
    with run_in_thread() as srv:
        srv.call(
            srv.store.create(
                "namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}
            )
        )
        yield srv


def _pod(srv: ThreadedServer, name: str) -> None:
    srv.call(
        srv.store.create(
            "pods",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": NS},
                "spec": {"containers": [{"name": "r", "image": "x"}]},
            },
        )
    )


def test_reports_the_card_in_its_own_annotation(
    server: ThreadedServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _pod(server, "res-a")
    monkeypatch.setenv("POD_NAME", "res-a")
    monkeypatch.setenv("POD_NAMESPACE", NS)
    monkeypatch.setenv("NVIDIA_VISIBLE_DEVICES", "GPU-1234")
    assert main(["reserve", "--kubeconfig", server.kubeconfig_path, "--no-wait"]) == 0
    pod = server.call(server.store.get("pods", NS, "res-a"))
    assert pod["metadata"]["annotations"][keys.RESERVED_GPU_INDEX_ANNOTATION] == "GPU-1234"
    assert "holds GPU GPU-1234" in capsys.readouterr().out


def test_bad_environment_and_missing_pod(
    server: ThreadedServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("POD_NAME", raising=False)
    assert main(["reserve", "--kubeconfig", server.kubeconfig_path, "--no-wait"]) == 2
    assert "POD_NAME" in capsys.readouterr().err
    monkeypatch.setenv("POD_NAME", "nobody")
    monkeypatch.setenv("POD_NAMESPACE", NS)
    monkeypatch.delenv("NVIDIA_VISIBLE_DEVICES", raising=False)
    assert main(["reserve", "--kubeconfig", server.kubeconfig_path, "--no-wait"]) == 2
    assert "NVIDIA_VISIBLE_DEVICES" in capsys.readouterr().err
    monkeypatch.setenv("NVIDIA_VISIBLE_DEVICES", "GPU-9")
    assert main(["reserve", "--kubeconfig", server.kubeconfig_path, "--no-wait"]) == 1
    assert f"{NS}/nobody" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["", "all", "none", "GPU-1,GPU-2"])
def test_card_of_refuses_what_is_not_one_card(value: str) -> None:
    with pytest.raises(ReserveError):
        card_of({"NVIDIA_VISIBLE_DEVICES": value})
