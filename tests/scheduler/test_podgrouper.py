"""The pod-grouper rules (docs/operator.md, "The pod-grouper"), one test (or more) per rule,
and the bad inputs that must come back as PodGrouperWarning events."""

from __future__ import annotations

from typing import Any

import pytest

from kai_py.api import keys
from kai_py.api.podgroup import PodGroup
from kai_py.podgrouper.rules import (
    Grouped,
    GroupingFailed,
    GroupingResult,
    LeftAlone,
    group_name_for,
    group_pod,
)

NS = "team-a"


def meta(
    name: str,
    uid: str,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    owner: dict[str, Any] | None = None,
) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "namespace": NS, "uid": uid}
    if labels:
        out["labels"] = labels
    if annotations:
        out["annotations"] = annotations
    if owner:
        out["ownerReferences"] = [
            {
                "apiVersion": owner["apiVersion"],
                "kind": owner["kind"],
                "name": owner["metadata"]["name"],
                "uid": owner["metadata"]["uid"],
                "controller": True,
            }
        ]
    return out


def pod(
    name: str = "p-1",
    uid: str = "pod-uid",
    owner: dict[str, Any] | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    priority_class: str | None = None,
    scheduler: str | None = keys.DEFAULT_SCHEDULER_NAME,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "x"}]}
    if scheduler:
        spec["schedulerName"] = scheduler
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta(name, uid, labels, annotations, owner),
        "spec": spec,
    }


def obj(
    api_version: str,
    kind: str,
    name: str,
    uid: str,
    owner: dict[str, Any] | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    spec: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": meta(name, uid, labels, annotations, owner),
        "spec": spec or {},
    }


def grouped(result: GroupingResult) -> Grouped:
    assert isinstance(result, Grouped), result
    return result


def failed(result: GroupingResult) -> GroupingFailed:
    assert isinstance(result, GroupingFailed), result
    return result


def owner_of(group: PodGroup) -> tuple[str, str, str, str]:
    (ref,) = group.metadata.owner_references
    return ref.api_version, ref.kind, ref.name, ref.uid


# --- which group --------------------------------------------------------------


def test_bare_pod_gets_its_own_group() -> None:
    result = grouped(group_pod(pod("solo", "u-solo")))
    assert result.group_name == "pg-solo-u-solo"
    group = result.pod_group
    assert group.metadata.name == result.group_name
    assert group.metadata.namespace == NS
    assert owner_of(group) == ("v1", "Pod", "solo", "u-solo")
    assert group.spec.min_member == 1
    assert group.spec.queue == keys.DEFAULT_QUEUE == "default-queue"
    assert group.spec.priority_class_name == keys.DEFAULT_PRIORITY_CLASS == "train"
    assert result.warnings == ()


def test_bare_pod_naming_its_own_group_is_left_alone() -> None:
    result = group_pod(pod(annotations={keys.POD_GROUP_ANNOTATION: "my-gang"}))
    assert isinstance(result, LeftAlone)
    assert result.group_name == "my-gang"


def test_pod_of_another_scheduler_is_left_alone() -> None:
    assert isinstance(group_pod(pod(scheduler=None)), LeftAlone)
    assert isinstance(group_pod(pod(scheduler="volcano")), LeftAlone)
    # The check can be switched off, and the scheduler name is configurable.
    assert isinstance(group_pod(pod(scheduler=None), scheduler_name=None), Grouped)
    assert isinstance(group_pod(pod(scheduler="mine"), scheduler_name="mine"), Grouped)


def test_default_rule_one_group_per_top_owner() -> None:
    top = obj("apps/v1", "StatefulSet", "db", "u-db")
    a = grouped(group_pod(pod("db-0", "u0", owner=top), [top]))
    b = grouped(group_pod(pod("db-1", "u1", owner=top), [top]))
    assert a.group_name == b.group_name == "pg-db-u-db"
    assert owner_of(a.pod_group) == ("apps/v1", "StatefulSet", "db", "u-db")
    assert a.pod_group.spec.min_member == 1


