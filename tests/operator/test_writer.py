"""The writer's pure parts: manifests and patches from decisions, and the write plan."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

from kai_py.api.bindrequest import SIGNATURE_ANNOTATION, BindRequest, signature, signed
from kai_py.api.quantities import format_quantity, parse_quantity
from kai_py.apiclient.kube import KubeError, NotLeader
from kai_py.scheduler.cycle import run_cycle
from kai_py.scheduler.model import Node, Task
from kai_py.scheduler.reasons import Reason
from kai_py.scheduler.resources import Res
from kai_py.scheduler.session import Event, QueueFigures
from kai_py.state.cache import BINDREQUESTS, KINDS, NODES, PODGROUPS, PODS, QUEUES, ClusterCache
from kai_py.writes.writer import (
    URGENT,
    BackgroundWriter,
    EventRecorder,
    JobResources,
    Write,
    Writer,
    bindrequest_manifest,
    bindrequest_writes,
    event_manifest,
    nominated_patch,
    plan,
    podgroup_status_patch,
    queue_status_patch,
    scheduling_conditions,
    stale_annotation_patch,
    unschedulable_patch,
)

NOW = 1_800_000_000.0


def test_a_whole_gpu_bind_is_a_regular_bindrequest_owned_by_the_pod() -> None:
    task = Task("uid-1", "ns", "p1", "job", Res(1000, 1e9, 2), node_name="n1")
    body = bindrequest_manifest(task, "uid-1", None)
    assert body["apiVersion"] == "scheduling.run.ai/v1alpha2"
    assert body["kind"] == "BindRequest"
    assert body["metadata"]["name"] == "p1"
    assert body["metadata"]["namespace"] == "ns"
    assert body["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Pod", "name": "p1", "uid": "uid-1"}
    ]
    assert body["spec"] == {
        "podName": "p1",
        "selectedNode": "n1",
        "receivedResourceType": "Regular",
        "receivedGPU": {"count": 2, "portion": "1"},
        "backoffLimit": 3,
    }
    # Valid by the model the CRD is made from, and read back unchanged.
    assert BindRequest.from_manifest(body).to_manifest() == body


def test_a_bindrequest_is_signed_with_the_key_and_the_signature_covers_the_decision() -> None:
    task = Task("uid-1", "ns", "p1", "job", Res(1000, 1e9, 2), node_name="n1")
    assert "annotations" not in bindrequest_manifest(task, "uid-1", None)["metadata"]
    body = bindrequest_manifest(task, "uid-1", None, sign_key=b"k")
    assert signed(b"k", body) and not signed(b"other", body)
    assert BindRequest.from_manifest(body).to_manifest() == body
    for change in (
        {"receivedGPU": {"count": 4, "portion": "1"}},
        {"selectedNode": "n2"},
        {"podName": "p2"},
    ):
        assert not signed(b"k", {**body, "spec": {**body["spec"], **change}})
    other_pod = copy.deepcopy(body)
    other_pod["metadata"]["ownerReferences"][0]["uid"] = "uid-9"
    assert not signed(b"k", other_pod)
    # What the API server adds (the CRD's defaults, a status) changes nothing.
    bare = copy.deepcopy(body)
    del bare["spec"]["receivedResourceType"]
    bare["metadata"]["annotations"] = {SIGNATURE_ANNOTATION: signature(b"k", bare)}
    defaulted = copy.deepcopy(bare)
    defaulted["spec"]["receivedResourceType"] = "Regular"
    defaulted["status"] = {"phase": "Pending"}
    assert signed(b"k", defaulted)


def test_a_shared_gpu_bind_is_a_fraction_with_its_gpu_groups() -> None:
    task = Task(
        "uid-2",
        "ns",
        "p2",
        "job",
        Res(100, 0, 0),
        gpu_fraction=0.5,
        node_name="n1",
        gpu_groups=("g-0",),
    )
    node = Node("n1", Res(8000, 64e9, 8))
    body = bindrequest_manifest(task, "uid-2", node, backoff_limit=5)
    assert BindRequest.from_manifest(body).to_manifest() == body
    spec = body["spec"]
    assert spec["receivedResourceType"] == "Fraction"
    assert spec["receivedGPU"] == {"count": 1, "portion": "0.5"}
    assert spec["selectedGPUGroups"] == ["g-0"]
    assert spec["backoffLimit"] == 5


def test_a_gpu_memory_bind_gets_the_portion_of_the_node_card() -> None:
    task = Task(
        "u", "ns", "p", "job", Res(), gpu_memory_mib=20480, node_name="n1", gpu_groups=("0",)
    )
    node = Node("n1", Res(8000, 64e9, 8), gpu_memory_mib=81920)
    body = bindrequest_manifest(task, "u", node)
    assert BindRequest.from_manifest(body).to_manifest() == body
    assert body["spec"]["receivedGPU"] == {"count": 1, "portion": "0.25"}


def test_an_event_is_core_v1_with_the_message_cut() -> None:
    event = Event("Pod", "ns", "p1", "Warning", "Unschedulable", "x" * 2000)
    body = event_manifest(event, name="p1.abc", uid="u1", count=3, first=NOW, last=NOW + 5)
    assert body["involvedObject"] == {
        "kind": "Pod",
        "name": "p1",
        "namespace": "ns",
        "apiVersion": "v1",
        "uid": "u1",
    }
    assert len(body["message"]) == 1024
    assert body["source"] == {"component": "kai-scheduler"}
    assert body["count"] == 3
    assert body["firstTimestamp"] == "2027-01-15T08:00:00Z"
    assert body["lastTimestamp"] == "2027-01-15T08:00:05Z"
    queue_event = event_manifest(
        Event("Queue", "", "q", "Warning", "QueueLimitTrap", "m"),
        name="q.1",
        uid=None,
        count=1,
        first=NOW,
        last=NOW,
    )
    assert queue_event["metadata"]["namespace"] == "default"
    assert "namespace" not in queue_event["involvedObject"]
    assert queue_event["involvedObject"]["apiVersion"] == "scheduling.run.ai/v2"


def test_repeated_events_bump_one_event_count() -> None:
    recorder = EventRecorder(refresh=10)
    event = Event("PodGroup", "ns", "g", "Warning", "Unschedulable", "no room")
    uids = {("PodGroup", "ns", "g"): "uid-g"}
    [create] = recorder.writes([event], uids, NOW)
    assert create.method == "POST" and create.path == "/api/v1/namespaces/ns/events"
    assert create.body is not None and create.body["involvedObject"]["uid"] == "uid-g"
    name = create.body["metadata"]["name"]
    assert recorder.writes([event], uids, NOW + 1) == []  # counted, written later
    [bump] = recorder.writes([event], uids, NOW + 11)
    assert bump.method == "PATCH"
    assert bump.path == f"/api/v1/namespaces/ns/events/{name}"
    assert bump.body == {"count": 3, "lastTimestamp": "2027-01-15T08:00:11Z"}
    # Another message is another event.
    other = Event("PodGroup", "ns", "g", "Warning", "Unschedulable", "other")
    [new] = recorder.writes([other], uids, NOW + 12)
    assert new.method == "POST"
    # A failed write forgets the record, so the next repeat creates the event again.
    assert new.failed is not None
    new.failed(Exception())  # type: ignore[arg-type]
    [again] = recorder.writes([other], uids, NOW + 13)
    assert again.method == "POST"


def _pod(conditions: list[dict[str, Any]] | None = None, **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p"}, "status": {"conditions": conditions or [], **status}}


def test_unschedulable_condition_only_when_it_changes() -> None:
    patch = unschedulable_patch(_pod(), "no room", NOW)
    assert patch == {
        "status": {
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "no room",
                    "lastProbeTime": None,
                    "lastTransitionTime": "2027-01-15T08:00:00Z",
                }
            ]
        }
    }
    same = patch["status"]["conditions"]
    assert unschedulable_patch(_pod(same), "no room", NOW + 5) is None
    changed = unschedulable_patch(_pod(same), "other", NOW + 5)
    assert changed is not None
    # Still False: the transition time stays.
    assert changed["status"]["conditions"][0]["lastTransitionTime"] == "2027-01-15T08:00:00Z"


def test_nominated_node_only_when_it_changes() -> None:
    assert nominated_patch(_pod(), "n1") == {"status": {"nominatedNodeName": "n1"}}
    assert nominated_patch(_pod(nominatedNodeName="n1"), "n1") is None


def test_queue_status_in_kai_units_only_when_changed() -> None:
    figures = QueueFigures(
        deserved=Res(),
        fair_share=Res(2000, 3e9, 2.5),
        allocated=Res(1500, 2e9, 1.5),
        allocated_non_preemptible=Res(),
        requested=Res(3000, 4e9, 3),
    )
    patch = queue_status_patch({"metadata": {"name": "q"}}, figures)
    assert patch == {
        "status": {
            "allocated": {"nvidia.com/gpu": "1.5", "cpu": 1500, "memory": 2000},
            "allocatedNonPreemptible": {"nvidia.com/gpu": 0, "cpu": 0, "memory": 0},
            "requested": {"nvidia.com/gpu": 3, "cpu": 3000, "memory": 4000},
            # kai-py's own: what `kubectl kai queues` shows as the fair share.
            "fairShare": {"nvidia.com/gpu": "2.5", "cpu": 2000, "memory": 3000},
        }
    }
    # As the API server returns it (strings for all): no change, no write.
    stored = {k: {r: str(v) for r, v in m.items()} for k, m in patch["status"].items()}
    assert queue_status_patch({"status": stored}, figures) is None
    # A new fair share alone is written.
    moved = dataclasses.replace(figures, fair_share=Res(2000, 3e9, 3))
    again = queue_status_patch({"status": stored}, moved)
    assert again is not None and again["status"]["fairShare"]["nvidia.com/gpu"] == 3


def test_an_orphan_queue_gets_kais_orphan_condition_until_its_parent_exists() -> None:
    why = "Queue child is not used: spec.parentQueue: queue 'later' does not exist"
    other = {"type": "OverQuota", "status": "False"}
    child = {"metadata": {"name": "child"}, "status": {"conditions": [other]}}
    patch = queue_status_patch(child, None, orphan=why, now=0.0)
    assert patch == {
        "status": {
            "conditions": [
                other,
                {
                    "type": "Orphan",
                    "status": "True",
                    "reason": "ParentQueueNotFound",
                    "message": why,
                    "lastTransitionTime": "1970-01-01T00:00:00Z",
                },
            ]
        }
    }
    marked = {"metadata": {"name": "child"}, "status": patch["status"]}
    assert queue_status_patch(marked, None, orphan=why, now=5.0) is None  # already so
    # The parent exists: the condition goes, the others stay.
    assert queue_status_patch(marked, None) == {"status": {"conditions": [other]}}
    alone = {"metadata": {"name": "child"}, "status": {"conditions": patch["status"]["conditions"][1:]}}
    assert queue_status_patch(alone, None) == {"status": {"conditions": None}}


def test_a_parent_queue_lists_its_children_once() -> None:
    figures = QueueFigures(Res(), Res(), Res(), Res(), Res())
    patch = queue_status_patch({"metadata": {"name": "dept"}}, figures, ["a", "b"])
    assert patch is not None and patch["status"]["childQueues"] == ["a", "b"]
    stored = {"status": {**patch["status"]}}
    assert queue_status_patch(stored, figures, ["a", "b"]) is None
    gone = queue_status_patch(stored, figures, [])  # its children were deleted
    assert gone is not None and gone["status"]["childQueues"] is None


def test_podgroup_phase_follows_min_member() -> None:
    from kai_py.scheduler.model import Job, TaskStatus
    from kai_py.writes.writer import podgroup_phase

    def job(*statuses: TaskStatus, min_member: int = 2) -> Job:
        tasks = [
            Task(uid=f"t{i}", namespace="ns", name=f"p{i}", job_uid="j", request=Res(), status=st)
            for i, st in enumerate(statuses)
        ]
        return Job("j", "ns", "g", "q", 0, True, min_member, 0.0, tasks=tasks)

    assert podgroup_phase(job(TaskStatus.PENDING, TaskStatus.PENDING)) == "Pending"
    assert podgroup_phase(job(TaskStatus.RUNNING, TaskStatus.PENDING)) == "Pending"
    assert podgroup_phase(job(TaskStatus.RUNNING, TaskStatus.ALLOCATED)) == "Running"
    assert podgroup_phase(job(TaskStatus.RUNNING, min_member=1)) == "Running"
    assert podgroup_phase(job()) is None  # nothing live: left as it was
    # A member that Succeeded counts towards minMember: the rest of the gang runs.
    finished = job(TaskStatus.RUNNING, min_member=2)
    finished.succeeded = 1
    assert podgroup_phase(finished) == "Running"
    patch = podgroup_status_patch(
        {"status": {"phase": "Pending"}}, [], JobResources(Res(), Res(), Res()), 0.0, "Running"
    )
    assert patch is not None and patch["status"]["phase"] == "Running"
    same = podgroup_status_patch(
        {"status": {"phase": "Running", "resourcesStatus": patch["status"]["resourcesStatus"]}},
        [],
        JobResources(Res(), Res(), Res()),
        0.0,
        "Running",
    )
    assert same is None


def test_large_memory_reads_back_equal_so_an_unchanged_status_is_not_written_again() -> None:
    # 256 GiB is 274877.906944 MB: written as 274878, read back as 274878, equal.
    figures = QueueFigures(
        deserved=Res(),
        fair_share=Res(),
        allocated=Res(1500, 256 * 2.0**30, 2),
        allocated_non_preemptible=Res(),
        requested=Res(3000, 2048 * 2.0**30, 4),
    )
    patch = queue_status_patch({"metadata": {"name": "q"}}, figures)
    assert patch is not None
    assert patch["status"]["allocated"]["memory"] == 274878
    assert patch["status"]["requested"]["memory"] == "2199023.255552"
    for stored in (
        patch["status"],
        {k: {r: str(v) for r, v in m.items()} for k, m in patch["status"].items()},
    ):
        assert queue_status_patch({"status": stored}, figures) is None


def test_a_formatted_quantity_formats_the_same_once_read_back() -> None:
    for value in (0.5, 1 / 3, 99999.95, 274877.906944, 999999.7, 1e-7, 2199023.255552, 12.0):
        written = format_quantity(value)
        assert format_quantity(parse_quantity(written)) == written, value


def test_podgroup_status_reasons_and_resources() -> None:
    reasons = [
        Reason(
            "OverLimit",
            "queue q would exceed its GPU limit",
            {
                "resource": "gpu",
                "queueDetails": {
                    "name": "q",
                    "deserved": {"gpu": 1.0, "cpu": 0.0, "memory": 0.0},
                    "allocated": {"gpu": 2.0, "cpu": 1000.0, "memory": 1e9},
                    "limit": {"gpu": 2.0, "cpu": float("inf"), "memory": float("inf")},
                },
            },
        )
    ]
    resources = JobResources(Res(), Res(), Res(1000, 1e9, 1))
    patch = podgroup_status_patch({"metadata": {"name": "g"}}, reasons, resources, NOW)
    assert patch is not None
    [cond] = patch["status"]["schedulingConditions"]
    assert cond["type"] == "UnschedulableOnNodePool"
    assert cond["nodePool"] == "default"
    assert cond["reasons"][0]["reason"] == "OverLimit"
    details = cond["reasons"][0]["details"]["queueDetails"]
    assert details["queueResourceLimits"] == {"nvidia.com/gpu": 2, "cpu": -1, "memory": -1}
    assert details["queueAllocatedResources"] == {"nvidia.com/gpu": 2, "cpu": 1000, "memory": 1000}
    assert patch["status"]["resourcesStatus"]["requested"] == {
        "nvidia.com/gpu": 1,
        "cpu": 1000,
        "memory": 1000,
    }
    written = {"status": patch["status"]}
    assert podgroup_status_patch(written, reasons, resources, NOW + 5) is None
    # Scheduled at last: the conditions are cleared.
    cleared = podgroup_status_patch(written, [], resources, NOW + 6)
    assert cleared == {"status": {"schedulingConditions": []}}
    # The transition id counts changes.
    other = [Reason("NotReady", "2 of 4 pods exist")]
    changed = podgroup_status_patch(written, other, resources, NOW + 7)
    assert changed is not None
    assert changed["status"]["schedulingConditions"][0]["transitionID"] == "1"


def test_stale_since_annotation_is_set_and_removed_only_when_it_changes() -> None:
    pg: dict[str, Any] = {"metadata": {"name": "g", "annotations": {}}}
    assert stale_annotation_patch(pg, None) is None
    patch = stale_annotation_patch(pg, NOW)
    assert patch == {
        "metadata": {"annotations": {"kai.scheduler/stale-since": "2027-01-15T08:00:00Z"}}
    }
    pg["metadata"]["annotations"] = patch["metadata"]["annotations"]
    assert stale_annotation_patch(pg, NOW + 0.4) is None
    assert stale_annotation_patch(pg, None) == {
        "metadata": {"annotations": {"kai.scheduler/stale-since": None}}
    }


# -------------------------------------------------- cache + plan, without a cluster
def _cache() -> ClusterCache:
    cache = ClusterCache()
    cache.observe(
        NODES,
        None,
        {
            "metadata": {"name": "n1", "uid": "n1"},
            "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "4"}},
        },
    )
    cache.observe(
        QUEUES,
        None,
        {
            "apiVersion": "scheduling.run.ai/v2",
            "kind": "Queue",
            "metadata": {"name": "q", "uid": "uq"},
            "spec": {"resources": {"gpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1}}},
        },
    )
    cache.observe(
        PODGROUPS,
        None,
        {
            "apiVersion": "scheduling.run.ai/v2alpha2",
            "kind": "PodGroup",
            "metadata": {
                "name": "g",
                "namespace": "ns",
                "uid": "ug",
                "creationTimestamp": "2026-01-01T00:00:00Z",
            },
            "spec": {"minMember": 1, "queue": "q"},
        },
    )
    return cache


def _pod_body(name: str, uid: str, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": uid,
            "resourceVersion": "5",
            "annotations": {"pod-group-name": "g"},
            "creationTimestamp": "2026-01-01T00:00:00Z",
        },
        "spec": {
            "schedulerName": "kai-scheduler",
            "containers": [
                {"name": "c", "image": "i", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
            ],
            **spec,
        },
        "status": {"phase": "Pending"},
    }


def test_plan_from_the_cache_binds_and_a_live_bindrequest_counts_as_placed() -> None:
    cache = _cache()
    cache.observe(PODS, "ADDED", _pod_body("p1", "u1"))
    view = cache.view(NOW)
    built = view.build(NOW)
    decisions = run_cycle(built.snapshot)
    writes = plan(view, built, decisions, NOW, EventRecorder(), cache)
    [bind] = [w for w in writes if w.what.startswith("bind ")]
    assert bind.path == "/apis/scheduling.run.ai/v1alpha2/namespaces/ns/bindrequests"
    assert bind.body is not None and bind.body["spec"]["selectedNode"] == "n1"
    assert any(w.what == "Queue q status" for w in writes)
    assert any(w.what == "PodGroup ns/g status" for w in writes)
    # The answer goes into the cache: the next cycle sees the pod as placed.
    assert bind.done is not None
    bind.done({**bind.body, "metadata": {**bind.body["metadata"], "uid": "ubr"}})
    again = cache.view(NOW)
    built = again.build(NOW)
    assert run_cycle(built.snapshot).binds == []
    [task] = built.snapshot.jobs[0].tasks
    assert task.node_name == "n1"


def _made(uid: str, version: str) -> dict[str, str]:
    return {"uid": uid, "resourceVersion": version}


def _answer(write: Any, stored: dict[str, Any], version: str) -> dict[str, Any]:
    """What the API server answers a merge patch of ``stored``'s status with."""
    status = {**(stored.get("status") or {}), **write.body["status"]}
    return {
        **stored,
        "metadata": {**stored["metadata"], "resourceVersion": version},
        "status": status,
    }


