"""The operator's integration tests, each run on both backends: the emulator and a real kube-apiserver.

Only the Kubernetes API is used (the kubernetes client and the operator
subprocess), so what passes here passes against a real API server with
authentication, RBAC, admission and TLS, not only against the emulator.
"""

from __future__ import annotations

import re
import time
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
    gpu_job,
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
from kai_py.binder import reservation as rsv

NS = "team-a"
RNS = keys.RESERVATION_NAMESPACE
#: How KAI's own e2e tests recognise its NotReady event (their regular expression).
KAI_NOT_READY = (
    r"Job is not ready for scheduling. Waiting for \d+ pods( for SubGroup \S+)?, "
    r"currently \d+ exist, \d+ are gated"
)


def _queues(custom: k8s.CustomObjectsApi) -> None:
    create_queues(custom, queue("root"), queue("team-a", parent="root"))


def _running(core: k8s.CoreV1Api, name: str, namespace: str = NS) -> Any:
    p = core.read_namespaced_pod(name, namespace)
    return p if p.status.phase == "Running" else None


def _gone(core: k8s.CoreV1Api, name: str, namespace: str = NS) -> bool:
    try:
        core.read_namespaced_pod(name, namespace)
    except k8s.ApiException as exc:
        if exc.status == 404:
            return True
        raise
    return False


def _fraction_pod(name: str, group: str, fraction: str = "0.5") -> dict[str, Any]:
    """A shared pod as the pod webhook admits it: KAI's two ConfigMaps."""
    return kai_shared(pod(name, NS, group, gpus=0), fraction)


def _configmap(core: k8s.CoreV1Api, name: str) -> Any:
    try:
        return core.read_namespaced_config_map(name, NS)
    except k8s.ApiException as exc:
        if exc.status == 404:
            return None
        raise


def test_a_jobs_pods_are_grouped_and_run(
    backend: Backend,
    operator: Operator,
    core: k8s.CoreV1Api,
    custom: k8s.CustomObjectsApi,
    batch: k8s.BatchV1Api,
) -> None:
    _queues(custom)
    job = gpu_job("train", NS, parallelism=2, annotations={keys.BATCH_MIN_MEMBER_ANNOTATION: "2"})
    batch.create_namespaced_job(NS, job)
    uid = batch.read_namespaced_job("train", NS).metadata.uid
    group = f"pg-train-{uid}"
    pg = wait_for(
        lambda: custom.get_namespaced_custom_object(
            "scheduling.run.ai", "v2alpha2", NS, "podgroups", group
        ),
        timeout=30,
        what=f"the Job's PodGroup\n{operator.log}",
    )
    assert pg["spec"]["minMember"] == 2
    assert pg["spec"]["queue"] == "team-a"
    assert pg["metadata"]["ownerReferences"][0]["uid"] == uid

    def both_running() -> list[Any] | None:
        pods = core.list_namespaced_pod(NS, label_selector="job-name=train").items
        ok = len(pods) == 2 and all(p.status.phase == "Running" for p in pods)
        return pods if ok else None

    pods = wait_for(both_running, timeout=40, what=f"both pods Running\n{operator.log}")
    assert {p.metadata.annotations[keys.POD_GROUP_ANNOTATION] for p in pods} == {group}
    assert all(p.spec.node_name in ("gpu-0", "gpu-1") for p in pods)


def test_a_gang_binds_together_or_not_at_all(
    backend: Backend, operator: Operator, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi
) -> None:
    _queues(custom)
    # 3 pods of 3 GPUs on two 4-GPU nodes: the gang of 3 cannot fit, nothing binds.
    create_podgroup(custom, podgroup("big", NS, "team-a", min_member=3))
    for i in range(3):
        create_pod(core, pod(f"big-{i}", NS, "big", gpus=3))

    def unschedulable() -> list[Any]:
        return [e for e in events_of(core, NS, "big") if e.reason == "Unschedulable"]

    wait_for(unschedulable, timeout=30, what=f"an Unschedulable event\n{operator.log}")
    assert not bindrequests(custom, NS)
    assert not any(p.spec.node_name for p in core.list_namespaced_pod(NS).items)
    # A gang of 2 that fits binds both, one per node.
    create_podgroup(custom, podgroup("pair", NS, "team-a", min_member=2))
    for i in range(2):
        create_pod(core, pod(f"pair-{i}", NS, "pair", gpus=3))
    for i in range(2):
        wait_for(
            lambda i=i: _running(core, f"pair-{i}"),
            timeout=30,
            what=f"pair-{i} Running\n{operator.log}",
        )
    nodes = {core.read_namespaced_pod(f"pair-{i}", NS).spec.node_name for i in range(2)}
    assert nodes == {"gpu-0", "gpu-1"}
    assert not any(core.read_namespaced_pod(f"big-{i}", NS).spec.node_name for i in range(3))