def test_default_rule_walks_to_the_top_of_a_long_chain() -> None:
    top = obj("example.com/v1", "Workflow", "wf", "u-wf")
    middle = obj("example.com/v1", "Step", "step", "u-step", owner=top)
    result = grouped(group_pod(pod(owner=middle), [middle, top]))
    assert result.group_name == "pg-wf-u-wf"
    assert owner_of(result.pod_group)[1] == "Workflow"


def test_top_owner_known_only_by_reference_still_names_the_group() -> None:
    top = obj("example.com/v1", "Workflow", "wf", "u-wf")
    middle = obj("example.com/v1", "Step", "step", "u-step", owner=top)
    # The caller could fetch only the nearest owner: the top comes from its reference.
    result = grouped(group_pod(pod(owner=middle), [middle]))
    assert result.group_name == "pg-wf-u-wf"
    # And with no owner manifests at all, from the pod's own reference.
    assert grouped(group_pod(pod(owner=middle))).group_name == "pg-step-u-step"


def test_deployment_pods_get_one_group_each_with_inference_priority() -> None:
    deployment = obj("apps/v1", "Deployment", "web", "u-web")
    rs = obj("apps/v1", "ReplicaSet", "web-5d8", "u-rs", owner=deployment)
    a = grouped(group_pod(pod("web-5d8-a", "ua", owner=rs), [rs, deployment]))
    b = grouped(group_pod(pod("web-5d8-b", "ub", owner=rs), [rs, deployment]))
    assert a.group_name == "pg-web-5d8-a-ua"
    assert b.group_name == "pg-web-5d8-b-ub"
    assert owner_of(a.pod_group) == ("v1", "Pod", "web-5d8-a", "ua")
    assert a.pod_group.spec.min_member == 1
    assert a.pod_group.spec.priority_class_name == keys.INFERENCE_PRIORITY_CLASS == "inference"


def test_deployment_seen_only_through_the_replicasets_reference() -> None:
    deployment = obj("apps/v1", "Deployment", "web", "u-web")
    rs = obj("apps/v1", "ReplicaSet", "web-5d8", "u-rs", owner=deployment)
    result = grouped(group_pod(pod("web-5d8-a", "ua", owner=rs), [rs]))
    assert result.group_name == "pg-web-5d8-a-ua"
    assert result.pod_group.spec.priority_class_name == "inference"


def test_a_bare_replicaset_follows_the_default_rule() -> None:
    rs = obj("apps/v1", "ReplicaSet", "rs", "u-rs")
    result = grouped(group_pod(pod(owner=rs), [rs]))
    assert result.group_name == "pg-rs-u-rs"
    assert result.pod_group.spec.priority_class_name == "train"


def test_deployment_priority_can_still_be_set() -> None:
    deployment = obj(
        "apps/v1", "Deployment", "web", "u-web", labels={keys.PRIORITY_CLASS_LABEL: "build"}
    )
    rs = obj("apps/v1", "ReplicaSet", "web-5d8", "u-rs", owner=deployment)
    result = grouped(group_pod(pod(owner=rs), [rs, deployment]))
    assert result.pod_group.spec.priority_class_name == "build"


# --- batch Jobs ---------------------------------------------------------------


def test_batch_job_one_group_min_member_one_by_default() -> None:
    job = obj("batch/v1", "Job", "train", "u-job")
    a = grouped(group_pod(pod("train-a", "ua", owner=job), [job]))
    b = grouped(group_pod(pod("train-b", "ub", owner=job), [job]))
    assert a.group_name == b.group_name == "pg-train-u-job"
    assert owner_of(a.pod_group) == ("batch/v1", "Job", "train", "u-job")
    assert a.pod_group.spec.min_member == 1


