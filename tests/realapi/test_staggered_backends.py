"""Staggered start on both backends: pods sharing a card start one at a time.

The simulated kubelets hold a pod's containers not Ready for
``kai-py.dev/ready-seconds`` (an engine loading its model); the binder binds the
next pod on that card only once the one before it is Ready. A gang's member on
another card binds with the first (kai_py.binder.stagger, docs/operator.md).
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from kubernetes import client as k8s
from operator_helpers import (
    Operator,
    bindrequests,
    create_pod,
    create_podgroup,
    create_queues,
    kai_shared,
    pod,
    podgroup,
    queue,
    start_operator,
    stop_operator,
    wait_for,
)
from realapi_backends import Backend

from kai_py.api import keys

NS = "team-a"
READY_AFTER = 3


def _condition(p: Any, kind: str) -> datetime | None:
    for c in p.status.conditions or []:
        if c.type == kind and c.status == "True":
            when: datetime = c.last_transition_time
            return when
    return None


def test_engines_sharing_a_card_start_one_at_a_time(
    backend: Backend, operator: Operator, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi
) -> None:
    create_queues(custom, queue("root"), queue("team-a", parent="root"))
    create_podgroup(custom, podgroup("engines", NS, "team-a", min_member=3))
    names = ("engine-0", "engine-1", "engine-2")
    for name in names:
        body = kai_shared(pod(name, NS, "engines", gpus=0), "0.5")
        body["metadata"]["annotations"][keys.STAGGERED_START_ANNOTATION] = "true"
        body["metadata"]["annotations"]["kai-py.dev/ready-seconds"] = str(READY_AFTER)
        create_pod(core, body)

    def all_ready() -> list[Any] | None:
        pods = [core.read_namespaced_pod(n, NS) for n in names]
        return pods if all(_condition(p, "Ready") for p in pods) else None

    pods = wait_for(all_ready, timeout=60, what=f"three engines Ready\n{operator.log}")
    by_card: dict[tuple[str, str], list[Any]] = {}
    for p in pods:
        card = (p.spec.node_name, p.metadata.labels[keys.GPU_GROUP_LABEL])
        by_card.setdefault(card, []).append(p)
    shared = [ps for ps in by_card.values() if len(ps) == 2]
    assert len(shared) == 1, {k: [p.metadata.name for p in v] for k, v in by_card.items()}
    first, second = sorted(shared[0], key=lambda p: _condition(p, "PodScheduled"))
    (alone,) = [p for p in pods if p not in shared[0]]
    first_bound, first_ready = _condition(first, "PodScheduled"), _condition(first, "Ready")
    second_bound = _condition(second, "PodScheduled")
    assert first_bound and first_ready and second_bound
    # The first on the card was not Ready for READY_AFTER seconds (the kubelet's delay)...
    assert (first_ready - first_bound).total_seconds() >= READY_AFTER - 1
    # ... and the second on that card was bound only once the first was Ready.
    assert second_bound >= first_ready, (first_ready, second_bound)
    # The gang's member on another card did not wait for either.
    alone_bound = _condition(alone, "PodScheduled")
    assert alone_bound is not None
    assert abs((alone_bound - first_bound).total_seconds()) <= 1


def test_a_restarted_binder_continues_the_wait(
    backend: Backend, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, tmp_path: Path
) -> None:
    create_queues(custom, queue("root"), queue("team-a", parent="root"))
    create_podgroup(custom, podgroup("pair", NS, "team-a", min_member=2))
    names = ("pair-0", "pair-1")
    for name in names:
        body = kai_shared(pod(name, NS, "pair", gpus=0), "0.5")
        body["metadata"]["annotations"][keys.STAGGERED_START_ANNOTATION] = "true"
        body["metadata"]["annotations"]["kai-py.dev/ready-seconds"] = "8"
        create_pod(core, body)
    first = start_operator(backend.kubeconfig_path, tmp_path / "first.log")
    try:
        # One is bound, the other's BindRequest says what it waits for.
        waiting = wait_for(
            lambda: [
                br
                for br in bindrequests(custom, NS).values()
                if "staggered start: waiting" in ((br.get("status") or {}).get("reason") or "")
            ],
            timeout=60,
            what=f"a waiting BindRequest\n{first.log}",
        )
    finally:
        stop_operator(first)
    (br,) = waiting
    later = br["spec"]["podName"]
    (earlier,) = [n for n in names if n != later]
    assert not core.read_namespaced_pod(later, NS).spec.node_name
    # A new operator (nothing in memory) continues the same wait from the cluster.
    second = start_operator(backend.kubeconfig_path, tmp_path / "second.log")
    try:
        bound = wait_for(
            lambda: (lambda p: p if p.spec.node_name else None)(
                core.read_namespaced_pod(later, NS)
            ),
            timeout=60,
            what=f"{later} bound\n{second.log}",
        )
    finally:
        stop_operator(second)
    ready = _condition(core.read_namespaced_pod(earlier, NS), "Ready")
    bound_at = _condition(core.read_namespaced_pod(later, NS), "PodScheduled")
    assert ready is not None and bound_at is not None, bound
    assert bound_at >= ready, (ready, bound_at)
    assert "Traceback" not in first.log + second.log
