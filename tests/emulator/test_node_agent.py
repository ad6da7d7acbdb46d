"""``kai-py node-agent``: NVML's cards on the Node, and a clear refusal without NVML."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes import config as k8s_config

from kai_py.apiclient.kube import Kube
from kai_py.cli import main
from kai_py.emulator.apiserver.threaded import ThreadedServer
from kai_py.gpu import inventory
from kai_py.gpu.nodeagent import NvmlUnavailable, load_nvml, publish, read_cards, run_node_agent


class FakeNvml:
    """The slice of pynvml the agent calls, over a fixed list of cards."""

    class NVMLError(Exception):
        pass

    def __init__(self, cards: list[tuple[str, bytes, int]], broken: int | None = None) -> None:
        self.cards = cards
        self.broken = broken

    def nvmlDeviceGetCount(self) -> int:
        return len(self.cards)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        return self.cards[handle][0]

    def nvmlDeviceGetName(self, handle: int) -> bytes:
        if handle == self.broken:
            raise self.NVMLError("GPU is lost")
        return self.cards[handle][1]

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:
        return SimpleNamespace(total=self.cards[handle][2])


def _node(name: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "annotations": annotations or {}},
        "status": {"allocatable": {"nvidia.com/gpu": "2"}},
    }


def test_publishes_nvml_cards_once_and_again_when_they_change(server: ThreadedServer) -> None:
    nvml = FakeNvml(
        [
            ("GPU-aaaa-1", b"NVIDIA H100 80GB HBM3", 85520809984),
            ("GPU-bbbb-2", b"NVIDIA H100 80GB HBM3", 85520809984),
        ],
        broken=1,
    )
    cards = read_cards(nvml)
    assert [(c.index, c.uuid, c.product, c.memory_mib, c.healthy) for c in cards] == [
        (0, "GPU-aaaa-1", "NVIDIA H100 80GB HBM3", 81559, True),
        (1, "GPU-bbbb-2", "", 0, False),
    ]
    server.call(server.store.create("nodes", _node("n1")))
    kube = Kube(k8s_config.new_client_from_config(config_file=server.kubeconfig_path))
    assert publish(kube, "n1", cards)
    assert not publish(kube, "n1", cards)  # unchanged: nothing written
    stored = server.call(server.store.get("nodes", None, "n1"))
    raw = stored["metadata"]["annotations"]["kai.scheduler/gpu-inventory"]
    assert json.loads(raw)["cards"][1]["health"] == "Unhealthy"
    assert inventory.node_cards(stored["metadata"]["annotations"]) == tuple(cards)
    nvml.broken = None
    assert publish(kube, "n1", read_cards(nvml))
    # The same through the command's loop, once.
    assert run_node_agent("n1", server.kubeconfig_path, once=True, nvml=nvml) == 0


def test_without_nvml_it_says_so_and_exits_non_zero(capsys: pytest.CaptureFixture[str]) -> None:
    try:
        load_nvml()
    except NvmlUnavailable:
        pass
    else:  # pragma: no cover - a machine with the NVIDIA driver
        pytest.skip("NVML works on this machine")
    assert main(["node-agent", "--node", "gpu-1", "--once"]) == 1
    err = capsys.readouterr().err
    assert "no GPU inventory for node gpu-1" in err and "NVML" in err
    assert main(["node-agent", "--once", "--node", ""]) == 2