def test_batch_job_min_member_from_annotation() -> None:
    job = obj(
        "batch/v1", "Job", "train", "u-job", annotations={keys.BATCH_MIN_MEMBER_ANNOTATION: "4"}
    )
    assert grouped(group_pod(pod(owner=job), [job])).pod_group.spec.min_member == 4
    zero = obj(
        "batch/v1", "Job", "train", "u-job", annotations={keys.BATCH_MIN_MEMBER_ANNOTATION: "0"}
    )
    assert grouped(group_pod(pod(owner=zero), [zero])).pod_group.spec.min_member == 0


@pytest.mark.parametrize("bad", ["abc", "-1", "2.5", "", " ", "99999999999"])
def test_bad_batch_min_member_is_a_pod_grouper_warning(bad: str) -> None:
    job = obj(
        "batch/v1", "Job", "train", "u-job", annotations={keys.BATCH_MIN_MEMBER_ANNOTATION: bad}
    )
    result = failed(group_pod(pod(owner=job), [job]))
    assert result.group_name is None
    (warning,) = result.warnings
    assert warning.REASON == "PodGrouperWarning" and warning.EVENT_TYPE == "Warning"
    assert (warning.involved.kind, warning.involved.name) == ("Job", "train")
    assert warning.involved.namespace == NS and warning.involved.uid == "u-job"
    assert warning.field == 'metadata.annotations["kai.scheduler/batch-min-member"]'
    assert warning.message == (
        f'Job "{NS}/train": metadata.annotations["kai.scheduler/batch-min-member"]: '
        f'must be a non-negative integer, got "{bad}"'
    )


def test_cronjob_runs_get_a_group_per_job() -> None:
    cron = obj("batch/v1", "CronJob", "nightly", "u-cron")
    run1 = obj("batch/v1", "Job", "nightly-1", "u-1", owner=cron)
    run2 = obj("batch/v1", "Job", "nightly-2", "u-2", owner=cron)
    a = grouped(group_pod(pod("a", "ua", owner=run1), [run1, cron]))
    b = grouped(group_pod(pod("b", "ub", owner=run2), [run2, cron]))
    assert a.group_name == "pg-nightly-1-u-1"
    assert b.group_name == "pg-nightly-2-u-2"
    assert owner_of(a.pod_group)[1] == "Job"


def test_job_known_only_by_reference_waits_for_its_manifest() -> None:
    job = obj("batch/v1", "Job", "train", "u-job")
    result = failed(group_pod(pod(owner=job)))
    (warning,) = result.warnings
    assert warning.involved.kind == "Job"
    assert "owner not available" in warning.message


def test_a_job_of_another_api_group_is_not_a_batch_job() -> None:
    job = obj(
        "example.com/v1", "Job", "j", "u-j", annotations={keys.BATCH_MIN_MEMBER_ANNOTATION: "abc"}
    )
    result = grouped(group_pod(pod(owner=job), [job]))
    assert result.pod_group.spec.min_member == 1


# --- Kubeflow -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "field", "api_version"),
    [
        ("PyTorchJob", "pytorchReplicaSpecs", "kubeflow.org/v1"),
        ("TFJob", "tfReplicaSpecs", "kubeflow.org/v1"),
        ("MPIJob", "mpiReplicaSpecs", "kubeflow.org/v2beta1"),
        ("XGBoostJob", "xgbReplicaSpecs", "kubeflow.org/v1"),
        ("JAXJob", "jaxReplicaSpecs", "kubeflow.org/v1"),
        ("PaddleJob", "paddleReplicaSpecs", "kubeflow.org/v1"),
    ],
)
def test_kubeflow_min_member_is_the_sum_of_replicas(
    kind: str, field: str, api_version: str
) -> None:
    job = obj(
        api_version,
        kind,
        "dist",
        "u-kf",
        spec={field: {"Master": {"replicas": 1}, "Worker": {"replicas": 3}}},
    )
    result = grouped(group_pod(pod(owner=job), [job]))
    assert result.group_name == "pg-dist-u-kf"
    assert owner_of(result.pod_group) == (api_version, kind, "dist", "u-kf")
    assert result.pod_group.spec.min_member == 4