def test_fractions_share_a_gpu_through_one_reservation_pod(
    backend: Backend, operator: Operator, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi
) -> None:
    _queues(custom)
    for name in ("half-a", "half-b"):
        create_podgroup(custom, podgroup(name, NS, "team-a"))
        create_pod(core, _fraction_pod(name, name))
    for name in ("half-a", "half-b"):
        wait_for(
            lambda n=name: _running(core, n), timeout=30, what=f"{name} Running\n{operator.log}"
        )
    a, b = (core.read_namespaced_pod(n, NS) for n in ("half-a", "half-b"))
    assert a.spec.node_name == b.spec.node_name
    group = a.metadata.labels[keys.GPU_GROUP_LABEL]
    assert b.metadata.labels[keys.GPU_GROUP_LABEL] == group
    # KAI's wiring: <annotation>-0 with the card and the portion, <annotation>-0-evar,
    # both owned by the pod; and the card is what the kubelet gave the container.
    for p in (a, b):
        prefix = p.metadata.annotations["runai/shared-gpu-configmap"]
        assert prefix == f"{p.metadata.name}-x7b2kq9-shared-gpu"
        first, evar = _configmap(core, f"{prefix}-0"), _configmap(core, f"{prefix}-0-evar")
        assert first is not None and evar is not None
        card = first.data["NVIDIA_VISIBLE_DEVICES"]
        assert card.startswith("GPU-")
        assert (first.data["GPU_PORTION"], first.data["RUNAI_NUM_OF_GPUS"]) == ("0.5", "0.5")
        assert not evar.data
        for cm in (first, evar):
            (owner,) = cm.metadata.owner_references
            assert (owner.kind, owner.name, owner.uid) == ("Pod", p.metadata.name, p.metadata.uid)
        assert p.metadata.annotations["kai-py.dev/visible-devices"] == card
        assert _configmap(core, f"{p.metadata.name}-gpu") is None  # only KAI's names
    holders = core.list_namespaced_pod(RNS).items
    assert [h.metadata.name for h in holders] == [rsv.reservation_pod_name(a.spec.node_name, group)]
    assert holders[0].spec.node_name == a.spec.node_name
    core.delete_namespaced_pod("half-a", NS)
    wait_for(lambda: _gone(core, "half-a"), timeout=30, what="half-a gone")
    time.sleep(0.5)
    assert core.list_namespaced_pod(RNS).items  # half-b still uses the card
    core.delete_namespaced_pod("half-b", NS)
    wait_for(lambda: not core.list_namespaced_pod(RNS).items, timeout=30, what="reservation gone")


def test_shared_cards_on_two_nodes_have_different_group_values(
    backend: Backend, operator: Operator, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi
) -> None:
    """``runai-gpu-group`` names one card in the whole cluster, as KAI's UUID does: five
    0.75 pods on two 4-GPU nodes take five cards (binpack fills one node first), and no
    two of them, on one node or on two, carry the same value."""
    _queues(custom)
    names = [f"big-share-{i}" for i in range(5)]
    for name in names:
        create_podgroup(custom, podgroup(name, NS, "team-a"))
        create_pod(core, _fraction_pod(name, name, "0.75"))
    for name in names:
        wait_for(
            lambda n=name: _running(core, n), timeout=60, what=f"{name} Running\n{operator.log}"
        )
    placed = [core.read_namespaced_pod(n, NS) for n in names]
    cards = {(p.spec.node_name, p.metadata.labels[keys.GPU_GROUP_LABEL]) for p in placed}
    assert len({node for node, _ in cards}) == 2, cards
    assert len({group for _, group in cards}) == 5, cards
    held = {
        (h.spec.node_name, h.metadata.labels[keys.GPU_GROUP_LABEL])
        for h in core.list_namespaced_pod(RNS).items
    }
    assert held == cards  # one reservation pod per card, labelled with its group


