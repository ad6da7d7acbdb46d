"""`kai-py simulate` on custom workload kinds given without their pods: the owners and
pods their operators would make (names, owner references, labels the pod-grouper reads,
resources), fields not read said in an Event, bad values refused with object, field
and value."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_simulate_cli import NODE, QUEUES, run_json, write

from kai_py.api.quantities import parse_quantity
from kai_py.cli import main
from kai_py.scheduler.session import Event
from kai_py.state.documents import Document, InputError
from kai_py.state.operators import expand

GPU_CONTAINER = "{name: m, image: x, resources: {limits: {nvidia.com/gpu: '1'}}}"


def made(manifest: str) -> tuple[list[dict[str, Any]], list[Event]]:
    events: list[Event] = []
    docs = [Document("in.yaml", d) for d in yaml.safe_load_all(textwrap.dedent(manifest))]
    return [dict(d.body) for d in expand(docs, events)], events


def by_kind(objects: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def chain(obj: Mapping[str, Any], objects: list[dict[str, Any]]) -> list[str]:
    """kind/name of each owner up the controller references, nearest first."""
    uids = {o["metadata"]["uid"]: o for o in objects}
    out = []
    while refs := obj["metadata"].get("ownerReferences"):
        (ref,) = refs
        assert ref["controller"] is True
        obj = uids[ref["uid"]]
        assert (obj["kind"], obj["metadata"]["name"]) == (ref["kind"], ref["name"])
        out.append(f"{obj['kind']}/{obj['metadata']['name']}")
    return out


def requests(pod: Mapping[str, Any], key: str) -> float:
    return sum(
        parse_quantity(c.get("resources", {}).get("requests", {}).get(key, 0))
        for c in pod["spec"]["containers"]
    )


RAYCLUSTER = f"""
apiVersion: ray.io/v1
kind: RayCluster
metadata: {{name: rc, namespace: ml, labels: {{kai.scheduler/queue: team}}}}
spec:
  rayVersion: "2.40"
  enableInTreeAutoscaling: true
  headGroupSpec:
    rayStartParams: {{}}
    template:
      spec:
        schedulerName: kai-scheduler
        containers: [{{name: head, image: ray, resources: {{requests: {{cpu: "1", memory: 2Gi}}}}}}]
  workerGroupSpecs:
  - {{groupName: gpu, replicas: 5, minReplicas: 1, maxReplicas: 3,
      template: {{spec: {{schedulerName: kai-scheduler, containers: [{GPU_CONTAINER}]}}}}}}
  - {{groupName: tpu, replicas: 2, minReplicas: 2, numOfHosts: 2,
      template: {{spec: {{schedulerName: kai-scheduler, containers: [{{name: m, image: x}}]}}}}}}
  - {{groupName: off, replicas: 4, suspended: true, template: {{spec: {{containers: []}}}}}}
