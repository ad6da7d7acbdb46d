"""Workloads of operators' kinds on both backends: the kind's CRD installed, the owners
and pods created as the operator would (``workload_operators``), and the pods scheduled
by the kai-py operator. The gang each one forms is in ``test_workload_gangs.py``."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client as k8s
from operator_helpers import Operator, create_queues, queue, wait_for
from realapi_backends import Backend
from workload_operators import apply_as_operator, install_crds, owner_chain

NS = "team-a"
SCHEDULED = {"schedulerName": "kai-scheduler", "restartPolicy": "Never"}


def container(gpus: int = 0) -> dict[str, Any]:
    resources: dict[str, Any] = {"requests": {"cpu": "1", "memory": "1Gi"}}
    if gpus:
        resources["limits"] = {"nvidia.com/gpu": str(gpus)}
    return {"name": "main", "image": "busybox", "resources": resources}


def template(gpus: int = 0, restart: str = "Never") -> dict[str, Any]:
    return {"spec": {**SCHEDULED, "restartPolicy": restart, "containers": [container(gpus)]}}


def meta(name: str) -> dict[str, Any]:
    return {"name": name, "namespace": NS, "labels": {"kai.scheduler/queue": "team-a"}}


def raycluster(name: str, workers: int, min_workers: int | None = None) -> dict[str, Any]:
    group: dict[str, Any] = {"groupName": "gpu", "replicas": workers, "template": template(1)}
    if min_workers is not None:
        group["minReplicas"] = min_workers
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": meta(name),
        "spec": {"headGroupSpec": {"template": template()}, "workerGroupSpecs": [group]},
    }


def leaderworkerset(name: str, size: int) -> dict[str, Any]:
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": meta(name),
        "spec": {
            "replicas": 1,
            "leaderWorkerTemplate": {
                "size": size,
                "leaderTemplate": template(restart="Always"),
                "workerTemplate": template(1, restart="Always"),
            },
        },
    }


def jobset(name: str, workers: int) -> dict[str, Any]:
    def rjob(rname: str, replicas: int, gpus: int) -> dict[str, Any]:
        return {
            "name": rname,
            "replicas": replicas,
            "template": {"spec": {"parallelism": 1, "completions": 1, "template": template(gpus)}},
        }

    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": meta(name),
        "spec": {"replicatedJobs": [rjob("driver", 1, 0), rjob("workers", workers, 1)]},
    }


def running(core: k8s.CoreV1Api, selector: str, count: int, log: str) -> list[Any]:
    def check() -> list[Any] | None:
        pods = core.list_namespaced_pod(NS, label_selector=selector).items
        ok = len(pods) == count and all(p.status.phase == "Running" for p in pods)
        return pods if ok else None

    pods: list[Any] = wait_for(check, timeout=60, what=f"{count} pods Running ({selector})\n{log}")
    return pods


def owner(pod: Any) -> tuple[str, str, str]:
    (ref,) = pod.metadata.owner_references
    assert ref.controller is True
    return ref.kind, ref.name, ref.uid


@pytest.fixture
def queues(custom: k8s.CustomObjectsApi) -> None:
    create_queues(custom, queue("root"), queue("team-a", parent="root"))


@pytest.mark.usefixtures("queues")
def test_a_rayclusters_head_and_workers_run(
    backend: Backend, operator: Operator, api: k8s.ApiClient, core: k8s.CoreV1Api
) -> None:
    install_crds(backend, api, "RayCluster")
    created = apply_as_operator(api, raycluster("rc", workers=2))
    pods = running(core, "ray.io/cluster=rc", 3, operator.log)
    assert {owner(p) for p in pods} == {("RayCluster", "rc", created["RayCluster/rc"])}
    assert sorted(p.metadata.labels["ray.io/group"] for p in pods) == ["gpu", "gpu", "headgroup"]


@pytest.mark.usefixtures("queues")
def test_a_leaderworkersets_leader_and_workers_run(
    backend: Backend, operator: Operator, api: k8s.ApiClient, core: k8s.CoreV1Api
) -> None:
    install_crds(backend, api, "LeaderWorkerSet")
    apply_as_operator(api, leaderworkerset("lws", size=3))
    pods = {
        p.metadata.name: p
        for p in running(core, "leaderworkerset.sigs.k8s.io/name=lws", 3, operator.log)
    }
    assert sorted(pods) == ["lws-0", "lws-0-1", "lws-0-2"]
    # Worker -> worker StatefulSet -> leader pod -> leader StatefulSet -> LeaderWorkerSet.
    assert owner(pods["lws-0-2"])[:2] == ("StatefulSet", "lws-0")
    workers = k8s.AppsV1Api(core.api_client).read_namespaced_stateful_set("lws-0", NS)
    (ref,) = workers.metadata.owner_references
    assert (ref.kind, ref.name, ref.uid) == ("Pod", "lws-0", pods["lws-0"].metadata.uid)
    assert owner(pods["lws-0"])[:2] == ("StatefulSet", "lws")
    labels = pods["lws-0"].metadata.labels
    assert labels["leaderworkerset.sigs.k8s.io/group-index"] == "0"
    assert labels["leaderworkerset.sigs.k8s.io/worker-index"] == "0"


@pytest.mark.usefixtures("queues")
def test_a_jobsets_jobs_and_their_pods_run(
    backend: Backend, operator: Operator, api: k8s.ApiClient, core: k8s.CoreV1Api
) -> None:
    install_crds(backend, api, "JobSet")
    created = apply_as_operator(api, jobset("js", workers=2))
    assert sorted(k for k in created if k.startswith("Job/")) == [
        "Job/js-driver-0",
        "Job/js-workers-0",
        "Job/js-workers-1",
    ]
    pods = running(core, "jobset.sigs.k8s.io/jobset-name=js", 3, operator.log)
    assert {owner(p)[:2] for p in pods} == {
        ("Job", "js-driver-0"),
        ("Job", "js-workers-0"),
        ("Job", "js-workers-1"),
    }
    job = k8s.BatchV1Api(core.api_client).read_namespaced_job("js-workers-1", NS)
    assert job.metadata.owner_references[0].uid == created["JobSet/js"]


@pytest.mark.usefixtures("queues")
def test_a_knative_services_revision_pods_run(
    backend: Backend, operator: Operator, api: k8s.ApiClient, core: k8s.CoreV1Api
) -> None:
    install_crds(backend, api, "Service", "Configuration", "Revision")
    service = {
        "apiVersion": "serving.knative.dev/v1",
        "kind": "Service",
        "metadata": meta("hello"),
        "spec": {
            "template": {
                "metadata": {"annotations": {"autoscaling.knative.dev/min-scale": "2"}},
                "spec": {"schedulerName": "kai-scheduler", "containers": [container(1)]},
            }
        },
    }
    created = apply_as_operator(api, service)
    assert set(created) == {
        "Service/hello",
        "Configuration/hello",
        "Revision/hello-00001",
        "Deployment/hello-00001-deployment",
    }
    pods = running(core, "serving.knative.dev/revision=hello-00001", 2, operator.log)
    assert {owner(p)[0] for p in pods} == {"ReplicaSet"}


@pytest.mark.usefixtures("queues")
def test_a_spark_driver_and_its_executors_run(
    backend: Backend, operator: Operator, api: k8s.ApiClient, core: k8s.CoreV1Api
) -> None:
    install_crds(backend, api, "SparkApplication")
    part = {"cores": 1, "memory": "512m", "schedulerName": "kai-scheduler"}
    app = {
        "apiVersion": "sparkoperator.k8s.io/v1beta2",
        "kind": "SparkApplication",
        "metadata": meta("pi"),
        "spec": {"image": "spark", "driver": part, "executor": {**part, "instances": 2}},
    }
    created = apply_as_operator(api, app)
    pods = {p.metadata.name: p for p in running(core, "spark-app-name=pi", 3, operator.log)}
    assert owner(pods["pi-driver"]) == ("SparkApplication", "pi", created["SparkApplication/pi"])
    assert owner(pods["pi-exec-2"]) == ("Pod", "pi-driver", pods["pi-driver"].metadata.uid)


def _ray_job() -> dict[str, Any]:
    cluster = raycluster("unused", workers=1)["spec"]
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": meta("rj"),
        "spec": {"entrypoint": "python run.py", "rayClusterSpec": cluster},
    }


RUNTIME = {
    "apiVersion": "trainer.kubeflow.org/v1alpha1",
    "kind": "ClusterTrainingRuntime",
    "metadata": {"name": "torch"},
    "spec": {
        "mlPolicy": {"numNodes": 1},
        "template": {
            "spec": {
                "replicatedJobs": [
                    {
                        "name": "node",
                        "template": {
                            "metadata": {
                                "labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}
                            },
                            "spec": {"template": template(1)},
                        },
                    }
                ]
            }
        },
    },
}
STEP = {"name": "fit", "image": "x", "computeResources": container(1)["resources"]}
#: kind -> (the workload, the CRDs it needs, the selector of its pods, how many pods).
OTHERS: dict[str, tuple[dict[str, Any], tuple[str, ...], str, int]] = {
    "RayJob": (_ray_job(), ("RayJob", "RayCluster"), "ray.io/cluster=rj-raycluster", 2),
    "Notebook": (
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "Notebook",
            "metadata": meta("nb"),
            "spec": {"template": template(1, restart="Always")},
        },
        ("Notebook",),
        "notebook-name=nb",
        1,
    ),
    "TrainJob": (
        {
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainJob",
            "metadata": meta("tj"),
            "spec": {"runtimeRef": {"name": "torch"}, "trainer": {"numNodes": 2}},
        },
        ("TrainJob", "JobSet"),
        "jobset.sigs.k8s.io/jobset-name=tj",
        2,
    ),
    "PipelineRun": (
        {
            "apiVersion": "tekton.dev/v1",
            "kind": "PipelineRun",
            "metadata": meta("pr"),
            "spec": {
                "taskRunTemplate": {"podTemplate": {"schedulerName": "kai-scheduler"}},
                "pipelineSpec": {
                    "tasks": [{"name": t, "taskSpec": {"steps": [STEP]}} for t in ("a", "b")]
                },
            },
        },
        ("PipelineRun", "TaskRun"),
        "tekton.dev/pipelineRun=pr",
        2,
    ),
    "Workflow": (
        {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Workflow",
            "metadata": meta("wf"),
            "spec": {
                "entrypoint": "main",
                "schedulerName": "kai-scheduler",
                "templates": [{"name": "main", "container": container(1)}],
            },
        },
        ("Workflow",),
        "workflows.argoproj.io/workflow=wf",
        1,
    ),
    "PodCliqueSet": (
        {
            "apiVersion": "grove.io/v1alpha1",
            "kind": "PodCliqueSet",
            "metadata": meta("pcs"),
            "spec": {
                "template": {
                    "cliques": [
                        {"name": c, "spec": {"replicas": 2, "podSpec": template(1)["spec"]}}
                        for c in ("prefill", "decode")
                    ]
                }
            },
        },
        ("PodCliqueSet", "PodClique", "PodGang"),
        "grove.io/podgang=pcs-0",
        4,
    ),
}


@pytest.mark.usefixtures("queues")
@pytest.mark.parametrize("kind", sorted(OTHERS))
def test_other_kinds_pods_are_made_and_run(
    backend: Backend, operator: Operator, api: k8s.ApiClient, core: k8s.CoreV1Api, kind: str
) -> None:
    workload, crds, selector, count = OTHERS[kind]
    install_crds(backend, api, *crds)
    created = apply_as_operator(api, workload, [RUNTIME])
    pods = running(core, selector, count, operator.log)
    top = f"{kind}/{workload['metadata']['name']}"
    assert top in created
    # Each pod's owners lead up to the workload, with the uids the server gave.
    for p in pods:
        chain = owner_chain(api, api.sanitize_for_serialization(p))
        assert chain[-1] == (kind, workload["metadata"]["name"], created[top]), chain
