"""Objects and pods the operators of custom workload kinds make, for workloads given
without them.

``kai-py simulate cluster.yaml my-raycluster.yaml`` should answer "what happens if I
apply this", so a JobSet, a LeaderWorkerSet, a Ray cluster, job or service, a Knative
Service, a SparkApplication, a Kubeflow Notebook or TrainJob, an Argo Workflow, a
Tekton PipelineRun or TaskRun, a Grove PodCliqueSet or a KubeVirt
VirtualMachineInstance that comes without its pods gets the owners and pods its
operator would create, with
the owner references and labels the pod-grouper reads (docs/simulate.md lists
them per kind). Each kind's manifest fields that this module does not read are
named in one Event per object: a field is never dropped silently.

The same objects are what the tests create on an API server to stand in for an
operator (``made_objects``): parents come before their children, and every
``ownerReferences[].uid`` names an object made here or the input object.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from kai_py.api.objects import meta
from kai_py.api.quantities import format_quantity, parse_quantity
from kai_py.scheduler.session import Event
from kai_py.state.documents import Document, InputError
from kai_py.state.workloads import count_or, job_pods, owner_ref, pod_from_template, uid_of
from kai_py.state.workloads import expand as expand_builtin

Obj = dict[str, Any]


@dataclass(slots=True)
class Made:
    """What an operator makes for one input object, parents first."""

    objects: list[Obj] = field(default_factory=list)
    #: Paths of the input's fields not read here (said in an Event, not dropped).
    unread: list[str] = field(default_factory=list)
    #: What the operator does later or differently than made here (said in an Event).
    notes: list[str] = field(default_factory=list)
    #: What the operator writes in the input object's status (read by the pod-grouper).
    status: Obj | None = None


class BadField(ValueError):
    """A field whose value cannot be what the operator reads: its path and why."""

    def __init__(self, path: str, value: Any, why: str) -> None:
        self.path, self.value, self.why = path, value, why
        super().__init__(f"{path}: {why}, got {value!r}")


def _count(section: Mapping[str, Any], key: str, default: int, path: str) -> int:
    """A replica count: a whole number of 0 or more, ``default`` when not given."""
    value = section.get(key)
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise BadField(f"{path}.{key}", value, "must be a whole number of 0 or more")
    return value


def _items(section: Mapping[str, Any], key: str, path: str) -> list[Mapping[str, Any]]:
    """A list of objects (replicated jobs, worker groups, tasks): never skipped silently."""
    value = section.get(key)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, Mapping) for v in value):
        raise BadField(f"{path}.{key}", value, "must be a list of objects")
    return value


def _group(obj: Mapping[str, Any]) -> str:
    api_version = str(obj.get("apiVersion") or "")
    return api_version.split("/", 1)[0] if "/" in api_version else ""


def _ns(obj: Mapping[str, Any]) -> str:
    return str(meta(obj).get("namespace") or "default")


def _name(obj: Mapping[str, Any]) -> str:
    return str(meta(obj).get("name") or "")


def _unread(section: Any, read: Iterable[str], path: str) -> list[str]:
    if not isinstance(section, Mapping):
        return []
    known = set(read)
    return [f"{path}.{key}" for key in section if key not in known]


def _owned(
    api_version: str,
    kind: str,
    name: str,
    owner: Mapping[str, Any],
    *,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    spec: Mapping[str, Any] | None = None,
) -> Obj:
    """An object the operator makes under ``owner`` (its controller)."""
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {
            "name": name,
            "namespace": _ns(owner),
            "uid": f"{uid_of(owner)}-{kind.lower()}-{name}",
            "labels": dict(labels or {}),
            "annotations": dict(annotations or {}),
            "creationTimestamp": meta(owner).get("creationTimestamp"),
            "ownerReferences": [owner_ref(owner)],
        },
        "spec": copy.deepcopy(dict(spec or {})),
    }


def _template(
    template: Mapping[str, Any] | None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
) -> Obj:
    """A pod template with the operator's labels and annotations added."""
    t = dict(template or {})
    t_meta = dict(t.get("metadata") or {})
    t_meta["labels"] = {**(t_meta.get("labels") or {}), **(labels or {})}
    t_meta["annotations"] = {**(t_meta.get("annotations") or {}), **(annotations or {})}
    return {"metadata": t_meta, "spec": t.get("spec") or {}}


def _statefulset_pods(sts: Mapping[str, Any]) -> list[Obj]:
    """The pods of a StatefulSet, as its controller names them."""
    spec = sts.get("spec") or {}
    name = _name(sts)
    replicas = count_or(spec.get("replicas"), 1)
    start = count_or((spec.get("ordinals") or {}).get("start"), 0)
    pods = []
    for i in range(start, start + replicas):
        pods.append(
            pod_from_template(
                spec.get("template") or {},
                f"{name}-{i}",
                sts,
                {
                    "statefulset.kubernetes.io/pod-name": f"{name}-{i}",
                    "apps.kubernetes.io/pod-index": str(i),
                },
            )
        )
    return pods


def _short_hash(*parts: str) -> str:
    return hashlib.sha1("/".join(parts).encode()).hexdigest()[:10]


# ---- JobSet -------------------------------------------------------------------------------

_JOBSET = "jobset.sigs.k8s.io/"


def _jobset(js: Mapping[str, Any]) -> Made:
    """One Job per replica of each replicated job, named <jobset>-<replicatedJob>-<index>;
    the Job controller then starts each Job's pods."""
    made = Made()
    spec = js.get("spec") or {}
    name = _name(js)
    made.unread += _unread(spec, ("replicatedJobs", "suspend", "startupPolicy"), "spec")
    rjobs = _items(spec, "replicatedJobs", "spec")
    if (spec.get("startupPolicy") or {}).get("startupPolicyOrder") == "InOrder":
        made.notes.append(
            "spec.startupPolicy.startupPolicyOrder InOrder: the JobSet controller creates "
            "each replicated job once the one before is ready; all are made at once here"
        )
    global_index = 0
    for r_index, rjob in enumerate(rjobs):
        made.unread += _unread(
            rjob, ("name", "replicas", "template"), f"spec.replicatedJobs[{r_index}]"
        )
        rname = str(rjob.get("name") or f"rjob{r_index}")
        replicas = _count(rjob, "replicas", 1, f"spec.replicatedJobs[{r_index}]")
        job_template = rjob.get("template") or {}
        for i in range(replicas):
            job_name = f"{name}-{rname}-{i}"
            marks = {
                f"{_JOBSET}jobset-name": name,
                f"{_JOBSET}replicatedjob-name": rname,
                f"{_JOBSET}replicatedjob-replicas": str(replicas),
                f"{_JOBSET}job-index": str(i),
                f"{_JOBSET}job-global-index": str(global_index),
                f"{_JOBSET}job-key": _short_hash(_ns(js), job_name),
            }
            global_index += 1
            j_meta = job_template.get("metadata") or {}
            job_spec = dict(job_template.get("spec") or {})
            job_spec.setdefault("completionMode", "Indexed")
            job_spec["template"] = _template(job_spec.get("template"), marks, marks)
            if spec.get("suspend") is True:
                job_spec["suspend"] = True
            job = _owned(
                "batch/v1",
                "Job",
                job_name,
                js,
                labels={**(j_meta.get("labels") or {}), **marks},
                annotations={**(j_meta.get("annotations") or {}), **marks},
                spec=job_spec,
            )
            made.objects.append(job)
            made.objects.extend(job_pods(job))
    return made


