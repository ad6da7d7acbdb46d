"""The fault suite's over-commit check itself: it must see what it is there to see."""

from __future__ import annotations

from typing import Any

from fault_harness import overcommitted

from kai_py.api import keys
from kai_py.emulator import annotations as ann


def _pod(
    name: str, cards: str, *, fraction: str | None = None, gpus: int = 0, ns: str = "a"
) -> Any:
    annotations = {ann.VISIBLE_DEVICES: cards}
    if fraction:
        annotations[keys.GPU_FRACTION_ANNOTATION] = fraction
    limits = {keys.GPU_RESOURCE: str(gpus)} if gpus else {}
    return {
        "metadata": {"name": name, "namespace": ns, "annotations": annotations},
        "spec": {"nodeName": "n1", "containers": [{"resources": {"limits": limits}}]},
        "status": {"phase": "Running"},
    }


NODES = [{"metadata": {"name": "n1"}, "status": {"allocatable": {keys.GPU_RESOURCE: "2"}}}]


def test_a_shared_card_given_to_a_whole_gpu_pod_is_over_100_percent() -> None:
    reservation = _pod("r", "GPU-1", gpus=1, ns=keys.RESERVATION_NAMESPACE)
    halves = [_pod("h1", "GPU-1", fraction="0.5"), _pod("h2", "GPU-1", fraction="0.5")]
    assert overcommitted([reservation, *halves], NODES) == []
    whole = _pod("w", "GPU-1", gpus=1)  # the card whose reservation pod went
    assert overcommitted([*halves, whole], NODES) == ["card GPU-1: 2"]
    third = _pod("h3", "GPU-1", fraction="0.5")
    assert overcommitted([reservation, *halves, third], NODES) == ["card GPU-1: 1.5"]


def test_a_node_with_more_whole_gpus_than_it_has_is_over() -> None:
    pods = [
        _pod("r", "GPU-1", gpus=1, ns=keys.RESERVATION_NAMESPACE),  # a leftover holds a card
        _pod("w1", "GPU-2", gpus=1),
        _pod("w2", "", gpus=1),  # bound, not started: the kubelet would reject it
    ]
    assert overcommitted(pods, NODES) == ["node n1: 3 of 2 GPUs"]
    pods[-1]["status"]["phase"] = "Failed"
    assert overcommitted(pods, NODES) == []
