"""The pod-grouper controller's API work (kai_py.podgrouper.service) over a fake API."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import pytest

from kai_py.api import keys
from kai_py.apiclient.kube import KubeError
from kai_py.podgrouper.grouping import group_for_pod, owner_chain, walk_owner_chain
from kai_py.podgrouper.service import OwnerResolver, PodGrouperService

Json = dict[str, Any]

DISCOVERY = {
    "/apis/batch/v1": {"resources": [{"name": "jobs", "kind": "Job", "namespaced": True}]},
    "/apis/apps/v1": {
        "resources": [
            {"name": "replicasets", "kind": "ReplicaSet", "namespaced": True},
            {"name": "replicasets/scale", "kind": "Scale", "namespaced": True},
        ]
    },
}


class FakeKube:
    def __init__(self, objects: dict[str, Json]) -> None:
        self.objects = {**copy.deepcopy(DISCOVERY), **objects}
        self.calls: list[tuple[str, str, Any]] = []

    def request(self, method: str, path: str, body: Any = None, **_: Any) -> Json:
        self.calls.append((method, path, body))
        if method == "GET":
            if path not in self.objects:
                raise KubeError(404, "NotFound", path)
            return copy.deepcopy(self.objects[path])
        if method == "POST":
            key = f"{path}/{body['metadata'].get('name') or 'event'}{len(self.calls)}"
            if "/events" not in path:
                key = f"{path}/{body['metadata']['name']}"
            if key in self.objects:
                raise KubeError(409, "AlreadyExists", key)
            self.objects[key] = copy.deepcopy(body)
            return copy.deepcopy(body)
        if method == "PATCH":
            if "spec" in body:  # a merge patch of a PodGroup's gang fields
                stored = self.objects.setdefault(path, {}).setdefault("spec", {})
                for key, value in body["spec"].items():
                    if value is None:
                        stored.pop(key, None)
                    else:
                        stored[key] = value
                return copy.deepcopy(self.objects[path])
            for part in ("annotations", "labels"):
                if part in body["metadata"]:
                    stored = self.objects[path]["metadata"].setdefault(part, {})
                    stored.update(body["metadata"][part])
            return copy.deepcopy(self.objects[path])
        raise AssertionError(method)

    def get(self, path: str) -> Json:
        return self.request("GET", path)

    def create(self, path: str, body: Json) -> Json:
        return self.request("POST", path, body)

    def patch(self, path: str, body: Json, content_type: str = "") -> Json:
        return self.request("PATCH", path, body)

    def writes(self, method: str, part: str = "") -> list[tuple[str, str, Any]]:
        return [c for c in self.calls if c[0] == method and part in c[1]]

    def refuse(
        self, method: str, path: str, code: int, reason: str, refusing: Callable[[], bool]
    ) -> None:
        """``method`` on ``path`` is answered ``code`` while ``refusing()`` says so."""
        original = self.request

        def request(verb: str, where: str, body: Any = None, **kw: Any) -> Json:
            if verb == method and where == path and refusing():
                raise KubeError(code, reason, "injected")
            return original(verb, where, body, **kw)

        self.request = request  # type: ignore[method-assign]

    def refuse_podgroup_creates(self, code: int, reason: str, refusing: Callable[[], bool]) -> None:
        self.refuse(
            "POST",
            "/apis/scheduling.run.ai/v2alpha2/namespaces/ns/podgroups",
            code,
            reason,
            refusing,
        )


def job(min_member: str = "3") -> Json:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "train",
            "namespace": "ns",
            "uid": "job-uid",
            "annotations": {keys.BATCH_MIN_MEMBER_ANNOTATION: min_member},
        },
    }


def job_pod(name: str = "train-0", annotations: dict[str, str] | None = None) -> Json:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"{name}-uid",
            "annotations": annotations or {},
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": "train",
                    "uid": "job-uid",
                    "controller": True,
                }
            ],
        },
        "spec": {"schedulerName": "kai-scheduler", "containers": []},
    }


JOB_PATH = "/apis/batch/v1/namespaces/ns/jobs/train"
T = TypeVar("T")


def run(step: Coroutine[Any, Any, T]) -> T:
    """One step of the service (it runs on the event loop; the fake API from a thread)."""
    return asyncio.run(step)


def service(kube: FakeKube, now: list[float] | None = None) -> PodGrouperService:
    clock = now or [0.0]
    return PodGrouperService(
        kube,  # type: ignore[arg-type]
        owners=OwnerResolver(kube, ttl=10, clock=lambda: clock[0]),  # type: ignore[arg-type]
    )


def test_owner_chain_walk_is_shared_with_simulate() -> None:
    owners = {("ns", "job-uid"): job()}
    assert owner_chain(job_pod(), owners) == [job()]
    assert walk_owner_chain(job_pod(), lambda ns, ref: None) == []


def test_owners_are_fetched_by_discovery_and_cached_briefly() -> None:
    kube = FakeKube({JOB_PATH: job()})
    now = [0.0]
    resolver = OwnerResolver(kube, ttl=10, clock=lambda: now[0])  # type: ignore[arg-type]
    assert run(resolver.chain(job_pod()))[0]["metadata"]["uid"] == "job-uid"
    assert run(resolver.resource("apps/v1", "ReplicaSet")) == ("replicasets", True)
    run(resolver.chain(job_pod()))
    assert len(kube.writes("GET", "/jobs/")) == 1  # cached
    now[0] = 11
    run(resolver.chain(job_pod()))
    assert len(kube.writes("GET", "/jobs/")) == 2  # expired
    kube.objects[JOB_PATH]["metadata"]["uid"] = "another-job"
    now[0] = 30
    assert run(resolver.chain(job_pod())) == []  # same name, another object


def test_a_job_pod_gets_its_group_and_annotation_once() -> None:
    kube = FakeKube({JOB_PATH: job(), "/api/v1/namespaces/ns/pods/train-0": job_pod()})
    grouper = service(kube)
    outcome = run(grouper.handle(job_pod()))
    assert outcome.group == "pg-train-job-uid" and outcome.created and outcome.annotated
    (create,) = kube.writes("POST", "/podgroups")
    assert create[2]["spec"]["minMember"] == 3
    assert create[2]["metadata"]["ownerReferences"][0]["uid"] == "job-uid"
    (patch,) = kube.writes("PATCH")
    assert patch[2] == {
        "metadata": {"annotations": {keys.POD_GROUP_ANNOTATION: "pg-train-job-uid"}}
    }
    # The pod's next event (now annotated) costs nothing.
    annotated = job_pod(annotations={keys.POD_GROUP_ANNOTATION: "pg-train-job-uid"})
    assert not grouper.needs_work(annotated)
    calls = len(kube.calls)
    assert run(grouper.handle(annotated)).skipped == "already grouped"
    assert len(kube.calls) == calls


def test_an_existing_group_and_a_right_annotation_mean_no_writes() -> None:
    kube = FakeKube(
        {
            JOB_PATH: job(),
            "/apis/scheduling.run.ai/v2alpha2/namespaces/ns/podgroups/pg-train-job-uid": {},
        }
    )
    outcome = run(
        service(kube).handle(job_pod(annotations={keys.POD_GROUP_ANNOTATION: "pg-train-job-uid"}))
    )
    assert not outcome.created and not outcome.annotated
    assert not kube.writes("PATCH")


def test_a_bad_annotation_warns_once_on_the_job_and_groups_nothing() -> None:
    kube = FakeKube({JOB_PATH: job("abc")})
    grouper = service(kube)
    for name in ("train-0", "train-1", "train-0"):
        outcome = run(grouper.handle(job_pod(name)))
        assert outcome.skipped == "grouping failed"
    events = [e[2] for e in kube.writes("POST", "/events")]
    (body,) = [e for e in events if e["involvedObject"]["kind"] == "Job"]
    assert (body["reason"], body["type"]) == ("PodGrouperWarning", "Warning")
    assert body["involvedObject"]["name"] == "train"
    assert '"abc"' in body["message"]
    # Each waiting pod is told why, once (train-0 was handled twice).
    pods = [e for e in events if e["involvedObject"]["kind"] == "Pod"]
    assert sorted(e["involvedObject"]["name"] for e in pods) == ["train-0", "train-1"]
    assert all(e["reason"] == "PodGroupNotCreated" and '"abc"' in e["message"] for e in pods)
    assert not kube.writes("POST", "/podgroups") and not kube.writes("PATCH")


def test_other_schedulers_and_deleted_pods_are_not_touched() -> None:
    kube = FakeKube({})
    grouper = service(kube)
    other = job_pod()
    other["spec"]["schedulerName"] = "default-scheduler"
    going = job_pod()
    going["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert run(grouper.handle(other)).skipped == "not ours"
    assert run(grouper.handle(going)).skipped == "not ours"
    assert kube.calls == []


def test_a_deleted_group_is_made_again_on_the_next_event() -> None:
    kube = FakeKube({JOB_PATH: job(), "/api/v1/namespaces/ns/pods/train-0": job_pod()})
    grouper = service(kube)
    run(grouper.handle(job_pod()))
    annotated = job_pod(annotations={keys.POD_GROUP_ANNOTATION: "pg-train-job-uid"})
    grouper.group_deleted("ns", "pg-train-job-uid")
    del kube.objects["/apis/scheduling.run.ai/v2alpha2/namespaces/ns/podgroups/pg-train-job-uid"]
    assert grouper.needs_work(annotated)
    assert run(grouper.handle(annotated)).created


def test_pods_whose_grouping_failed_are_tried_again() -> None:
    kube = FakeKube({JOB_PATH: job("abc"), "/api/v1/namespaces/ns/pods/train-0": job_pod()})
    now = [0.0]
    grouper = service(kube, now)
    assert run(grouper.handle(job_pod())).skipped == "grouping failed"
    assert run(grouper.retry_pending())[0].skipped == "grouping failed"  # still broken
    kube.objects[JOB_PATH]["metadata"]["annotations"][keys.BATCH_MIN_MEMBER_ANNOTATION] = "1"
    now[0] = 20  # the cached Job expired
    (outcome,) = run(grouper.retry_pending())
    assert outcome.annotated and outcome.group == "pg-train-job-uid"
    assert run(grouper.retry_pending()) == []  # done: no longer pending


def test_a_pending_pod_that_went_is_forgotten() -> None:
    kube = FakeKube({JOB_PATH: job("abc")})
    grouper = service(kube)
    run(grouper.handle(job_pod()))
    assert run(grouper.retry_pending()) == []  # the pod is not there (404)
    kube.objects["/api/v1/namespaces/ns/pods/train-0"] = job_pod()
    assert run(grouper.retry_pending()) == []  # and it was forgotten


# --- kai.scheduler/skip-podgrouper: the user's PodGroup is left alone


def test_skip_podgrouper_on_the_job_keeps_the_pod_in_the_users_group() -> None:
    skipping = job()
    skipping["metadata"]["annotations"][keys.SKIP_PODGROUPER_ANNOTATION] = "true"
    kube = FakeKube({JOB_PATH: skipping})
    pod = job_pod(annotations={keys.POD_GROUP_ANNOTATION: "mine"})
    outcome = run(service(kube).handle(pod))
    assert outcome.group == "mine"
    assert not kube.writes("POST", "/podgroups")
    assert not kube.writes("PATCH")


def test_without_it_the_pod_is_moved_to_its_owners_group() -> None:
    pod = job_pod(annotations={keys.POD_GROUP_ANNOTATION: "mine"})
    kube = FakeKube({JOB_PATH: job(), "/api/v1/namespaces/ns/pods/train-0": pod})
    outcome = run(service(kube).handle(pod))
    assert outcome.group == "pg-train-job-uid"
    assert kube.writes("PATCH")


def test_a_conflict_on_create_is_not_taken_for_an_existing_group() -> None:
    # An injected (or racing) 409 on create: the group may not exist. The grouper must not
    # remember it as made, so the pod is grouped again and the group made on the retry.
    kube = FakeKube({JOB_PATH: job(), "/api/v1/namespaces/ns/pods/train-0": job_pod()})
    conflicts = iter([True])
    kube.refuse_podgroup_creates(409, "Conflict", lambda: next(conflicts, False))
    grouper = service(kube)
    with pytest.raises(KubeError):
        run(grouper.handle(job_pod()))
    assert not kube.writes("POST", "/podgroups")
    (outcome,) = run(grouper.retry_pending())
    assert outcome.created
    assert (
        "/apis/scheduling.run.ai/v2alpha2/namespaces/ns/podgroups/pg-train-job-uid" in kube.objects
    )


def test_a_new_leader_groups_every_pod_of_a_listing() -> None:
    kube = FakeKube({JOB_PATH: job()})
    kube.objects["/api/v1/pods"] = {"items": [job_pod("train-0"), job_pod("train-1")]}
    for name in ("train-0", "train-1"):
        kube.objects[f"/api/v1/namespaces/ns/pods/{name}"] = job_pod(name)
    outcomes = run(service(kube).group_all())
    assert len(outcomes) == 2
    assert len(kube.writes("PATCH")) == 2 and len(kube.writes("POST", "/podgroups")) == 1


def test_a_pod_that_met_an_api_error_is_tried_again_by_the_quick_pass_alone() -> None:
    kube = FakeKube(
        {
            JOB_PATH: job(),
            "/api/v1/namespaces/ns/pods/train-0": job_pod(),
        }
    )
    down = [True]
    kube.refuse_podgroup_creates(500, "InternalError", lambda: down[0])
    grouper = service(kube)
    with pytest.raises(KubeError):
        run(grouper.handle(job_pod()))
    assert grouper.api_failed == 1
    assert run(grouper.retry_pending(api_failed_only=True)) == []  # still down: no outcome
    assert grouper.api_failed == 1
    down[0] = False
    (outcome,) = run(grouper.retry_pending(api_failed_only=True))
    assert outcome.created and outcome.annotated
    assert grouper.api_failed == 0
    assert run(grouper.retry_pending(api_failed_only=True)) == []


def test_the_quick_pass_leaves_a_bad_annotation_to_the_full_one() -> None:
    kube = FakeKube({JOB_PATH: job("abc"), "/api/v1/namespaces/ns/pods/train-0": job_pod()})
    grouper = service(kube)
    assert run(grouper.handle(job_pod())).skipped == "grouping failed"
    assert grouper.api_failed == 0
    gets = len(kube.writes("GET", "/pods/"))
    assert run(grouper.retry_pending(api_failed_only=True)) == []
    assert len(kube.writes("GET", "/pods/")) == gets  # not even read
    assert run(grouper.retry_pending())[0].skipped == "grouping failed"


@pytest.mark.parametrize("path", [JOB_PATH, "/apis/batch/v1"])
def test_an_owner_not_read_for_an_api_error_is_tried_again_by_the_quick_pass(path: str) -> None:
    # A 500 on the owner's GET (or on discovery) is not a missing owner: nothing is
    # remembered as missing, and the pod is tried again in seconds, not at the full pass.
    kube = FakeKube({JOB_PATH: job(), "/api/v1/namespaces/ns/pods/train-0": job_pod()})
    down = [True]
    kube.refuse("GET", path, 500, "InternalError", lambda: down[0])
    grouper = service(kube)
    with pytest.raises(KubeError):
        run(grouper.handle(job_pod()))
    assert grouper.api_failed == 1
    assert not kube.writes("POST", "/podgroups")
    down[0] = False  # at once: no cached miss to wait out
    (outcome,) = run(grouper.retry_pending(api_failed_only=True))
    assert outcome.created and outcome.annotated and outcome.group == "pg-train-job-uid"


@pytest.mark.parametrize("code", [403, 404])
def test_an_owner_forbidden_or_gone_is_a_miss_remembered_briefly(code: int) -> None:
    kube = FakeKube({JOB_PATH: job()})
    asked: list[float] = []
    now = [0.0]
    kube.refuse("GET", JOB_PATH, code, "Refused", lambda: not asked.append(now[0]))
    resolver = OwnerResolver(kube, ttl=10, clock=lambda: now[0])  # type: ignore[arg-type]
    assert run(resolver.chain(job_pod())) == []
    assert run(resolver.chain(job_pod())) == []
    assert asked == [0.0]  # the miss was remembered
    now[0] = 11
    assert run(resolver.chain(job_pod())) == []
    assert asked == [0.0, 11]


# --- kinds beyond the built-in ones: subgroups, and owners the grouper cannot read

LWS_API = "/apis/leaderworkerset.x-k8s.io/v1"
JOBSET_API = "/apis/jobset.x-k8s.io/v1alpha2"


def owned(api_version: str, kind: str, name: str, owner: Json | None, **extra: Any) -> Json:
    out: Json = {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": name, "namespace": "ns", "uid": f"{name}-uid"},
        **extra,
    }
    if owner is not None:
        out["metadata"]["ownerReferences"] = [
            {
                "apiVersion": owner["apiVersion"],
                "kind": owner["kind"],
                "name": owner["metadata"]["name"],
                "uid": owner["metadata"]["uid"],
                "controller": True,
            }
        ]
    return out


def kind_pod(name: str, owner: Json, labels: dict[str, str]) -> Json:
    manifest = owned("v1", "Pod", name, owner)
    manifest["metadata"]["labels"] = labels
    manifest["spec"] = {"schedulerName": "kai-scheduler", "containers": []}
    return manifest


def test_a_leaderworkerset_pod_gets_its_subgroup_label_with_its_group() -> None:
    lws = owned(
        "leaderworkerset.x-k8s.io/v1",
        "LeaderWorkerSet",
        "infer",
        None,
        spec={"leaderWorkerTemplate": {"size": 4}},
    )
    sts = owned("apps/v1", "StatefulSet", "infer", lws)
    pod = kind_pod(
        "infer-0",
        sts,
        {
            "leaderworkerset.sigs.k8s.io/worker-index": "0",
            "leaderworkerset.sigs.k8s.io/group-index": "0",
        },
    )
    kube = FakeKube(
        {
            "/apis/apps/v1": {
                "resources": [{"name": "statefulsets", "kind": "StatefulSet", "namespaced": True}]
            },
            LWS_API: {
                "resources": [
                    {"name": "leaderworkersets", "kind": "LeaderWorkerSet", "namespaced": True}
                ]
            },
            "/apis/apps/v1/namespaces/ns/statefulsets/infer": sts,
            f"{LWS_API}/namespaces/ns/leaderworkersets/infer": lws,
            "/api/v1/namespaces/ns/pods/infer-0": pod,
        }
    )
    outcome = run(service(kube).handle(pod))
    assert outcome.group == "pg-infer-infer-uid-group-0" and outcome.created
    (create,) = kube.writes("POST", "/podgroups")
    assert create[2]["spec"]["minMember"] == 4
    assert [(g["name"], g["minMember"]) for g in create[2]["spec"]["subGroups"]] == [
        ("leader", 1),
        ("workers", 3),
    ]
    (patch,) = kube.writes("PATCH")
    assert patch[2]["metadata"]["labels"] == {"kai.scheduler/subgroup-name": "leader"}
    assert patch[2]["metadata"]["annotations"] == {
        keys.POD_GROUP_ANNOTATION: "pg-infer-infer-uid-group-0"
    }


def jobset_world(discovery: Json | None, code: int = 0) -> tuple[FakeKube, list[Json]]:
    """Two Jobs of one JobSet, one pod each; the JobSet API answers ``discovery``
    (None: ``code``)."""
    jobset = owned("jobset.x-k8s.io/v1alpha2", "JobSet", "js", None)
    objects: Json = {}
    pods = []
    for index in range(2):
        run_job = owned("batch/v1", "Job", f"js-w-{index}", jobset)
        objects[f"/apis/batch/v1/namespaces/ns/jobs/js-w-{index}"] = run_job
        pod = kind_pod(f"js-w-{index}-0", run_job, {})
        objects[f"/api/v1/namespaces/ns/pods/js-w-{index}-0"] = pod
        pods.append(pod)
    if discovery is not None:
        objects[JOBSET_API] = discovery
    kube = FakeKube(objects)
    if discovery is None and code:
        kube.refuse("GET", JOBSET_API, code, "Refused", lambda: True)
    return kube, pods


@pytest.mark.parametrize(
    ("discovery", "code", "cause"),
    [
        (None, 403, "may not read them"),  # no RBAC right on the API group
        (None, 404, "does not serve"),  # the JobSet CRD is not installed
        ({"resources": []}, 0, "does not serve"),  # the group is there, the kind is not
    ],
)
def test_an_owner_kind_not_readable_warns_once_and_groups_by_the_owner_below(
    discovery: Json | None, code: int, cause: str
) -> None:
    kube, pods = jobset_world(discovery, code)
    grouper = service(kube)
    outcomes = [run(grouper.handle(pod)) for pod in pods]
    # KAI's fallback: the nearest owner that could be read (each Job) is the top.
    assert [o.group for o in outcomes] == ["pg-js-w-0-js-w-0-uid", "pg-js-w-1-js-w-1-uid"]
    events = [e[2] for e in kube.writes("POST", "/events")]
    told = [e for e in events if e["reason"] == "PodGrouperOwnerUnreadable"]
    assert len(told) == 1, events  # one per kind, not one per pod
    assert told[0]["type"] == "Warning"
    assert told[0]["involvedObject"]["name"] == "js-w-0-0"
    assert "JobSet objects cannot be read" in told[0]["message"]
    assert cause in told[0]["message"]


def lws_world(policy: str) -> tuple[FakeKube, Json, Json, Json]:
    """A LeaderWorkerSet of 4 with its leader (not placed yet) and one worker pod."""
    lws = owned(
        "leaderworkerset.x-k8s.io/v1",
        "LeaderWorkerSet",
        "infer",
        None,
        spec={"startupPolicy": policy, "leaderWorkerTemplate": {"size": 4}},
    )
    sts = owned("apps/v1", "StatefulSet", "infer", lws)
    leader = kind_pod("infer-0", sts, {"leaderworkerset.sigs.k8s.io/worker-index": "0"})
    workers = owned("apps/v1", "StatefulSet", "infer-0", leader)
    worker = kind_pod("infer-0-1", workers, {"leaderworkerset.sigs.k8s.io/worker-index": "1"})
    kube = FakeKube(
        {
            "/api/v1": {"resources": [{"name": "pods", "kind": "Pod", "namespaced": True}]},
            "/apis/apps/v1": {
                "resources": [{"name": "statefulsets", "kind": "StatefulSet", "namespaced": True}]
            },
            LWS_API: {
                "resources": [
                    {"name": "leaderworkersets", "kind": "LeaderWorkerSet", "namespaced": True}
                ]
            },
            "/apis/apps/v1/namespaces/ns/statefulsets/infer": sts,
            "/apis/apps/v1/namespaces/ns/statefulsets/infer-0": workers,
            f"{LWS_API}/namespaces/ns/leaderworkersets/infer": lws,
            "/api/v1/namespaces/ns/pods/infer-0": leader,
            "/api/v1/namespaces/ns/pods/infer-0-1": worker,
        }
    )
    return kube, lws, leader, worker


GROUP_PATH = "/apis/scheduling.run.ai/v2alpha2/namespaces/ns/podgroups/pg-infer-infer-uid"


@pytest.mark.parametrize("fresh_process", [False, True])
def test_a_leader_ready_group_grows_to_its_size_when_the_workers_come(fresh_process: bool) -> None:
    """LeaderReady: the leader alone until it is placed, then the whole group. The
    group made for the leader (minMember 1) is rewritten by the first worker, whether
    this process made it or finds it made (a 409, then read back)."""
    kube, _lws, leader, worker = lws_world("LeaderReady")
    grouper = service(kube)
    assert run(grouper.handle(leader)).created
    (create,) = kube.writes("POST", "/podgroups")
    assert create[2]["spec"]["minMember"] == 1
    assert [g["name"] for g in create[2]["spec"]["subGroups"]] == ["leader"]
    kube.objects[GROUP_PATH] = copy.deepcopy(create[2])
    if fresh_process:
        grouper = service(kube)
    outcome = run(grouper.handle(worker))
    assert outcome.resized and not outcome.created
    (resize,) = kube.writes("PATCH", "/podgroups/")
    assert resize[2]["spec"]["minMember"] == 4
    assert resize[2]["spec"]["minSubGroup"] is None
    assert [(g["name"], g["minMember"]) for g in resize[2]["spec"]["subGroups"]] == [
        ("leader", 1),
        ("workers", 3),
    ]
    assert kube.objects[GROUP_PATH]["spec"]["minMember"] == 4
    # The next worker finds the group as it is: no write.
    other = copy.deepcopy(worker)
    other["metadata"].update(name="infer-0-2", uid="infer-0-2-uid")
    assert not run(grouper.handle(other)).resized
    assert len(kube.writes("PATCH", "/podgroups/")) == 1


def test_a_group_of_a_workload_that_did_not_change_is_never_patched() -> None:
    kube, _lws, leader, worker = lws_world("LeaderCreated")
    grouper = service(kube)
    assert run(grouper.handle(leader)).created
    assert not run(grouper.handle(worker)).resized
    assert not kube.writes("PATCH", "/podgroups/")


def test_a_kind_readable_again_is_no_longer_taken_for_unreadable() -> None:
    """Forbidden at first (one Warning, the pod grouped by itself); once the right is
    granted, an owner of that kind that is merely gone (404) is not a kind problem."""
    kube, pods = jobset_world(
        {"resources": [{"name": "jobsets", "kind": "JobSet", "namespaced": True}]}
    )
    forbidden = [True]
    kube.refuse("GET", JOBSET_API, 403, "Forbidden", lambda: forbidden[0])
    now = [0.0]
    resolver = OwnerResolver(kube, ttl=10, clock=lambda: now[0])  # type: ignore[arg-type]
    chain, stopped = run(resolver.walk(pods[0]))
    assert stopped is not None and stopped.why == "forbidden" and len(chain) == 1
    forbidden[0] = False
    now[0] = 11  # the cached miss expired; the JobSet itself is not there (404)
    chain, stopped = run(resolver.walk(pods[0]))
    assert stopped is None and len(chain) == 1


def test_offline_grouping_reads_related_objects_from_the_given_ones() -> None:
    """``kai-py simulate``'s path: a RayJob's pod, its RayCluster named by the RayJob's
    status among the given objects; the group is the RayJob's, sized by the cluster."""
    rayjob = owned("ray.io/v1", "RayJob", "rj", None, status={"rayClusterName": "rc"})
    cluster = owned(
        "ray.io/v1",
        "RayCluster",
        "rc",
        rayjob,
        spec={"headGroupSpec": {}, "workerGroupSpecs": [{"groupName": "gpu", "replicas": 3}]},
    )
    pod = kind_pod("rc-gpu-0", cluster, {"ray.io/group": "gpu"})
    objects = {("ns", "RayJob/rj"): rayjob, ("ns", "RayCluster/rc"): cluster}
    grouped = group_for_pod(pod, objects)
    assert grouped.name == "pg-rj-rj-uid" and not grouped.failed
    assert grouped.podgroup is not None and grouped.podgroup["spec"]["minMember"] == 4
    assert grouped.sub_group == "gpu"
    # The submitter's chain (pod -> Job -> RayJob) has no RayCluster: read by name.
    submitter = owned("batch/v1", "Job", "rj-submit", rayjob)
    objects[("ns", "Job/rj-submit")] = submitter
    grouped = group_for_pod(kind_pod("rj-submit-0", submitter, {}), objects)
    assert grouped.name == "pg-rj-rj-uid" and not grouped.failed
    assert grouped.podgroup is not None and grouped.podgroup["spec"]["minMember"] == 4
    assert grouped.sub_group is None


