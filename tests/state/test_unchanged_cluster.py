"""An unchanged cluster: the second cycle writes nothing, the third is skipped."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import pytest

from kai_py.scheduler.cycle import run_cycle
from kai_py.scheduler.model import Task, TaskStatus
from kai_py.state.builder import Document, ParseMemo, build
from kai_py.state.cache import NODES, PODGROUPS, PODS, PRIORITY_CLASSES, QUEUES, ClusterCache
from kai_py.state.idle import IdleGate
from kai_py.writes.writer import EventRecorder, Write, plan

NOW = 1_800_000_000.0
Json = dict[str, Any]


def _objects() -> dict[tuple[str, str, str], Json]:
    objs: dict[tuple[str, str, str], Json] = {}
    objs[(NODES, "", "n1")] = {
        "metadata": {"name": "n1", "uid": "n1", "resourceVersion": "1"},
        "status": {"allocatable": {"cpu": "190", "memory": "2000Gi", "nvidia.com/gpu": "8"}},
    }
    objs[(QUEUES, "", "q")] = {
        "apiVersion": "scheduling.run.ai/v2",
        "kind": "Queue",
        "metadata": {"name": "q", "uid": "uq", "resourceVersion": "2"},
        "spec": {"resources": {"gpu": {"quota": 2, "limit": -1, "overQuotaWeight": 1}}},
    }
    for name, size in (("run", 2), ("big", 8)):
        objs[(PODGROUPS, "ns", name)] = {
            "apiVersion": "scheduling.run.ai/v2alpha2",
            "kind": "PodGroup",
            "metadata": {
                "name": name,
                "namespace": "ns",
                "uid": f"pg-{name}",
                "resourceVersion": "3",
                "creationTimestamp": "2026-01-01T00:00:00Z",
            },
            "spec": {"minMember": size, "queue": "q"},
        }
        for i in range(size):
            pod: Json = {
                "metadata": {
                    "name": f"{name}-{i}",
                    "namespace": "ns",
                    "uid": f"{name}-{i}",
                    "resourceVersion": "4",
                    "annotations": {"pod-group-name": name},
                    "creationTimestamp": "2026-01-01T00:00:00Z",
                },
                "spec": {
                    "schedulerName": "kai-scheduler",
                    # 256 GiB is 274877.906944 MB: status maps hold it as 274878.
                    "containers": [
                        {
                            "name": "c",
                            "resources": {
                                "requests": {"cpu": "4", "memory": "256Gi"},
                                "limits": {"nvidia.com/gpu": "1"},
                            },
                        }
                    ],
                },
                "status": {"phase": "Pending"},
            }
            if name == "run":
                pod["spec"]["nodeName"] = "n1"
                pod["status"] = {"phase": "Running", "startTime": "2026-01-01T00:00:01Z"}
            objs[(PODS, "ns", f"{name}-{i}")] = pod
    return objs


def _filled() -> tuple[dict[tuple[str, str, str], Json], ClusterCache]:
    """The objects, and a cache that has seen each of them once."""
    objs = _objects()
    cache = ClusterCache()
    for (kind, _, _), body in objs.items():
        cache.observe(kind, "ADDED", body)
    return objs, cache


def _apply(
    cache: ClusterCache, objs: dict[tuple[str, str, str], Json], writes: list[Write]
) -> None:
    """The API server's answer to status writes, delivered as watch events."""
    rv = 100
    for w in writes:
        parts = w.path.strip("/").split("/")
        assert w.method == "PATCH" and parts[-1] == "status", w.what
        kind = PODGROUPS if "podgroups" in parts else QUEUES if "queues" in parts else PODS
        ns = parts[parts.index("namespaces") + 1] if "namespaces" in parts else ""
        key = (kind, ns, parts[-2])
        body = copy.deepcopy(objs[key])
        patch = (w.body or {})["status"]
        status = body.setdefault("status", {})
        if kind == PODS:
            status["conditions"] = patch["conditions"]
        else:
            status.update(patch)
        rv += 1
        body["metadata"]["resourceVersion"] = str(rv)
        objs[key] = body
        cache.observe(kind, "MODIFIED", body)


