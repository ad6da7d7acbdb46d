"""KAI's pod-grouper plugin tests (pkg/podgrouper/podgrouper/plugins/<kind>/*_test.go
in KAI's repository), as data: the owner objects as the operators make them in,
the PodGroup out. Each case is named ``<KAI test file>::<KAI test>``; a case that
differs from KAI on purpose says so in KNOWN-DIFFERENCES.md ("The pod-grouper").

The pods are given with their whole owner chain (KAI's tests hand the top owner
to the plugin directly); objects a kind reads besides its owners (a PodGang, a
RayJob's RayCluster, a Knative Revision) are given as ``related``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from kai_py.api import keys
from kai_py.podgrouper.rules import Grouped, GroupingFailed, group_pod, related_objects

NS = "default"
Manifest = dict[str, Any]


def obj(
    api_version: str,
    kind: str,
    name: str,
    uid: str = "",
    *,
    owner: Manifest | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    spec: Mapping[str, Any] | None = None,
    status: Mapping[str, Any] | None = None,
) -> Manifest:
    meta: Manifest = {"name": name, "namespace": NS, "uid": uid or f"{name}-uid"}
    if labels:
        meta["labels"] = dict(labels)
    if annotations:
        meta["annotations"] = dict(annotations)
    if owner is not None:
        meta["ownerReferences"] = [
            {
                "apiVersion": owner["apiVersion"],
                "kind": owner["kind"],
                "name": owner["metadata"]["name"],
                "uid": owner["metadata"]["uid"],
                "controller": True,
            }
        ]
    out: Manifest = {"apiVersion": api_version, "kind": kind, "metadata": meta}
    if spec is not None:
        out["spec"] = dict(spec)
    if status is not None:
        out["status"] = dict(status)
    return out


def pod(
    name: str = "p",
    *,
    owner: Manifest | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    node: str = "",
) -> Manifest:
    manifest = obj("v1", "Pod", name, owner=owner, labels=labels, annotations=annotations)
    manifest["spec"] = {"schedulerName": keys.DEFAULT_SCHEDULER_NAME, "containers": []}
    if node:
        manifest["spec"]["nodeName"] = node
    return manifest


@dataclass
class Case:
    pod: Manifest
    chain: list[Manifest]  # nearest owner first
    related: list[Manifest] = field(default_factory=list)
    name: str | None = None
    owner: str | None = None  # "Kind/name" of the PodGroup's owner
    min_member: int | None = None
    min_sub_group: int | None = None
    priority: str | None = None
    queue: str | None = None
    # name -> (minMember, minSubGroup, parent)
    sub_groups: dict[str, tuple[int | None, int | None, str | None]] | None = None
    pod_sub_group: str | None = "(not checked)"
    fails_on: str | None = None  # a GroupingFailed whose warning names this field
    warns: str | None = None  # a warning (grouped anyway) containing this text
    # subgroup -> (topology, required level, preferred level), None for no constraint
    topologies: dict[str, tuple[str, str | None, str | None] | None] | None = None


def _run(case: Case) -> Grouped | GroupingFailed:
    by_key = {(m["kind"], m["metadata"]["name"]): m for m in case.related}

    def related(_api_version: str, kind: str, name: str) -> Mapping[str, Any] | None:
        return by_key.get((kind, name))

    result = group_pod(case.pod, case.chain, related=related)
    assert isinstance(result, Grouped | GroupingFailed), result
    return result


# --- the owners as the operators make them ----------------------------------------


def lws(policy: str = "LeaderCreated", size: int = 3, **extra: Any) -> Manifest:
    return obj(
        "leaderworkerset.x-k8s.io/v1",
        "LeaderWorkerSet",
        "lws-test",
        spec={"startupPolicy": policy, "leaderWorkerTemplate": {"size": size, **extra}},
    )


def lws_pod(
    owner: Manifest,
    name: str,
    worker: str | None,
    group: str | None = None,
    *,
    node: str = "",
    size: str | None = None,
) -> tuple[Manifest, list[Manifest]]:
    """A LWS pod: the leader's StatefulSet owns leaders; a leader owns its workers' set."""
    sts = obj("apps/v1", "StatefulSet", "lws-test", owner=owner)
    labels = {}
    if worker is not None:
        labels["leaderworkerset.sigs.k8s.io/worker-index"] = worker
    if group is not None:
        labels["leaderworkerset.sigs.k8s.io/group-index"] = group
    annotations = {"leaderworkerset.sigs.k8s.io/size": size} if size else None
    if worker in (None, "0"):
        return pod(name, owner=sts, labels=labels, annotations=annotations, node=node), [sts, owner]
    leader = pod("lws-test-0", owner=sts)
    workers = obj("apps/v1", "StatefulSet", "lws-test-0", owner=leader)
    p = pod(name, owner=workers, labels=labels, annotations=annotations, node=node)
    return p, [workers, leader, sts, owner]


def jobset(
    *rjs: Manifest, annotations: Mapping[str, str] | None = None, order: str | None = None
) -> Manifest:
    spec: Manifest = {"replicatedJobs": list(rjs)}
    if order:
        spec["startupPolicy"] = {"startupPolicyOrder": order}
    return obj(
        "jobset.x-k8s.io/v1alpha2", "JobSet", "js", "uid", annotations=annotations, spec=spec
    )


def rj(
    name: str, replicas: int | None, parallelism: int, min_member: str | None = None
) -> Manifest:
    out: Manifest = {"name": name, "template": {"spec": {"parallelism": parallelism}}}
    if replicas is not None:
        out["replicas"] = replicas
    if min_member is not None:
        out["template"]["metadata"] = {
            "annotations": {keys.BATCH_MIN_MEMBER_ANNOTATION: min_member}
        }
    return out


def jobset_pod(
    js: Manifest, rj_name: str | None, index: str | None
) -> tuple[Manifest, list[Manifest]]:
    job = obj("batch/v1", "Job", f"js-{rj_name}-{index}", owner=js, spec={"parallelism": 1})
    labels = {keys.QUEUE_LABEL: "test-queue"}
    if rj_name is not None:
        labels["jobset.sigs.k8s.io/replicatedjob-name"] = rj_name
    if index is not None:
        labels["jobset.sigs.k8s.io/job-index"] = index
    return pod("p", owner=job, labels=labels), [job, js]


AUTOSCALING_WORKERS = [
    {"replicas": 3, "minReplicas": 2},
    {"replicas": 3, "minReplicas": 1},
]


def raycluster(
    workers: list[Manifest],
    labels: Mapping[str, str] | None = None,
    name: str = "test_ray_cluster",
    owner: Manifest | None = None,
) -> Manifest:
    return obj(
        "ray.io/v1alpha1",
        "RayCluster",
        name,
        "1",
        owner=owner,
        labels=labels,
        spec={"headGroupSpec": {}, "workerGroupSpecs": workers},
    )


def ray_pod(
    owner: Manifest, chain: list[Manifest], group: str | None = None
) -> tuple[Manifest, list[Manifest]]:
    labels = {"ray.io/group": group} if group else None
    return pod("ray-pod", owner=owner, labels=labels), chain


RC = raycluster(AUTOSCALING_WORKERS)
RC_PRIO = raycluster(
    AUTOSCALING_WORKERS, labels={"ray.io/priority-class-name": "ray_train_priority_class"}
)
RC_SUSPENDED = raycluster(
    [{"replicas": 3, "minReplicas": 2}, {"suspended": True, "replicas": 3, "minReplicas": 1}]
)
RC_HOSTS = raycluster(
    [
        {"replicas": 2, "minReplicas": 2, "numOfHosts": 2},
        {"replicas": 3, "minReplicas": 1, "numOfHosts": 3},
    ]
)
RC_NAMED = raycluster(
    [{"groupName": "gpu", "replicas": 2}, {"groupName": "cpu", "replicas": 1, "minReplicas": 1}]
)
RAYJOB = obj(
    "ray.io/v1", "RayJob", "test_ray_job", "2", status={"rayClusterName": "test_ray_cluster"}
)
RAYJOB_CLUSTER = raycluster(AUTOSCALING_WORKERS, owner=RAYJOB)
RAYSERVICE = obj(
    "ray.io/v1",
    "RayService",
    "test_ray_service",
    "3",
    status={"pendingServiceStatus": {"rayClusterName": "test_ray_cluster"}},
)
RAYSERVICE_CLUSTER = raycluster(AUTOSCALING_WORKERS, owner=RAYSERVICE)
SUBMITTER = obj("batch/v1", "Job", "test_ray_job-submitter", owner=RAYJOB)

KSVC = obj("serving.knative.dev/v1", "Service", "test_service", "1")
KCONF = obj("serving.knative.dev/v1", "Configuration", "test_service", "c", owner=KSVC)


def revision(min_scale: str | None) -> Manifest:
    return obj(
        "serving.knative.dev/v1",
        "Revision",
        "revision",
        "2",
        owner=KCONF,
        annotations={"autoscaling.knative.dev/min-scale": min_scale} if min_scale else None,
    )


def knative_pod(
    rev: Manifest, *, labels: Mapping[str, str] | None = None, priority: str | None = None
) -> tuple[Manifest, list[Manifest]]:
    deploy = obj("apps/v1", "Deployment", "revision-deployment", owner=rev)
    rs = obj("apps/v1", "ReplicaSet", "revision-deployment-abc", owner=deploy)
    p = pod(
        "pod",
        owner=rs,
        labels={
            "serving.knative.dev/revision": "revision",
            keys.QUEUE_LABEL: "test_queue",
            **(labels or {}),
        },
    )
    if priority:
        p["spec"]["priorityClassName"] = priority
    return p, [rs, deploy, rev, KCONF, KSVC]


SPARK_LABELS = {"spark-app-name": "my-app", "spark-app-selector": "spark-0123"}
DRIVER = pod("driver", labels=SPARK_LABELS)
SPARK_APP = obj("sparkoperator.k8s.io/v1beta2", "SparkApplication", "my-app")

PCS = obj("grove.io/v1alpha1", "PodCliqueSet", "pcs", labels={keys.QUEUE_LABEL: "q-grove"})
CLIQUE = obj("grove.io/v1alpha1", "PodClique", "pcs-0-prefill", owner=PCS)
GANG = obj(
    "scheduler.grove.io/v1alpha1",
    "PodGang",
    "pcs-0",
    owner=PCS,
    spec={
        "priorityClassName": "inference",
        "podgroups": [
            {
                "name": "pcs-0-prefill",
                "minReplicas": 2,
                "podReferences": [
                    {"namespace": NS, "name": "prefill-0"},
                    {"namespace": NS, "name": "prefill-1"},
                ],
            },
            {
                "name": "pcs-0-decode",
                "minReplicas": 1,
                "podReferences": [{"namespace": NS, "name": "decode-0"}],
            },
        ],
    },
)
GANG_HIERARCHY = obj(
    "scheduler.grove.io/v1alpha1",
    "PodGang",
    "pgs1",
    owner=PCS,
    annotations={"grove.io/topology-name": "test-topology"},
    spec={
        "topologyConstraint": {"packConstraint": {"preferred": "rack", "required": "zone"}},
        "topologyConstraintGroupConfigs": [
            {
                "name": "group1",
                "podGroupNames": ["pg1", "pg2"],
                "topologyConstraint": {"packConstraint": {"preferred": "node", "required": "rack"}},
            }
        ],
        "podgroups": [
            {
                "name": "pg1",
                "topologyConstraint": {"packConstraint": {"preferred": "node", "required": ""}},
                "minReplicas": 2,
                "podReferences": [{"namespace": NS, "name": "pod1"}],
            },
            {
                "name": "pg2",
                "topologyConstraint": {"packConstraint": {"preferred": "", "required": "node"}},
                "minReplicas": 3,
                "podReferences": [{"namespace": NS, "name": "pod2"}],
            },
        ],
    },
)
GANG_MISSING_CLIQUE = obj(
    "scheduler.grove.io/v1alpha1",
    "PodGang",
    "pgs1",
    owner=PCS,
    spec={
        "topologyConstraintGroupConfigs": [{"name": "group1", "podGroupNames": ["pg1", "pg2"]}],
        "podgroups": [
            {"name": "pg1", "minReplicas": 2, "podReferences": [{"namespace": NS, "name": "pod1"}]}
        ],
    },
)
DGD = obj(
    "nvidia.com/v1alpha1",
    "DynamoGraphDeployment",
    "dgd",
    labels={keys.QUEUE_LABEL: "q-dynamo", keys.PRIORITY_CLASS_LABEL: "build"},
)
PCS_DYNAMO = obj("grove.io/v1alpha1", "PodCliqueSet", "pcs", owner=DGD)
CLIQUE_DYNAMO = obj("grove.io/v1alpha1", "PodClique", "pcs-0-prefill", owner=PCS_DYNAMO)

NOTEBOOK = obj("kubeflow.org/v1beta1", "Notebook", "nb")
NOTEBOOK_STS = obj("apps/v1", "StatefulSet", "nb", owner=NOTEBOOK)

TRAINJOB = obj(
    "trainer.kubeflow.org/v1alpha1", "TrainJob", "tj", labels={keys.QUEUE_LABEL: "q-train"}
)
TJ_JOBSET = obj(
    "jobset.x-k8s.io/v1alpha2",
    "JobSet",
    "tj",
    "js-uid",
    owner=TRAINJOB,
    spec={"replicatedJobs": [rj("node", 2, 1)]},
)
TJ_JOB = obj("batch/v1", "Job", "tj-node-0", owner=TJ_JOBSET)

WORKFLOW = obj("argoproj.io/v1alpha1", "Workflow", "wf", labels={keys.QUEUE_LABEL: "q-argo"})
PIPELINERUN = obj("tekton.dev/v1", "PipelineRun", "pr")
TASKRUN = obj("tekton.dev/v1", "TaskRun", "pr-build", owner=PIPELINERUN)
VMI = obj("kubevirt.io/v1", "VirtualMachineInstance", "vmi")
SWF = obj("kubeflow.org/v1beta1", "ScheduledWorkflow", "swf")
SWF_WF = obj("argoproj.io/v1alpha1", "Workflow", "swf-run", owner=SWF)
SELDON = obj("machinelearning.seldon.io/v1", "SeldonDeployment", "sd")
SELDON_DEPLOY = obj("apps/v1", "Deployment", "sd-model", owner=SELDON)
SELDON_RS = obj("apps/v1", "ReplicaSet", "sd-model-abc", owner=SELDON_DEPLOY)
DEVWS = obj("workspace.devfile.io/v1alpha2", "DevWorkspace", "ws")
DEVWS_DEPLOY = obj("apps/v1", "Deployment", "ws", owner=DEVWS)
DEVWS_RS = obj("apps/v1", "ReplicaSet", "ws-abc", owner=DEVWS_DEPLOY)
AML = obj(
    "amlarc.azureml.com/v1alpha1",
    "AmlJob",
    "aml",
    spec={"job": {"options": {"envs": {"AZUREML_NODE_COUNT": 4}}}},
)
AML_BAD = obj("amlarc.azureml.com/v1alpha1", "AmlJob", "aml", spec={})
UNKNOWN = obj("example.com/v1", "Widget", "w")


def _lws(
    policy: str,
    size: int,
    name: str,
    worker: str | None,
    group: str | None = None,
    node: str = "",
    pod_size: str | None = None,
    **extra: Any,
) -> tuple[Manifest, list[Manifest]]:
    return lws_pod(lws(policy, size, **extra), name, worker, group, node=node, size=pod_size)


def case(built: tuple[Manifest, list[Manifest]], **expected: Any) -> Case:
    return Case(built[0], built[1], **expected)


SG = dict[str, tuple[int | None, int | None, str | None]]
LEADER_WORKERS: SG = {"leader": (1, None, None), "workers": (2, None, None)}
# 5 pods in segments of 2: the leader and workers 1-2 in segment 0, workers 3-4 in segment 1.
SEGMENTED_5_BY_2: SG = {
    "segment-0": (None, 2, None),
    "segment-1": (2, None, None),
    "leader": (1, None, "segment-0"),
    "workers": (2, None, "segment-0"),
}
LEADER_EXCLUDED_2 = {"subGroupSize": 2, "subGroupPolicyType": "LeaderExcluded"}
LEADER_EXCLUDED_5_BY_2: SG = {
    "leader": (1, None, None),
    "segment-0": (2, None, None),
    "segment-1": (2, None, None),
}


def worker_template(annotations: Mapping[str, str]) -> Manifest:
    return {"metadata": {"annotations": dict(annotations)}}


def pytorch(
    masters: int,
    workers: int,
    worker_annotations: Mapping[str, str],
    *,
    annotations: Mapping[str, str] | None = None,
    min_replicas: int | None = None,
) -> Manifest:
    """A PyTorchJob with a segment annotation on its Worker template (KAI's
    getPytorchJobWithSegments / getPytorchJobWithSegmentTopology)."""
    spec: Manifest = {
        "pytorchReplicaSpecs": {
            "Master": {"replicas": masters},
            "Worker": {
                "replicas": workers,
                "template": {"metadata": {"annotations": dict(worker_annotations)}},
            },
        }
    }
    if min_replicas is not None:
        spec["elasticPolicy"] = {"minReplicas": min_replicas}
    return obj(
        "kubeflow.org/v1", "PyTorchJob", "test-job-segments", annotations=annotations, spec=spec
    )


def pytorch_pod(
    job: Manifest, role: str, index: str, annotations: Mapping[str, str] | None = None
) -> tuple[Manifest, list[Manifest]]:
    labels = {"training.kubeflow.org/replica-type": role, "training.kubeflow.org/replica-index": index}
    name = f"test-job-{role}-{index}"
    return pod(name, owner=job, labels=labels, annotations=annotations), [job]


SEG2 = {"kai.scheduler/segment-size": "2"}
PYTORCH_4_BY_2: SG = {
    "master": (1, None, None),
    "worker": (None, 2, None),
    "worker-0": (2, None, "worker"),
    "worker-1": (2, None, "worker"),
}


def _seg_topology(
    required: str | None, preferred: str | None, topology_on_job: bool = False, topology: str = "cluster-topology"
) -> Manifest:
    worker = dict(SEG2)
    if required:
        worker["kai.scheduler/segment-topology-required-placement"] = required
    if preferred:
        worker["kai.scheduler/segment-topology-preferred-placement"] = preferred
    if topology and not topology_on_job:
        worker["kai.scheduler/topology"] = topology
    on_job = {"kai.scheduler/topology": topology} if topology and topology_on_job else None
    return pytorch(1, 4, worker, annotations=on_job)


CASES: dict[str, Case] = {
    # --- leaderworkerset/lws_grouper_test.go
    "lws_grouper_test.go::TestGetPodGroupMetadata_LeaderCreated": case(
        _lws("LeaderCreated", 3, "lws-test-0-1", None),
        owner="LeaderWorkerSet/lws-test",
        name="pg-lws-test-lws-test-uid",
        min_member=3,
        sub_groups=LEADER_WORKERS,
        pod_sub_group="workers",
        priority="train",
    ),
    "lws_grouper_test.go::TestGetPodGroupMetadata_LeaderReady_LeaderPod": case(
        _lws("LeaderReady", 5, "lws-ready-0-0", "0"),
        min_member=1,
        sub_groups={"leader": (1, None, None)},
        pod_sub_group="leader",
    ),
    "lws_grouper_test.go::TestGetPodGroupMetadata_LeaderReady_WorkerPod": case(
        _lws("LeaderReady", 5, "lws-ready-0-2", "2", "0", node="worker-node", pod_size="5"),
        min_member=5,
        sub_groups={"leader": (1, None, None), "workers": (4, None, None)},
        pod_sub_group="workers",
        name="pg-lws-test-lws-test-uid-group-0",
    ),
    "lws_grouper_test.go::TestGetPodGroupMetadata_GroupIndex_Label": case(
        _lws("LeaderCreated", 2, "lws-grouped-1-0", None, "1"),
        name="pg-lws-test-lws-test-uid-group-1",
        pod_sub_group="workers",
    ),
    "lws_grouper_test.go::TestGetPodGroupMetadata_SubGroups_LeaderPod": case(
        _lws("LeaderCreated", 3, "lws-subgroups-0-0", "0"),
        sub_groups=LEADER_WORKERS,
        pod_sub_group="leader",
    ),
    "lws_grouper_test.go::TestGetPodGroupMetadata_SubGroups_WorkerPod": case(
        _lws("LeaderCreated", 3, "lws-subgroups-0-1", "1"),
        sub_groups=LEADER_WORKERS,
        pod_sub_group="workers",
    ),
    "lws_grouper_test.go::TestGetPodGroupMetadata_SubGroups_OnlyLeader": case(
        _lws("LeaderCreated", 1, "lws-single-0-0", "0"),
        min_member=1,
        sub_groups={"leader": (1, None, None)},
        pod_sub_group="leader",
    ),
    "lws_grouper_test.go::TestGetPodGroupMetadata_NegativeWorkerIndex": case(
        _lws("LeaderCreated", 3, "lws-invalid-0-1", "-1"),
        fails_on='metadata.labels["leaderworkerset.sigs.k8s.io/worker-index"]',
    ),
    "lws_grouper_test.go::TestBuildSubGroups_Segmentation_ExceedsMaxAllowedSegmentation": case(
        _lws("LeaderCreated", 20_003, "lws-seg-cap-0-0", "0", subGroupPolicy={"subGroupSize": 2}),
        fails_on="spec.leaderWorkerTemplate.subGroupPolicy.subGroupSize",
    ),
    "lws_grouper_test.go::TestBuildSubGroups_Segmentation_Divisible_LeaderPod": case(
        _lws("LeaderCreated", 5, "lws-seg-0-0", "0", subGroupPolicy={"subGroupSize": 2}),
        sub_groups=SEGMENTED_5_BY_2,
        pod_sub_group="leader",
        min_member=5,
    ),
    "lws_grouper_test.go::TestBuildSubGroups_Segmentation_Divisible_WorkerInFirstSegment": case(
        _lws("LeaderCreated", 5, "lws-seg-0-1", "1", subGroupPolicy={"subGroupSize": 2}),
        sub_groups=SEGMENTED_5_BY_2,
        pod_sub_group="workers",
    ),
    "lws_grouper_test.go::TestBuildSubGroups_Segmentation_Divisible_WorkerInLaterSegment": case(
        _lws("LeaderCreated", 5, "lws-seg-0-3", "3", subGroupPolicy={"subGroupSize": 2}),
        sub_groups=SEGMENTED_5_BY_2,
        pod_sub_group="segment-1",
    ),
    "lws_grouper_test.go::TestBuildSubGroups_Segmentation_NotDivisible_LeaderPod": case(
        _lws("LeaderCreated", 4, "lws-seg-0-0", "0", subGroupPolicy={"subGroupSize": 2}),
        sub_groups={
            "segment-0": (None, 2, None),
            "segment-1": (2, None, None),
            "leader": (1, None, "segment-0"),
            "workers": (1, None, "segment-0"),
        },
        pod_sub_group="leader",
    ),
    "lws_grouper_test.go::TestBuildSubGroups_Segmentation_LeaderExcluded_WorkerInFirstSegment": case(
        _lws("LeaderCreated", 5, "lws-seg-0-1", "1", subGroupPolicy=LEADER_EXCLUDED_2),
        sub_groups=LEADER_EXCLUDED_5_BY_2,
        pod_sub_group="segment-0",
    ),
    "lws_grouper_test.go::TestBuildSubGroups_Segmentation_LeaderExcluded_WorkerInLaterSegment": case(
        _lws("LeaderCreated", 5, "lws-seg-0-3", "3", subGroupPolicy=LEADER_EXCLUDED_2),
        sub_groups=LEADER_EXCLUDED_5_BY_2,
        pod_sub_group="segment-1",
    ),
    "lws_grouper_test.go::TestBuildSubGroups_Segmentation_TopologyPreferredOnly_LeaderIncluded_NotDivisible": case(
        _lws(
            "LeaderCreated",
            5,
            "lws-seg-0-1",
            "1",
            subGroupPolicy={"subGroupSize": 3},
            workerTemplate=worker_template(
                {
                    "kai.scheduler/topology": "rack",
                    "kai.scheduler/segment-topology-preferred-placement": "node",
                }
            ),
        ),
        sub_groups={
            "segment-0": (None, 2, None),
            "segment-1": (2, None, None),
            "leader": (1, None, "segment-0"),
            "workers": (2, None, "segment-0"),
        },
        pod_sub_group="workers",
        topologies={
            "segment-0": ("rack", None, "node"),
            "segment-1": ("rack", None, "node"),
            "leader": None,
            "workers": None,
        },
    ),
    "lws_grouper_test.go::TestBuildSubGroups_Segmentation_TopologyBothPlacementKeys_LeaderExcluded": case(
        _lws(
            "LeaderCreated",
            5,
            "lws-seg-0-1",
            "1",
            subGroupPolicy=LEADER_EXCLUDED_2,
            workerTemplate=worker_template(
                {
                    "kai.scheduler/topology": "rack",
                    "kai.scheduler/segment-topology-preferred-placement": "node",
                    "kai.scheduler/segment-topology-required-placement": "rack-unit",
                }
            ),
        ),
        sub_groups=LEADER_EXCLUDED_5_BY_2,
        pod_sub_group="segment-0",
        topologies={
            "leader": None,
            "segment-0": ("rack", "rack-unit", "node"),
            "segment-1": ("rack", "rack-unit", "node"),
        },
    ),
    "lws_grouper_test.go::TestBuildSubGroups_SegmentSizeFromWorkerTemplateAnnotation": case(
        lws_pod(
            {
                **lws(
                    "LeaderCreated",
                    5,
                    workerTemplate=worker_template(
                        {
                            "kai.scheduler/segment-size": "2",
                            "kai.scheduler/segment-topology-required-placement": "rack-unit",
                            "kai.scheduler/segment-topology-preferred-placement": "node",
                        }
                    ),
                ),
                "metadata": {
                    "name": "lws-test",
                    "namespace": NS,
                    "uid": "lws-test-uid",
                    "annotations": {"kai.scheduler/topology": "rack"},
                },
            },
            "lws-seg-0-1",
            "1",
        ),
        sub_groups=SEGMENTED_5_BY_2,
        pod_sub_group="workers",
        topologies={
            "segment-0": ("rack", "rack-unit", "node"),
            "segment-1": ("rack", "rack-unit", "node"),
            "leader": None,
            "workers": None,
        },
    ),
    "lws_grouper_test.go::(kai-py) a segment size of 1 is refused": case(
        _lws("LeaderCreated", 5, "lws-seg-0-1", "1", subGroupPolicy={"subGroupSize": 1}),
        fails_on="spec.leaderWorkerTemplate.subGroupPolicy.subGroupSize",
    ),
    "lws_grouper_test.go::(kai-py) LeaderExcluded with workers that do not divide": case(
        _lws("LeaderCreated", 4, "lws-seg-0-1", "1", subGroupPolicy=LEADER_EXCLUDED_2),
        fails_on="spec.leaderWorkerTemplate.subGroupPolicy.subGroupPolicyType",
    ),
    "lws_grouper_test.go::(kai-py) one segment holds the whole group": case(
        _lws("LeaderCreated", 3, "lws-seg-0-2", "2", subGroupPolicy={"subGroupSize": 2}),
        sub_groups={
            "segment-0": (None, 2, None),
            "leader": (1, None, "segment-0"),
            "workers": (2, None, "segment-0"),
        },
        pod_sub_group="workers",
    ),
    # --- jobset/jobset_grouper_test.go
    "jobset_grouper_test.go::TestSingleReplicatedJobSingleReplica": case(
        jobset_pod(jobset(rj("worker", 1, 4)), "worker", "0"),
        name="pg-js-uid",
        owner="JobSet/js",
        min_sub_group=1,
        queue="test-queue",
        sub_groups={"worker": (None, 1, None), "worker-replica-0": (4, None, "worker")},
        pod_sub_group="worker-replica-0",
    ),
    "jobset_grouper_test.go::TestSingleReplicatedJobMultipleReplicas": case(
        jobset_pod(jobset(rj("worker", 3, 4)), "worker", "2"),
        sub_groups={
            "worker": (None, 3, None),
            **{f"worker-replica-{i}": (4, None, "worker") for i in range(3)},
        },
        pod_sub_group="worker-replica-2",
    ),
    "jobset_grouper_test.go::TestMultipleReplicatedJobsAnyOrder": case(
        jobset_pod(jobset(rj("leader", 1, 1), rj("worker", 2, 4), order="AnyOrder"), "worker", "0"),
        min_sub_group=2,
    ),
    "jobset_grouper_test.go::TestStartupPolicyInOrderRootMinSubGroup": case(
        jobset_pod(jobset(rj("leader", 1, 1), rj("worker", 2, 4), order="InOrder"), "leader", "0"),
        min_sub_group=1,
    ),
    "jobset_grouper_test.go::TestJobSetAnnotationOverridesRoot": case(
        jobset_pod(
            jobset(
                rj("a", 1, 1),
                rj("b", 1, 1),
                rj("c", 1, 1),
                annotations={keys.BATCH_MIN_MEMBER_ANNOTATION: "2"},
            ),
            "a",
            "0",
        ),
        min_sub_group=2,
    ),
    "jobset_grouper_test.go::TestJobSetAnnotationClampedToReplicatedJobCount": case(
        jobset_pod(
            jobset(
                rj("a", 1, 1), rj("b", 1, 1), annotations={keys.BATCH_MIN_MEMBER_ANNOTATION: "9"}
            ),
            "a",
            "0",
        ),
        min_sub_group=2,
    ),
    "jobset_grouper_test.go::TestJobSetAnnotationWinsOverInOrder": case(
        jobset_pod(
            jobset(
                rj("a", 1, 1),
                rj("b", 1, 1),
                order="InOrder",
                annotations={keys.BATCH_MIN_MEMBER_ANNOTATION: "2"},
            ),
            "a",
            "0",
        ),
        min_sub_group=2,
    ),
    "jobset_grouper_test.go::TestJobSetAnnotationUnparseable": case(
        jobset_pod(
            jobset(rj("a", 1, 1), annotations={keys.BATCH_MIN_MEMBER_ANNOTATION: "x"}), "a", "0"
        ),
        fails_on=f'metadata.annotations["{keys.BATCH_MIN_MEMBER_ANNOTATION}"]',
    ),
    "jobset_grouper_test.go::TestJobSetAnnotationBelowOne": case(
        jobset_pod(
            jobset(rj("a", 1, 1), annotations={keys.BATCH_MIN_MEMBER_ANNOTATION: "0"}), "a", "0"
        ),
        fails_on=f'metadata.annotations["{keys.BATCH_MIN_MEMBER_ANNOTATION}"]',
    ),
    "jobset_grouper_test.go::TestTemplateAnnotationOverridesLeafMinMember": case(
        jobset_pod(jobset(rj("w", 1, 4, "2")), "w", "0"),
        sub_groups={"w": (None, 1, None), "w-replica-0": (2, None, "w")},
    ),
    "jobset_grouper_test.go::TestTemplateAnnotationGreaterThanParallelismAccepted": case(
        jobset_pod(jobset(rj("w", 1, 4, "8")), "w", "0"),
        sub_groups={"w": (None, 1, None), "w-replica-0": (8, None, "w")},
    ),
    "jobset_grouper_test.go::TestTemplateAnnotationUnparseable": case(
        jobset_pod(jobset(rj("w", 1, 4, "abc")), "w", "0"),
        fails_on="spec.replicatedJobs[0].template.metadata.annotations",
    ),
    "jobset_grouper_test.go::TestTemplateAnnotationBelowOne": case(
        jobset_pod(jobset(rj("w", 1, 4, "0")), "w", "0"),
        fails_on="spec.replicatedJobs[0].template.metadata.annotations",
    ),
    "jobset_grouper_test.go::TestPodMissingReplicatedJobLabel": case(
        jobset_pod(jobset(rj("w", 1, 4)), None, "0"),
        fails_on='metadata.labels["jobset.sigs.k8s.io/replicatedjob-name"]',
    ),
    "jobset_grouper_test.go::TestPodMissingJobIndexLabel": case(
        jobset_pod(jobset(rj("w", 1, 4)), "w", None),
        fails_on='metadata.labels["jobset.sigs.k8s.io/job-index"]',
    ),
    "jobset_grouper_test.go::TestPodRoutingFindsCorrectLeaf": case(
        jobset_pod(jobset(rj("leader", 1, 1), rj("worker", 3, 2)), "worker", "1"),
        pod_sub_group="worker-replica-1",
    ),
    "jobset_grouper_test.go::TestEmptyReplicatedJobs": case(
        jobset_pod(jobset(), "w", "0"), fails_on="spec.replicatedJobs"
    ),
    "jobset_grouper_test.go::TestReplicasDefaultsToOne": case(
        jobset_pod(jobset(rj("w", None, 2)), "w", "0"),
        sub_groups={"w": (None, 1, None), "w-replica-0": (2, None, "w")},
    ),
    # --- ray/ray_grouper_test.go
    "ray_grouper_test.go::TestGetPodGroupMetadata_RayCluster": case(
        ray_pod(RC, [RC]),
        owner="RayCluster/test_ray_cluster",
        name="pg-test_ray_cluster-1",
        min_member=4,
        priority="train",
        queue=keys.DEFAULT_QUEUE,
    ),
    "ray_grouper_test.go::TestGetPodGroupMetadata_RayCluster_NonAutoScaling": case(
        ray_pod(RC_PRIO, [RC_PRIO]), min_member=4, priority="ray_train_priority_class"
    ),
    "ray_grouper_test.go::TestGetPodGroupMetadata_RayCluster_SuspendedWorkers": case(
        ray_pod(RC_SUSPENDED, [RC_SUSPENDED]),
        min_member=3,
        sub_groups={"headgroup": (1, None, None), "worker-group-0": (2, None, None)},
    ),
    "ray_grouper_test.go::TestGetPodGroupMetadata_RayCluster_NumOfHosts": case(
        ray_pod(RC_HOSTS, [RC_HOSTS]), min_member=8
    ),
    "ray_grouper_test.go::TestGetPodGroupMetadata_RayJob_v1": case(
        ray_pod(RAYJOB_CLUSTER, [RAYJOB_CLUSTER, RAYJOB], "worker-group-0"),
        related=[RAYJOB_CLUSTER],
        owner="RayJob/test_ray_job",
        name="pg-test_ray_job-2",
        min_member=4,
        pod_sub_group="worker-group-0",
    ),
    "ray_grouper_test.go::TestGetPodGroupMetadata_RayService": case(
        ray_pod(RAYSERVICE_CLUSTER, [RAYSERVICE_CLUSTER, RAYSERVICE], "headgroup"),
        related=[RAYSERVICE_CLUSTER],
        owner="RayService/test_ray_service",
        name="pg-test_ray_service-3",
        min_member=4,
        pod_sub_group="headgroup",
    ),
    "ray_grouper_test.go::TestGetPodGroupMetadata_RayCluster_SubGroups_Default": case(
        ray_pod(RC, [RC], "worker-group-1"),
        sub_groups={
            "headgroup": (1, None, None),
            "worker-group-0": (2, None, None),
            "worker-group-1": (1, None, None),
        },
        pod_sub_group="worker-group-1",
    ),
    "ray_grouper_test.go::TestGetPodGroupMetadata_RayCluster_SubGroups_NamedWorkerGroups": case(
        ray_pod(RC_NAMED, [RC_NAMED], "gpu"),
        min_member=4,
        sub_groups={"headgroup": (1, None, None), "gpu": (2, None, None), "cpu": (1, None, None)},
        pod_sub_group="gpu",
    ),
    # --- knative/knative_test.go
    "knative_test.go::TestGetPodGroupMetadata_MinScale/min-scale=3": case(
        knative_pod(revision("3")),
        name="pg-revision-2",
        owner="Revision/revision",
        priority="inference",
        queue="test_queue",
        min_member=3,
    ),
    "knative_test.go::TestGetPodGroupMetadata_MinScale/min-scale=0": case(
        knative_pod(revision("0")), name="pg-revision-2", min_member=0
    ),
    "knative_test.go::TestGetPodGroupMetadataBackwardsCompatibility/one pod service - default gang schedule": case(
        knative_pod(revision(None)), name="pg-revision-2", min_member=1, priority="inference"
    ),
    "knative_test.go::TestGetPodGroupMetadataBackwardsCompatibility/priority class name set in pod": case(
        knative_pod(revision(None), priority="high"), priority="high"
    ),
    # --- spark/spark_test.go, podjob/podjob_test.go
    "spark_test.go::TestGetPodGroupMetadata": case(
        (pod("executor-1", owner=DRIVER, labels=SPARK_LABELS), [DRIVER]),
        name="spark-0123",
        owner="Pod/driver",
        min_member=1,
        priority="train",
    ),
    "podjob_test.go::TestGetPodGroupMetadata_SparkPod_GroupNameEqualsSelector": case(
        (pod("driver", labels=SPARK_LABELS), []), name="spark-0123", owner="Pod/driver"
    ),
    "podjob_test.go::TestGetPodGroupMetadata_PodWithOnlySparkAppSelector_UsesDefaultGrouper": case(
        (pod("p", labels={"spark-app-selector": "spark-0123"}), []), name="pg-p-p-uid"
    ),
    "podjob_test.go::TestGetPodGroupMetadata_NonSparkDefaultPriorityIsTrain": case(
        (pod("p"), []), name="pg-p-p-uid", owner="Pod/p", min_member=1, priority="train"
    ),
    # kai-py: a SparkApplication's driver joins its executors' group (KNOWN-DIFFERENCES.md)
    "spark_test.go::TestGetPodGroupMetadata (driver owned by a SparkApplication)": case(
        (pod("driver", owner=SPARK_APP, labels=SPARK_LABELS), [SPARK_APP]),
        name="spark-0123",
        owner="SparkApplication/my-app",
        min_member=1,
    ),
    # --- grove/grove_grouper_test.go
    "grove_grouper_test.go::TestGetPodGroupMetadata": case(
        (pod("prefill-1", owner=CLIQUE, labels={"grove.io/podgang": "pcs-0"}), [CLIQUE, PCS]),
        related=[GANG],
        owner="PodGang/pcs-0",
        name="pg-pcs-0-pcs-0-uid",
        min_member=3,
        priority="inference",
        queue="q-grove",
        sub_groups={"pcs-0-prefill": (2, None, None), "pcs-0-decode": (1, None, None)},
        pod_sub_group="pcs-0-prefill",
    ),
    "grove_grouper_test.go::TestParseGroveSubGroup_CrossNamespaceReferenceRejected": case(
        (pod("prefill-1", owner=CLIQUE, labels={"grove.io/podgang": "pcs-0"}), [CLIQUE, PCS]),
        related=[
            {
                **GANG,
                "spec": {
                    "podgroups": [
                        {
                            "name": "x",
                            "minReplicas": 1,
                            "podReferences": [{"namespace": "other", "name": "prefill-1"}],
                        }
                    ]
                },
            }
        ],
        fails_on="spec.podgroups[0].podReferences",
    ),
    "grove_grouper_test.go::TestParseGroveSubGroup_NegativeMinAvailable": case(
        (pod("prefill-1", owner=CLIQUE, labels={"grove.io/podgang": "pcs-0"}), [CLIQUE, PCS]),
        related=[
            {**GANG, "spec": {"podgroups": [{"name": "x", "minReplicas": -1, "podReferences": []}]}}
        ],
        fails_on="spec.podgroups[0].minReplicas",
    ),
    "grove_grouper_test.go::TestGetPodGroupMetadata_WithTopologyHierarchy": case(
        (pod("pod1", owner=CLIQUE, labels={"grove.io/podgang": "pgs1"}), [CLIQUE, PCS]),
        related=[GANG_HIERARCHY],
        min_member=5,
        sub_groups={
            "group1": (None, 2, None),
            "pg1": (2, None, "group1"),
            "pg2": (3, None, "group1"),
        },
        topologies={
            "group1": ("test-topology", "rack", "node"),
            "pg1": ("test-topology", None, "node"),
            "pg2": ("test-topology", "node", None),
        },
        pod_sub_group="pg1",
    ),
    "grove_grouper_test.go::TestGetPodGroupMetadata_ConfigReferencesNonexistentPodGroup": case(
        (pod("pod1", owner=CLIQUE, labels={"grove.io/podgang": "pgs1"}), [CLIQUE, PCS]),
        related=[GANG_MISSING_CLIQUE],
        sub_groups={"group1": (None, 2, None), "pg1": (2, None, "group1")},
    ),
    "grove_grouper_test.go::(no label)": case(
        (pod("prefill-1", owner=CLIQUE), [CLIQUE, PCS]),
        fails_on='metadata.labels["grove.io/podgang"]',
    ),
    # --- hub.go: DynamoGraphDeployment skipped, its PodCliqueSet grouped by Grove's grouper
    "skiptopowner_test.go::TestSkipTopOwnerGrouper (DynamoGraphDeployment)": case(
        (
            pod("prefill-0", owner=CLIQUE_DYNAMO, labels={"grove.io/podgang": "pcs-0"}),
            [CLIQUE_DYNAMO, PCS_DYNAMO, DGD],
        ),
        related=[GANG],
        owner="PodGang/pcs-0",
        min_member=3,
        queue="q-dynamo",
        priority="build",
        pod_sub_group="pcs-0-prefill",
    ),
    # --- kubeflow/pytorch/pytorch_grouper_test.go (segments)
    "kubeflow/pytorch/pytorch_grouper_test.go::TestGetPodGroupMetadata_Segments_HappyFlow_4Workers_2PerSegment/master-pod": case(
        pytorch_pod(pytorch(1, 4, SEG2), "master", "0", SEG2),
        min_member=5,
        sub_groups=PYTORCH_4_BY_2,
        pod_sub_group="master",
    ),
    "kubeflow/pytorch/pytorch_grouper_test.go::TestGetPodGroupMetadata_Segments_HappyFlow_4Workers_2PerSegment/worker-0": case(
        pytorch_pod(pytorch(1, 4, SEG2), "worker", "0", SEG2),
        sub_groups=PYTORCH_4_BY_2,
        pod_sub_group="worker-0",
    ),
    "kubeflow/pytorch/pytorch_grouper_test.go::TestGetPodGroupMetadata_Segments_HappyFlow_4Workers_2PerSegment/worker-2": case(
        pytorch_pod(pytorch(1, 4, SEG2), "worker", "2", SEG2),
        pod_sub_group="worker-1",
    ),
    "kubeflow/pytorch/pytorch_grouper_test.go::TestGetPodGroupMetadata_Segments_5Workers_2PerSegment": case(
        pytorch_pod(pytorch(1, 5, SEG2), "worker", "0", SEG2),
        min_member=6,
        sub_groups={
            "master": (1, None, None),
            "worker": (None, 3, None),
            "worker-0": (2, None, "worker"),
            "worker-1": (2, None, "worker"),
            "worker-2": (1, None, "worker"),
        },
        pod_sub_group="worker-0",
    ),
    "kubeflow/pytorch/pytorch_grouper_test.go::TestGetPodGroupMetadata_Segments_5Workers_2PerSegment/worker-4": case(
        pytorch_pod(pytorch(1, 5, SEG2), "worker", "4", SEG2),
        pod_sub_group="worker-2",
    ),
    "kubeflow/pytorch/pytorch_grouper_test.go::TestGetPodGroupMetadata_Segments_ElasticMinReplicas": case(
        pytorch_pod(pytorch(1, 8, SEG2, min_replicas=5), "worker", "0", SEG2),
        min_member=5,
        sub_groups={
            "master": (1, None, None),
            "worker": (None, 4, None),
            "worker-0": (2, None, "worker"),
            "worker-1": (2, None, "worker"),
            "worker-2": (0, None, "worker"),
            "worker-3": (0, None, "worker"),
        },
    ),
    "kubeflow/pytorch/pytorch_grouper_test.go::TestGetPodGroupMetadata_Segments_MalformedAnnotation": case(
        pytorch_pod(
            pytorch(1, 4, {"kai.scheduler/segment-size": "invalid"}),
            "worker",
            "0",
            {"kai.scheduler/segment-size": "not-a-number"},
        ),
        fails_on='metadata.annotations["kai.scheduler/segment-size"]',
    ),
    "kubeflow/pytorch/pytorch_grouper_test.go::TestGetPodGroupMetadata_Segments_MalformedAnnotationInTemplate": case(
        pytorch_pod(pytorch(1, 4, {"kai.scheduler/segment-size": "invalid-size"}), "worker", "0"),
        fails_on='spec.pytorchReplicaSpecs.Worker.template.metadata.annotations["kai.scheduler/segment-size"]',
    ),
    "kubeflow/pytorch/pytorch_grouper_test.go::TestGetPodGroupMetadata_Segments_SegmentSizeFromPodTemplate": case(
        pytorch_pod(pytorch(1, 4, SEG2), "worker", "1"),
        sub_groups=PYTORCH_4_BY_2,
        pod_sub_group="worker-0",
    ),
    "kubeflow/pytorch/pytorch_grouper_test.go::TestGetPodGroupMetadata_Segments_NegativeReplicaIndex": case(
        pytorch_pod(pytorch(1, 4, SEG2), "worker", "-1", SEG2),
        fails_on='metadata.labels["training.kubeflow.org/replica-index"]',
    ),
    "kubeflow/pytorch/pytorch_grouper_test.go::TestGetPodGroupMetadata_Segments_ExceedsMaxAllowedSegmentation": case(
        pytorch_pod(
            pytorch(1, 10_001, {"kai.scheduler/segment-size": "1"}),
            "worker",
            "0",
            {"kai.scheduler/segment-size": "1"},
        ),
        fails_on='metadata.annotations["kai.scheduler/segment-size"]',
    ),
    "kubeflow/pytorch/pytorch_grouper_test.go::TestGetPodGroupMetadata_Segments_WithTopologyConstraints": case(
        pytorch_pod(_seg_topology("rack", "node"), "worker", "0"),
        topologies={
            "master": None,
            "worker": None,
            "worker-0": ("cluster-topology", "rack", "node"),
            "worker-1": ("cluster-topology", "rack", "node"),
        },
    ),
    "kubeflow/pytorch/pytorch_grouper_test.go::TestGetPodGroupMetadata_Segments_TopologyFromRootAnnotation": case(
        pytorch_pod(_seg_topology("rack", None, topology_on_job=True), "worker", "0"),
        topologies={
            "master": None,
            "worker": None,
            "worker-0": ("cluster-topology", "rack", None),
            "worker-1": ("cluster-topology", "rack", None),
        },
    ),
    # KAI drops the placement silently; kai-py says so (a Warning), as for LWS segments.
    "kubeflow/pytorch/pytorch_grouper_test.go::TestGetPodGroupMetadata_Segments_NoTopologyWhenMissing": case(
        pytorch_pod(_seg_topology("rack", None, topology=""), "worker", "0"),
        sub_groups=PYTORCH_4_BY_2,
        topologies=dict.fromkeys(PYTORCH_4_BY_2),
        warns="is not set on the pod, its Worker template or the PyTorchJob",
    ),
    "kubeflow/pytorch/pytorch_grouper_test.go::TestGetPodGroupMetadata_Segments_OnlyRequiredPlacement": case(
        pytorch_pod(_seg_topology("rack", None), "worker", "0"),
        topologies={
            "master": None,
            "worker": None,
            "worker-0": ("cluster-topology", "rack", None),
            "worker-1": ("cluster-topology", "rack", None),
        },
    ),
    "kubeflow/pytorch/pytorch_grouper_test.go::TestGetPodGroupMetadata_Segments_OnlyPreferredPlacement": case(
        pytorch_pod(_seg_topology(None, "node"), "worker", "0"),
        topologies={
            "master": None,
            "worker": None,
            "worker-0": ("cluster-topology", None, "node"),
            "worker-1": ("cluster-topology", None, "node"),
        },
    ),
    # --- kubeflow/notebook/notebook_grouper_test.go
    "notebook_grouper_test.go::TestGetPodGroupMetadata_DefaultPriorityClassIsBuildNotTrain": case(
        (pod("nb-0", owner=NOTEBOOK_STS), [NOTEBOOK_STS, NOTEBOOK]),
        owner="Notebook/nb",
        name="pg-nb-nb-uid",
        min_member=1,
        priority="build",
    ),
    "notebook_grouper_test.go::TestGetPodGroupMetadata_QueueFromPodLabel": case(
        (
            pod("nb-0", owner=NOTEBOOK_STS, labels={keys.QUEUE_LABEL: "q-pod"}),
            [NOTEBOOK_STS, NOTEBOOK],
        ),
        queue="q-pod",
    ),
    # --- hub.go: TrainJob skipped, its JobSet grouped by JobSet's grouper
    "skiptopowner_test.go::TestSkipTopOwnerGrouper (TrainJob)": case(
        (
            pod(
                "tj-node-0-0",
                owner=TJ_JOB,
                labels={
                    "jobset.sigs.k8s.io/replicatedjob-name": "node",
                    "jobset.sigs.k8s.io/job-index": "0",
                },
            ),
            [TJ_JOB, TJ_JOBSET, TRAINJOB],
        ),
        owner="JobSet/tj",
        name="pg-tj-js-uid",
        min_sub_group=1,
        queue="q-train",
        pod_sub_group="node-replica-0",
    ),
    # --- hub.go: an Argo Workflow owns its step pods: skipped, the pod is its own group
    "skiptopowner_test.go::TestSkipTopOwnerGrouper (argo Workflow)": case(
        (pod("wf-step-1", owner=WORKFLOW), [WORKFLOW]),
        owner="Pod/wf-step-1",
        name="pg-wf-step-1-wf-step-1-uid",
        min_member=1,
        queue="q-argo",
    ),
    # --- hub.go: the kinds grouped by the default grouper
    "hub.go::tekton.dev PipelineRun": case(
        (pod("pr-build-pod", owner=TASKRUN), [TASKRUN, PIPELINERUN]),
        owner="PipelineRun/pr",
        name="pg-pr-pr-uid",
        min_member=1,
        priority="train",
    ),
    "hub.go::tekton.dev TaskRun": case(
        (
            pod("tr-pod", owner=obj("tekton.dev/v1", "TaskRun", "tr")),
            [obj("tekton.dev/v1", "TaskRun", "tr")],
        ),
        owner="TaskRun/tr",
        name="pg-tr-tr-uid",
    ),
    "hub.go::kubevirt.io VirtualMachineInstance": case(
        (pod("virt-launcher-vmi", owner=VMI), [VMI]),
        owner="VirtualMachineInstance/vmi",
        min_member=1,
    ),
    "hub.go::kubeflow.org ScheduledWorkflow": case(
        (pod("swf-run-step", owner=SWF_WF), [SWF_WF, SWF]), owner="ScheduledWorkflow/swf"
    ),
    "hub.go::machinelearning.seldon.io SeldonDeployment": case(
        (pod("sd-model-abc-1", owner=SELDON_RS), [SELDON_RS, SELDON_DEPLOY, SELDON]),
        owner="SeldonDeployment/sd",
        name="pg-sd-sd-uid",
        priority="train",
    ),
    "hub.go::workspace.devfile.io DevWorkspace": case(
        (pod("ws-abc-1", owner=DEVWS_RS), [DEVWS_RS, DEVWS_DEPLOY, DEVWS]),
        owner="DevWorkspace/ws",
        name="pg-ws-ws-uid",
    ),
    "hub.go::an unknown kind (default grouper)": case(
        (pod("w-1", owner=UNKNOWN), [UNKNOWN]),
        owner="Widget/w",
        name="pg-w-w-uid",
        min_member=1,
        priority="train",
        queue=keys.DEFAULT_QUEUE,
    ),
    # --- aml/aml_grouper_test.go
    "aml_grouper_test.go::TestGetPodGroupMetadata": case(
        (pod("aml-0", owner=AML), [AML]), owner="AmlJob/aml", min_member=4
    ),
    "aml_grouper_test.go::TestGetPodGroupMetadataWithoutReplicas": case(
        (pod("aml-0", owner=AML_BAD), [AML_BAD]),
        fails_on="spec.job.options.envs.AZUREML_NODE_COUNT",
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_kai_podgrouper_case(name: str) -> None:
    case = CASES[name]
    result = _run(case)
    if case.fails_on is not None:
        assert isinstance(result, GroupingFailed), result
        assert result.warnings[0].field.startswith(case.fails_on), result.warnings[0].message
        return
    assert isinstance(result, Grouped), result
    group = result.pod_group
    spec = group.spec
    if case.name is not None:
        assert result.group_name == case.name == group.metadata.name
    if case.owner is not None:
        ref = group.metadata.owner_references[0]
        assert f"{ref.kind}/{ref.name}" == case.owner
    if case.min_member is not None:
        assert spec.min_member == case.min_member
        assert spec.min_sub_group is None
    if case.min_sub_group is not None:
        assert spec.min_sub_group == case.min_sub_group
        assert "minMember" not in group.to_manifest()["spec"]
    if case.priority is not None:
        assert spec.priority_class_name == case.priority
    if case.queue is not None:
        assert spec.queue == case.queue
    if case.sub_groups is not None:
        assert {
            g.name: (g.min_member, g.min_sub_group, g.parent) for g in spec.sub_groups or []
        } == case.sub_groups
    if case.pod_sub_group != "(not checked)":
        assert result.sub_group == case.pod_sub_group
    if case.topologies is not None:
        found = {}
        for g in spec.sub_groups or []:
            t = g.topology_constraint
            found[g.name] = (
                None
                if t is None
                else (t.topology, t.required_topology_level, t.preferred_topology_level)
            )
        assert found == case.topologies
    if case.warns is not None:
        assert any(case.warns in w.message for w in result.warnings), result.warnings
    else:
        assert not result.warnings, [w.message for w in result.warnings]


def test_related_objects_name_what_the_kinds_read() -> None:
    """The caller fetches these before grouping: a RayJob's RayCluster, a PodGang,
    and a Knative Revision only when it is not among the pod's owners."""
    ray_case = CASES["ray_grouper_test.go::TestGetPodGroupMetadata_RayJob_v1"]
    assert related_objects(ray_case.pod, ray_case.chain) == [
        ("ray.io/v1", "RayCluster", "test_ray_cluster")
    ]
    grove_case = CASES["grove_grouper_test.go::TestGetPodGroupMetadata"]
    assert related_objects(grove_case.pod, grove_case.chain) == [
        ("scheduler.grove.io/v1alpha1", "PodGang", "pcs-0")
    ]
    kn = CASES["knative_test.go::TestGetPodGroupMetadata_MinScale/min-scale=3"]
    assert related_objects(kn.pod, kn.chain) == []
    owned_by_service = pod("pod", owner=KSVC, labels={"serving.knative.dev/revision": "revision"})
    assert related_objects(owned_by_service, [KSVC]) == [
        ("serving.knative.dev/v1", "Revision", "revision")
    ]
    unknown = CASES["hub.go::an unknown kind (default grouper)"]
    assert related_objects(unknown.pod, unknown.chain) == []