def test_a_refused_podgroup_gives_one_warning_on_the_pod_naming_queue_and_reason() -> None:
    # An admission webhook refusing the group (a queue it does not accept): without an
    # Event on the pod, the reason was only in the operator's log, retried again and again.
    kube = FakeKube({JOB_PATH: job(), "/api/v1/namespaces/ns/pods/train-0": job_pod()})
    why = 'admission webhook "podgroups.kai-py" denied the request: queue "ghost" is missing'
    original = kube.request

    def refusing(verb: str, where: str, body: Any = None, **kw: Any) -> Json:
        if verb == "POST" and where.endswith("/podgroups"):
            raise KubeError(403, "Forbidden", why)
        return original(verb, where, body, **kw)

    kube.request = refusing  # type: ignore[method-assign]
    grouper = service(kube)
    for _ in range(3):  # the first try and two retries: one Event
        with pytest.raises(KubeError):
            run(grouper.handle(job_pod()))
    events = [body for _m, path, body in kube.writes("POST", "/events")]
    assert len(events) == 1, events
    (event,) = events
    assert event["type"] == "Warning" and event["reason"] == "PodGroupNotCreated"
    assert event["involvedObject"]["name"] == "train-0"
    assert 'PodGroup ns/pg-train-job-uid (queue "default-queue")' in event["message"]
    assert f"refused by the API server (403 Forbidden): {why}" in event["message"]