def _cycle(cache: ClusterCache, recorder: EventRecorder, gate: IdleGate, now: float) -> list[Write]:
    view = cache.view(now)
    built = view.build(now)
    decisions = run_cycle(built.snapshot)
    assert not decisions.binds and not decisions.evictions
    gate.ran(view.generation, now, view.wake_at, quiet=True)
    return [
        w for w in plan(view, built, decisions, now, recorder) if not w.what.startswith("event")
    ]


def test_an_unchanged_cluster_gets_no_writes_in_the_second_cycle_and_no_third_cycle() -> None:
    objs, cache = _filled()
    recorder, gate = EventRecorder(), IdleGate()
    first = _cycle(cache, recorder, gate, NOW)
    kinds = sorted(w.what.split(" ")[0] for w in first)
    # The gang of 8 does not fit next to the running one: it stays unschedulable.
    assert kinds == [
        "PodGroup",
        "PodGroup",
        "PodScheduled=False",
        *["PodScheduled=False"] * 7,
        "Queue",
    ]
    queue_write = next(w for w in first if w.what.startswith("Queue"))
    assert (queue_write.body or {})["status"]["allocated"]["memory"] == 549756
    _apply(cache, objs, first)
    assert gate.due(cache.generation, NOW + 1)  # its own writes came back
    assert _cycle(cache, recorder, gate, NOW + 1) == []
    # Nothing changed since a quiet cycle: the next ones are skipped ...
    assert not gate.due(cache.generation, NOW + 2)
    assert not gate.due(cache.generation, NOW + 5)
    # ... until a full cycle is due again, or the cache changes.
    assert gate.due(cache.generation, NOW + 1 + gate.max_idle)
    cache.observe(PODS, "DELETED", objs[(PODS, "ns", "run-0")])
    assert gate.due(cache.generation, NOW + 3)


def test_a_cycle_that_decided_something_is_never_skipped() -> None:
    gate = IdleGate()
    assert gate.due(7, NOW)
    gate.ran(7, NOW, float("inf"), quiet=False)
    assert gate.due(7, NOW + 1)
    gate.ran(7, NOW + 1, NOW + 3, quiet=True)
    assert not gate.due(7, NOW + 2)
    assert gate.due(7, NOW + 3)  # a pod's PodGroup grace period ends


