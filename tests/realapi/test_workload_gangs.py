"""The gang KAI's pod-grouper makes of an operator's workload, on both backends: one
PodGroup for the whole workload, named and sized as KAI names and sizes it, scheduled
whole or not at all (never half a Ray cluster or half a LeaderWorkerSet group).

The workloads are made as their operators would (``workload_operators``) on a cluster
of two 4-GPU nodes; each kind has one workload that cannot fit whole (nothing of it may
bind) and one that fits (all of it runs).
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client as k8s
from operator_helpers import Operator, create_queues, events_of, queue, wait_for
from realapi_backends import Backend
from test_workload_operators import NS, jobset, leaderworkerset, raycluster, running
from workload_operators import apply_as_operator, install_crds

from kai_py.api import keys


@pytest.fixture(autouse=True)
def _queues(custom: k8s.CustomObjectsApi) -> None:
    create_queues(custom, queue("root"), queue("team-a", parent="root"))


def grouped(core: k8s.CoreV1Api, selector: str, count: int, log: str) -> set[str]:
    """The PodGroups the pods of ``selector`` are in, once the pod-grouper has seen all."""

    def check() -> set[str] | None:
        pods = core.list_namespaced_pod(NS, label_selector=selector).items
        names = {(p.metadata.annotations or {}).get(keys.POD_GROUP_ANNOTATION) for p in pods}
        return None if len(pods) != count or None in names else {str(n) for n in names}

    found: set[str] = wait_for(check, timeout=30, what=f"{count} pods grouped ({selector})\n{log}")
    return found


def podgroup(custom: k8s.CustomObjectsApi, name: str) -> Any:
    return custom.get_namespaced_custom_object(
        "scheduling.run.ai", "v2alpha2", NS, "podgroups", name
    )


def nothing_binds(core: k8s.CoreV1Api, group: str, selector: str, log: str) -> None:
    wait_for(
        lambda: [e for e in events_of(core, NS, group) if e.reason == "Unschedulable"],
        timeout=30,
        what=f"an Unschedulable event on {group}\n{log}",
    )
    pods = core.list_namespaced_pod(NS, label_selector=selector).items
    assert not [p.metadata.name for p in pods if p.spec.node_name]


def test_a_raycluster_is_one_gang_of_its_head_and_min_workers(
    backend: Backend,
    operator: Operator,
    api: k8s.ApiClient,
    core: k8s.CoreV1Api,
    custom: k8s.CustomObjectsApi,
) -> None:
    install_crds(backend, api, "RayCluster")
    # The head and at least 9 one-GPU workers: more than the 8 GPUs there are.
    big = apply_as_operator(api, raycluster("big", workers=10, min_workers=9))
    (group,) = grouped(core, "ray.io/cluster=big", 11, operator.log)
    assert group == f"pg-big-{big['RayCluster/big']}"
    assert podgroup(custom, group)["spec"]["minMember"] == 1 + 9
    nothing_binds(core, group, "ray.io/cluster=big", operator.log)
    small = apply_as_operator(api, raycluster("small", workers=3, min_workers=2))
    (group,) = grouped(core, "ray.io/cluster=small", 4, operator.log)
    assert group == f"pg-small-{small['RayCluster/small']}"
    assert podgroup(custom, group)["spec"]["minMember"] == 1 + 2
    running(core, "ray.io/cluster=small", 4, operator.log)


def test_a_leaderworkerset_group_is_one_gang_of_its_size(
    backend: Backend,
    operator: Operator,
    api: k8s.ApiClient,
    core: k8s.CoreV1Api,
    custom: k8s.CustomObjectsApi,
) -> None:
    install_crds(backend, api, "LeaderWorkerSet")
    # A leader and 9 one-GPU workers: more than the 8 GPUs there are.
    big = apply_as_operator(api, leaderworkerset("big", size=10))
    selector = "leaderworkerset.sigs.k8s.io/name=big"
    (group,) = grouped(core, selector, 10, operator.log)
    assert group == f"pg-big-{big['LeaderWorkerSet/big']}-group-0"
    assert podgroup(custom, group)["spec"]["minMember"] == 10
    nothing_binds(core, group, selector, operator.log)
    small = apply_as_operator(api, leaderworkerset("small", size=4))
    selector = "leaderworkerset.sigs.k8s.io/name=small"
    (group,) = grouped(core, selector, 4, operator.log)
    assert group == f"pg-small-{small['LeaderWorkerSet/small']}-group-0"
    running(core, selector, 4, operator.log)


def test_a_jobset_is_one_gang_of_its_replicated_jobs(
    backend: Backend,
    operator: Operator,
    api: k8s.ApiClient,
    core: k8s.CoreV1Api,
    custom: k8s.CustomObjectsApi,
) -> None:
    install_crds(backend, api, "JobSet")
    # A driver and 3 worker Jobs of 3 one-GPU pods: 9 GPUs, more than the 8 there are.
    big = jobset("big", workers=3)
    big["spec"]["replicatedJobs"][1]["template"]["spec"].update(parallelism=3, completions=3)
    uids = apply_as_operator(api, big)
    selector = "jobset.sigs.k8s.io/jobset-name=big"
    (group,) = grouped(core, selector, 10, operator.log)
    assert group == f"pg-big-{uids['JobSet/big']}"
    nothing_binds(core, group, selector, operator.log)
    uids = apply_as_operator(api, jobset("small", workers=2))
    selector = "jobset.sigs.k8s.io/jobset-name=small"
    (group,) = grouped(core, selector, 3, operator.log)
    assert group == f"pg-small-{uids['JobSet/small']}"
    running(core, selector, 3, operator.log)
