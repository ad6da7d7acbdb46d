"""A leftover reservation pod holds its card until the clean-up removes it (issue 8 item 1).

The operator starts on a cluster where a reservation pod outlived its shared pod
(the release was missed while it was down): whole-GPU pods must not be bound onto
that card (the kubelet would reject them), and the clean-up must remove the pod
from state within seconds of the start, not after a fixed wait.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from operator_helpers import (
    create_podgroup,
    create_queues,
    pod,
    podgroup,
    queue,
    start_operator,
    stop_operator,
    wait_for,
)

from kai_py.api import keys
from kai_py.binder import reservation as rsv
from kai_py.emulator.dev_cluster import ThreadedDevCluster


def test_a_leftover_reservation_pod_holds_its_card_until_the_sweep(
    cluster: ThreadedDevCluster,
    core: Any,
    custom: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = cluster.store
    leftover = rsv.reservation_pod_manifest("gpu-0", "g-left")
    cluster.call(store.create("pods", leftover))
    wait_for(
        lambda: (
            cluster.call(
                store.get("pods", keys.RESERVATION_NAMESPACE, leftover["metadata"]["name"])
            )
            .get("status", {})
            .get("phase")
            == "Running"
        ),
        what="the leftover reservation pod running",
    )
    create_queues(custom, queue("root"), queue("team-a", parent="root"))
    for i in range(4):
        create_podgroup(custom, podgroup(f"g{i}", "team-a", "team-a"))
        body = pod(f"p{i}", "team-a", f"g{i}")
        body["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "gpu-0"}  # 4 cards, 1 held
        core.create_namespaced_pod("team-a", body)
    monkeypatch.setenv("KAI_PY_BINDER_SWEEP_PERIOD", "1")
    monkeypatch.setenv("KAI_PY_BINDER_SWEEP_MIN_AGE", "4")
    started = time.monotonic()
    operator = start_operator(cluster.kubeconfig_path, tmp_path / "operator.log")
    try:

        def bound() -> list[str]:
            pods, _ = cluster.call(store.list("pods", "team-a"))
            return sorted(p["metadata"]["name"] for p in pods if p["spec"].get("nodeName"))

        wait_for(lambda: len(bound()) == 3, 20, "three pods bound")
        # While the leftover is younger than the sweep's minimum age, its card stays held.
        while time.monotonic() - started < 3:
            assert len(bound()) == 3
            time.sleep(0.2)
        wait_for(lambda: len(bound()) == 4, 15, "the fourth pod, once the leftover is gone")
        assert time.monotonic() - started < 15
        pods, _ = cluster.call(store.list("pods", "team-a"))
        rejected = [p for p in pods if str(p["status"].get("reason", "")).startswith("OutOf")]
        assert not rejected
    finally:
        stop_operator(operator)
    assert "Traceback" not in operator.log, operator.log