def test_a_status_write_is_seen_by_the_cache_at_once_and_not_planned_again() -> None:
    """The PodGroup and Queue status a cycle wrote are in the cache as soon as the API
    server answers, before their watch events: the next cycle finds them right, plans
    no write for them (it used to send them again while the events were on the way)."""
    cache = _cache()
    cache.observe(PODS, "ADDED", _pod_body("p1", "u1"))
    view = cache.view(NOW)
    built = view.build(NOW)
    writes = plan(view, built, run_cycle(built.snapshot), NOW, EventRecorder(), cache)
    answers = []
    for w in writes:
        if w.what == "PodGroup ns/g status":
            answers.append((PODGROUPS, _answer(w, cache.get(PODGROUPS, "ns", "g") or {}, "7")))
        elif w.what == "Queue q status":
            answers.append((QUEUES, _answer(w, cache.get(QUEUES, "", "q") or {}, "8")))
        elif w.what.startswith("bind "):
            answers.append(
                (BINDREQUESTS, {**w.body, "metadata": {**w.body["metadata"], **_made("b", "6")}})
            )
        else:
            continue
        assert w.done is not None
        w.done(answers[-1][1])
    assert sorted(kind for kind, _ in answers) == [BINDREQUESTS, PODGROUPS, QUEUES]
    again = cache.view(NOW)
    built = again.build(NOW)
    left = plan(again, built, run_cycle(built.snapshot), NOW, EventRecorder(), cache)
    assert [w.what for w in left if "status" in w.what] == []


