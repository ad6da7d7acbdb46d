"""The grouper of each owner kind, chosen by the top owner's (API group, kind), as
KAI's pod-grouper hub chooses its plugins; kinds not in the table get the default
grouper (one group per top owner). docs/operator.md, "The pod-grouper", has the table.

Some kinds are wrappers whose top owner is skipped (an Argo Workflow, a Kubeflow
TrainJob, a Dynamo DynamoGraphDeployment): the owner below is grouped by its own
kind's grouper, with the skipped owner's labels and annotations added to it
where it has none of its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Final

from kai_py.podgrouper.kinds import core, grove, jobset, knative, kubeflow, lws, ray
from kai_py.podgrouper.kinds.common import Grouper, Obj, Workload
from kai_py.podgrouper.kinds.kubeflow import KUBEFLOW_REPLICA_SPECS

GROUPERS: Final[Mapping[tuple[str, str], Grouper]] = {
    ("", "Pod"): core.pod,
    ("batch", "Job"): core.job,
    ("batch", "CronJob"): core.cron_job,
    ("apps", "Deployment"): core.deployment,
    ("apps", "ReplicaSet"): core.default,
    ("apps", "StatefulSet"): core.default,
    **{("kubeflow.org", kind): kubeflow.training_job for kind in KUBEFLOW_REPLICA_SPECS},
    ("kubeflow.org", "Notebook"): kubeflow.notebook,
    ("kubeflow.org", "ScheduledWorkflow"): core.default,
    ("jobset.x-k8s.io", "JobSet"): jobset.jobset,
    ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"): lws.leader_worker_set,
    ("ray.io", "RayCluster"): ray.ray,
    ("ray.io", "RayJob"): ray.ray,
    ("ray.io", "RayService"): ray.ray,
    ("serving.knative.dev", "Service"): knative.service,
    ("grove.io", "PodCliqueSet"): grove.podgang,
    ("grove.io", "PodGangSet"): grove.podgang,
    ("tekton.dev", "PipelineRun"): core.default,
    ("tekton.dev", "TaskRun"): core.default,
    ("kubevirt.io", "VirtualMachineInstance"): core.default,
    ("machinelearning.seldon.io", "SeldonDeployment"): core.default,
    ("workspace.devfile.io", "DevWorkspace"): core.default,
    ("amlarc.azureml.com", "AmlJob"): core.aml_job,
    ("sparkoperator.k8s.io", "SparkApplication"): core.spark_application,
}

#: What the live grouper reads, per API group (resource plurals): the top owners of
#: the table, the owners between them and the pod, and the objects a kind reads
#: besides its owners. The chart's pod-grouper role grants ``get`` on exactly these
#: (tests/chart checks the two agree); a kind outside them is read only if the chart's
#: ``podgrouper.extraOwnerGroups`` names its group.
READS: Final[Mapping[str, tuple[str, ...]]] = {
    "apps": ("deployments", "replicasets", "statefulsets"),
    "batch": ("cronjobs", "jobs"),
    "kubeflow.org": (
        *(f"{kind.lower()}s" for kind in KUBEFLOW_REPLICA_SPECS),
        "notebooks",
        "scheduledworkflows",
    ),
    "trainer.kubeflow.org": ("trainjobs",),
    "jobset.x-k8s.io": ("jobsets",),
    "leaderworkerset.x-k8s.io": ("leaderworkersets",),
    "ray.io": ("rayclusters", "rayjobs", "rayservices"),
    "serving.knative.dev": ("configurations", "revisions", "services"),
    "sparkoperator.k8s.io": ("sparkapplications",),
    "argoproj.io": ("workflows",),
    "tekton.dev": ("pipelineruns", "taskruns"),
    "kubevirt.io": ("virtualmachineinstances", "virtualmachines"),
    "grove.io": ("podcliques", "podcliquescalinggroups", "podcliquesets", "podgangsets"),
    "scheduler.grove.io": ("podgangs",),
    "nvidia.com": ("dynamographdeployments",),
    "machinelearning.seldon.io": ("seldondeployments",),
    "workspace.devfile.io": ("devworkspaces",),
    "amlarc.azureml.com": ("amljobs",),
}

#: Wrappers whose top owner is skipped: the owner below it is grouped instead.
SKIPPED_TOP_OWNERS: Final = frozenset(
    {
        ("argoproj.io", "Workflow"),
        ("trainer.kubeflow.org", "TrainJob"),
        ("nvidia.com", "DynamoGraphDeployment"),
    }
)


#: Top owners whose grouping may read objects besides the owners (``related``).
MAY_READ: Final = frozenset(
    {
        ("ray.io", "RayJob"),
        ("ray.io", "RayService"),
        ("serving.knative.dev", "Service"),
        ("grove.io", "PodCliqueSet"),
        ("grove.io", "PodGangSet"),
        *SKIPPED_TOP_OWNERS,
    }
)


def _merged(below: Obj, skipped: Obj) -> Obj:
    """``below`` with the skipped owner's labels and annotations where it has none."""
    if not skipped.labels and not skipped.annotations:
        return below
    return replace(
        below,
        labels={**skipped.labels, **below.labels},
        annotations={**skipped.annotations, **below.annotations},
    )


def resolve(workload: Workload) -> tuple[Workload, Grouper]:
    """The workload as its grouper sees it (a skipped wrapper removed) and that grouper."""
    top = workload.top
    key = (top.group, top.kind)
    if key in SKIPPED_TOP_OWNERS and workload.chain:
        chain = list(workload.chain[:-1])
        if chain:
            chain[-1] = _merged(chain[-1], top)
            workload = replace(workload, chain=chain)
        else:
            # The wrapper owns the pod itself (an Argo step): the pod is the top.
            workload = replace(workload, pod=_merged(workload.pod, top), chain=[])
        top = workload.top
        key = (top.group, top.kind)
    return workload, GROUPERS.get(key, core.default)


def related(pod: Obj, chain: list[Obj]) -> list[tuple[str, str, str]]:
    """Objects outside the pod's owner chain that its grouper reads, as
    (apiVersion, kind, name), for the caller to fetch before grouping."""
    workload, grouper = resolve(Workload(pod, {}, chain))
    if grouper is ray.ray and workload.chain:
        return ray.related(workload.top)
    if grouper is grove.podgang:
        return grove.related(workload.pod)
    if grouper is knative.service:
        name = workload.pod.labels.get(knative.REVISION_LABEL)
        if any(o.kind == "Revision" and o.name == name for o in workload.chain):
            return []  # the Revision is an owner of the pod: read already
        return knative.related(workload.pod)
    return []