def test_a_build_reuses_unchanged_pods_and_parses_changed_ones_again() -> None:
    objs, cache = _filled()
    first = cache.view(NOW).build(NOW).snapshot
    task = next(t for j in first.jobs for t in j.tasks if t.name == "big-0")
    task.status, task.node_name = TaskStatus.ALLOCATED, "n1"  # what a session does
    again = cache.view(NOW).build(NOW).snapshot
    same = next(t for j in again.jobs for t in j.tasks if t.name == "big-0")
    # The same Task, as parsed again: the next build puts back what a session changed.
    assert same is task and same.status is TaskStatus.PENDING and same.node_name is None
    # A new version of the pod is parsed again.
    changed = copy.deepcopy(objs[(PODS, "ns", "big-0")])
    changed["metadata"]["resourceVersion"] = "50"
    changed["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "6"
    cache.observe(PODS, "MODIFIED", changed)
    third = cache.view(NOW).build(NOW).snapshot
    new = next(t for j in third.jobs for t in j.tasks if t.name == "big-0")
    assert new.request.cpu == 6000


def test_a_build_reuses_unchanged_jobs_and_nodes_and_reads_changed_ones_again() -> None:
    objs, cache = _filled()
    first = cache.view(NOW).build(NOW).snapshot
    job = next(j for j in first.jobs if j.name == "big")
    node = first.nodes[0]
    # What a session and the operator's view do to a snapshot's jobs and nodes.
    job.errors.append("from the last cycle")
    job.stale_since, job.version = NOW, 3
    node.allocatable.gpu, node.used.gpu = 5, 2
    again = cache.view(NOW).build(NOW).snapshot
    job2 = next(j for j in again.jobs if j.name == "big")
    assert job2 is not job and job2.errors == [] and job2.stale_since is None
    assert job2.version == 0 and [t.name for t in job2.tasks] == [f"big-{i}" for i in range(8)]
    assert again.nodes[0] is not node
    assert (again.nodes[0].allocatable.gpu, again.nodes[0].used.gpu) == (8, 0)
    # A new PodGroup version, a new node version and a new priority class are read again.
    pg = copy.deepcopy(objs[(PODGROUPS, "ns", "big")])
    pg["metadata"]["resourceVersion"] = "60"
    pg["spec"]["minMember"] = 4
    pg["spec"]["priorityClassName"] = "urgent"
    cache.observe(PODGROUPS, "MODIFIED", pg)
    n1 = copy.deepcopy(objs[(NODES, "", "n1")])
    n1["metadata"]["resourceVersion"] = "61"
    n1["status"]["allocatable"]["nvidia.com/gpu"] = "4"
    cache.observe(NODES, "MODIFIED", n1)
    third = cache.view(NOW).build(NOW).snapshot
    job3 = next(j for j in third.jobs if j.name == "big")
    assert job3.min_member == 4 and third.nodes[0].allocatable.gpu == 4
    assert job3.priority == 0 and any("'urgent' does not exist" in e for e in job3.errors)
    cache.observe(
        PRIORITY_CLASSES,
        "ADDED",
        {"metadata": {"name": "urgent", "uid": "pc", "resourceVersion": "62"}, "value": 500},
    )
    fourth = cache.view(NOW).build(NOW).snapshot
    job4 = next(j for j in fourth.jobs if j.name == "big")
    assert job4.priority == 500 and job4.errors == []


def _status_writes(writes: list[Write]) -> list[str]:
    return sorted(w.what for w in writes if w.what.startswith("PodGroup"))


def test_a_podgroup_status_found_right_is_compared_again_once_it_changes() -> None:
    objs, cache = _filled()
    recorder, gate = EventRecorder(), IdleGate()
    _apply(cache, objs, _cycle(cache, recorder, gate, NOW))
    assert _cycle(cache, recorder, gate, NOW + 1) == []
    assert _cycle(cache, recorder, gate, NOW + 2) == []  # remembered as right: still nothing
    # Someone overwrites the status (a new version): the plan sees it and puts it right.
    wrong = copy.deepcopy(objs[(PODGROUPS, "ns", "run")])
    wrong["status"]["resourcesStatus"]["allocated"] = {"nvidia.com/gpu": 7}
    wrong["metadata"]["resourceVersion"] = "900"
    objs[(PODGROUPS, "ns", "run")] = wrong
    cache.observe(PODGROUPS, "MODIFIED", wrong)
    fixed = _cycle(cache, recorder, gate, NOW + 3)
    assert _status_writes(fixed) == ["PodGroup ns/run status"]
    assert (fixed[0].body or {})["status"]["resourcesStatus"]["allocated"]["nvidia.com/gpu"] == 2
    # What the job holds changes with the PodGroup untouched: the plan sees that too.
    cache.observe(PODS, "DELETED", objs[(PODS, "ns", "run-1")])
    _apply(cache, objs, fixed)
    shrunk = _cycle(cache, recorder, gate, NOW + 4)
    assert "PodGroup ns/run status" in _status_writes(shrunk)
    run = next(w for w in shrunk if w.what == "PodGroup ns/run status")
    assert (run.body or {})["status"]["resourcesStatus"]["allocated"]["nvidia.com/gpu"] == 1


def test_events_carry_the_uid_of_their_object() -> None:
    _, cache = _filled()
    view = cache.view(NOW)
    built = view.build(NOW)
    events = [
        w
        for w in plan(view, built, run_cycle(built.snapshot), NOW, EventRecorder())
        if w.what.startswith("event")
    ]
    involved = {
        ((w.body or {})["involvedObject"]["kind"], (w.body or {})["involvedObject"]["name"]): (
            w.body or {}
        )["involvedObject"].get("uid")
        for w in events
    }
    assert involved[("PodGroup", "big")] == "pg-big"
    assert involved[("Pod", "big-3")] == "big-3"


def _fields(task: Task) -> dict[str, object]:
    out = {f.name: getattr(task, f.name) for f in dataclasses.fields(Task)}
    out["request"] = (task.request.cpu, task.request.memory, task.request.gpu)
    out.pop("_shape")  # derived from the fields above, kept once computed
    return out


def test_the_tasks_of_a_build_are_as_parsed_whatever_the_last_sessions_did() -> None:
    """Each build hands out the parsed Tasks themselves: every field must be as a fresh
    parse makes it, after sessions that bound, pipelined and evicted them."""
    objs, cache = _filled()
    # No bounds, and "big" an elastic job of 4 to 8 pods of a higher priority than
    # "run": sessions bind some of it, and may preempt "run" for the rest.
    q = copy.deepcopy(objs[(QUEUES, "", "q")])
    q["metadata"]["resourceVersion"] = "6"
    for resource in ("cpu", "memory", "gpu"):
        q["spec"]["resources"][resource] = {"quota": -1, "limit": -1, "overQuotaWeight": 1}
    cache.observe(QUEUES, "MODIFIED", q)
    objs[(PRIORITY_CLASSES, "", "urgent")] = {
        "metadata": {"name": "urgent", "uid": "pc", "resourceVersion": "7"},
        "value": 90,
    }
    cache.observe(PRIORITY_CLASSES, "ADDED", objs[(PRIORITY_CLASSES, "", "urgent")])
    big = copy.deepcopy(objs[(PODGROUPS, "ns", "big")])
    big["metadata"]["resourceVersion"] = "8"
    big["spec"]["priorityClassName"] = "urgent"
    big["spec"]["minMember"] = 4
    cache.observe(PODGROUPS, "MODIFIED", big)
    changed: set[str] = set()
    for cycle in range(4):
        view = cache.view(NOW + cycle)
        built = view.build(NOW + cycle)
        fresh = build(view.all_documents, NOW + cycle, memo=ParseMemo(), workloads=False)
        mine = {t.uid: t for j in built.snapshot.jobs for t in j.tasks}
        theirs = {t.uid: t for j in fresh.snapshot.jobs for t in j.tasks}
        assert mine.keys() == theirs.keys()
        for uid, task in mine.items():
            assert _fields(task) == _fields(theirs[uid]), uid
        before = {uid: _fields(t) for uid, t in mine.items()}
        decisions = run_cycle(built.snapshot)
        changed |= {uid for uid, t in mine.items() if _fields(t) != before[uid]}
        assert decisions.binds or decisions.evictions or decisions.pipelined or cycle > 0
    assert len(changed) >= 8  # the sessions did change the Tasks they were handed


def test_a_pod_given_twice_in_one_build_gets_two_tasks() -> None:
    objs, _ = _filled()
    pod = Document(
        "Pod ns/big-0", {"apiVersion": "v1", "kind": "Pod", **objs[(PODS, "ns", "big-0")]}
    )
    group = Document("PodGroup ns/big", {**objs[(PODGROUPS, "ns", "big")]})
    memo = ParseMemo()
    for _ in range(2):
        built = build([group, pod, pod], NOW, memo=memo, workloads=False)
        first, second = built.snapshot.jobs[0].tasks
        assert first is not second and _fields(first) == _fields(second)


def test_pod_facts_read_once_give_each_memo_its_own_tasks() -> None:
    """The cache reads a pod's facts once and hands them to every build; a build from
    another memo (a tool building the same view again) parses Tasks of its own."""
    _, cache = _filled()
    view = cache.view(NOW)
    view.build(NOW)
    mine = {t.uid: t for j in view.build(NOW).snapshot.jobs for t in j.tasks}
    other = build(view.documents, NOW, memo=ParseMemo(), workloads=False, pods=view.pod_documents)
    theirs = {t.uid: t for j in other.snapshot.jobs for t in j.tasks}
    assert mine.keys() == theirs.keys() and len(mine) == 10
    for uid, task in mine.items():
        assert task is not theirs[uid] and _fields(task) == _fields(theirs[uid])
    # The cache's next build hands out none of the other memo's.
    again = {t.uid: t for j in cache.view(NOW).build(NOW).snapshot.jobs for t in j.tasks}
    for uid, task in again.items():
        assert task is not theirs[uid] and _fields(task) == _fields(theirs[uid])


def test_a_podgroup_is_parsed_again_for_its_spec_not_for_its_status(
    monkeypatch: Any,
) -> None:
    """The scheduler writes thousands of PodGroup statuses in a cycle: each is a new
    version, but the Job is made of the metadata and spec, so none is parsed again;
    a spec change is. A status kai-py cannot read does not stop the workload."""
    import kai_py.state.builder as builder

    parsed: list[str] = []
    real = builder.PodGroup.from_manifest

    def counting(body: Any) -> Any:
        parsed.append(body["metadata"]["name"])
        return real(body)

    monkeypatch.setattr(builder.PodGroup, "from_manifest", counting)
    objs, _ = _filled()
    group = copy.deepcopy(objs[(PODGROUPS, "ns", "big")])
    memo = ParseMemo()

    def job() -> Any:
        built = build([Document("PodGroup ns/big", copy.deepcopy(group))], NOW, memo=memo)
        (made,) = built.snapshot.jobs
        return made

    assert job().min_member == 8 and parsed == ["big"]
    group["metadata"]["resourceVersion"] = "9"
    group["status"] = {"phase": "Running", "running": -3, "conditions": "not a list"}
    first = job()
    assert parsed == ["big"] and first.errors == [] and first.min_member == 8
    group["metadata"]["resourceVersion"] = "10"
    group["spec"]["minMember"] = 4
    assert job().min_member == 4 and parsed == ["big", "big"]
    group["metadata"]["resourceVersion"] = "11"
    group["metadata"].setdefault("annotations", {})["kai.scheduler/stale-since"] = "soon"
    stale = job()
    assert parsed == ["big", "big", "big"] and "not an RFC 3339 time" in stale.errors[0]


@pytest.mark.interpreted
def test_a_podgroup_key_is_made_once_per_manifest(monkeypatch: Any) -> None:
    """The cache hands out the same manifest until a watch event replaces it: its key
    (JSON of its metadata and spec) is made once, not in every build; a new manifest
    of the same PodGroup gets a key of its own, and a changed spec a new Job."""
    made: list[str] = []
    real = ParseMemo.podgroup_key

    def counting(body: Any) -> Any:
        made.append(body["metadata"]["resourceVersion"])
        return real(body)

    monkeypatch.setattr(ParseMemo, "podgroup_key", staticmethod(counting))
    objs, _ = _filled()
    group = copy.deepcopy(objs[(PODGROUPS, "ns", "big")])
    memo = ParseMemo()

    def min_member(body: Any) -> int:
        (job,) = build([Document("PodGroup ns/big", body)], NOW, memo=memo).snapshot.jobs
        return int(job.min_member)

    assert [min_member(group) for _ in range(3)] == [8, 8, 8]
    assert len(made) == 1
    newer = copy.deepcopy(group)
    newer["metadata"]["resourceVersion"] = "12"
    newer["spec"]["minMember"] = 2
    assert min_member(newer) == 2 and len(made) == 2
    assert min_member(newer) == 2 and len(made) == 2