# ---- LeaderWorkerSet ----------------------------------------------------------------------

_LWS = "leaderworkerset.sigs.k8s.io/"


def _lws(lws: Mapping[str, Any]) -> Made:
    """A leader StatefulSet <lws> with one leader pod per group (<lws>-<i>), and under
    each leader pod a worker StatefulSet <lws>-<i> with size-1 workers (<lws>-<i>-<j>)."""
    made = Made()
    spec = lws.get("spec") or {}
    name = _name(lws)
    made.unread += _unread(spec, ("replicas", "leaderWorkerTemplate", "startupPolicy"), "spec")
    lwt = spec.get("leaderWorkerTemplate") or {}
    made.unread += _unread(
        lwt, ("size", "leaderTemplate", "workerTemplate"), "spec.leaderWorkerTemplate"
    )
    if spec.get("startupPolicy") == "LeaderReady":
        made.notes.append(
            "spec.startupPolicy LeaderReady: the LeaderWorkerSet controller creates the "
            "workers once their leader is ready; they are made at once here"
        )
    size = _count(lwt, "size", 1, "spec.leaderWorkerTemplate")
    if size < 1:
        raise BadField("spec.leaderWorkerTemplate.size", size, "must be 1 or more")
    groups = _count(spec, "replicas", 1, "spec")
    worker_template = lwt.get("workerTemplate") or {}
    leader_template = lwt.get("leaderTemplate") or worker_template
    common = {f"{_LWS}name": name}
    size_note = {f"{_LWS}size": str(size)}
    # What the controller puts in the StatefulSets' templates; the group and worker
    # index of each pod are added by LeaderWorkerSet's pod webhook at creation.
    leader_sts = _owned(
        "apps/v1",
        "StatefulSet",
        name,
        lws,
        labels=common,
        spec={
            "replicas": groups,
            "podManagementPolicy": "Parallel",
            "serviceName": name,
            "selector": {"matchLabels": {**common, f"{_LWS}worker-index": "0"}},
            "template": _template(
                leader_template, {**common, f"{_LWS}worker-index": "0"}, size_note
            ),
        },
    )
    made.objects.append(leader_sts)
    for i in range(groups):
        group = {
            **common,
            f"{_LWS}group-index": str(i),
            f"{_LWS}group-key": _short_hash(name, str(i)),
        }
        leader = pod_from_template(
            leader_sts["spec"]["template"],
            f"{name}-{i}",
            leader_sts,
            {
                **group,
                "statefulset.kubernetes.io/pod-name": f"{name}-{i}",
                "apps.kubernetes.io/pod-index": str(i),
            },
        )
        made.objects.append(leader)
        if size == 1:
            continue
        workers = _owned(
            "apps/v1",
            "StatefulSet",
            f"{name}-{i}",
            leader,
            labels=group,
            spec={
                "replicas": size - 1,
                "ordinals": {"start": 1},
                "podManagementPolicy": "Parallel",
                "serviceName": name,
                "selector": {"matchLabels": group},
                "template": _template(
                    worker_template, group, {**size_note, f"{_LWS}leader-name": f"{name}-{i}"}
                ),
            },
        )
        made.objects.append(workers)
        for j, pod in enumerate(_statefulset_pods(workers), start=1):
            pod["metadata"]["labels"][f"{_LWS}worker-index"] = str(j)
            made.objects.append(pod)
    return made


# ---- Ray ----------------------------------------------------------------------------------

_AUTOSCALER = {
    # KubeRay's default autoscaler sidecar in the head pod (requests = limits).
    "name": "autoscaler",
    "image": "rayproject/ray",
    "resources": {
        "requests": {"cpu": "500m", "memory": "512Mi"},
        "limits": {"cpu": "500m", "memory": "512Mi"},
    },
}


def _ray_workers(group: Mapping[str, Any], path: str) -> int:
    """Pods of one worker group: replicas (minReplicas when unset) kept within
    [minReplicas, maxReplicas], times numOfHosts; none while suspended."""
    if group.get("suspended") is True:
        return 0
    low = _count(group, "minReplicas", 0, path)
    high = _count(group, "maxReplicas", 2**31 - 1, path)
    replicas = _count(group, "replicas", low, path)
    return max(low, min(replicas, high)) * max(1, _count(group, "numOfHosts", 1, path))