"""


def test_simulate_makes_a_rayclusters_pods_and_schedules_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, NODE.replace('"2"', '"4"'), QUEUES.replace("quota: 2,", "quota: 4,"))
    ray = write(tmp_path, RAYCLUSTER, name="ray.yaml")
    data = run_json(capsys, str(path), str(ray))
    pods = data["pods"]
    assert isinstance(pods, dict)
    gpu = ["ml/rc-gpu-worker-0", "ml/rc-gpu-worker-1", "ml/rc-gpu-worker-2"]
    assert all(pods[p]["status"] == "Running" for p in ["ml/rc-head-0", *gpu])


def test_raycluster_head_and_worker_groups() -> None:
    objects, events = made(RAYCLUSTER)
    pods = by_kind(objects, "Pod")
    # replicas 5 kept to maxReplicas 3; minReplicas 2 times numOfHosts 2; a suspended
    # group has none.
    assert sorted(pods) == [
        "rc-gpu-worker-0",
        "rc-gpu-worker-1",
        "rc-gpu-worker-2",
        "rc-head-0",
        *(f"rc-tpu-worker-{i}" for i in range(4)),
    ]
    head = pods["rc-head-0"]
    assert head["metadata"]["labels"]["ray.io/node-type"] == "head"
    assert head["metadata"]["labels"]["ray.io/group"] == "headgroup"
    assert chain(head, objects) == ["RayCluster/rc"]
    # KubeRay's autoscaler sidecar (enableInTreeAutoscaling) adds to the head's requests.
    assert requests(head, "cpu") == 1.5 and requests(head, "memory") == 2.5 * 2**30
    worker = pods["rc-tpu-worker-3"]
    assert worker["metadata"]["labels"]["ray.io/group"] == "tpu"
    assert worker["metadata"]["labels"]["ray.io/node-type"] == "worker"
    assert chain(worker, objects) == ["RayCluster/rc"]
    (note,) = [e for e in events if e.reason == "NotRead"]
    assert "spec.rayVersion, spec.headGroupSpec.rayStartParams" in note.message
    assert note.message.startswith("in.yaml: RayCluster ml/rc: ")


def test_rayjob_and_rayservice_make_a_raycluster_named_in_their_status() -> None:
    spec = f"""
      workerGroupSpecs:
      - {{groupName: w, replicas: 2, template: {{spec: {{containers: [{GPU_CONTAINER}]}}}}}}
      headGroupSpec: {{template: {{spec: {{containers: [{{name: h, image: ray}}]}}}}}}
    """
    objects, events = made(
        f"""
        apiVersion: ray.io/v1
        kind: RayJob
        metadata: {{name: job, namespace: ml}}
        spec:
          entrypoint: python run.py
          rayClusterSpec:{textwrap.indent(textwrap.dedent(spec), "            ")}
        ---
        apiVersion: ray.io/v1
        kind: RayService
        metadata: {{name: svc, namespace: ml}}
        spec:
          rayClusterConfig:{textwrap.indent(textwrap.dedent(spec), "            ")}
        """
    )
    rayjob = by_kind(objects, "RayJob")["job"]
    assert rayjob["status"] == {"rayClusterName": "job-raycluster"}
    service = by_kind(objects, "RayService")["svc"]
    assert service["status"] == {"pendingServiceStatus": {"rayClusterName": "svc-raycluster"}}
    pods = by_kind(objects, "Pod")
    assert chain(pods["job-raycluster-w-worker-1"], objects) == [
        "RayCluster/job-raycluster",
        "RayJob/job",
    ]
    assert chain(pods["svc-raycluster-head-0"], objects) == [
        "RayCluster/svc-raycluster",
        "RayService/svc",
    ]
    assert len(pods) == 6
    messages = [e.message for e in events]
    assert any(
        "spec.entrypoint" in m and e.reason == "NotRead"
        for e, m in zip(events, messages, strict=True)
    )
    assert any("submitter" in m for m in messages)


def test_leaderworkerset_leaders_own_their_workers() -> None:
    objects, _ = made(
        f"""
        apiVersion: leaderworkerset.x-k8s.io/v1
        kind: LeaderWorkerSet
        metadata: {{name: lws, namespace: ml}}
        spec:
          replicas: 2
          leaderWorkerTemplate:
            size: 3
            leaderTemplate: {{spec: {{containers: [{{name: l, image: x}}]}}}}
            workerTemplate: {{spec: {{containers: [{GPU_CONTAINER}]}}}}
        """
    )
    pods = by_kind(objects, "Pod")
    assert sorted(pods) == ["lws-0", "lws-0-1", "lws-0-2", "lws-1", "lws-1-1", "lws-1-2"]
    assert chain(pods["lws-1"], objects) == ["StatefulSet/lws", "LeaderWorkerSet/lws"]
    assert chain(pods["lws-1-2"], objects) == [
        "StatefulSet/lws-1",
        "Pod/lws-1",
        "StatefulSet/lws",
        "LeaderWorkerSet/lws",
    ]
    labels = pods["lws-1-2"]["metadata"]["labels"]
    assert labels["leaderworkerset.sigs.k8s.io/group-index"] == "1"
    assert labels["leaderworkerset.sigs.k8s.io/worker-index"] == "2"
    assert pods["lws-1"]["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/worker-index"] == "0"
    assert pods["lws-1-2"]["metadata"]["annotations"]["leaderworkerset.sigs.k8s.io/size"] == "3"
    # The leader runs the leader template, the workers the worker template.
    assert pods["lws-0"]["spec"]["containers"][0]["name"] == "l"
    assert pods["lws-0-1"]["spec"]["containers"][0]["name"] == "m"


def test_jobset_makes_a_job_per_replica_and_their_pods() -> None:
    objects, _ = made(
        f"""
        apiVersion: jobset.x-k8s.io/v1alpha2
        kind: JobSet
        metadata: {{name: js, namespace: ml}}
        spec:
          replicatedJobs:
          - name: workers
            replicas: 2
            template:
              spec:
                parallelism: 2
                completions: 2
                template: {{spec: {{containers: [{GPU_CONTAINER}]}}}}
          - name: driver
            template: {{spec: {{template: {{spec: {{containers: [{{name: d, image: x}}]}}}}}}}}
        ---
        apiVersion: jobset.x-k8s.io/v1alpha2
        kind: JobSet
        metadata: {{name: held, namespace: ml}}
        spec:
          suspend: true
          replicatedJobs:
          - name: w
            template: {{spec: {{template: {{spec: {{containers: [{GPU_CONTAINER}]}}}}}}}}
        """
    )
    jobs = by_kind(objects, "Job")
    assert sorted(jobs) == ["held-w-0", "js-driver-0", "js-workers-0", "js-workers-1"]
    pods = by_kind(objects, "Pod")
    assert sorted(pods) == [
        "js-driver-0-0",
        "js-workers-0-0",
        "js-workers-0-1",
        "js-workers-1-0",
        "js-workers-1-1",
    ]  # a suspended JobSet's Jobs start no pod
    pod = pods["js-workers-1-0"]
    assert chain(pod, objects) == ["Job/js-workers-1", "JobSet/js"]
    labels = pod["metadata"]["labels"]
    assert labels["jobset.sigs.k8s.io/replicatedjob-name"] == "workers"
    assert labels["jobset.sigs.k8s.io/job-index"] == "1"
    assert labels["jobset.sigs.k8s.io/jobset-name"] == "js"
    assert pods["js-driver-0-0"]["metadata"]["labels"]["jobset.sigs.k8s.io/job-global-index"] == "2"


def test_knative_service_revision_deployment_and_queue_proxy() -> None:
    objects, _ = made(
        """
        apiVersion: serving.knative.dev/v1
        kind: Service
        metadata: {name: hello, namespace: ml}
        spec:
          template:
            metadata: {annotations: {autoscaling.knative.dev/min-scale: "3"}}
            spec:
              containerConcurrency: 4
              containers: [{name: user, image: x, resources: {requests: {cpu: "1"}}}]
        """
    )
    pods = by_kind(objects, "Pod")
    assert len(pods) == 3  # min-scale 3 above the initial scale of 1
    pod = next(iter(pods.values()))
    assert chain(pod, objects) == [
        "ReplicaSet/hello-00001-deployment-sim",
        "Deployment/hello-00001-deployment",
        "Revision/hello-00001",
        "Configuration/hello",
        "Service/hello",
    ]
    assert pod["metadata"]["labels"]["serving.knative.dev/revision"] == "hello-00001"
    revision = by_kind(objects, "Revision")["hello-00001"]
    assert revision["metadata"]["annotations"]["autoscaling.knative.dev/min-scale"] == "3"
    assert [c["name"] for c in pod["spec"]["containers"]] == ["user", "queue-proxy"]
    assert requests(pod, "cpu") == 1.025
    assert "containerConcurrency" not in pod["spec"]


def test_a_core_service_is_still_an_unknown_kind(tmp_path: Path) -> None:
    path = write(tmp_path, NODE, "apiVersion: v1\nkind: Service\nmetadata: {name: web}")
    assert main(["simulate", str(path)]) == 2


def test_spark_driver_owns_its_executors() -> None:
    objects, _ = made(
        """
        apiVersion: sparkoperator.k8s.io/v1beta2
        kind: SparkApplication
        metadata: {name: pi, namespace: ml}
        spec:
          type: Scala
          mode: cluster
          image: spark:3.5
          driver: {cores: 1, memory: 512m, labels: {kai.scheduler/queue: team}}
          executor: {instances: 3, cores: 2, memory: 4g, gpu: {name: nvidia.com/gpu, quantity: 1}}
        """
    )
    pods = by_kind(objects, "Pod")
    assert sorted(pods) == ["pi-driver", "pi-exec-1", "pi-exec-2", "pi-exec-3"]
    driver, executor = pods["pi-driver"], pods["pi-exec-3"]
    assert chain(executor, objects) == ["Pod/pi-driver", "SparkApplication/pi"]
    assert driver["metadata"]["labels"]["spark-role"] == "driver"
    assert driver["metadata"]["labels"]["kai.scheduler/queue"] == "team"
    selector = driver["metadata"]["labels"]["spark-app-selector"]
    assert executor["metadata"]["labels"]["spark-app-selector"] == selector
    # Spark's memory overhead: 10% of the heap, at least 384 MiB.
    assert requests(driver, "memory") == (512 + 384) * 2**20
    assert requests(executor, "memory") == 4.4 * 2**30
    assert requests(executor, "cpu") == 2
    assert executor["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"


def test_notebook_and_virtual_machine_instance() -> None:
    objects, _ = made(
        f"""
        apiVersion: kubeflow.org/v1
        kind: Notebook
        metadata: {{name: nb, namespace: ml}}
        spec: {{template: {{spec: {{containers: [{GPU_CONTAINER}]}}}}}}
        ---
        apiVersion: kubevirt.io/v1
        kind: VirtualMachineInstance
        metadata: {{name: vm, namespace: ml}}
        spec:
          domain:
            memory: {{guest: 8Gi}}
            resources: {{requests: {{cpu: "2"}}}}
            devices:
              gpus: [{{name: g1, deviceName: nvidia.com/GA102GL}}, {{name: g2, deviceName: nvidia.com/GA102GL}}]
        """
    )
    pods = by_kind(objects, "Pod")
    assert chain(pods["nb-0"], objects) == ["StatefulSet/nb", "Notebook/nb"]
    assert pods["nb-0"]["metadata"]["labels"]["notebook-name"] == "nb"
    launcher = pods["virt-launcher-vm"]
    assert chain(launcher, objects) == ["VirtualMachineInstance/vm"]
    assert requests(launcher, "memory") == 8 * 2**30
    assert launcher["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/GA102GL": "2"}


def test_a_workload_whose_pods_are_given_is_not_made_again() -> None:
    objects, _ = made(RAYCLUSTER)
    again, _ = made(yaml.safe_dump_all(objects))
    assert len(by_kind(again, "Pod")) == len(by_kind(objects, "Pod"))


@pytest.mark.parametrize(
    ("manifest", "problem"),
    [
        (
            "apiVersion: leaderworkerset.x-k8s.io/v1\nkind: LeaderWorkerSet\n"
            "metadata: {name: l, namespace: ml}\nspec: {leaderWorkerTemplate: {size: 0}}",
            "LeaderWorkerSet ml/l: spec.leaderWorkerTemplate.size: must be 1 or more, got 0",
        ),
        (
            "apiVersion: ray.io/v1\nkind: RayJob\nmetadata: {name: j, namespace: ml}\n"
            "spec: {rayClusterSpec: {workerGroupSpecs: [{groupName: w, replicas: two}]}}",
            "RayJob ml/j: spec.rayClusterSpec.workerGroupSpecs[0].replicas: must be a whole "
            "number of 0 or more, got 'two'",
        ),
        (
            "apiVersion: sparkoperator.k8s.io/v1beta2\nkind: SparkApplication\n"
            "metadata: {name: s, namespace: ml}\nspec: {executor: {memory: lots}}",
            "SparkApplication ml/s: spec.executor.memory: must be a JVM memory size",
        ),
    ],
)
def test_bad_values_name_object_field_and_value(manifest: str, problem: str) -> None:
    with pytest.raises(InputError) as caught:
        made(manifest)
    assert any(problem in p and p.startswith("in.yaml: ") for p in caught.value.problems)


def test_a_suspended_job_starts_no_pods() -> None:
    objects, _ = made(
        """
        apiVersion: batch/v1
        kind: Job
        metadata: {name: held, namespace: ml}
        spec: {suspend: true, parallelism: 2, template: {spec: {containers: []}}}
        """
    )
    assert by_kind(objects, "Pod") == {}


@pytest.mark.parametrize(("example", "pods"), [("raycluster.yaml", 5), ("leaderworkerset.yaml", 8)])
def test_the_examples_run_whole(
    example: str, pods: int, capsys: pytest.CaptureFixture[str]
) -> None:
    root = Path(__file__).resolve().parents[2] / "examples"
    data = run_json(
        capsys, str(root / "simulate" / "cluster.yaml"), str(root / "workloads" / example)
    )
    found = data["pods"]
    assert isinstance(found, dict) and len(found) == pods
    assert all(p["status"] == "Running" for p in found.values())


RUNTIME = """
apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata: {name: torch-distributed}
spec:
  mlPolicy: {numNodes: 1, torch: {numProcPerNode: auto}}
  template:
    spec:
      replicatedJobs:
      - name: dataset-initializer
        template:
          metadata: {labels: {trainer.kubeflow.org/trainjob-ancestor-step: dataset-initializer}}
          spec: {template: {spec: {containers: [{name: dataset-initializer, image: init}]}}}
      - name: node
        template:
          metadata: {labels: {trainer.kubeflow.org/trainjob-ancestor-step: trainer}}
          spec:
            template:
              spec:
                schedulerName: kai-scheduler
                containers: [{name: node, image: pytorch/pytorch, command: [torchrun]}]