def test_a_status_that_came_in_during_the_cycle_is_not_written_again() -> None:
    """A cycle's view is as old as the cycle: the answer of the last cycle's status
    write (the status wanted now) may come in while it runs. The plan compares with
    the PodGroup as the cache holds it then, and writes nothing."""
    cache = _cache()
    cache.observe(PODS, "ADDED", _pod_body("p1", "u1"))
    view = cache.view(NOW)
    built = view.build(NOW)
    decisions = run_cycle(built.snapshot)
    [status] = [
        w
        for w in plan(view, built, decisions, NOW, EventRecorder(), None)
        if w.what == "PodGroup ns/g status"
    ]
    stored = cache.get(PODGROUPS, "ns", "g") or {}
    cache.observe(PODGROUPS, "MODIFIED", _answer(status, stored, "7"))  # during the cycle
    writes = plan(view, built, decisions, NOW, EventRecorder(), cache)
    assert [w.what for w in writes if w.what.startswith("PodGroup")] == []
    # A status changed by someone else since is put right.
    cache.observe(
        PODGROUPS,
        "MODIFIED",
        {
            **stored,
            "metadata": {**stored["metadata"], "resourceVersion": "8"},
            "status": {"phase": "Unknown"},
        },
    )
    writes = plan(view, built, decisions, NOW, EventRecorder(), cache)
    [again] = [w for w in writes if w.what == "PodGroup ns/g status"]
    assert again.body == status.body