def _raycluster(rc: Mapping[str, Any]) -> Made:
    """A head pod and each worker group's pods, owned by the RayCluster."""
    made = Made()
    spec = rc.get("spec") or {}
    name = _name(rc)
    made.unread += _unread(
        spec,
        ("headGroupSpec", "workerGroupSpecs", "suspend", "enableInTreeAutoscaling"),
        "spec",
    )
    if spec.get("suspend") is True:
        return made
    base = {
        "ray.io/cluster": name,
        "ray.io/is-ray-node": "yes",
        "app.kubernetes.io/name": "kuberay",
        "app.kubernetes.io/created-by": "kuberay-operator",
    }
    head = spec.get("headGroupSpec") or {}
    made.unread += _unread(head, ("template",), "spec.headGroupSpec")
    head_pod = pod_from_template(
        head.get("template") or {},
        f"{name}-head-0",
        rc,
        {
            **base,
            "ray.io/node-type": "head",
            "ray.io/group": "headgroup",
            "ray.io/identifier": f"{name}-head",
        },
    )
    if spec.get("enableInTreeAutoscaling") is True:
        head_pod["spec"].setdefault("containers", []).append(copy.deepcopy(_AUTOSCALER))
    made.objects.append(head_pod)
    for g_index, group in enumerate(_items(spec, "workerGroupSpecs", "spec")):
        made.unread += _unread(
            group,
            (
                "groupName",
                "replicas",
                "minReplicas",
                "maxReplicas",
                "numOfHosts",
                "suspended",
                "template",
            ),
            f"spec.workerGroupSpecs[{g_index}]",
        )
        gname = str(group.get("groupName") or f"group{g_index}")
        for i in range(_ray_workers(group, f"spec.workerGroupSpecs[{g_index}]")):
            made.objects.append(
                pod_from_template(
                    group.get("template") or {},
                    f"{name}-{gname}-worker-{i}",
                    rc,
                    {
                        **base,
                        "ray.io/node-type": "worker",
                        "ray.io/group": gname,
                        "ray.io/identifier": f"{name}-worker",
                    },
                )
            )
    return made


def _ray_owner(owner: Mapping[str, Any], cluster_spec_key: str, note: str) -> Made:
    """A RayJob or RayService: the RayCluster it makes, then that cluster's pods."""
    spec = owner.get("spec") or {}
    made = Made(notes=[note])
    cluster_name = f"{_name(owner)}-raycluster"
    cluster = _owned(
        "ray.io/v1",
        "RayCluster",
        cluster_name,
        owner,
        labels=dict(meta(owner).get("labels") or {}),
        spec=spec.get(cluster_spec_key) or {},
    )
    made.objects.append(cluster)
    try:
        inner = _raycluster(cluster)
    except BadField as exc:
        raise BadField(
            f"spec.{cluster_spec_key}{exc.path.removeprefix('spec')}", exc.value, exc.why
        ) from exc
    made.objects.extend(inner.objects)
    made.unread += [f"spec.{cluster_spec_key}{p.removeprefix('spec')}" for p in inner.unread]
    return made


def _rayjob(rj: Mapping[str, Any]) -> Made:
    spec = rj.get("spec") or {}
    if spec.get("clusterSelector"):
        return Made(
            unread=_unread(spec, ("clusterSelector",), "spec"),
            notes=["spec.clusterSelector: the job runs on an existing RayCluster; nothing is made"],
        )
    if spec.get("suspend") is True:
        return Made(
            unread=_unread(spec, ("suspend",), "spec"),
            notes=["spec.suspend: a suspended RayJob has no cluster; nothing is made"],
        )
    made = _ray_owner(
        rj,
        "rayClusterSpec",
        "KubeRay starts the job's submitter once the cluster runs; it is not made here",
    )
    made.unread += _unread(spec, ("rayClusterSpec", "suspend"), "spec")
    # The pod-grouper finds the cluster of a RayJob by this status field.
    made.status = {"rayClusterName": _name(made.objects[0])}
    return made


def _rayservice(rs: Mapping[str, Any]) -> Made:
    spec = rs.get("spec") or {}
    made = _ray_owner(
        rs,
        "rayClusterConfig",
        "spec.serveConfigV2: the Ray Serve applications run inside the cluster's pods",
    )
    made.unread += _unread(spec, ("rayClusterConfig", "serveConfigV2"), "spec")
    # A new RayService's cluster is its pending one until it serves.
    made.status = {"pendingServiceStatus": {"rayClusterName": _name(made.objects[0])}}
    return made


# ---- Knative Serving ----------------------------------------------------------------------

_KNATIVE = "serving.knative.dev/"
_MIN_SCALE = ("autoscaling.knative.dev/min-scale", "autoscaling.knative.dev/minScale")
_INITIAL_SCALE = ("autoscaling.knative.dev/initial-scale", "autoscaling.knative.dev/initialScale")
#: Knative's queue-proxy sidecar with its default request (25m CPU).
_QUEUE_PROXY = {
    "name": "queue-proxy",
    "image": "knative/queue",
    "resources": {"requests": {"cpu": "25m"}},
}


def _scale(annotations: Mapping[str, Any], names: tuple[str, ...], default: int) -> int:
    for key in names:
        value = annotations.get(key)
        if isinstance(value, str) and value.isdigit():
            return int(value)
    return default


def _knative_service(svc: Mapping[str, Any]) -> Made:
    """Service -> Configuration -> Revision <svc>-00001 -> Deployment
    <svc>-00001-deployment -> ReplicaSet -> pods, max(initial-scale, min-scale) of them."""
    made = Made()
    spec = svc.get("spec") or {}
    name = _name(svc)
    made.unread += _unread(spec, ("template", "traffic"), "spec")
    template = spec.get("template") or {}
    t_meta = template.get("metadata") or {}
    annotations = dict(t_meta.get("annotations") or {})
    rev_spec = dict(template.get("spec") or {})
    # Revision fields that are not the pod's (read by Knative's activator, not here).
    for key in (
        "containerConcurrency",
        "timeoutSeconds",
        "responseStartTimeoutSeconds",
        "idleTimeoutSeconds",
    ):
        rev_spec.pop(key, None)
    revision = str(t_meta.get("name") or f"{name}-00001")
    config = _owned(
        "serving.knative.dev/v1",
        "Configuration",
        name,
        svc,
        labels={f"{_KNATIVE}service": name},
        spec={"template": template},
    )
    rev = _owned(
        "serving.knative.dev/v1",
        "Revision",
        revision,
        config,
        labels={
            **(t_meta.get("labels") or {}),
            f"{_KNATIVE}service": name,
            f"{_KNATIVE}configuration": name,
        },
        annotations=annotations,
        spec=rev_spec,
    )
    replicas = max(_scale(annotations, _INITIAL_SCALE, 1), _scale(annotations, _MIN_SCALE, 0))
    pod_labels = {
        f"{_KNATIVE}service": name,
        f"{_KNATIVE}configuration": name,
        f"{_KNATIVE}revision": revision,
        "app": revision,
    }
    pod_spec = copy.deepcopy(rev_spec)
    pod_spec.setdefault("containers", []).append(copy.deepcopy(_QUEUE_PROXY))
    pod_template = _template({"metadata": t_meta, "spec": pod_spec}, pod_labels)
    deployment = _owned(
        "apps/v1",
        "Deployment",
        f"{revision}-deployment",
        rev,
        labels=pod_labels,
        spec={
            "replicas": replicas,
            "selector": {"matchLabels": {f"{_KNATIVE}revision": revision}},
            "template": pod_template,
        },
    )
    rs_name = f"{revision}-deployment-sim"
    replicaset = _owned(
        "apps/v1",
        "ReplicaSet",
        rs_name,
        deployment,
        labels=pod_labels,
        spec={
            "replicas": replicas,
            "selector": deployment["spec"]["selector"],
            "template": pod_template,
        },
    )
    made.objects += [config, rev, deployment, replicaset]
    made.objects += [
        pod_from_template(pod_template, f"{rs_name}-{i}", replicaset, {"pod-template-hash": "sim"})
        for i in range(replicas)
    ]
    return made