def test_kubeflow_replicas_default_to_one() -> None:
    job = obj(
        "kubeflow.org/v1",
        "PyTorchJob",
        "dist",
        "u-kf",
        spec={"pytorchReplicaSpecs": {"Master": {}, "Worker": {"replicas": 2}}},
    )
    assert grouped(group_pod(pod(owner=job), [job])).pod_group.spec.min_member == 3


def test_kubeflow_min_available_wins_over_replicas() -> None:
    job = obj(
        "kubeflow.org/v1",
        "PyTorchJob",
        "dist",
        "u-kf",
        spec={
            "runPolicy": {"schedulingPolicy": {"minAvailable": 2}},
            "pytorchReplicaSpecs": {"Master": {"replicas": 1}, "Worker": {"replicas": 7}},
        },
    )
    assert grouped(group_pod(pod(owner=job), [job])).pod_group.spec.min_member == 2


def test_kubeflow_priority_class_from_scheduling_policy() -> None:
    job = obj(
        "kubeflow.org/v1",
        "TFJob",
        "tf",
        "u-tf",
        spec={
            "runPolicy": {"schedulingPolicy": {"priorityClass": "build"}},
            "tfReplicaSpecs": {"Worker": {"replicas": 1}},
        },
    )
    group = grouped(group_pod(pod(owner=job, priority_class="inference"), [job])).pod_group
    assert group.spec.priority_class_name == "build"


@pytest.mark.parametrize(
    ("spec", "field", "problem"),
    [
        (
            {"runPolicy": {"schedulingPolicy": {"minAvailable": "two"}}},
            "spec.runPolicy.schedulingPolicy.minAvailable",
            'got "two"',
        ),
        (
            {"runPolicy": {"schedulingPolicy": {"minAvailable": -1}}},
            "spec.runPolicy.schedulingPolicy.minAvailable",
            "got -1",
        ),
        (
            {"pytorchReplicaSpecs": {"Worker": {"replicas": "x"}}},
            "spec.pytorchReplicaSpecs.Worker.replicas",
            'got "x"',
        ),
        (
            {"pytorchReplicaSpecs": {"Worker": {"replicas": True}}},
            "spec.pytorchReplicaSpecs.Worker.replicas",
            "must be a non-negative integer",
        ),
        ({}, "spec.pytorchReplicaSpecs", "cannot tell how many pods"),
    ],
)
def test_bad_kubeflow_jobs_are_warnings(spec: dict[str, Any], field: str, problem: str) -> None:
    job = obj("kubeflow.org/v1", "PyTorchJob", "dist", "u-kf", spec=spec)
    (warning,) = failed(group_pod(pod(owner=job), [job])).warnings
    assert warning.involved.kind == "PyTorchJob"
    assert warning.field == field
    assert problem in warning.message
    assert warning.message.startswith(f'PyTorchJob "{NS}/dist": {field}: ')


def test_a_kubeflow_kind_outside_kubeflow_org_follows_the_default_rule() -> None:
    job = obj("example.com/v1", "PyTorchJob", "dist", "u-kf")
    assert grouped(group_pod(pod(owner=job), [job])).pod_group.spec.min_member == 1


# --- queue ------------------------------------------------------------------------


def test_queue_from_the_top_owner_first() -> None:
    job = obj("batch/v1", "Job", "j", "u-j", labels={keys.QUEUE_LABEL: "from-job"})
    p = pod(owner=job, labels={keys.QUEUE_LABEL: "from-pod"})
    group = grouped(group_pod(p, [job])).pod_group
    assert group.spec.queue == "from-job"
    assert group.metadata.labels[keys.QUEUE_LABEL] == "from-job"