def test_each_view_reads_a_pod_as_it_is_now() -> None:
    """Views reuse what they read from an unchanged pod; any change is seen."""
    cache = _cache()
    ungrouped = _pod_body("p1", "u1")
    del ungrouped["metadata"]["annotations"]
    cache.observe(PODS, "ADDED", ungrouped)
    assert cache.view(NOW).held_back == 1
    assert cache.view(NOW).held_back == 1  # read again from what the last view kept
    grouped = _pod_body("p1", "u1")
    grouped["metadata"]["resourceVersion"] = "6"
    cache.observe(PODS, "MODIFIED", grouped)
    view = cache.view(NOW)
    assert view.held_back == 0 and list(view.pods) == ["u1"]
    # A BindRequest places it; once the request is gone, it is pending again.
    request = {
        "metadata": {
            "name": "p1",
            "namespace": "ns",
            "uid": "ubr",
            "ownerReferences": [{"kind": "Pod", "name": "p1", "uid": "u1"}],
        },
        "spec": {"podName": "p1", "selectedNode": "n1"},
    }
    cache.observe(BINDREQUESTS, "ADDED", request)
    [task] = cache.view(NOW).build(NOW).snapshot.jobs[0].tasks
    assert task.node_name == "n1"
    cache.observe(BINDREQUESTS, "DELETED", request)
    [task] = cache.view(NOW).build(NOW).snapshot.jobs[0].tasks
    assert task.node_name is None