# ---- Spark (spark-operator) ---------------------------------------------------------------

_SPARK_POD_FIELDS = (
    "cores",
    "coreLimit",
    "coreRequest",
    "memory",
    "memoryOverhead",
    "gpu",
    "image",
    "labels",
    "annotations",
    "nodeSelector",
    "tolerations",
    "affinity",
    "schedulerName",
    "priorityClassName",
    "template",
    "instances",
)
_JVM_UNITS: Final = {"k": "Ki", "m": "Mi", "g": "Gi", "t": "Ti", "p": "Pi"}


def _jvm_memory(value: Any, path: str) -> float:
    """Spark's memory strings in bytes: 512m, 4g (a number alone is MiB, as Spark reads it)."""
    text = str(value).strip().lower().removesuffix("b")
    try:
        if text[-1:] in _JVM_UNITS:
            return parse_quantity(text[:-1] + _JVM_UNITS[text[-1]])
        return parse_quantity(text) * 2**20
    except ValueError:
        raise BadField(path, value, 'must be a JVM memory size such as "512m" or "4g"') from None


def _spark_pod(
    app: Mapping[str, Any],
    role: str,
    name: str,
    owner: Mapping[str, Any],
    labels: Mapping[str, str],
    path: str,
) -> tuple[Obj, list[str]]:
    spec = app.get("spec") or {}
    part = spec.get(role) or {}
    unread = _unread(part, _SPARK_POD_FIELDS, path)
    memory = _jvm_memory(part.get("memory") or "1g", f"{path}.memory")
    overhead = (
        _jvm_memory(part["memoryOverhead"], f"{path}.memoryOverhead")
        if part.get("memoryOverhead")
        else max(384 * 2**20, 0.1 * memory)  # Spark's default overhead
    )
    requests: Obj = {
        "cpu": str(part.get("coreRequest") or part.get("cores") or 1),
        "memory": str(format_quantity(memory + overhead)),
    }
    limits: Obj = {"memory": requests["memory"]}
    if part.get("coreLimit"):
        limits["cpu"] = str(part["coreLimit"])
    gpu = part.get("gpu") or {}
    if gpu.get("name"):
        limits[str(gpu["name"])] = str(gpu.get("quantity") or 1)
    template = copy.deepcopy(dict(part.get("template") or {}))
    pod_spec = dict(template.get("spec") or {})
    container = {
        "name": f"spark-kubernetes-{role}",
        "image": part.get("image") or spec.get("image") or "spark",
        "resources": {"requests": requests, "limits": limits},
    }
    pod_spec["containers"] = [container, *(pod_spec.get("containers") or [])[1:]]
    for key in ("nodeSelector", "tolerations", "affinity", "schedulerName", "priorityClassName"):
        if part.get(key):
            pod_spec[key] = copy.deepcopy(part[key])
    pod = pod_from_template(
        {
            "metadata": {
                "labels": {
                    **(template.get("metadata") or {}).get("labels", {}),
                    **(part.get("labels") or {}),
                },
                "annotations": dict(part.get("annotations") or {}),
            },
            "spec": pod_spec,
        },
        name,
        owner,
        dict(labels),
    )
    return pod, unread


def _spark(app: Mapping[str, Any]) -> Made:
    """A driver pod <app>-driver owned by the SparkApplication, and executor pods owned
    by the driver (spark.executor.instances: 2 when unset, as Spark's default)."""
    made = Made()
    spec = app.get("spec") or {}
    name = _name(app)
    made.unread += _unread(
        spec,
        (
            "driver",
            "executor",
            "image",
            "type",
            "mode",
            "mainApplicationFile",
            "mainClass",
            "sparkVersion",
            "arguments",
        ),
        "spec",
    )
    selector = f"spark-{_short_hash(uid_of(app))}"
    labels = {
        "spark-app-name": name,
        "spark-app-selector": selector,
        "sparkoperator.k8s.io/app-name": name,
        "sparkoperator.k8s.io/launched-by-spark-operator": "true",
    }
    driver, unread = _spark_pod(
        app, "driver", f"{name}-driver", app, {**labels, "spark-role": "driver"}, "spec.driver"
    )
    made.unread += unread
    made.objects.append(driver)
    executors = _count(spec.get("executor") or {}, "instances", 2, "spec.executor")
    for i in range(1, executors + 1):
        pod, unread = _spark_pod(
            app,
            "executor",
            f"{name}-exec-{i}",
            driver,
            {**labels, "spark-role": "executor", "spark-exec-id": str(i)},
            "spec.executor",
        )
        made.objects.append(pod)
    made.unread += unread if executors else []
    return made


# ---- Kubeflow Notebook --------------------------------------------------------------------


def _notebook(nb: Mapping[str, Any]) -> Made:
    """A StatefulSet <notebook> of one pod <notebook>-0 (none while stopped)."""
    made = Made()
    spec = nb.get("spec") or {}
    name = _name(nb)
    made.unread += _unread(spec, ("template",), "spec")
    stopped = "kubeflow-resource-stopped" in (meta(nb).get("annotations") or {})
    labels = {"statefulset": name, "notebook-name": name}
    sts = _owned(
        "apps/v1",
        "StatefulSet",
        name,
        nb,
        labels=labels,
        spec={
            "replicas": 0 if stopped else 1,
            "serviceName": name,
            "selector": {"matchLabels": {"statefulset": name}},
            "template": _template(spec.get("template"), labels),
        },
    )
    made.objects.append(sts)
    made.objects.extend(_statefulset_pods(sts))
    return made


# ---- KubeVirt -----------------------------------------------------------------------------


