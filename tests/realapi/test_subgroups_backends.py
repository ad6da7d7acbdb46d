"""A hierarchical PodGroup end to end, on both backends (the emulator and a real
kube-apiserver).

A LeaderWorkerSet-shaped group written by hand: a user-made PodGroup with a leader
sub-group (minMember 1) and a workers sub-group (minMember 3), and plain pods that name
their sub-group with the ``kai.scheduler/subgroup-name`` label. With the leader and 2 of
the 3 workers created, nothing binds and the PodGroup is NotReady (in KAI's words, which
its own tests match); once the third worker exists, all four run together.
"""

from __future__ import annotations

import re
from typing import Any

from kubernetes import client as k8s
from operator_helpers import (
    Operator,
    bindrequests,
    create_pod,
    create_podgroup,
    create_queues,
    events_of,
    pod,
    queue,
    wait_for,
)
from realapi_backends import Backend

from kai_py.api import keys

NS = "team-a"
#: How KAI's own end-to-end tests recognise a sub-group's NotReady event.
KAI_NOT_READY = (
    r"Job is not ready for scheduling. Waiting for \d+ pods( for SubGroup \S+)?, "
    r"currently \d+ exist, \d+ are gated"
)


def _member(name: str, subgroup: str, gpus: int) -> dict[str, Any]:
    body = pod(name, NS, "lws", gpus=gpus)
    body["metadata"]["labels"][keys.SUBGROUP_LABEL] = subgroup
    return body


def test_a_leader_and_workers_podgroup_starts_whole(
    backend: Backend, operator: Operator, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi
) -> None:
    create_queues(custom, queue("root"), queue("team-a", parent="root"))
    create_podgroup(
        custom,
        {
            "apiVersion": "scheduling.run.ai/v2alpha2",
            "kind": "PodGroup",
            "metadata": {"name": "lws", "namespace": NS},
            "spec": {
                "queue": "team-a",
                "priorityClassName": "train",
                "subGroups": [
                    {"name": "leader", "minMember": 1},
                    {"name": "workers", "minMember": 3},
                ],
            },
        },
    )
    # 1 + 3 x 2 GPUs: 7 of the two 4-GPU nodes, so the group spans both.
    create_pod(core, _member("lws-leader", "leader", 1))
    for i in range(2):
        create_pod(core, _member(f"lws-worker-{i}", "workers", 2))

    def not_ready() -> list[Any]:
        return [
            e
            for e in events_of(core, NS, "lws")
            if e.reason == "NotReady" and re.search(KAI_NOT_READY, e.message or "")
        ]

    (event, *_) = wait_for(not_ready, timeout=60, what=f"a NotReady event\n{operator.log}")
    assert "Waiting for 3 pods for SubGroup workers, currently 2 exist, 0 are gated" in (
        event.message
    )
    assert not bindrequests(custom, NS)
    assert not any(p.spec.node_name for p in core.list_namespaced_pod(NS).items)

    create_pod(core, _member("lws-worker-2", "workers", 2))
    names = ["lws-leader", *(f"lws-worker-{i}" for i in range(3))]

    def all_running() -> list[Any] | None:
        pods = [core.read_namespaced_pod(n, NS) for n in names]
        return pods if all(p.status.phase == "Running" for p in pods) else None

    pods = wait_for(all_running, timeout=60, what=f"the whole group Running\n{operator.log}")
    assert {p.spec.node_name for p in pods} == {"gpu-0", "gpu-1"}