def test_an_evicted_jobs_podgroup_records_when_for_its_preemption_delay() -> None:
    from kai_py.scheduler.session import Decisions, Eviction

    cache = _cache()
    running = _pod_body("p1", "u1", nodeName="n1")
    running["status"] = {"phase": "Running"}
    cache.observe(PODS, "ADDED", running)
    view = cache.view(NOW)
    built = view.build(NOW)
    [task] = built.snapshot.jobs[0].tasks
    decisions = Decisions(evictions=[Eviction(task, "reclaim", None, "taken back")])
    writes = plan(view, built, decisions, NOW, EventRecorder(), cache)
    [mark] = [w for w in writes if w.what == "PodGroup ns/g last eviction"]
    assert mark.path == "/apis/scheduling.run.ai/v2alpha2/namespaces/ns/podgroups/g"
    assert mark.body is not None
    stamp = mark.body["metadata"]["annotations"]["kai.scheduler/last-eviction-timestamp"]
    assert mark.body["metadata"]["uid"] == "ug"
    # Read back by the builder (once the watch delivers the PodGroup as patched): the
    # job's preemption delay counts from then.
    pg = cache.objects[PODGROUPS][("ns", "g")]
    annotations = {"kai.scheduler/last-eviction-timestamp": stamp}
    cache.observe(
        PODGROUPS, "MODIFIED", {**pg, "metadata": {**pg["metadata"], "annotations": annotations}}
    )
    again = cache.view(NOW).build(NOW)
    assert again.snapshot.jobs[0].last_evicted == pytest.approx(NOW, abs=1.0)


def test_failed_or_orphaned_bindrequests_are_deleted_and_hold_their_pod_back() -> None:
    cache = _cache()
    cache.observe(PODS, "ADDED", _pod_body("p1", "u1"))
    cache.observe(PODS, "ADDED", _pod_body("p2", "u2"))
    owner = {"apiVersion": "v1", "kind": "Pod", "name": "p1", "uid": "u1"}
    cache.observe(
        BINDREQUESTS,
        "ADDED",
        {
            "metadata": {"name": "p1", "namespace": "ns", "uid": "b1", "ownerReferences": [owner]},
            "spec": {"podName": "p1", "selectedNode": "n1"},
            "status": {"phase": "Failed"},
        },
    )
    cache.observe(
        BINDREQUESTS,
        "ADDED",
        {
            "metadata": {
                "name": "p2",
                "namespace": "ns",
                "uid": "b2",
                "ownerReferences": [{**owner, "name": "p2", "uid": "an-older-p2"}],
            },
            "spec": {"podName": "p2", "selectedNode": "n1"},
        },
    )
    view = cache.view(NOW)
    assert sorted(view.failed_bindrequests) == [("ns", "p1"), ("ns", "p2")]
    assert view.pods == {}  # neither is decided while its old request is there
    deletes = bindrequest_writes(view, cache)
    assert [w.method for w in deletes] == ["DELETE", "DELETE"]
    for w in deletes:
        assert w.done is not None
        w.done({})
    assert sorted(cache.view(NOW).pods) == ["u1", "u2"]