def _vmi(vmi: Mapping[str, Any]) -> Made:
    """The virt-launcher pod of a VirtualMachineInstance, with the domain's resources and
    GPUs; KubeVirt's memory overhead is not added."""
    made = Made()
    spec = vmi.get("spec") or {}
    name = _name(vmi)
    read = (
        "domain",
        "nodeSelector",
        "affinity",
        "tolerations",
        "schedulerName",
        "priorityClassName",
        "volumes",
        "networks",
        "terminationGracePeriodSeconds",
    )
    made.unread += _unread(spec, read, "spec")
    domain = spec.get("domain") or {}
    resources = copy.deepcopy(dict(domain.get("resources") or {}))
    requests = dict(resources.get("requests") or {})
    guest = (domain.get("memory") or {}).get("guest")
    if guest and "memory" not in requests:
        requests["memory"] = guest
    limits = dict(resources.get("limits") or {})
    cards: dict[str, int] = {}
    for gpu in (domain.get("devices") or {}).get("gpus") or []:
        if isinstance(gpu, Mapping) and gpu.get("deviceName"):
            cards[str(gpu["deviceName"])] = cards.get(str(gpu["deviceName"]), 0) + 1
    limits.update({device: str(n) for device, n in cards.items()})
    pod_spec: Obj = {
        "containers": [
            {
                "name": "compute",
                "image": "virt-launcher",
                "resources": {"requests": requests, "limits": limits},
            }
        ],
    }
    for key in ("nodeSelector", "affinity", "tolerations", "schedulerName", "priorityClassName"):
        if spec.get(key):
            pod_spec[key] = copy.deepcopy(spec[key])
    labels = {
        **(meta(vmi).get("labels") or {}),
        "kubevirt.io": "virt-launcher",
        "kubevirt.io/created-by": uid_of(vmi),
        "vm.kubevirt.io/name": name,
    }
    made.objects.append(
        pod_from_template(
            {
                "metadata": {"annotations": dict(meta(vmi).get("annotations") or {})},
                "spec": pod_spec,
            },
            f"virt-launcher-{name}",
            vmi,
            labels,
        )
    )
    return made


# ---- Kubeflow Trainer v2 -----------------------------------------------------------------

_TRAINER = "trainer.kubeflow.org"
#: Definitions that workloads name and operators read (a training runtime, a Tekton
#: Task or Pipeline): read by ``expand``, not objects of the snapshot.
DEFINITIONS: Final = frozenset(
    {
        (_TRAINER, "ClusterTrainingRuntime"),
        (_TRAINER, "TrainingRuntime"),
        ("tekton.dev", "Task"),
        ("tekton.dev", "Pipeline"),
    }
)
#: Cluster-scoped definitions (looked up without a namespace).
_CLUSTER_SCOPED = frozenset({"ClusterTrainingRuntime"})


class Definitions:
    """The definitions of the input by (kind, namespace, name), and which were named."""

    def __init__(self, objects: Iterable[Mapping[str, Any]] = ()) -> None:
        self.found: dict[tuple[str, str, str], Mapping[str, Any]] = {}
        self.used: set[tuple[str, str, str]] = set()
        for obj in objects:
            self.found[self.key(str(obj.get("kind")), _ns(obj), _name(obj))] = obj

    @staticmethod
    def key(kind: str, ns: str, name: str) -> tuple[str, str, str]:
        return kind, "" if kind in _CLUSTER_SCOPED else ns, name

    def get(self, kind: str, owner: Mapping[str, Any], name: str, path: str) -> Mapping[str, Any]:
        key = self.key(kind, _ns(owner), name)
        found = self.found.get(key)
        if found is None:
            raise BadField(
                path,
                name,
                f"names a {kind} that is not in the input (give it with the "
                f"{owner.get('kind')}: the pods come from it)",
            )
        self.used.add(key)
        return found


def _runtime(job: Mapping[str, Any], definitions: Definitions) -> Mapping[str, Any]:
    ref = (job.get("spec") or {}).get("runtimeRef") or {}
    kind = str(ref.get("kind") or "ClusterTrainingRuntime")
    return definitions.get(kind, job, str(ref.get("name") or ""), "spec.runtimeRef.name")


def _trainjob(job: Mapping[str, Any], definitions: Definitions) -> Made:
    """A JobSet <trainjob> owned by the TrainJob, from its runtime's template: the trainer
    step's replicated job (labelled trainjob-ancestor-step: trainer, else the one named
    "node") runs numNodes pods with the trainer's image, command, args and
    resourcesPerNode; then the JobSet's Jobs and pods."""
    made = Made()
    spec = job.get("spec") or {}
    trainer = spec.get("trainer") or {}
    made.unread += _unread(
        spec, ("runtimeRef", "trainer", "labels", "annotations", "suspend"), "spec"
    )
    made.unread += _unread(
        trainer, ("image", "command", "args", "numNodes", "resourcesPerNode"), "spec.trainer"
    )
    runtime = _runtime(job, definitions)
    r_spec = runtime.get("spec") or {}
    template = copy.deepcopy(dict(r_spec.get("template") or {}))
    js_spec = dict(template.get("spec") or {})
    nodes = _count(
        trainer,
        "numNodes",
        _count(
            r_spec.get("mlPolicy") or {},
            "numNodes",
            1,
            f"its {runtime.get('kind')} {_name(runtime)}: spec.mlPolicy",
        ),
        "spec.trainer",
    )
    rjobs = [
        dict(r)
        for r in _items(js_spec, "replicatedJobs", f"its {runtime.get('kind')}: spec.template.spec")
    ]
    js_spec["replicatedJobs"] = rjobs
    step = next(
        (
            r
            for r in rjobs
            if ((r.get("template") or {}).get("metadata") or {})
            .get("labels", {})
            .get(f"{_TRAINER}/trainjob-ancestor-step")
            == "trainer"
        ),
        next((r for r in rjobs if r.get("name") == "node"), None),
    )
    if step is None:
        raise BadField(
            "spec.runtimeRef",
            (spec.get("runtimeRef") or {}).get("name"),
            "the runtime's JobSet template has no trainer step (a replicated job named node)",
        )
    job_spec = step.setdefault("template", {}).setdefault("spec", {})
    job_spec["parallelism"] = job_spec["completions"] = nodes
    pod_spec = job_spec.setdefault("template", {}).setdefault("spec", {})
    containers = pod_spec.get("containers") or [{"name": "node"}]
    main = next((c for c in containers if c.get("name") == "node"), containers[0])
    for key in ("image", "command", "args"):
        if key in trainer:
            main[key] = copy.deepcopy(trainer[key])
    if "resourcesPerNode" in trainer:
        main["resources"] = copy.deepcopy(trainer["resourcesPerNode"])
    pod_spec["containers"] = containers
    if spec.get("suspend") is True:
        js_spec["suspend"] = True
    t_meta = template.get("metadata") or {}
    jobset = _owned(
        "jobset.x-k8s.io/v1alpha2",
        "JobSet",
        _name(job),
        job,
        labels={**(t_meta.get("labels") or {}), **(spec.get("labels") or {})},
        annotations={**(t_meta.get("annotations") or {}), **(spec.get("annotations") or {})},
        spec=js_spec,
    )
    made.objects.append(jobset)
    inner = _jobset(jobset)
    made.objects.extend(inner.objects)
    made.notes += [f"its JobSet: {n}" for n in inner.notes]
    if inner.unread:
        made.notes.append(
            f"its JobSet (from {runtime.get('kind')} {_name(runtime)}): "
            f"{', '.join(inner.unread)}: not read by kai-py simulate"
        )
    return made