def test_an_api_error_on_create_is_not_told_to_the_pod() -> None:
    kube = FakeKube({JOB_PATH: job(), "/api/v1/namespaces/ns/pods/train-0": job_pod()})
    kube.refuse_podgroup_creates(500, "InternalError", lambda: True)
    with pytest.raises(KubeError):
        run(service(kube).handle(job_pod()))
    assert not kube.writes("POST", "/events")


QUEUES_PATH = "/apis/scheduling.run.ai/v2/queues"


def _queue(name: str, **spec: Any) -> Json:
    return {
        "apiVersion": "scheduling.run.ai/v2",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": spec,
    }


def test_no_podgroup_in_a_queue_the_namespace_may_not_use_and_the_pod_says_why() -> None:
    # A tenant of namespace ns labels its Job for team-b's queue: no PodGroup is made
    # (the pod is never charged to team-b), and the pod's Warning names the queue, the
    # namespace and the namespaces the queue takes.
    labelled = job()
    labelled["metadata"]["labels"] = {keys.QUEUE_LABEL: "team-b"}
    kube = FakeKube(
        {
            JOB_PATH: labelled,
            "/api/v1/namespaces/ns/pods/train-0": job_pod(),
            QUEUES_PATH: {"items": [_queue("team-b", namespaces=["team-b"])]},
        }
    )
    grouper = service(kube)
    for _ in range(2):  # tried again: still one Event
        assert run(grouper.handle(job_pod())).skipped == "not allowed in its queue"
    assert not kube.writes("POST", "/podgroups")
    assert not kube.writes("PATCH")
    (event,) = [body for _m, _p, body in kube.writes("POST", "/events")]
    assert event["type"] == "Warning" and event["reason"] == "PodGroupNotCreated"
    assert event["involvedObject"]["name"] == "train-0"
    assert event["message"].endswith(
        "its PodGroup ns/pg-train-job-uid is not made, as its queue does not allow it: "
        'PodGroup "ns/pg-train-job-uid": spec.queue: queue "team-b" does not take namespace '
        '"ns": spec.namespaces of queue "team-b" allows team-b'
    )
    # The admin gives the namespace the queue: the next retry makes the group, with no
    # pod event needed.
    kube.objects[QUEUES_PATH]["items"][0]["spec"]["namespaces"].append("ns")
    (outcome,) = run(grouper.retry_pending())
    assert outcome.created and outcome.annotated


