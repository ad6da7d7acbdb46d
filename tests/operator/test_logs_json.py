"""The operator's JSON log lines as a log collector reads them: kai-py's own lines
have one event name per kind, numbers as numbers and the object as a field."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client as k8s
from operator_helpers import (
    Operator,
    bindrequests,
    create_pod,
    create_queues,
    pod,
    queue,
    wait_for,
)

NS = "team-a"


@pytest.fixture
def operator_args(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    monkeypatch.setenv("KAI_PY_LOG_FORMAT", "json")
    return []


def _lines(operator: Operator) -> list[dict[str, Any]]:
    out = []
    for raw in operator.log.splitlines():
        if raw.startswith("{"):
            out.append(json.loads(raw))
    return out


def test_the_cycle_line_and_a_pods_line_carry_fields(
    operator: Operator, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi
) -> None:
    create_queues(custom, queue("root"), queue("team-a", parent="root"))
    bare = pod("solo", NS, "unused", gpus=1)
    del bare["metadata"]["annotations"]  # the pod-grouper gives it a PodGroup
    create_pod(core, bare)
    wait_for(lambda: len(bindrequests(custom, NS)) == 1, timeout=20, what="solo bound")
    cycle = wait_for(
        lambda: next(
            (x for x in _lines(operator) if x.get("event") == "cycle" and x["binds"] >= 1), None
        ),
        timeout=10,
        what=f"a cycle line with a bind\n{operator.log}",
    )
    assert cycle["logger"] == "kai_py.scheduling" and cycle["level"] == "info"
    for field in ("cycle", "binds", "pipelined", "evictions", "writes", "failed"):
        assert isinstance(cycle[field], int), (field, cycle)
    assert isinstance(cycle["duration_s"], float) and cycle["duration_s"] >= 0
    # The first pod may be grouped by the pod-grouper's first listing; a pod created
    # once it runs is grouped from its watch event, with a line about that pod.
    second = pod("solo-2", NS, "unused", gpus=1)
    del second["metadata"]["annotations"]
    create_pod(core, second)
    grouped = wait_for(
        lambda: next(
            (
                x
                for x in _lines(operator)
                if x.get("event") == "pod-grouper: pod in PodGroup"
                and x.get("pod") == f"{NS}/solo-2"
            ),
            None,
        ),
        timeout=10,
        what=f"the pod-grouper's line\n{operator.log}",
    )
    assert grouped["namespace"] == NS and grouped["level"] == "info"
    assert grouped["podgroup"].startswith(f"{NS}/") and grouped["podgroup_created"] is True
    loaded = next(x for x in _lines(operator) if x.get("event") == "cache loaded")
    assert isinstance(loaded["pods"], int) and isinstance(loaded["nodes"], int)
    assert loaded["nodes"] >= 1