def test_queue_from_the_pod_when_the_owner_has_none() -> None:
    job = obj("batch/v1", "Job", "j", "u-j")
    group = grouped(
        group_pod(pod(owner=job, labels={keys.QUEUE_LABEL: "from-pod"}), [job])
    ).pod_group
    assert group.spec.queue == "from-pod"


def test_queue_default_and_override_of_the_default() -> None:
    assert grouped(group_pod(pod())).pod_group.spec.queue == "default-queue"
    assert grouped(group_pod(pod(), default_queue="other")).pod_group.spec.queue == "other"


def test_queue_from_the_top_owner_of_a_deployment() -> None:
    deployment = obj("apps/v1", "Deployment", "web", "u-web", labels={keys.QUEUE_LABEL: "serving"})
    rs = obj("apps/v1", "ReplicaSet", "web-5d8", "u-rs", owner=deployment)
    p = pod(owner=rs, labels={keys.QUEUE_LABEL: "from-pod"})
    assert grouped(group_pod(p, [rs, deployment])).pod_group.spec.queue == "serving"


# --- priority -----------------------------------------------------------------------


def test_priority_label_on_an_owner_beats_the_pod() -> None:
    job = obj("batch/v1", "Job", "j", "u-j", labels={keys.PRIORITY_CLASS_LABEL: "build"})
    p = pod(owner=job, labels={keys.PRIORITY_CLASS_LABEL: "inference"}, priority_class="train")
    assert grouped(group_pod(p, [job])).pod_group.spec.priority_class_name == "build"


def test_priority_label_on_the_pod_beats_its_spec() -> None:
    p = pod(labels={keys.PRIORITY_CLASS_LABEL: "build"}, priority_class="inference")
    assert grouped(group_pod(p)).pod_group.spec.priority_class_name == "build"


def test_priority_from_the_pod_spec_then_the_default() -> None:
    assert (
        grouped(
            group_pod(pod(priority_class="build-preemptible"))
        ).pod_group.spec.priority_class_name
        == "build-preemptible"
    )
    assert grouped(group_pod(pod())).pod_group.spec.priority_class_name == "train"
    custom = group_pod(pod(), default_priority_class="build")
    assert grouped(custom).pod_group.spec.priority_class_name == "build"


# --- preemptibility and other warnings -------------------------------------------------


def test_preemptibility_label_is_copied() -> None:
    job = obj("batch/v1", "Job", "j", "u-j", labels={keys.PREEMPTIBILITY_LABEL: "non-preemptible"})
    assert (
        grouped(group_pod(pod(owner=job), [job])).pod_group.spec.preemptibility == "non-preemptible"
    )
    p = pod(labels={keys.PREEMPTIBILITY_LABEL: "preemptible"})
    assert grouped(group_pod(p)).pod_group.spec.preemptibility == "preemptible"
    assert grouped(group_pod(pod())).pod_group.spec.preemptibility is None


def test_bad_preemptibility_is_a_warning_but_the_pod_is_still_grouped() -> None:
    result = grouped(group_pod(pod("p", "u", labels={keys.PREEMPTIBILITY_LABEL: "maybe"})))
    assert result.pod_group.spec.preemptibility is None
    (warning,) = result.warnings
    assert warning.involved.kind == "Pod" and warning.involved.name == "p"
    assert warning.message == (
        f'Pod "{NS}/p": metadata.labels["kai.scheduler/preemptibility"]: must be "preemptible" '
        'or "non-preemptible", got "maybe"; ignored'
    )


def test_owned_pod_naming_another_group_is_regrouped_with_a_warning() -> None:
    job = obj("batch/v1", "Job", "j", "u-j")
    p = pod(owner=job, annotations={keys.POD_GROUP_ANNOTATION: "elsewhere"})
    result = grouped(group_pod(p, [job]))
    assert result.group_name == "pg-j-u-j"
    (warning,) = result.warnings
    assert "elsewhere" in warning.message and warning.involved.kind == "Pod"