def test_no_podgroup_with_a_priority_class_its_queue_does_not_allow() -> None:
    labelled = job()
    labelled["metadata"]["labels"] = {
        keys.QUEUE_LABEL: "team-a",
        keys.PRIORITY_CLASS_LABEL: "system-cluster-critical",
    }
    queues = [
        _queue("org", priorityClasses=["train", "build"]),
        _queue("team-a", parentQueue="org"),
    ]
    kube = FakeKube(
        {
            JOB_PATH: labelled,
            "/api/v1/namespaces/ns/pods/train-0": job_pod(),
            QUEUES_PATH: {"items": queues},
        }
    )
    assert run(service(kube).handle(job_pod())).skipped == "not allowed in its queue"
    assert not kube.writes("POST", "/podgroups")
    (event,) = [body for _m, _p, body in kube.writes("POST", "/events")]
    assert (
        'spec.priorityClassName: priority class "system-cluster-critical" is not allowed in '
        'queue "team-a": spec.priorityClasses of queue "org" (an ancestor of "team-a", which '
        "sets none) allows build, train"
    ) in event["message"]
    # Allowed by the list (in the namespace list too): the group is made as before.
    labelled["metadata"]["labels"][keys.PRIORITY_CLASS_LABEL] = "build"
    kube.objects[QUEUES_PATH]["items"][1]["spec"]["namespaces"] = ["ns"]
    outcome = run(service(kube).handle(job_pod()))
    assert outcome.created, outcome