# ---- Tekton --------------------------------------------------------------------------------

_TEKTON = "tekton.dev/"
_POD_TEMPLATE_FIELDS = (
    "nodeSelector",
    "tolerations",
    "affinity",
    "schedulerName",
    "priorityClassName",
)


def _task_spec(
    owner: Mapping[str, Any], spec: Mapping[str, Any], definitions: Definitions, path: str
) -> tuple[Mapping[str, Any], str]:
    """The task a TaskRun (or a pipeline task) runs: inline, or the Task it names."""
    if spec.get("taskSpec"):
        return spec["taskSpec"], ""
    name = str((spec.get("taskRef") or {}).get("name") or "")
    task = definitions.get("Task", owner, name, f"{path}.taskRef.name")
    return task.get("spec") or {}, name


def _taskrun_pod(
    run: Mapping[str, Any], task: Mapping[str, Any], task_name: str, labels: Mapping[str, str]
) -> tuple[Obj, list[str]]:
    """The pod <taskrun>-pod: one container step-<name> per step (with its
    computeResources) and sidecar-<name> per sidecar, the podTemplate's placement."""
    spec = run.get("spec") or {}
    unread = _unread(
        task, ("steps", "sidecars", "params", "results", "workspaces", "description"), "taskSpec"
    )
    containers = []
    for prefix, key in (("step", "steps"), ("sidecar", "sidecars")):
        for i, step in enumerate(task.get(key) or []):
            unread += _unread(
                step,
                (
                    "name",
                    "image",
                    "command",
                    "args",
                    "script",
                    "env",
                    "computeResources",
                    "workingDir",
                ),
                f"taskSpec.{key}[{i}]",
            )
            containers.append(
                {
                    "name": f"{prefix}-{step.get('name') or i}",
                    "image": step.get("image") or "",
                    "resources": copy.deepcopy(step.get("computeResources") or {}),
                }
            )
    pod_spec: Obj = {"restartPolicy": "Never", "containers": containers}
    template = spec.get("podTemplate") or {}
    unread += _unread(template, _POD_TEMPLATE_FIELDS, "spec.podTemplate")
    for key in _POD_TEMPLATE_FIELDS:
        if template.get(key):
            pod_spec[key] = copy.deepcopy(template[key])
    run_labels = {
        **(meta(run).get("labels") or {}),
        **labels,
        f"{_TEKTON}taskRun": _name(run),
        "app.kubernetes.io/managed-by": "tekton-pipelines",
    }
    if task_name:
        run_labels[f"{_TEKTON}task"] = task_name
    pod = pod_from_template(
        {"metadata": {"annotations": dict(meta(run).get("annotations") or {})}, "spec": pod_spec},
        f"{_name(run)}-pod",
        run,
        run_labels,
    )
    return pod, unread


def _taskrun(run: Mapping[str, Any], definitions: Definitions) -> Made:
    spec = run.get("spec") or {}
    made = Made(unread=_unread(spec, ("taskSpec", "taskRef", "podTemplate", "params"), "spec"))
    task, task_name = _task_spec(run, spec, definitions, "spec")
    pod, unread = _taskrun_pod(run, task, task_name, {})
    made.objects.append(pod)
    made.unread += unread
    return made


def _pipelinerun(run: Mapping[str, Any], definitions: Definitions) -> Made:
    """A TaskRun <pipelinerun>-<task> owned by the PipelineRun for each task that starts
    at once (no runAfter), then its pod; the later tasks and `finally` are said."""
    spec = run.get("spec") or {}
    made = Made(
        unread=_unread(spec, ("pipelineSpec", "pipelineRef", "taskRunTemplate", "params"), "spec")
    )
    if spec.get("pipelineSpec"):
        pipeline, pipeline_name = spec["pipelineSpec"], ""
    else:
        pipeline_name = str((spec.get("pipelineRef") or {}).get("name") or "")
        found = definitions.get("Pipeline", run, pipeline_name, "spec.pipelineRef.name")
        pipeline = found.get("spec") or {}
    pod_template = (spec.get("taskRunTemplate") or {}).get("podTemplate")
    later = []
    for i, task in enumerate(_items(pipeline, "tasks", "pipelineSpec")):
        name = str(task.get("name") or i)
        if task.get("runAfter"):
            later.append(name)
            continue
        labels = {f"{_TEKTON}pipelineRun": _name(run), f"{_TEKTON}pipelineTask": name}
        if pipeline_name:
            labels[f"{_TEKTON}pipeline"] = pipeline_name
        task_spec, task_name = _task_spec(run, task, definitions, f"pipelineSpec.tasks[{i}]")
        taskrun = _owned(
            "tekton.dev/v1",
            "TaskRun",
            f"{_name(run)}-{name}",
            run,
            labels={**(meta(run).get("labels") or {}), **labels},
            spec={"taskSpec": task_spec, **({"podTemplate": pod_template} if pod_template else {})},
        )
        pod, unread = _taskrun_pod(taskrun, task_spec, task_name, labels)
        made.objects += [taskrun, pod]
        made.unread += [f"pipelineSpec.tasks[{i}].{u}" for u in unread]
    finally_tasks = [str(t.get("name")) for t in _items(pipeline, "finally", "pipelineSpec")]
    if later or finally_tasks:
        made.notes.append(
            "Tekton starts the tasks that run after others (and `finally`) once those finish; "
            f"not made here: {', '.join(later + finally_tasks)}"
        )
    return made