def test_owned_pod_already_annotated_with_its_group_is_quiet() -> None:
    job = obj("batch/v1", "Job", "j", "u-j")
    p = pod(owner=job, annotations={keys.POD_GROUP_ANNOTATION: "pg-j-u-j"})
    assert grouped(group_pod(p, [job])).warnings == ()


# --- names and the result as a manifest ----------------------------------------------


def test_long_names_are_cut_to_a_valid_object_name() -> None:
    uid = "0f8fad5b-d9cb-469f-a165-70867728950e"
    name = group_name_for("x" * 300, uid, "Job")
    assert len(name) == 253 and name.endswith("-" + uid) and name.startswith("pg-x")


def test_missing_uid_uses_the_kind() -> None:
    assert grouped(group_pod(pod("solo", ""))).group_name == "pg-solo-pod"
    job = obj("batch/v1", "Job", "solo", "")
    assert grouped(group_pod(pod(owner=job), [job])).group_name == "pg-solo-job"


def test_namespace_defaults_to_default() -> None:
    p = pod()
    del p["metadata"]["namespace"]
    assert grouped(group_pod(p)).pod_group.metadata.namespace == "default"


def test_the_group_is_a_valid_pod_group_manifest() -> None:
    job = obj(
        "batch/v1",
        "Job",
        "j",
        "u-j",
        annotations={keys.BATCH_MIN_MEMBER_ANNOTATION: "3"},
        labels={keys.QUEUE_LABEL: "q"},
    )
    manifest = grouped(group_pod(pod(owner=job), [job])).pod_group.to_manifest()
    assert manifest == {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {
            "name": "pg-j-u-j",
            "namespace": NS,
            "labels": {keys.QUEUE_LABEL: "q"},
            "ownerReferences": [
                {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "u-j"}
            ],
        },
        "spec": {
            "minMember": 3,
            "queue": "q",
            "priorityClassName": "train",
            "markUnschedulable": True,
        },
    }
    assert PodGroup.from_manifest(manifest).spec.min_member == 3


def test_a_pod_without_a_name_is_a_caller_error() -> None:
    with pytest.raises(ValueError, match=r"metadata\.name"):
        group_pod({"metadata": {}})


def test_the_inputs_are_not_modified() -> None:
    import copy

    job = obj("batch/v1", "Job", "j", "u-j")
    p = pod(owner=job)
    before = copy.deepcopy((p, job))
    group_pod(p, [job])
    assert (p, job) == before


# --- KAI features read from workloads -------------------------------------------


def test_elastic_pytorchjob_min_member_is_min_replicas() -> None:
    spec: dict[str, Any] = {
        "elasticPolicy": {"minReplicas": 2, "maxReplicas": 6},
        "pytorchReplicaSpecs": {"Master": {"replicas": 1}, "Worker": {"replicas": 5}},
    }
    job = obj("kubeflow.org/v1", "PyTorchJob", "dist", "u-kf", spec=spec)
    assert grouped(group_pod(pod(owner=job), [job])).pod_group.spec.min_member == 2
    # minAvailable still wins, as in KAI's PyTorchJob grouper.
    spec["runPolicy"] = {"schedulingPolicy": {"minAvailable": 3}}
    job = obj("kubeflow.org/v1", "PyTorchJob", "dist", "u-kf", spec=spec)
    assert grouped(group_pod(pod(owner=job), [job])).pod_group.spec.min_member == 3


