"""Queue-admission gating against both backends: the operator lifts kai-py's gate (and
only it) from a gang that fits its queue's limit, with the uid precondition and the
admission annotation, and keeps it on one that does not until room is made.

The pods are created with the gate, as the pod webhook (``admissiongate``, unit-tested
in tests/operator/test_queue_admission.py) would add it."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client as k8s
from operator_helpers import (
    Operator,
    create_pod,
    create_podgroup,
    create_queues,
    events_of,
    pod,
    podgroup,
    queue,
    wait_for,
)
from realapi_backends import Backend

from kai_py.api import keys

NS = "team-a"
GATE = {"name": keys.QUEUE_ADMISSION_GATE}


def _gated(name: str, group: str, *gates: dict[str, str]) -> dict[str, Any]:
    body = pod(name, NS, group, gpus=2)
    body["spec"]["schedulingGates"] = [*gates, GATE]
    return body


def _gates(core: k8s.CoreV1Api, name: str) -> list[str]:
    p = core.read_namespaced_pod(name, NS)
    return [g.name for g in p.spec.scheduling_gates or []]


@pytest.mark.parametrize("operator_args", [["--queue-admission-gating", "queues"]])
def test_a_gang_within_the_limit_is_let_go_and_the_next_when_room_is_made(
    backend: Backend, operator: Operator, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi
) -> None:
    team = queue("team-a", parent="root", gpu_quota=4, gpu_limit=4)
    team["spec"]["admissionGating"] = True
    create_queues(custom, queue("root"), team)
    for group in ("first", "second"):
        create_podgroup(custom, podgroup(group, NS, "team-a", min_member=2))
        for i in range(2):
            create_pod(core, _gated(f"{group}-{i}", group))
    create_podgroup(custom, podgroup("held", NS, "team-a"))
    create_pod(core, _gated("held", "held", {"name": "example.com/approval"}))

    def running(group: str) -> bool:
        pods = [core.read_namespaced_pod(f"{group}-{i}", NS) for i in range(2)]
        return all(p.status.phase == "Running" for p in pods)

    # Both PodGroups are made within a second: which goes first is the uid's draw.
    first = wait_for(
        lambda: next((g for g in ("first", "second") if running(g)), None),
        40,
        f"one gang running\n{operator.log}",
    )
    second = "first" if first == "second" else "second"
    admitted = core.read_namespaced_pod(f"{first}-0", NS)
    assert keys.QUEUE_ADMITTED_ANNOTATION in (admitted.metadata.annotations or {})
    assert admitted.spec.scheduling_gates in (None, [])

    def over_limit() -> bool:
        return any(
            "queue team-a may use 4 GPUs (limit)" in (e.message or "")
            for e in events_of(core, NS, second)
        )

    wait_for(over_limit, 20, f"the other gang's reason\n{operator.log}")
    assert _gates(core, f"{second}-0") == [keys.QUEUE_ADMISSION_GATE]
    assert _gates(core, "held") == ["example.com/approval", keys.QUEUE_ADMISSION_GATE]
    assert not core.read_namespaced_pod(f"{second}-0", NS).spec.node_name
    # Room made: the running gang goes, the other is let go and runs; the pod with
    # another gate still waits for that gate's owner.
    for i in range(2):
        core.delete_namespaced_pod(f"{first}-{i}", NS, grace_period_seconds=0)
    wait_for(lambda: running(second), 40, f"the other gang running\n{operator.log}")
    assert _gates(core, "held") == ["example.com/approval", keys.QUEUE_ADMISSION_GATE]
