"""``kubectl kai cards``'s view, from objects alone: shares by fraction and by memory,
whole cards the binder recorded, pins, and nodes that publish no inventory."""

from __future__ import annotations

import json
from typing import Any

from kai_py.api import keys
from kai_py.kubectl.cards import cards, cards_table

A, B = "GPU-aaaa", "GPU-bbbb"


def _node(name: str, inventory: bool = True, gpus: int = 2) -> dict[str, Any]:
    annotations = {}
    if inventory:
        annotations[keys.GPU_INVENTORY_ANNOTATION] = json.dumps(
            {
                "version": 1,
                "source": "nvml",
                "cards": [
                    {"index": i, "uuid": u, "product": "NVIDIA L4", "memoryMiB": 24000}
                    for i, u in enumerate((A, B))
                ],
            }
        )
    return {
        "metadata": {"name": name, "annotations": annotations},
        "status": {"allocatable": {keys.GPU_RESOURCE: str(gpus)}},
    }


def _pod(
    name: str,
    node: str | None,
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    gpus: int = 0,
    namespace: str = "ns",
) -> dict[str, Any]:
    limits = {keys.GPU_RESOURCE: str(gpus)} if gpus else {}
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"limits": limits}}]}
    if node:
        spec["nodeName"] = node
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "annotations": annotations or {},
            "labels": labels or {},
        },
        "spec": spec,
        "status": {"phase": "Running" if node else "Pending"},
    }


def test_each_card_shows_its_shares_its_whole_holder_its_reservation_and_pins() -> None:
    pods = [
        _pod(
            "gpu-reservation-n1-g1",
            "n1",
            {keys.GPU_GROUPS_ANNOTATION: "g1", keys.RESERVED_GPU_INDEX_ANNOTATION: A},
            {keys.GPU_GROUP_LABEL: "g1"},
            gpus=1,
            namespace=keys.RESERVATION_NAMESPACE,
        ),
        _pod("half", "n1", {keys.GPU_FRACTION_ANNOTATION: "0.5"}, {keys.GPU_GROUP_LABEL: "g1"}),
        _pod("mem", "n1", {keys.GPU_MEMORY_ANNOTATION: "6000"}, {keys.GPU_GROUP_LABEL: "g1"}),
        _pod(
            "whole",
            "n1",
            {keys.GPU_UUIDS_ANNOTATION: B, keys.USE_GPU_UUID_ANNOTATION: B},
            gpus=1,
        ),
        _pod("waits", None, {keys.USE_GPU_UUID_ANNOTATION: A}, gpus=1),
        _pod(
            "elsewhere", "n2", {keys.GPU_FRACTION_ANNOTATION: "0.5"}, {keys.GPU_GROUP_LABEL: "g9"}
        ),
    ]
    [view] = cards([_node("n1"), {"metadata": {"name": "cpu-only"}, "status": {}}], pods)
    shown = view.json()  # the -o json shape
    first, second = shown["cards"]
    assert [(h["pod"], h["share"], h["group"]) for h in first["holders"]] == [
        ("ns/half", "0.5", "g1"),
        ("ns/mem", "6000MiB", "g1"),
    ]
    assert first["used"] == 0.75  # 0.5 + 6000 of 24000 MiB
    assert first["reservationPods"] == [f"{keys.RESERVATION_NAMESPACE}/gpu-reservation-n1-g1"]
    assert first["pinnedWaiting"] == ["ns/waits"]
    assert (first["index"], first["uuid"], first["product"], first["memoryMiB"]) == (
        0,
        A,
        "NVIDIA L4",
        24000,
    )
    assert [(h["pod"], h["share"]) for h in second["holders"]] == [("ns/whole", "1")]
    assert second["holders"][0]["pin"] == f'{keys.USE_GPU_UUID_ANNOTATION}="{B}"'
    assert (shown["cardNotKnown"], shown["problems"]) == ([], [])
    table = cards_table([view])
    assert max(len(line) for line in table) <= 120
    assert any("ns/mem  6000MiB  group g1" in line for line in table)


def test_without_an_inventory_cards_are_counted_and_whole_holders_listed_apart() -> None:
    pods = [_pod("two", "n1", gpus=2), _pod("done", "n1", gpus=1)]
    pods[1]["status"]["phase"] = "Succeeded"
    [view] = cards([_node("n1", inventory=False, gpus=4)], pods)
    shown = view.json()
    assert [(c["index"], c["uuid"]) for c in shown["cards"]] == [(0, ""), (1, ""), (2, ""), (3, "")]
    assert [(h["pod"], h["share"]) for h in shown["cardNotKnown"]] == [("ns/two", "2")]


def test_without_an_inventory_a_reported_card_is_one_of_the_nodes_not_one_more() -> None:
    # A node of 2 GPUs without an inventory: its reservation pod names one card.
    node = _node("n1", inventory=False, gpus=2)
    node["metadata"]["labels"] = {
        keys.GPU_PRODUCT_NODE_LABEL: "NVIDIA L4",
        keys.GPU_MEMORY_NODE_LABEL: "24000",
    }
    pods = [
        _pod(
            "gpu-reservation-n1-g1",
            "n1",
            {keys.GPU_GROUPS_ANNOTATION: "g1", keys.RESERVED_GPU_INDEX_ANNOTATION: A},
            {keys.GPU_GROUP_LABEL: "g1"},
            gpus=1,
            namespace=keys.RESERVATION_NAMESPACE,
        ),
        _pod("half", "n1", {keys.GPU_FRACTION_ANNOTATION: "0.5"}, {keys.GPU_GROUP_LABEL: "g1"}),
    ]
    [view] = cards([node], pods)
    shown = view.json()
    assert [(c["index"], c["uuid"], c["used"]) for c in shown["cards"]] == [
        (0, "", 0),
        (None, A, 0.5),
    ]
    # Its model and memory: the node's labels.
    assert (shown["cards"][1]["product"], shown["cards"][1]["memoryMiB"]) == ("NVIDIA L4", 24000)


def test_a_pinned_binds_blocker_is_no_reservation_pod_without_a_card() -> None:
    blocker = _pod("blocker-n1-x", "n1", gpus=1, namespace=keys.RESERVATION_NAMESPACE)
    blocker["metadata"]["labels"] = {keys.GPU_BLOCKER_LABEL: "true"}
    waiting = _pod("gpu-reservation-n1-g2", "n1", gpus=1, namespace=keys.RESERVATION_NAMESPACE)
    [view] = cards([_node("n1")], [blocker, waiting])
    assert view.problems == [
        f"reservation pod {keys.RESERVATION_NAMESPACE}/gpu-reservation-n1-g2 "
        "holds a card not yet reported"
    ]