def test_skip_podgrouper_keeps_the_users_pod_group() -> None:
    job = obj(
        "batch/v1", "Job", "train", "u-job", annotations={keys.SKIP_PODGROUPER_ANNOTATION: "true"}
    )
    result = group_pod(pod(owner=job, annotations={keys.POD_GROUP_ANNOTATION: "mine"}), [job])
    assert isinstance(result, LeftAlone)
    assert result.group_name == "mine"
    on_pod = group_pod(
        pod(annotations={keys.SKIP_PODGROUPER_ANNOTATION: "true", keys.POD_GROUP_ANNOTATION: "x"}),
        [],
    )
    assert isinstance(on_pod, LeftAlone)
    # Only "true" skips.
    job = obj(
        "batch/v1", "Job", "train", "u-job", annotations={keys.SKIP_PODGROUPER_ANNOTATION: "yes"}
    )
    assert isinstance(group_pod(pod(owner=job), [job]), Grouped)


def test_preemption_delay_and_staleness_annotations_reach_the_pod_group() -> None:
    job = obj(
        "batch/v1",
        "Job",
        "train",
        "u-job",
        annotations={
            keys.PREEMPTION_DELAY_ANNOTATION: "5m",
            keys.STALENESS_GRACE_ANNOTATION: "-1s",
        },
    )
    spec = grouped(group_pod(pod(owner=job), [job])).pod_group.spec
    assert spec.preemption_delay_seconds == 300
    assert spec.staleness_grace_seconds is None  # negative: never evicted as stale
    on_pod = grouped(group_pod(pod(annotations={keys.PREEMPTION_DELAY_ANNOTATION: "30s"}), []))
    assert on_pod.pod_group.spec.preemption_delay_seconds == 30


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (keys.PREEMPTION_DELAY_ANNOTATION, "soon"),
        (keys.PREEMPTION_DELAY_ANNOTATION, "-5s"),
        (keys.STALENESS_GRACE_ANNOTATION, "5 minutes"),
    ],
)
def test_bad_duration_annotations_are_warnings_and_ignored(key: str, value: str) -> None:
    job = obj("batch/v1", "Job", "train", "u-job", annotations={key: value})
    result = grouped(group_pod(pod(owner=job), [job]))
    assert result.pod_group.spec.preemption_delay is None
    assert result.pod_group.spec.staleness_grace_period is None
    (warning,) = result.warnings
    assert warning.field == f'metadata.annotations["{key}"]'
    assert value in warning.problem


# --- node pools ---------------------------------------------------------------
def test_the_node_pool_label_goes_from_the_top_owner_else_the_pod_to_the_podgroup() -> None:
    """Only the shard of the PodGroup's pool decides its pods (docs/operator.md)."""
    pool = keys.NODE_POOL_LABEL
    job = obj("batch/v1", "Job", "train", "job-uid", labels={pool: "pool-a"}, spec={})
    # The top owner's label wins over the pod's, as KAI's pod-grouper.
    of_job = grouped(group_pod(pod(owner=job, labels={pool: "pool-b"}), [job])).pod_group
    assert of_job.metadata.labels[pool] == "pool-a"
    plain_job = obj("batch/v1", "Job", "plain", "plain-uid", spec={})
    of_pod = grouped(group_pod(pod(owner=plain_job, labels={pool: "pool-b"}), [plain_job]))
    assert of_pod.pod_group.metadata.labels[pool] == "pool-b"
    unlabelled = grouped(group_pod(pod(owner=plain_job), [plain_job])).pod_group
    assert pool not in unlabelled.metadata.labels  # the default shard's (no label)


def test_the_node_pool_label_key_is_the_one_the_config_names() -> None:
    """KAI's Config may name another key (spec.global.nodePoolLabelKey): the grouper
    copies that label, and not KAI's default one, to the PodGroup."""
    job = obj(
        "batch/v1",
        "Job",
        "train",
        "job-uid",
        labels={"example.com/pool": "pool-a", keys.NODE_POOL_LABEL: "pool-b"},
        spec={},
    )
    group = grouped(group_pod(pod(owner=job), [job], pool_label="example.com/pool")).pod_group
    assert group.metadata.labels["example.com/pool"] == "pool-a"
    assert keys.NODE_POOL_LABEL not in group.metadata.labels