def test_a_higher_priority_job_preempts_with_an_evict_event(
    backend: Backend, operator: Operator, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi
) -> None:
    _queues(custom)
    create_podgroup(custom, podgroup("low", NS, "team-a", min_member=1))
    for i in range(2):
        create_pod(core, pod(f"low-{i}", NS, "low", gpus=4))
    for i in range(2):
        wait_for(lambda i=i: _running(core, f"low-{i}"), timeout=30, what=f"low-{i} Running")
    create_podgroup(custom, podgroup("high", NS, "team-a", priority_class="inference"))
    create_pod(core, pod("high-0", NS, "high", gpus=4))

    def evicted() -> list[Any]:
        return [e for e in events_of(core, NS, "low") if e.reason == "Evict"]

    events = wait_for(evicted, timeout=30, what=f"an Evict event\n{operator.log}")
    assert "was preempted by higher priority workload team-a/high" in events[0].message
    wait_for(lambda: _running(core, "high-0"), timeout=40, what=f"high-0 Running\n{operator.log}")
    survivors = [n for n in ("low-0", "low-1") if not _gone(core, n)]
    assert len(survivors) == 1
    assert len(evicted()) == 1


def test_reclaim_gives_a_queue_back_its_quota(
    backend: Backend, operator: Operator, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi
) -> None:
    create_queues(
        custom,
        queue("root"),
        queue("team-a", parent="root", gpu_quota=4),
        queue("team-b", parent="root", gpu_quota=4),
    )
    # team-b borrows all 8 GPUs while team-a is idle.
    for i in range(2):
        pg = podgroup(f"b{i}", NS, "team-b")
        create_podgroup(custom, pg)
        create_pod(core, pod(f"b{i}-0", NS, f"b{i}", gpus=4))
    for i in range(2):
        wait_for(lambda i=i: _running(core, f"b{i}-0"), timeout=30, what=f"b{i}-0 Running")
    create_podgroup(custom, podgroup("a", NS, "team-a"))
    create_pod(core, pod("a-0", NS, "a", gpus=4))

    def reclaimed() -> list[Any]:
        found = []
        for i in range(2):
            found += [e for e in events_of(core, NS, f"b{i}") if e.reason == "Evict"]
        return found

    events = wait_for(reclaimed, timeout=30, what=f"an Evict event on team-b\n{operator.log}")
    assert "reclaim" in events[0].message.lower() or "team-a/a" in events[0].message
    wait_for(lambda: _running(core, "a-0"), timeout=40, what=f"a-0 Running\n{operator.log}")
    assert len(reclaimed()) == 1


# Only the binder: a scheduler would race the hand-written BindRequest with its own.
@pytest.mark.parametrize("operator_args", [["--controllers", "binder"]])
def test_a_failed_bind_rolls_back(
    backend: Backend, operator: Operator, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi
) -> None:
    create_pod(core, _fraction_pod("lost", "pg-lost"))
    uid = core.read_namespaced_pod("lost", NS).metadata.uid
    br = {
        "apiVersion": "scheduling.run.ai/v1alpha2",
        "kind": "BindRequest",
        "metadata": {
            "name": "lost",
            "namespace": NS,
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "lost", "uid": uid}],
        },
        "spec": {
            "podName": "lost",
            "selectedNode": "no-such-node",
            "receivedResourceType": "Fraction",
            "receivedGPU": {"count": 1, "portion": "0.5"},
            "selectedGPUGroups": ["g9"],
            "backoffLimit": 2,
        },
    }
    custom.create_namespaced_custom_object("scheduling.run.ai", "v1alpha2", NS, "bindrequests", br)

    def failed() -> dict[str, Any] | None:
        got = bindrequests(custom, NS).get("lost") or {}
        return got if (got.get("status") or {}).get("phase") == "Failed" else None

    got = wait_for(failed, timeout=30, what=f"BindRequest Failed\n{operator.log}")
    assert got["status"]["failedAttempts"] == 2
    errors = [e for e in events_of(core, NS, "lost") if e.reason == "BindingError"]
    assert errors and all("no-such-node" in e.message for e in errors)
    p = core.read_namespaced_pod("lost", NS)
    assert not p.spec.node_name
    assert keys.GPU_GROUP_LABEL not in (p.metadata.labels or {})
    assert not core.list_namespaced_pod(RNS).items
    names = {c.metadata.name for c in core.list_namespaced_config_map(NS).items}
    assert not {"lost-x7b2kq9-shared-gpu-0", "lost-x7b2kq9-shared-gpu-0-evar", "lost-gpu"} & names