"""
TRAINJOB = """
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: tj, namespace: ml, labels: {kai.scheduler/queue: team}}
spec:
  runtimeRef: {name: torch-distributed}
  trainer:
    numNodes: 3
    image: my/trainer:1
    resourcesPerNode: {limits: {nvidia.com/gpu: "2"}}
"""


def test_trainjob_makes_a_jobset_from_its_runtime() -> None:
    objects, events = made(RUNTIME + "\n---\n" + TRAINJOB)
    assert by_kind(objects, "ClusterTrainingRuntime") == {}  # read, not a snapshot object
    jobset = by_kind(objects, "JobSet")["tj"]
    assert chain(jobset, objects) == ["TrainJob/tj"]
    pods = by_kind(objects, "Pod")
    assert sorted(pods) == [
        "tj-dataset-initializer-0-0",
        "tj-node-0-0",
        "tj-node-0-1",
        "tj-node-0-2",
    ]
    node = pods["tj-node-0-2"]
    assert chain(node, objects) == ["Job/tj-node-0", "JobSet/tj", "TrainJob/tj"]
    (container,) = node["spec"]["containers"]
    assert container["image"] == "my/trainer:1" and container["command"] == ["torchrun"]
    assert container["resources"] == {"limits": {"nvidia.com/gpu": "2"}}
    assert not [e for e in events if e.reason == "NotUsed"]


def test_a_trainjob_without_its_runtime_is_refused() -> None:
    with pytest.raises(InputError) as caught:
        made(TRAINJOB)
    (problem,) = caught.value.problems
    assert problem.startswith("in.yaml: TrainJob ml/tj: spec.runtimeRef.name: names a ")
    assert "ClusterTrainingRuntime that is not in the input" in problem
    _, events = made(RUNTIME)
    assert [e.reason for e in events] == ["NotUsed"]


def test_tekton_pipelinerun_taskruns_and_their_pods() -> None:
    objects, events = made(
        """
        apiVersion: tekton.dev/v1
        kind: Task
        metadata: {name: train, namespace: ml}
        spec:
          steps:
          - {name: fit, image: x, computeResources: {limits: {nvidia.com/gpu: "1"}}}
          - {name: save, image: y, computeResources: {requests: {cpu: 500m}}}
        ---
        apiVersion: tekton.dev/v1
        kind: PipelineRun
        metadata: {name: pr, namespace: ml, labels: {kai.scheduler/queue: team}}
        spec:
          taskRunTemplate: {podTemplate: {schedulerName: kai-scheduler}}
          pipelineSpec:
            tasks:
            - {name: a, taskRef: {name: train}}
            - name: b
              taskSpec: {steps: [{name: s, image: z}]}
            - {name: c, runAfter: [a], taskRef: {name: train}}
        ---
        apiVersion: tekton.dev/v1
        kind: TaskRun
        metadata: {name: tr, namespace: ml}
        spec: {taskRef: {name: train}, timeout: 1h}
        """
    )
    pods = by_kind(objects, "Pod")
    assert sorted(pods) == ["pr-a-pod", "pr-b-pod", "tr-pod"]  # c waits for a
    assert chain(pods["pr-a-pod"], objects) == ["TaskRun/pr-a", "PipelineRun/pr"]
    assert chain(pods["tr-pod"], objects) == ["TaskRun/tr"]
    a = pods["pr-a-pod"]
    assert [c["name"] for c in a["spec"]["containers"]] == ["step-fit", "step-save"]
    assert a["spec"]["schedulerName"] == "kai-scheduler"
    assert a["metadata"]["labels"]["tekton.dev/pipelineTask"] == "a"
    assert a["metadata"]["labels"]["kai.scheduler/queue"] == "team"
    assert requests(a, "cpu") == 0.5
    messages = {e.reason: e.message for e in events}
    assert "not made here: c" in messages["NotMade"]
    assert "spec.timeout" in messages["NotRead"]


def test_argo_workflow_pods_of_the_steps_that_start_at_once() -> None:
    objects, events = made(
        """
        apiVersion: argoproj.io/v1alpha1
        kind: Workflow
        metadata: {name: wf, namespace: ml}
        spec:
          entrypoint: main
          schedulerName: kai-scheduler
          templates:
          - name: main
            dag:
              tasks:
              - {name: prep, template: work, withItems: [1, 2, 3]}
              - {name: train, template: gpu}
              - {name: report, template: work, dependencies: [train]}
          - name: work
            container: {image: x, resources: {requests: {cpu: "1"}}}
          - name: gpu
            retryStrategy: {limit: 2}
            steps:
            - [{name: fit, template: fit}]
            - [{name: eval, template: work}]
          - name: fit
            script: {image: y, source: "print(1)", resources: {limits: {nvidia.com/gpu: "2"}}}
        """
    )
    pods = by_kind(objects, "Pod")
    assert sorted(pods) == ["wf-fit-3", "wf-work-0", "wf-work-1", "wf-work-2"]
    assert all(chain(p, objects) == ["Workflow/wf"] for p in pods.values())
    fit = pods["wf-fit-3"]
    assert fit["spec"]["schedulerName"] == "kai-scheduler"
    assert fit["spec"]["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu": "2"}}
    assert fit["metadata"]["labels"]["workflows.argoproj.io/workflow"] == "wf"
    messages = {e.reason: e.message for e in events}
    assert "not made here: eval, report" in messages["NotMade"]
    assert "spec.templates[gpu].retryStrategy" in messages["NotRead"]
    with pytest.raises(InputError, match=r"spec.entrypoint: names no template"):
        made(
            "apiVersion: argoproj.io/v1alpha1\nkind: Workflow\nmetadata: {name: w}\nspec: {entrypoint: x}"
        )


def test_grove_podcliqueset_cliques_gangs_and_pods() -> None:
    objects, events = made(
        f"""
        apiVersion: grove.io/v1alpha1
        kind: PodCliqueSet
        metadata: {{name: dis, namespace: ml}}
        spec:
          replicas: 2
          template:
            priorityClassName: inference
            cliques:
            - name: prefill
              spec: {{roleName: prefill, replicas: 3, minAvailable: 2, podSpec: {{containers: [{GPU_CONTAINER}]}}}}
            - name: decode
              labels: {{tier: decode}}
              spec: {{replicas: 1, podSpec: {{containers: [{GPU_CONTAINER}]}}}}
            podCliqueScalingGroups: [{{name: sg, cliqueNames: [decode]}}]
        """
    )
    pods = by_kind(objects, "Pod")
    assert len(pods) == 8
    pod = pods["dis-1-prefill-2"]
    assert chain(pod, objects) == ["PodClique/dis-1-prefill", "PodCliqueSet/dis"]
    assert pod["metadata"]["labels"]["grove.io/podgang"] == "dis-1"
    assert pod["spec"]["priorityClassName"] == "inference"
    assert pods["dis-0-decode-0"]["metadata"]["labels"]["tier"] == "decode"
    gang = by_kind(objects, "PodGang")["dis-1"]
    assert chain(gang, objects) == ["PodCliqueSet/dis"]
    assert [
        (g["name"], g["minReplicas"], len(g["podReferences"])) for g in gang["spec"]["podgroups"]
    ] == [
        ("dis-1-prefill", 2, 3),
        ("dis-1-decode", 1, 1),
    ]
    (note,) = [e for e in events if e.reason == "NotRead"]
    assert "spec.template.podCliqueScalingGroups" in note.message


@pytest.mark.parametrize(
    ("manifest", "problem"),
    [
        (
            "apiVersion: ray.io/v1\nkind: RayCluster\nmetadata: {name: r, namespace: ml}\n"
            "spec: {workerGroupSpecs: [gpu]}",
            "RayCluster ml/r: spec.workerGroupSpecs: must be a list of objects, got ['gpu']",
        ),
        (
            "apiVersion: jobset.x-k8s.io/v1alpha2\nkind: JobSet\nmetadata: {name: j}\nspec: [1]",
            "JobSet default/j: spec: must be an object, got [1]",
        ),
        (
            "apiVersion: leaderworkerset.x-k8s.io/v1\nkind: LeaderWorkerSet\n"
            "metadata: {name: l, namespace: ml}\nspec: {leaderWorkerTemplate: {workerTemplate: 3}}",
            "LeaderWorkerSet ml/l: a field has a type its operator does not take",
        ),
    ],
)
def test_a_field_of_the_wrong_type_is_refused_not_skipped(manifest: str, problem: str) -> None:
    with pytest.raises(InputError) as caught:
        made(manifest)
    (found,) = caught.value.problems
    assert found.startswith(f"in.yaml: {problem}")
