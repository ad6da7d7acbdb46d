"""Every card and who holds it (kai_py.gpu.cards), and its metrics (kai_py.metrics)."""

from __future__ import annotations

import json
from typing import Any

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from kai_py import metrics
from kai_py.api import keys
from kai_py.gpu import cards

Json = dict[str, Any]
RNS = keys.RESERVATION_NAMESPACE


def node(name: str, *memories: int) -> Json:
    listed = [
        {"index": i, "uuid": f"GPU-{name}-{i}", "product": "H100", "memoryMiB": m}
        for i, m in enumerate(memories)
    ]
    inventory = json.dumps({"version": 1, "cards": listed})
    return {"metadata": {"name": name, "annotations": {keys.GPU_INVENTORY_ANNOTATION: inventory}}}


def pod(
    name: str, node: str, annotations: Json, labels: Json | None = None, phase: str = "Running"
) -> Json:
    return {
        "metadata": {
            "name": name,
            "namespace": "ml",
            "annotations": annotations,
            "labels": labels or {},
        },
        "spec": {"nodeName": node},
        "status": {"phase": phase},
    }


def reservation(node: str, group: str, uuid: str) -> Json:
    return {
        "metadata": {
            "name": f"gpu-reservation-{node}-{group}",
            "namespace": RNS,
            "labels": {keys.GPU_GROUP_LABEL: group},
            "annotations": {
                keys.GPU_GROUPS_ANNOTATION: group,
                keys.RESERVED_GPU_INDEX_ANNOTATION: uuid,
            },
        },
        "spec": {"nodeName": node},
    }


def cluster() -> tuple[list[Json], list[Json], list[Json]]:
    nodes = [node("n1", 81920, 40960)]
    shared = {keys.GPU_GROUP_LABEL: "g1"}
    pods = [
        # Two engines at 45 % on card 0, one pinned to it.
        pod("engine-a", "n1", {keys.GPU_FRACTION_ANNOTATION: "0.45"}, shared),
        pod(
            "engine-b",
            "n1",
            {keys.GPU_FRACTION_ANNOTATION: "0.45", keys.USE_GPU_UUID_ANNOTATION: "GPU-n1-0"},
            shared,
        ),
        # A 20,480 MiB share of card 0 (a quarter), finished: holds nothing.
        pod("done", "n1", {keys.GPU_MEMORY_ANNOTATION: "20480"}, shared, phase="Succeeded"),
        # A whole card whose UUID is known (the kubelet's report).
        pod("trainer", "n1", {keys.GPU_UUIDS_ANNOTATION: "GPU-n1-1"}),
    ]
    return nodes, pods, [reservation("n1", "g1", "GPU-n1-0")]


def test_cards_and_who_holds_them() -> None:
    nodes, pods, reservations = cluster()
    rows = cards.card_rows(nodes, pods, cards.reservation_cards(reservations))
    first, second = rows
    assert (first.node, first.index, first.uuid, first.model, first.memory_mib) == (
        "n1",
        0,
        "GPU-n1-0",
        "H100",
        81920,
    )
    assert first.reservation == f"{RNS}/gpu-reservation-n1-g1"
    assert [(h.pod, h.share, h.pinned) for h in first.holders] == [
        ("engine-a", 0.45, False),
        ("engine-b", 0.45, True),
    ]
    assert round(first.allocated, 6) == 0.9 and first.pinned
    assert [(h.pod, h.share) for h in second.holders] == [("trainer", 1.0)]
    assert (second.allocated, second.pinned, second.reservation) == (1.0, False, "")


def test_a_memory_share_is_measured_against_its_card() -> None:
    nodes = [node("n1", 81920, 40960)]
    pods = [pod("mem", "n1", {keys.GPU_MEMORY_ANNOTATION: "20480"}, {keys.GPU_GROUP_LABEL: "g2"})]
    rows = cards.card_rows(
        nodes, pods, cards.reservation_cards([reservation("n1", "g2", "GPU-n1-1")])
    )
    assert [(r.index, r.allocated) for r in rows] == [(0, 0.0), (1, 0.5)]


def _scrape() -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(generate_latest().decode()):
        for s in family.samples:
            out.setdefault(s.name, []).append((dict(s.labels), s.value))
    return out


def test_the_card_metrics_keep_pods_out_unless_asked() -> None:
    nodes, pods, reservations = cluster()
    reserved = cards.reservation_cards(reservations)
    try:
        metrics.watch_cards(lambda: cards.card_rows(nodes, pods, reserved))
        got = _scrape()
        card0 = {"node": "n1", "card": "0", "uuid": "GPU-n1-0"}
        assert (card0, 0.9) in [
            (lab, round(v, 6)) for lab, v in got["kai_py_gpu_card_allocated_share"]
        ]
        assert (card0, 2.0) in got["kai_py_gpu_card_pods"]
        assert (card0, 1.0) in got["kai_py_gpu_card_pinned"]
        assert (card0, 81920 * 1024 * 1024) in got["kai_py_gpu_card_memory_bytes"]
        info = {**card0, "model": "H100", "reservation_pod": f"{RNS}/gpu-reservation-n1-g1"}
        assert (info, 1.0) in got["kai_py_gpu_card_info"]
        # No pod label on the per-card families; no per-pod family unless asked for.
        for name in (
            "kai_py_gpu_card_allocated_share",
            "kai_py_gpu_card_pods",
            "kai_py_gpu_card_info",
        ):
            assert all("pod" not in labels for labels, _ in got[name])
        assert "kai_py_gpu_card_pod_share" not in got
        metrics.watch_cards(lambda: cards.card_rows(nodes, pods, reserved), card_pods=True)
        per_pod = _scrape()["kai_py_gpu_card_pod_share"]
        assert ({**card0, "namespace": "ml", "pod": "engine-b"}, 0.45) in per_pod
    finally:
        metrics.watch_cards(None)


def test_only_the_given_nodes_have_rows() -> None:
    # A scheduling shard's cache holds every reservation pod, its pool's nodes only:
    # another pool's shared card is that pool's shard's to export.
    nodes = [node("n1", 81920)]
    pods = [
        pod("elsewhere", "n2", {keys.GPU_FRACTION_ANNOTATION: "0.5"}, {keys.GPU_GROUP_LABEL: "g"})
    ]
    reserved = cards.reservation_cards([reservation("n2", "g", "GPU-n2-0")])
    rows = cards.card_rows(nodes, pods, reserved)
    assert [(r.node, r.uuid) for r in rows] == [("n1", "GPU-n1-0")]


def test_a_blank_pin_annotation_pins_nothing() -> None:
    # HAMi and kai-py read a blank pin as no constraint: the card is not pinned.
    nodes = [node("n1", 81920)]
    blank = {keys.GPU_UUIDS_ANNOTATION: "GPU-n1-0", keys.USE_GPU_UUID_ANNOTATION: " "}
    [row] = cards.card_rows(nodes, [pod("blank", "n1", blank)], {})
    assert not row.pinned
    assert [(h.pod, h.pin) for h in row.holders] == [("blank", "")]