# ---- Argo Workflows ------------------------------------------------------------------------

_ARGO = "workflows.argoproj.io/"


def _workflow(wf: Mapping[str, Any]) -> Made:
    """The pods of the steps that start at once: from the entrypoint, a container or
    script template is one pod <workflow>-<template>-<i> (withItems: one per item); steps
    go down the first step group, a DAG down its tasks without dependencies."""
    made = Made()
    spec = wf.get("spec") or {}
    made.unread += _unread(
        spec,
        ("entrypoint", "templates", "arguments", *_POD_TEMPLATE_FIELDS, "serviceAccountName"),
        "spec",
    )
    templates = {str(t.get("name")): t for t in _items(spec, "templates", "spec")}
    later: list[str] = []
    counter = iter(range(10**6))
    visited: set[str] = set()

    def run(name: str, copies: int, path: str, depth: int = 0) -> None:
        template = templates.get(name)
        if template is None:
            raise BadField(path, name, "names no template of spec.templates")
        if depth > 10:
            raise BadField(path, name, "templates nest more than 10 deep")
        if name not in visited:
            visited.add(name)
            made.unread += _unread(
                template,
                ("name", "container", "script", "steps", "dag", "metadata", *_POD_TEMPLATE_FIELDS),
                f"spec.templates[{name}]",
            )
        body = template.get("container") or template.get("script")
        if body:
            for _ in range(copies):
                pod_spec: Obj = {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "main",
                            "image": body.get("image") or "",
                            "resources": copy.deepcopy(body.get("resources") or {}),
                        }
                    ],
                }
                for key in _POD_TEMPLATE_FIELDS:
                    value = template.get(key) or spec.get(key)
                    if value:
                        pod_spec[key] = copy.deepcopy(value)
                t_meta = template.get("metadata") or {}
                made.objects.append(
                    pod_from_template(
                        {"metadata": t_meta, "spec": pod_spec},
                        f"{_name(wf)}-{name}-{next(counter)}",
                        wf,
                        {_ARGO + "workflow": _name(wf), _ARGO + "completed": "false"},
                    )
                )
            return
        steps = template.get("steps")
        if steps:
            first, *rest = steps
            later.extend(str(s.get("name")) for group in rest for s in group or [])
            for i, step in enumerate(first or []):
                run(
                    str(step.get("template")),
                    len(step.get("withItems") or [None]),
                    f"spec.templates[{name}].steps[0][{i}].template",
                    depth + 1,
                )
            return
        dag = template.get("dag")
        if dag:
            for i, task in enumerate(dag.get("tasks") or []):
                if task.get("dependencies") or task.get("depends"):
                    later.append(str(task.get("name")))
                    continue
                run(
                    str(task.get("template")),
                    len(task.get("withItems") or [None]),
                    f"spec.templates[{name}].dag.tasks[{i}].template",
                    depth + 1,
                )
            return
        made.notes.append(
            f"template {name}: neither a container, a script, steps nor a DAG; no pod is made for it"
        )

    run(str(spec.get("entrypoint") or ""), 1, "spec.entrypoint")
    if later:
        made.notes.append(
            f"Argo starts these once the steps before them finish; not made here: {', '.join(later)}"
        )
    return made


# ---- Grove ---------------------------------------------------------------------------------

_GROVE = "grove.io/"


def _podcliqueset(pcs: Mapping[str, Any]) -> Made:
    """Per replica r of the PodCliqueSet: a PodGang <pcs>-<r> (scheduler.grove.io) that
    lists each clique's pods and minimum, and per clique a PodClique <pcs>-<r>-<clique>
    with its replicas pods <podclique>-<i>, labelled grove.io/podgang and
    grove.io/podclique; all owned by the PodCliqueSet, the pods by their PodClique."""
    made = Made()
    spec = pcs.get("spec") or {}
    name, ns = _name(pcs), _ns(pcs)
    made.unread += _unread(spec, ("replicas", "template"), "spec")
    template = spec.get("template") or {}
    made.unread += _unread(template, ("cliques", "priorityClassName"), "spec.template")
    priority = template.get("priorityClassName")
    for r in range(_count(spec, "replicas", 1, "spec")):
        gang_name = f"{name}-{r}"
        groups: list[Obj] = []
        gang = _owned(
            "scheduler.grove.io/v1alpha1",
            "PodGang",
            gang_name,
            pcs,
            labels={"app.kubernetes.io/part-of": name},
            spec={"podgroups": [], **({"priorityClassName": priority} if priority else {})},
        )
        made.objects.append(gang)
        for c, clique in enumerate(template.get("cliques") or []):
            path = f"spec.template.cliques[{c}]"
            made.unread += _unread(clique, ("name", "labels", "annotations", "spec"), path)
            c_spec = clique.get("spec") or {}
            made.unread += _unread(
                c_spec, ("replicas", "minAvailable", "podSpec", "roleName"), f"{path}.spec"
            )
            replicas = _count(c_spec, "replicas", 1, f"{path}.spec")
            clique_name = f"{gang_name}-{clique.get('name') or c}"
            podclique = _owned(
                "grove.io/v1alpha1",
                "PodClique",
                clique_name,
                pcs,
                labels={"app.kubernetes.io/part-of": name, f"{_GROVE}podgang": gang_name},
                spec=c_spec,
            )
            made.objects.append(podclique)
            pod_spec = copy.deepcopy(dict(c_spec.get("podSpec") or {}))
            if priority:
                pod_spec.setdefault("priorityClassName", priority)
            labels = {
                "app.kubernetes.io/part-of": name,
                "app.kubernetes.io/managed-by": "grove-operator",
                f"{_GROVE}podgang": gang_name,
                f"{_GROVE}podclique": clique_name,
                f"{_GROVE}podcliqueset-replica-index": str(r),
            }
            pods = [
                pod_from_template(
                    {
                        "metadata": {
                            "labels": dict(clique.get("labels") or {}),
                            "annotations": dict(clique.get("annotations") or {}),
                        },
                        "spec": pod_spec,
                    },
                    f"{clique_name}-{i}",
                    podclique,
                    labels,
                )
                for i in range(replicas)
            ]
            made.objects.extend(pods)
            groups.append(
                {
                    "name": clique_name,
                    "minReplicas": _count(c_spec, "minAvailable", replicas, f"{path}.spec"),
                    "podReferences": [{"namespace": ns, "name": _name(p)} for p in pods],
                }
            )
        gang["spec"]["podgroups"] = groups
    return made


