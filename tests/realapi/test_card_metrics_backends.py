"""The per-card metrics, scraped from the operator on both backends (docs/metrics.md)."""

from __future__ import annotations

import urllib.request
from typing import Any

import pytest
from kubernetes import client as k8s
from operator_helpers import (
    Operator,
    create_pod,
    create_podgroup,
    create_queues,
    kai_shared,
    pod,
    podgroup,
    queue,
    wait_for,
)
from prometheus_client.parser import text_string_to_metric_families
from realapi_backends import Backend

from kai_py.api import keys
from kai_py.binder import reservation as rsv

NS = "team-a"
PORT = 41517  # this test's own, in the range its branch was given


@pytest.fixture
def operator_args() -> list[str]:
    return ["--metrics-port", str(PORT)]


def _scrape() -> dict[str, list[tuple[dict[str, str], float]]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{PORT}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((dict(s.labels), s.value))
    return out


def test_a_shared_card_is_exported_with_its_share_pods_and_reservation(
    backend: Backend, operator: Operator, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi
) -> None:
    create_queues(custom, queue("root"), queue("team-a", parent="root"))
    create_podgroup(custom, podgroup("engines", NS, "team-a", min_member=2))
    for name in ("engine-a", "engine-b"):
        create_pod(core, kai_shared(pod(name, NS, "engines", gpus=0), "0.5"))

    def running() -> list[Any] | None:
        pods = [core.read_namespaced_pod(n, NS) for n in ("engine-a", "engine-b")]
        return pods if all(p.status.phase == "Running" for p in pods) else None

    a, b = wait_for(running, timeout=60, what=f"two engines Running\n{operator.log}")
    node, group = a.spec.node_name, a.metadata.labels[keys.GPU_GROUP_LABEL]
    card = a.metadata.annotations["kai-py.dev/visible-devices"]
    assert b.metadata.annotations["kai-py.dev/visible-devices"] == card
    where = {"node": node, "uuid": card}

    def exported() -> dict[str, Any] | None:
        got = _scrape()
        share = [
            v
            for lab, v in got.get("kai_py_gpu_card_allocated_share", [])
            if lab.items() >= where.items()
        ]
        return got if share == [1.0] else None

    got = wait_for(exported, timeout=30, what=f"card {card} at 1.0\n{operator.log}")
    (info,) = [lab for lab, _ in got["kai_py_gpu_card_info"] if lab.items() >= where.items()]
    assert (
        info["reservation_pod"]
        == f"{keys.RESERVATION_NAMESPACE}/{rsv.reservation_pod_name(node, group)}"
    )
    assert info["card"].isdigit() and info["model"]
    assert [v for lab, v in got["kai_py_gpu_card_pods"] if lab.items() >= where.items()] == [2.0]
    assert [v for lab, v in got["kai_py_gpu_card_pinned"] if lab.items() >= where.items()] == [0.0]
    # Every card of the fleet is a row (two 4-GPU nodes), the idle ones at 0; no pod labels.
    assert len(got["kai_py_gpu_card_memory_bytes"]) == 8
    assert all("pod" not in lab for lab, _ in got["kai_py_gpu_card_allocated_share"])
    assert "kai_py_gpu_card_pod_share" not in got