def test_an_operator_restarted_between_decision_and_bind_finishes_the_bind(
    backend: Backend, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, tmp_path: Any
) -> None:
    _queues(custom)
    # First only the scheduler: BindRequests are written, nobody binds them.
    first = start_operator(
        backend.kubeconfig_path, tmp_path / "first.log", "--controllers", "scheduler"
    )
    try:
        create_podgroup(custom, podgroup("g", NS, "team-a", min_member=2))
        for i in range(2):
            create_pod(core, pod(f"g-{i}", NS, "g", gpus=2))
        found = wait_for(
            lambda: (lambda b: b if len(b) == 2 else None)(bindrequests(custom, NS)),
            timeout=30,
            what=f"two BindRequests\n{first.log}",
        )
    finally:
        stop_operator(first)
    assert first.process.returncode == 0, first.log
    assert not any(p.spec.node_name for p in core.list_namespaced_pod(NS).items)
    # Then the whole operator, as after a restart: it binds what was decided.
    second = start_operator(backend.kubeconfig_path, tmp_path / "second.log")
    try:
        for name, br in found.items():
            running = wait_for(
                lambda n=name: _running(core, n), timeout=30, what=f"{name} Running\n{second.log}"
            )
            assert running.spec.node_name == br["spec"]["selectedNode"]
    finally:
        stop_operator(second)
    assert "Traceback" not in first.log + second.log
    assert second.process.returncode == 0, second.log


def test_a_gated_pod_waits_with_its_gate_and_runs_once_it_is_removed(
    backend: Backend, operator: Operator, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi
) -> None:
    _queues(custom)
    # A gang of 2 with one gated member waits whole; the API server would refuse the
    # gated pod's Binding, and the gang must not start without it.
    create_podgroup(custom, podgroup("gg", NS, "team-a", min_member=2))
    create_pod(core, pod("gg-0", NS, "gg", gpus=1))
    gated = pod("gg-1", NS, "gg", gpus=1)
    gated["spec"]["schedulingGates"] = [{"name": "example.com/quota-check"}]
    create_pod(core, gated)

    def not_ready() -> list[Any]:
        return [
            e
            for e in events_of(core, NS, "gg")
            if e.type == "Normal"
            and e.reason == "NotReady"
            and re.search(KAI_NOT_READY, e.message)
            and "currently 2 exist, 1 are gated" in e.message
        ]

    wait_for(not_ready, timeout=30, what=f"a NotReady event\n{operator.log}")

    def gate_named() -> list[Any]:
        return [
            e
            for e in events_of(core, NS, "gg-1")
            if e.reason == "SchedulingGated" and "example.com/quota-check" in e.message
        ]

    wait_for(gate_named, timeout=30, what=f"the gated pod's event\n{operator.log}")
    time.sleep(1)  # a few more cycles: still nothing bound
    assert not bindrequests(custom, NS)
    assert not any(p.spec.node_name for p in core.list_namespaced_pod(NS).items)
    core.patch_namespaced_pod("gg-1", NS, {"spec": {"schedulingGates": None}})
    for name in ("gg-0", "gg-1"):
        wait_for(
            lambda n=name: _running(core, n), timeout=30, what=f"{name} Running\n{operator.log}"
        )


def test_a_child_queue_before_its_parent_waits_then_runs_once_the_parent_exists(
    backend: Backend, operator: Operator, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi
) -> None:
    # GitOps order: the child queue, its PodGroup and pod, and only then the parent.
    create_queues(custom, queue("child", parent="later"))
    create_podgroup(custom, podgroup("early", NS, "child"))
    create_pod(core, pod("early-0", NS, "early", gpus=1))

    def waits() -> list[Any]:
        return [
            e
            for e in events_of(core, NS, "early")
            if e.type == "Warning" and "'later' does not exist" in e.message
        ]

    wait_for(waits, timeout=30, what=f"the PodGroup told of the missing parent\n{operator.log}")

    def orphan() -> dict[str, Any] | None:
        got = custom.get_cluster_custom_object("scheduling.run.ai", "v2", "queues", "child")
        found = [c for c in (got.get("status") or {}).get("conditions") or []]
        return found[0] if found and found[0]["type"] == "Orphan" else None

    condition = wait_for(orphan, timeout=30, what=f"the Orphan condition\n{operator.log}")
    assert condition["status"] == "True" and "'later' does not exist" in condition["message"]
    warned = [
        e
        for e in events_of(core, "default", "child")
        if e.type == "Warning" and e.reason == "ParentQueueNotFound"
    ]
    assert warned and "'later'" in warned[0].message
    assert not bindrequests(custom, NS)
    create_queues(custom, queue("later"))
    wait_for(lambda: _running(core, "early-0"), timeout=30, what=f"early-0 Running\n{operator.log}")
    wait_for(lambda: orphan() is None, timeout=30, what=f"the condition cleared\n{operator.log}")