#: (API group, kind) -> what its operator makes.
MAKERS: Final[dict[tuple[str, str], Callable[[Mapping[str, Any]], Made]]] = {
    ("jobset.x-k8s.io", "JobSet"): _jobset,
    ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"): _lws,
    ("ray.io", "RayCluster"): _raycluster,
    ("ray.io", "RayJob"): _rayjob,
    ("ray.io", "RayService"): _rayservice,
    ("serving.knative.dev", "Service"): _knative_service,
    ("sparkoperator.k8s.io", "SparkApplication"): _spark,
    ("kubeflow.org", "Notebook"): _notebook,
    ("argoproj.io", "Workflow"): _workflow,
    ("kubevirt.io", "VirtualMachineInstance"): _vmi,
    ("grove.io", "PodCliqueSet"): _podcliqueset,
}
#: Those whose operator reads definitions the workload names.
MAKERS_WITH_DEFINITIONS: Final[
    dict[tuple[str, str], Callable[[Mapping[str, Any], Definitions], Made]]
] = {
    (_TRAINER, "TrainJob"): _trainjob,
    ("tekton.dev", "TaskRun"): _taskrun,
    ("tekton.dev", "PipelineRun"): _pipelinerun,
}
#: Every (API group, kind) an operator here makes objects for.
OPERATOR_KINDS: Final = frozenset({*MAKERS, *MAKERS_WITH_DEFINITIONS})

#: Owners an operator makes on the way to its pods (the owner walk goes through them).
MADE_OWNERS: Final = frozenset(
    {
        ("ray.io", "RayCluster"),
        ("serving.knative.dev", "Configuration"),
        ("serving.knative.dev", "Revision"),
        ("tekton.dev", "TaskRun"),
        ("grove.io", "PodClique"),
        # Not an owner of the pods: KAI's Grove grouper reads it by the pods' podgang label.
        ("scheduler.grove.io", "PodGang"),
    }
)


def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
    return _group(obj), str(obj.get("kind") or "")


#: Their kind names alone: most documents (pods) are told apart without their group.
_KIND_NAMES: Final = frozenset(k for _, k in (*OPERATOR_KINDS, *MADE_OWNERS, *DEFINITIONS))


def is_operator_owner(obj: Mapping[str, Any]) -> bool:
    """A custom-resource owner kai-py reads (its API group and kind, so that a core
    Service is not taken for a Knative one)."""
    if obj.get("kind") not in _KIND_NAMES:
        return False
    key = _key(obj)
    return key in OPERATOR_KINDS or key in MADE_OWNERS


def made_objects(obj: Mapping[str, Any], definitions: Definitions | None = None) -> Made | None:
    """What the operator of ``obj`` makes for it, or None for a kind made by no operator
    known here. ``obj`` needs a uid for owner references (one is derived if missing);
    a TrainJob needs its training runtime in ``definitions``, a Tekton run its Task or
    Pipeline when it names one."""
    key = _key(obj)
    with_definitions = MAKERS_WITH_DEFINITIONS.get(key)
    if with_definitions is not None:
        return with_definitions(obj, definitions or Definitions())
    maker = MAKERS.get(key)
    return maker(obj) if maker is not None else None


def expand(docs: list[Document], events: list[Event] | None = None) -> list[Document]:
    """``docs`` with the objects and pods the operators (then the built-in controllers)
    would make for the workloads given without them."""
    if not any(
        doc.body.get("kind") in _KIND_NAMES
        and (is_operator_owner(doc.body) or _key(doc.body) in DEFINITIONS)
        for doc in docs
    ):
        return expand_builtin(docs)
    definitions = Definitions(d.body for d in docs if _key(d.body) in DEFINITIONS)
    owned: set[str] = set()
    for doc in docs:
        for ref in meta(doc.body).get("ownerReferences") or []:
            owned.add(str(ref.get("uid") or f"{ref.get('kind')}/{ref.get('name')}"))
    out: list[Document] = []
    problems: list[str] = []
    for doc in docs:
        kind = str(doc.body.get("kind") or "")
        key = (_group(doc.body), kind)
        if key in DEFINITIONS:
            continue  # read for the workloads that name it; not an object of the snapshot
        if key not in OPERATOR_KINDS:
            out.append(doc)
            continue
        body = dict(doc.body)
        body["metadata"] = {**meta(doc.body), "uid": uid_of(doc.body)}
        if uid_of(body) in owned or f"{kind}/{_name(body)}" in owned:
            out.append(Document(doc.source, body))
            continue  # what it makes is in the input
        who = f"{doc.source}: {kind} {_ns(body)}/{_name(body)}"
        if not isinstance(body.get("spec") or {}, Mapping):
            problems.append(f"{who}: spec: must be an object, got {body.get('spec')!r}")
            continue
        try:
            made = made_objects(body, definitions)
        except BadField as exc:
            problems.append(f"{who}: {exc}")
            continue
        except (AttributeError, TypeError, ValueError) as exc:
            # A field of another type than the operator's API has, deeper than checked.
            problems.append(f"{who}: a field has a type its operator does not take ({exc})")
            continue
        assert made is not None  # a kind of OPERATOR_KINDS
        if made.status:
            body["status"] = {**(body.get("status") or {}), **made.status}
        out.append(Document(doc.source, body))
        by = f"{doc.source} (made by the {kind} operator)"
        out.extend(Document(by, o) for o in made.objects)
        if events is not None and made.unread:
            events.append(
                Event(
                    kind,
                    _ns(body),
                    _name(body),
                    "Normal",
                    "NotRead",
                    f"{who}: {', '.join(made.unread)}: not read by kai-py simulate "
                    "(the objects and pods made for it do not follow them)",
                )
            )
        if events is not None:
            events.extend(
                Event(kind, _ns(body), _name(body), "Normal", "NotMade", f"{who}: {n}")
                for n in made.notes
            )
    if problems:
        raise InputError(problems)
    if events is not None:
        events.extend(
            Event(kind, ns, name, "Normal", "NotUsed", f"{kind} {name}: no workload names it")
            for (kind, ns, name) in definitions.found
            if (kind, ns, name) not in definitions.used
        )
    return expand_builtin(out)