def test_the_cache_keeps_projections_and_ignores_older_versions() -> None:
    cache = ClusterCache()
    body = _pod_body("p1", "u1")
    body["spec"]["volumes"] = [{"name": "big"}]
    cache.observe(PODS, "ADDED", body)
    stored = cache.get(PODS, "ns", "p1")
    assert stored is not None and "volumes" not in stored["spec"]
    older = _pod_body("p1", "u1", nodeName="n1")
    older["metadata"]["resourceVersion"] = "4"
    assert cache.observe(PODS, "MODIFIED", older) is False
    # Another scheduler's pod is kept only while bound, as a small projection.
    other = _pod_body("x", "ux", schedulerName="default-scheduler")
    cache.observe(PODS, "ADDED", other)
    assert ("ns", "x") not in cache.foreign_pods
    bound = _pod_body("x", "ux", schedulerName="default-scheduler", nodeName="n1")
    bound["metadata"]["resourceVersion"] = "6"
    cache.observe(PODS, "MODIFIED", bound)
    kept = cache.foreign_pods.get(("ns", "x"))
    assert kept is not None and (kept.uid, kept.resource_version, kept.node) == ("ux", 6, "n1")
    assert cache.foreign_pods.used()["n1"] == kept.request
    cache.observe(PODS, "DELETED", bound)
    assert len(cache.foreign_pods) == 0 and cache.foreign_pods.used() == {}


def test_podgroups_and_queues_are_kept_without_their_managed_fields() -> None:
    # A real API server puts managedFields on every object (each writer's fields, twice
    # or more for a PodGroup the grouper made and the scheduler writes the status of);
    # nothing in kai-py reads them, and 10,000 PodGroups carried them in memory.
    managed = [
        {
            "manager": "kai-py",
            "operation": "Update",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:status": {"f:phase": {}}},
            "subresource": "status",
        },
    ]
    group = {
        "metadata": {
            "name": "pg",
            "namespace": "ns",
            "uid": "g1",
            "resourceVersion": "3",
            "annotations": {"a": "b"},
            "managedFields": managed,
        },
        "spec": {"minMember": 2, "queue": "team"},
        "status": {"phase": "Running"},
    }
    queue = {"metadata": {"name": "team", "uid": "q1", "managedFields": managed}, "spec": {}}
    cache = ClusterCache()
    cache.observe(PODGROUPS, "ADDED", group)
    cache.observe(QUEUES, "ADDED", queue)
    stored = cache.get(PODGROUPS, "ns", "pg")
    assert stored is not None and "managedFields" not in stored["metadata"]
    assert stored["metadata"]["annotations"] == {"a": "b"} and stored["spec"]["minMember"] == 2
    assert stored["status"] == {"phase": "Running"}
    kept_queue = cache.get(QUEUES, "", "team")
    assert kept_queue is not None and kept_queue["metadata"] == {"name": "team", "uid": "q1"}
    assert group["metadata"]["managedFields"] == managed  # the event's body is left alone


def test_a_pod_waits_for_its_group_and_the_pod_grouper() -> None:
    cache = ClusterCache()
    ungrouped = _pod_body("p1", "u1")
    ungrouped["metadata"]["annotations"] = {}
    cache.observe(PODS, "ADDED", ungrouped)
    young = _pod_body("p2", "u2")
    young["metadata"]["creationTimestamp"] = "2027-01-15T07:59:58Z"  # 2 s before NOW
    cache.observe(PODS, "ADDED", young)
    view = cache.view(NOW)
    assert view.pods == {} and view.held_back == 2
    # Past the grace period the missing group is reported (a Warning from the builder).
    later = cache.view(NOW + 60)
    assert list(later.pods) == ["u2"]
    built = later.build(NOW + 60)
    assert any(e.reason == "PodGroupNotFound" for e in built.events)


def test_warm_once_the_watch_has_delivered_the_listing() -> None:
    cache = ClusterCache()
    assert not cache.warm
    cache.observe(PODS, None, _pod_body("p1", "u1"))
    for kind in KINDS:
        if kind != PODS:
            cache.expect(kind, [])
    cache.expect(PODS, ["u1", "u2"])
    assert not cache.warm and cache.waiting_for()[PODS] == 1
    cache.observe(PODS, None, _pod_body("p2", "u2"))
    assert cache.warm


def test_a_bad_queue_is_left_out_with_a_warning_and_the_rest_is_used() -> None:
    def q(name: str, parent: str | None = None, **spec: Any) -> dict[str, Any]:
        body: dict[str, Any] = {"metadata": {"name": name, "uid": f"u-{name}"}, "spec": dict(spec)}
        if parent:
            body["spec"]["parentQueue"] = parent
        return body

    cache = ClusterCache()
    for body in [
        q("root"),
        q("team", "root"),
        q("orphan", "gone"),
        q("under-orphan", "orphan"),
        q("a", "b"),
        q("b", "a"),
        q("broken", "root", priority="high"),
    ]:
        cache.observe(QUEUES, None, body)
    view = cache.view(NOW)
    used = sorted(
        d.body["metadata"]["name"] for d in view.all_documents if d.body["kind"] == "Queue"
    )
    assert used == ["root", "team"]
    why = {e.name: e.message for e in view.events}
    assert set(why) == {"orphan", "under-orphan", "a", "b", "broken"}
    assert "queue 'gone' does not exist" in why["orphan"]
    assert "cycle" in why["a"] and "cycle" in why["b"]
    assert "priority" in why["broken"]
    assert all(e.type == "Warning" for e in view.events)
    # A parent still to come is no error: the queue waits for it (GitOps order).
    assert {e.name: e.reason for e in view.events if e.reason != "InvalidQueue"} == {
        "orphan": "ParentQueueNotFound"
    }
    assert view.orphans == {"orphan": why["orphan"]}
    view.build(NOW)  # no InputError: the snapshot is built from the rest