def test_a_rayjob_submitter_is_in_the_gang_but_no_subgroup() -> None:
    """The RayJob's submitter Job pod joins the RayJob's group (KAI names the group after
    the RayJob) without a subgroup of the cluster."""
    result = group_pod(
        pod("submitter", owner=SUBMITTER),
        [SUBMITTER, RAYJOB],
        related=lambda _v, kind, name: RAYJOB_CLUSTER if kind == "RayCluster" else None,
    )
    assert isinstance(result, Grouped)
    assert result.group_name == "pg-test_ray_job-2"
    assert result.pod_group.spec.min_member == 4
    assert result.sub_group is None


def test_a_rayjob_whose_cluster_is_not_made_yet_waits_with_a_warning() -> None:
    result = group_pod(pod("submitter", owner=SUBMITTER), [SUBMITTER, RAYJOB])
    assert isinstance(result, GroupingFailed)
    assert result.warnings[0].field == "status.rayClusterName"
    assert "RayJob" in result.warnings[0].message


def test_ray_autoscaling_min_member_follows_min_replicas_not_replicas() -> None:
    """Elastic: a worker group scaled up (replicas 3 -> 8) keeps its minimum (minReplicas)."""
    scaled = raycluster([{"replicas": 8, "minReplicas": 2}, {"replicas": 3, "minReplicas": 1}])
    result = group_pod(pod("h", owner=scaled), [scaled])
    assert isinstance(result, Grouped)
    assert result.pod_group.spec.min_member == 4
    bad = raycluster([{"replicas": 1, "minReplicas": 2}])
    failed = group_pod(pod("h", owner=bad), [bad])
    assert isinstance(failed, GroupingFailed)
    assert failed.warnings[0].field == "spec.workerGroupSpecs[0].replicas"
