"""The operator's scheduling loop against the emulated cluster, through the kubernetes client."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client as k8s
from operator_helpers import (
    Operator,
    bindrequests,
    create_pod,
    create_podgroup,
    create_queues,
    events_of,
    pod,
    podgroup,
    queue,
    wait_for,
)

from kai_py.api.queue import MAX_QUEUE_DEPTH
from kai_py.emulator.dev_cluster import ThreadedDevCluster

NS = "team-a"


def _queues(custom: k8s.CustomObjectsApi) -> None:
    create_queues(custom, queue("root"), queue("team-a", parent="root"))


def _gang_of_two(
    core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, name: str, gpus: int, what: str
) -> dict[str, dict[str, Any]]:
    """A 2-pod gang in team-a; waits for its two BindRequests."""
    _queues(custom)
    create_podgroup(custom, podgroup(name, NS, "team-a", min_member=2))
    for i in range(2):
        create_pod(core, pod(f"{name}-{i}", NS, name, gpus=gpus))
    return wait_for(
        lambda: (lambda b: b if len(b) == 2 else None)(bindrequests(custom, NS)),
        timeout=15,
        what=what,
    )


def test_pods_that_fit_get_bindrequests_on_the_chosen_node(
    cluster: ThreadedDevCluster,
    operator: Operator,
    core: k8s.CoreV1Api,
    custom: k8s.CustomObjectsApi,
) -> None:
    found = _gang_of_two(core, custom, "train", gpus=3, what=f"two BindRequests\n{operator.log}")
    nodes = {name: br["spec"]["selectedNode"] for name, br in found.items()}
    # 3 GPUs each on 4-GPU nodes: one pod per node.
    assert sorted(nodes.values()) == ["gpu-0", "gpu-1"]
    br = found["train-0"]
    assert br["spec"]["podName"] == "train-0"
    assert br["spec"]["receivedResourceType"] == "Regular"
    assert br["spec"]["receivedGPU"] == {"count": 3, "portion": "1"}
    pod_uid = core.read_namespaced_pod("train-0", NS).metadata.uid
    assert br["metadata"]["ownerReferences"][0]["uid"] == pod_uid
    assert br["metadata"]["ownerReferences"][0]["kind"] == "Pod"

    def scheduled_event() -> list[Any]:
        return [e for e in events_of(core, NS, "train-0") if e.reason == "Scheduled"]

    events = wait_for(scheduled_event, what="a Scheduled event")
    assert events[0].source.component == "kai-scheduler"
    assert events[0].involved_object.uid == pod_uid

    def allocated() -> dict[str, Any] | None:
        q = custom.get_cluster_custom_object("scheduling.run.ai", "v2", "queues", "team-a")
        status: dict[str, Any] = q.get("status") or {}
        got = status.get("allocated") or {}
        return status if str(got.get("nvidia.com/gpu")) == "6" else None

    status = wait_for(allocated, what="queue status allocated 6 GPUs")
    assert status["allocated"]["cpu"] in (2000, "2000")
    assert status["requested"]["nvidia.com/gpu"] in (6, "6")
    # The parent queue adds up its children.
    parent = custom.get_cluster_custom_object("scheduling.run.ai", "v2", "queues", "root")
    assert str(parent["status"]["allocated"]["nvidia.com/gpu"]) == "6"


def test_a_gang_that_does_not_fit_gets_no_bindrequests_and_an_unschedulable_event(
    cluster: ThreadedDevCluster,
    operator: Operator,
    core: k8s.CoreV1Api,
    custom: k8s.CustomObjectsApi,
) -> None:
    _queues(custom)
    # Four pods of 3 GPUs on two 4-GPU nodes: only two fit, the gang needs all four.
    create_podgroup(custom, podgroup("big", NS, "team-a", min_member=4))
    for i in range(4):
        create_pod(core, pod(f"big-{i}", NS, "big", gpus=3))

    def unschedulable() -> list[Any]:
        return [
            e
            for e in events_of(core, NS, "big")
            if e.reason == "Unschedulable" and e.involved_object.kind == "PodGroup"
        ]

    events = wait_for(unschedulable, timeout=15, what=f"an Unschedulable event\n{operator.log}")
    assert events[0].type == "Warning"
    assert "Resources were found for 2 pods while 4 are required" in events[0].message
    assert bindrequests(custom, NS) == {}
    # The pods say so too (markUnschedulable defaults to true), as kubectl describe shows.
    pod_events = wait_for(
        lambda: [e for e in events_of(core, NS, "big-0") if e.reason == "Unschedulable"],
        what="the pod's Unschedulable event",
    )
    assert pod_events[0].type == "Warning"

    def condition() -> Any:
        status = core.read_namespaced_pod("big-0", NS).status
        return next(
            (
                c
                for c in status.conditions or []
                if c.type == "PodScheduled" and c.status == "False"
            ),
            None,
        )

    cond = wait_for(condition, what="PodScheduled=False")
    assert cond.reason == "Unschedulable"
    assert "Resources were found for 2 pods" in cond.message
    # The PodGroup's status explains it.
    pg = wait_for(
        lambda: (
            lambda body: body if (body.get("status") or {}).get("schedulingConditions") else None
        )(
            custom.get_namespaced_custom_object(
                "scheduling.run.ai", "v2alpha2", NS, "podgroups", "big"
            )
        ),
        what="schedulingConditions",
    )
    cond_pg = pg["status"]["schedulingConditions"][0]
    assert cond_pg["type"] == "UnschedulableOnNodePool"
    assert cond_pg["reasons"][0]["message"].startswith("Resources were found for 2 pods")
    assert str(pg["status"]["resourcesStatus"]["requested"]["nvidia.com/gpu"]) == "12"
    # Repeats of the same event bump its count instead of making new Events.
    first = events[0]
    later = wait_for(
        lambda: [e for e in unschedulable() if (e.count or 0) > 1], timeout=15, what="count > 1"
    )
    assert len(unschedulable()) == 1
    assert later[0].metadata.name == first.metadata.name


@pytest.mark.parametrize("operator_args", [["--controllers", "scheduler"]])
def test_a_failed_bindrequest_is_deleted_and_the_pod_decided_again(
    cluster: ThreadedDevCluster,
    operator: Operator,
    core: k8s.CoreV1Api,
    custom: k8s.CustomObjectsApi,
) -> None:
    _queues(custom)
    create_podgroup(custom, podgroup("solo", NS, "team-a"))
    create_pod(core, pod("solo-0", NS, "solo", gpus=1))
    first = wait_for(
        lambda: bindrequests(custom, NS).get("solo-0"), timeout=15, what="a BindRequest"
    )
    custom.patch_namespaced_custom_object_status(
        "scheduling.run.ai",
        "v1alpha2",
        NS,
        "bindrequests",
        "solo-0",
        {"status": {"phase": "Failed", "reason": "test", "failedAttempts": 3}},
    )
    old_uid = first["metadata"]["uid"]

    def old_one_gone() -> bool:
        br = bindrequests(custom, NS).get("solo-0")
        return br is None or br["metadata"]["uid"] != old_uid

    wait_for(old_one_gone, timeout=15, what="the failed BindRequest deleted")
    # Only the scheduler runs here (no binder to race with): the pod is decided again.
    assert not core.read_namespaced_pod("solo-0", NS).spec.node_name
    again = wait_for(
        lambda: bindrequests(custom, NS).get("solo-0"), timeout=15, what="a new BindRequest"
    )
    assert again["metadata"]["uid"] != old_uid
    assert (again.get("status") or {}).get("phase") != "Failed"
    assert again["spec"]["selectedNode"] == first["spec"]["selectedNode"]


def test_a_missing_queue_is_a_warning_and_the_rest_schedules(
    cluster: ThreadedDevCluster,
    operator: Operator,
    core: k8s.CoreV1Api,
    custom: k8s.CustomObjectsApi,
) -> None:
    _queues(custom)
    # A Queue under a parent that does not exist (yet) is left out, with a Warning of its own.
    create_queues(custom, queue("orphan", parent="nowhere"))
    create_podgroup(custom, podgroup("lost", NS, "no-such-queue"))
    create_pod(core, pod("lost-0", NS, "lost", gpus=1))
    create_podgroup(custom, podgroup("fine", NS, "team-a"))
    create_pod(core, pod("fine-0", NS, "fine", gpus=1))
    wait_for(lambda: bindrequests(custom, NS).get("fine-0"), timeout=15, what="fine-0 bound")
    warnings = wait_for(
        lambda: [e for e in events_of(core, NS, "lost") if e.type == "Warning"],
        what=f"a Warning on the PodGroup\n{operator.log}",
    )
    assert "no-such-queue" in warnings[0].message
    assert "lost-0" not in bindrequests(custom, NS)
    orphan = wait_for(
        lambda: [
            e for e in events_of(core, "default", "orphan") if e.reason == "ParentQueueNotFound"
        ],
        what="a ParentQueueNotFound event",
    )
    assert orphan[0].type == "Warning"
    assert orphan[0].involved_object.kind == "Queue"
    assert "'nowhere' does not exist" in orphan[0].message


def test_the_loop_survives_api_errors(
    cluster: ThreadedDevCluster,
    operator: Operator,
    core: k8s.CoreV1Api,
    custom: k8s.CustomObjectsApi,
) -> None:
    _queues(custom)
    fault = cluster.cluster.faults.add(verb="create", resource="bindrequests", code=500, times=2)
    create_podgroup(custom, podgroup("flaky", NS, "team-a"))
    create_pod(core, pod("flaky-0", NS, "flaky", gpus=1))
    br = wait_for(
        lambda: bindrequests(custom, NS).get("flaky-0"),
        timeout=15,
        what=f"a BindRequest\n{operator.log}",
    )
    assert fault.fired == 2
    assert br["spec"]["selectedNode"].startswith("gpu-")
    assert "write failed" in operator.log and "the next cycle retries" in operator.log
    assert operator.process.poll() is None


def test_a_higher_priority_job_preempts_through_the_eviction_api(
    cluster: ThreadedDevCluster,
    operator: Operator,
    core: k8s.CoreV1Api,
    custom: k8s.CustomObjectsApi,
) -> None:
    _queues(custom)
    create_podgroup(custom, podgroup("low", NS, "team-a", min_member=1))
    for i in range(2):
        create_pod(core, pod(f"low-{i}", NS, "low", gpus=4))
    wait_for(lambda: len(bindrequests(custom, NS)) == 2, timeout=15, what="low bound")
    create_podgroup(custom, podgroup("high", NS, "team-a", priority_class="inference"))
    create_pod(core, pod("high-0", NS, "high", gpus=4))

    def evicted() -> list[Any]:
        return [e for e in events_of(core, NS, "low") if e.reason == "Evict"]

    events = wait_for(evicted, timeout=15, what=f"an Evict event\n{operator.log}")
    assert "was preempted by higher priority workload team-a/high" in events[0].message
    remaining = {p.metadata.name for p in core.list_namespaced_pod(NS).items}
    gone = {"low-0", "low-1"} - remaining
    assert len(gone) == 1 or any(
        p.metadata.deletion_timestamp for p in core.list_namespaced_pod(NS).items
    )
    br = wait_for(lambda: bindrequests(custom, NS).get("high-0"), timeout=15, what="high-0 bound")
    assert br["spec"]["selectedNode"] in ("gpu-0", "gpu-1")
    assert len([e for e in evicted()]) == 1  # one victim was enough


def test_with_the_binder_pods_end_up_bound_and_running(
    cluster: ThreadedDevCluster,
    operator: Operator,
    core: k8s.CoreV1Api,
    custom: k8s.CustomObjectsApi,
) -> None:
    found = _gang_of_two(core, custom, "run", gpus=2, what="two BindRequests")
    for name, br in found.items():
        running = wait_for(
            lambda name=name: (lambda p: p if p.status.phase == "Running" else None)(
                core.read_namespaced_pod(name, NS)
            ),
            timeout=15,
            what=f"{name} Running\n{operator.log}",
        )
        assert running.spec.node_name == br["spec"]["selectedNode"]
    # Both on one node (binpack).
    assert len({br["spec"]["selectedNode"] for br in found.values()}) == 1


def test_after_the_watches_drop_nothing_is_lost(
    cluster: ThreadedDevCluster,
    operator: Operator,
    core: k8s.CoreV1Api,
    custom: k8s.CustomObjectsApi,
) -> None:
    _queues(custom)
    for name in ("a", "c"):
        create_podgroup(custom, podgroup(name, NS, "team-a"))
        create_pod(core, pod(f"{name}-0", NS, name, gpus=4))
    first = wait_for(
        lambda: (lambda b: b if len(b) == 2 else None)(bindrequests(custom, NS)),
        timeout=15,
        what="a-0 and c-0 placed",
    )
    assert cluster.cluster.drop_watches() > 0
    # The cluster is full; a-0 goes while the watches restart, then b-0 asks for its place.
    core.delete_namespaced_pod("a-0", NS, grace_period_seconds=0)
    wait_for(
        lambda: "a-0" not in {p.metadata.name for p in core.list_namespaced_pod(NS).items},
        what="a-0 gone",
    )
    create_podgroup(custom, podgroup("b", NS, "team-a"))
    create_pod(core, pod("b-0", NS, "b", gpus=4))
    br = wait_for(
        lambda: bindrequests(custom, NS).get("b-0"), timeout=15, what=f"b-0 placed\n{operator.log}"
    )
    assert br["spec"]["selectedNode"] == first["a-0"]["spec"]["selectedNode"]


def test_pause_after_a_cycle_counts_its_own_work_not_its_writes() -> None:
    # Imported here: importing the operator's modules at collection sets up Kopf's
    # loggers before tests/operator/test_logs.py configures its own.
    from kai_py.controllers.scheduling import CYCLE_SHARE, pause_after

    # A quick cycle waits out the rest of its period.
    assert pause_after(0.25, 0.0, 1.0) == 0.75
    # A long cycle of its own work: as long a pause again (half the loop's time).
    assert CYCLE_SHARE == 0.5
    assert pause_after(4.0, 0.0, 1.0) == 4.0
    # 16 s of which 15 s waiting for the API server: a pause for the 1 s of work only.
    assert pause_after(16.0, 15.0, 1.0) == 1.0
    # Never negative, also when a clock step makes the writes look longer.
    assert pause_after(2.0, 3.0, 1.0) == 0.0


def test_a_node_with_unreadable_allocatable_is_left_out_and_the_rest_schedules(
    cluster: ThreadedDevCluster,
    operator: Operator,
    core: k8s.CoreV1Api,
    custom: k8s.CustomObjectsApi,
) -> None:
    _queues(custom)
    # A real API server refuses this quantity; the emulator's store does not check it, as
    # no store of a custom kind would: the one bad object must not stop every cycle.
    cluster.call(
        cluster.store.patch(
            "nodes",
            None,
            "gpu-1",
            {"status": {"allocatable": {"nvidia.com/gpu": "lots"}}},
            subresource="status",
        )
    )
    create_podgroup(custom, podgroup("fine", NS, "team-a"))
    create_pod(core, pod("fine-0", NS, "fine", gpus=1))
    br = wait_for(
        lambda: bindrequests(custom, NS).get("fine-0"),
        timeout=15,
        what=f"fine-0 bound\n{operator.log}",
    )
    assert br["spec"]["selectedNode"] == "gpu-0"
    warning = wait_for(
        lambda: [e for e in events_of(core, "default", "gpu-1") if e.reason == "InvalidNode"],
        what=f"an InvalidNode event\n{operator.log}",
    )
    assert warning[0].type == "Warning"
    assert warning[0].involved_object.kind == "Node"
    assert "status.allocatable.nvidia.com/gpu" in warning[0].message
    assert "'lots'" in warning[0].message
    assert "cannot build a snapshot" not in operator.log


def test_queues_deeper_than_the_limit_are_left_out_with_a_warning_and_the_rest_schedules(
    cluster: ThreadedDevCluster,
    operator: Operator,
    core: k8s.CoreV1Api,
    custom: k8s.CustomObjectsApi,
) -> None:
    # Created while no webhook checked them (the emulator runs none).
    _queues(custom)
    deep = MAX_QUEUE_DEPTH + 2
    create_queues(custom, queue("level-1"))
    create_queues(
        custom, *(queue(f"level-{i}", parent=f"level-{i - 1}") for i in range(2, deep + 1))
    )
    create_podgroup(custom, podgroup("too-deep", NS, f"level-{deep}"))
    create_pod(core, pod("too-deep-0", NS, "too-deep", gpus=1))
    create_podgroup(custom, podgroup("fine", NS, "team-a"))
    create_pod(core, pod("fine-0", NS, "fine", gpus=1))
    wait_for(lambda: bindrequests(custom, NS).get("fine-0"), timeout=15, what="fine-0 bound")
    first = f"level-{MAX_QUEUE_DEPTH + 1}"
    warning = wait_for(
        lambda: [e for e in events_of(core, "default", first) if e.reason == "InvalidQueue"],
        what=f"an InvalidQueue event\n{operator.log}",
    )
    assert warning[0].type == "Warning"
    assert f"level {MAX_QUEUE_DEPTH + 1} of the queue tree" in warning[0].message
    assert "too-deep-0" not in bindrequests(custom, NS)