def test_a_workload_of_a_left_out_queue_is_told_why_not_that_it_is_missing() -> None:
    cache = ClusterCache()
    cache.observe(
        QUEUES,
        None,
        {"metadata": {"name": "orphan", "uid": "u-o"}, "spec": {"parentQueue": "gone"}},
    )
    cache.observe(
        PODGROUPS,
        None,
        {
            "metadata": {"name": "g", "namespace": "ns", "uid": "pg-g"},
            "spec": {"minMember": 1, "queue": "orphan"},
        },
    )
    cache.observe(PODS, None, _pod_body("p", "u-p"))
    decisions = run_cycle(cache.view(NOW).build(NOW).snapshot)
    (why,) = decisions.reasons["pg-g"]
    assert "Queue orphan is not used" in why.message
    assert "queue 'gone' does not exist" in why.message
    assert "does not exist (QueueDoesNotExist)" not in why.message


def test_resync_drops_what_a_fresh_listing_no_longer_has() -> None:
    cache = ClusterCache()
    cache.observe(PODS, None, _pod_body("kept", "u1"))  # resourceVersion 5
    cache.observe(PODS, None, _pod_body("vanished", "u2"))
    newer = _pod_body("newer", "u3")
    newer["metadata"]["resourceVersion"] = "9"
    cache.observe(PODS, None, newer)  # made after the listing below was taken
    listing = {"metadata": {"resourceVersion": "7"}, "items": [{"metadata": {"uid": "u1"}}]}
    assert cache.resync(PODS, listing) == 1
    assert sorted(k[1] for k in cache.objects[PODS]) == ["kept", "newer"]
    # Without a listing version nothing is dropped.
    assert cache.resync(PODS, {"metadata": {}, "items": []}) == 0


def _reservation(group: str, uid: str) -> dict[str, Any]:
    body = _pod_body(f"gpu-reservation-n1-{group}", uid, nodeName="n1")
    body["metadata"]["namespace"] = "kai-resource-reservation"
    body["metadata"]["labels"] = {"runai-gpu-group": group}
    body["metadata"]["annotations"] = {"kai.scheduler/gpu-groups": group}
    body["spec"]["schedulerName"] = "default-scheduler"
    body["status"] = {"phase": "Running"}
    return body


def _shared(name: str, uid: str, group: str) -> dict[str, Any]:
    body = _pod_body(name, uid, nodeName="n1")
    body["metadata"]["annotations"]["gpu-fraction"] = "0.5"
    body["metadata"]["labels"] = {"runai-gpu-group": group}
    body["spec"]["containers"][0]["resources"] = {}
    body["status"] = {"phase": "Running"}
    return body


def test_reservation_pods_are_not_counted_on_top_of_their_shared_pods() -> None:
    # A reservation pod holds the card its GPU group's shared pods already count.
    cache = _cache()
    cache.observe(PODS, "ADDED", _reservation("0", "ur"))
    cache.observe(PODS, "ADDED", _shared("s1", "us", "0"))
    for i in range(3):
        cache.observe(PODS, "ADDED", _pod_body(f"p{i}", f"u{i}"))
    built = cache.view(NOW).build(NOW)
    # 4 cards: one shared (group 0), three free for the three whole-GPU pods.
    assert sorted(t.key for t in run_cycle(built.snapshot).binds) == ["ns/p0", "ns/p1", "ns/p2"]


def test_a_leftover_reservation_pod_holds_its_card_until_it_is_gone() -> None:
    # Its shared pod went (and the release was missed): the card is not free.
    cache = _cache()
    cache.observe(PODS, "ADDED", _reservation("0", "ur"))
    for i in range(4):
        cache.observe(PODS, "ADDED", _pod_body(f"p{i}", f"u{i}"))
    binds = run_cycle(cache.view(NOW).build(NOW).snapshot).binds
    assert len(binds) == 3
    cache.observe(PODS, "DELETED", _reservation("0", "ur"))
    binds = run_cycle(cache.view(NOW).build(NOW).snapshot).binds
    assert len(binds) == 4
    # A reservation pod that finished holds nothing either.
    done = _reservation("1", "ur1")
    done["status"] = {"phase": "Failed"}
    cache.observe(PODS, "ADDED", done)
    assert len(run_cycle(cache.view(NOW).build(NOW).snapshot).binds) == 4


def test_other_schedulers_pods_hold_their_node_until_they_finish_or_go() -> None:
    cache = _cache()  # n1: 4 GPUs
    wide = _pod_body("p1", "u1")
    wide["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "2"
    cache.observe(PODS, "ADDED", wide)
    others = []
    for i in range(2):
        other = _pod_body(f"x{i}", f"ux{i}", schedulerName="default-scheduler", nodeName="n1")
        other["status"]["phase"] = "Running"
        cache.observe(PODS, "ADDED", other)
        others.append(other)

    def binds() -> tuple[int, int]:
        """Pods bound, and other schedulers' pods counted."""
        built = cache.view(NOW).build(NOW)
        return len(run_cycle(built.snapshot).binds), built.other_scheduler_pods

    cache.observe(
        PODS,
        "ADDED",
        {
            **others[0],
            "spec": {
                **others[0]["spec"],
                "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "2"}}}],
            },
        },
    )  # ux0 now holds 2 GPUs: 3 of 4 are taken
    assert binds() == (0, 2)
    finished = {**others[1], "status": {"phase": "Succeeded"}}
    finished["metadata"] = {**others[1]["metadata"], "resourceVersion": "9"}
    cache.observe(PODS, "MODIFIED", finished)  # 2 of 4 taken: the pod fits
    assert binds() == (1, 1)
    assert ("ns", "x1") not in cache.foreign_pods
    bad = _pod_body("x2", "ux2", schedulerName="default-scheduler", nodeName="n1")
    bad["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "lots"
    cache.observe(PODS, "ADDED", bad)  # unparseable requests: not counted, as simulate does
    assert binds() == (1, 1)


# -------------------------------------------------- an eviction the API refused for a moment
class ScriptedKube:
    """Answers each request with the next of ``answers`` (a KubeError is raised), then
    with success; records the paths sent."""

    def __init__(self, *answers: KubeError) -> None:
        self.answers = list(answers)
        self.sent: list[str] = []

    async def arequest(
        self, method: str, path: str, body: Any = None, *, content_type: str = "", query: Any = None
    ) -> dict[str, Any]:
        self.sent.append(path)
        if self.answers:
            raise self.answers.pop(0)
        return {"metadata": {}}


def _eviction_plan(cache: ClusterCache) -> list[Write]:
    from kai_py.scheduler.session import Decisions, Eviction

    view = cache.view(NOW)
    built = view.build(NOW)
    [task] = built.snapshot.jobs[0].tasks
    decisions = Decisions(evictions=[Eviction(task, "reclaim", None, "taken back")])
    return [
        w for w in plan(view, built, decisions, NOW, EventRecorder(), cache) if w.lane == URGENT
    ]


def _running_cache() -> ClusterCache:
    cache = _cache()
    running = _pod_body("p1", "u1", nodeName="n1")
    running["status"] = {"phase": "Running"}
    cache.observe(PODS, "ADDED", running)
    return cache


async def _evict(
    kube: ScriptedKube,
    cache: ClusterCache,
    until: Callable[[], bool],
    meanwhile: Callable[[], None] | None = None,
    rounds: int = 200,
) -> BackgroundWriter:
    """Apply the plan of one eviction, then wait (``rounds`` x 10 ms at most) for
    ``until`` while the retries (10 to 20 ms apart) go on."""
    background = BackgroundWriter(kube, retry_delay=0.01, retry_max_delay=0.02)  # type: ignore[arg-type]
    writer = Writer(kube, background=background)  # type: ignore[arg-type]
    outcome = await writer.apply(_eviction_plan(cache))
    assert outcome.failed == 1
    for _ in range(rounds):
        if until():
            break
        if meanwhile is not None:
            meanwhile()
        await asyncio.sleep(0.01)
    await background.close()
    return background


EVICTION = "/api/v1/namespaces/ns/pods/p1/eviction"


def test_an_eviction_answered_500_is_sent_again_until_it_is_done() -> None:
    """One eviction of a gang answered 500 must not leave that member running alone:
    the next cycle does not decide it again (the rest of its gang is gone by then)."""
    kube = ScriptedKube(KubeError(500, "InternalError", "boom"), KubeError(0, "", "no answer"))
    background = asyncio.run(_evict(kube, _running_cache(), lambda: len(kube.sent) >= 3))
    assert kube.sent == [EVICTION] * 3  # the first answer, no answer, then done
    assert background.retried == 2 and background.outcome.done == 1


def test_an_eviction_is_not_sent_again_once_the_pod_is_gone_or_refused_on_its_merits() -> None:
    # The pod went (evicted by someone else, or deleted): nothing left to evict.
    cache = _running_cache()
    kube = ScriptedKube(*[KubeError(500, "InternalError", "boom")] * 50)
    pod = cache.get(PODS, "ns", "p1")
    sent_then: list[int] = []

    def delete_after_two() -> None:
        if len(kube.sent) >= 2 and not sent_then:
            cache.observe(PODS, "DELETED", pod or {})
            sent_then.append(len(kube.sent))

    asyncio.run(_evict(kube, cache, lambda: False, delete_after_two, rounds=40))
    assert sent_then and len(kube.sent) == sent_then[0]
    # A 403 would be refused again: left to the next cycle, which decides anew.
    kube = ScriptedKube(KubeError(403, "Forbidden", "no"))
    background = asyncio.run(_evict(kube, _running_cache(), lambda: False, rounds=20))
    assert kube.sent == [EVICTION] and background.retried == 0


def test_an_eviction_the_leadership_fence_refused_is_not_sent_again() -> None:
    # Deposed: whoever leads now decides that pod afresh; an old decision sent again
    # after this replica led again would evict on a term that did not decide it.
    kube = ScriptedKube(NotLeader("POST", EVICTION), *[KubeError(500, "InternalError", "x")] * 5)
    background = asyncio.run(_evict(kube, _running_cache(), lambda: False, rounds=20))
    assert kube.sent == [EVICTION] and background.retried == 0


def test_a_conditions_message_joins_its_reasons_as_sentences() -> None:
    # Reasons without a full stop ran together ("... leaf queue Job x cannot ...").
    why = [
        Reason("QueueDoesNotExist", "queue 'q' does not exist; create it"),
        Reason("CannotReclaim", "Job ns/j cannot reclaim resources: nothing to take."),
        Reason("CannotPreempt", "Job ns/j cannot preempt: no victim"),
    ]
    (condition,) = scheduling_conditions(why, NOW)
    assert condition["message"] == (
        "queue 'q' does not exist; create it. Job ns/j cannot reclaim resources: nothing to "
        "take. Job ns/j cannot preempt: no victim."
    )
