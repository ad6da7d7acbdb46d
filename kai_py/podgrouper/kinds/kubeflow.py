"""Kubeflow's kinds: the training operator's jobs (one gang of all replicas; a
PyTorchJob whose workers are cut into segments, ``kai.scheduler/segment-size``, a
sub-group per segment as KAI's grouper makes them) and Notebooks (one group,
priority class build)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from kai_py.api import keys
from kai_py.api.podgroup import SubGroup
from kai_py.podgrouper.kinds.common import (
    GrouperWarning,
    Obj,
    Plan,
    Workload,
    annotation_path,
    invalid,
    label_path,
    mapping,
    needs_manifest,
    non_negative_int,
)
from kai_py.podgrouper.kinds.lws import MAX_SEGMENTS, segment_topology

# Kubeflow training-operator kinds -> the prefix of their `<x>ReplicaSpecs` field.
KUBEFLOW_REPLICA_SPECS: Final[dict[str, str]] = {
    "PyTorchJob": "pytorchReplicaSpecs",
    "TFJob": "tfReplicaSpecs",
    "MPIJob": "mpiReplicaSpecs",
    "XGBoostJob": "xgbReplicaSpecs",
    "JAXJob": "jaxReplicaSpecs",
    "PaddleJob": "paddleReplicaSpecs",
}

#: KAI's default priority class of interactive kinds: a notebook is work a person
#: waits on (build: priority 100, so not preemptible by default).
BUILD_PRIORITY_CLASS: Final = "build"


def _min_member(job: Obj) -> int:
    spec = job.spec()
    policy = mapping(mapping(spec.get("runPolicy")).get("schedulingPolicy"))
    if policy.get("minAvailable") is not None:
        return non_negative_int(
            policy["minAvailable"], job, "spec.runPolicy.schedulingPolicy.minAvailable"
        )
    elastic = mapping(spec.get("elasticPolicy"))
    if job.kind == "PyTorchJob" and elastic.get("minReplicas") is not None:
        # An elastic PyTorchJob runs with as few as minReplicas workers.
        return non_negative_int(elastic["minReplicas"], job, "spec.elasticPolicy.minReplicas")
    specs_field = KUBEFLOW_REPLICA_SPECS[job.kind]
    replica_specs = spec.get(specs_field)
    if not isinstance(replica_specs, Mapping) or not replica_specs:
        raise invalid(
            job,
            f"spec.{specs_field}",
            "is missing, and spec.runPolicy.schedulingPolicy.minAvailable is not set: "
            "cannot tell how many pods the job needs",
        )
    total = 0
    for role, replica_spec in replica_specs.items():
        # The training operator defaults replicas to 1.
        replicas = mapping(replica_spec).get("replicas", 1)
        total += non_negative_int(replicas, job, f"spec.{specs_field}.{role}.replicas")
    return total


REPLICA_TYPE_LABEL: Final = "training.kubeflow.org/replica-type"
REPLICA_INDEX_LABEL: Final = "training.kubeflow.org/replica-index"


def training_job(workload: Workload) -> Plan:
    top = workload.top
    needs_manifest(top)
    policy = mapping(mapping(top.spec().get("runPolicy")).get("schedulingPolicy"))
    own = policy.get("priorityClass")
    min_member = _min_member(top)
    warnings: list[GrouperWarning] = []
    segmented = _pytorch_segments(workload, min_member, warnings) if top.kind == "PyTorchJob" else None
    sub_groups, pod_sub_group = segmented or ((), None)
    return Plan(
        owner=top,
        min_member=min_member,
        priority_class=own if isinstance(own, str) and own else None,
        sub_groups=tuple(sub_groups),
        pod_sub_group=pod_sub_group,
        warnings=tuple(warnings),
    )


def _worker_template_annotations(specs: Mapping[str, Any]) -> Mapping[str, Any]:
    worker = mapping(specs.get("Worker"))
    return mapping(mapping(mapping(worker.get("template")).get("metadata")).get("annotations"))


def _pytorch_segments(
    workload: Workload, min_member: int, warnings: list[GrouperWarning]
) -> tuple[list[SubGroup], str | None] | None:
    """A PyTorchJob's sub-groups when its workers are cut into segments (the pod's
    ``kai.scheduler/segment-size``, else the Worker template's), as KAI's grouper: a
    ``master`` sub-group, a ``worker`` parent needing all its segments, and segments
    ``worker-<i>`` of that many workers each (the last one the rest), with the
    segment placement annotations as their topology constraint. Segments past the
    job's minimum of workers need no pod (an elastic job's extra workers). None when
    not segmented: the job stays one gang."""
    top, pod = workload.top, workload.pod
    specs = mapping(top.spec().get("pytorchReplicaSpecs"))
    template = _worker_template_annotations(specs)
    if pod.annotations.get(keys.SEGMENT_SIZE_ANNOTATION):
        where = annotation_path(keys.SEGMENT_SIZE_ANNOTATION)
        raw = pod.annotations[keys.SEGMENT_SIZE_ANNOTATION]
        size_of: Obj = pod
    elif template.get(keys.SEGMENT_SIZE_ANNOTATION):
        where = "spec.pytorchReplicaSpecs.Worker.template." + annotation_path(
            keys.SEGMENT_SIZE_ANNOTATION
        )
        raw, size_of = template[keys.SEGMENT_SIZE_ANNOTATION], top
    else:
        return None
    size = non_negative_int(raw, size_of, where, minimum=1)
    if "Worker" not in specs:
        return None
    workers = non_negative_int(
        mapping(specs["Worker"]).get("replicas", 1), top, "spec.pytorchReplicaSpecs.Worker.replicas"
    )
    masters = 0
    if "Master" in specs:
        masters = non_negative_int(
            mapping(specs["Master"]).get("replicas", 0),
            top,
            "spec.pytorchReplicaSpecs.Master.replicas",
        )
    count, partial = -(-workers // size), workers % size
    if count > MAX_SEGMENTS:
        raise invalid(size_of, where, f"makes {count} segments of the workers, above {MAX_SEGMENTS}")
    groups = [SubGroup(name="master", min_member=masters)] if masters else []
    role = pod.labels.get(REPLICA_TYPE_LABEL)
    mine = "master" if role == "master" and masters else None
    if count == 0:  # no workers: the worker sub-group stays a leaf
        groups.append(SubGroup(name="worker", min_member=max(0, min_member - masters)))
        return groups, mine or ("worker" if role == "worker" else None)
    if role == "worker":
        index_path = label_path(REPLICA_INDEX_LABEL)
        if REPLICA_INDEX_LABEL not in pod.labels:
            raise invalid(pod, index_path, "is missing on a worker pod of a segmented PyTorchJob")
        mine = f"worker-{non_negative_int(pod.labels[REPLICA_INDEX_LABEL], pod, index_path) // size}"
    constraint = segment_topology(workload, template, "Worker template", warnings)
    # Segments holding one of the first (minimum - masters) workers are needed to start.
    needed = -(-max(0, min_member - masters) // size)
    groups.append(SubGroup(name="worker", min_sub_group=count))
    for i in range(count):
        members = 0 if i >= needed else (partial if partial and i == count - 1 else size)
        groups.append(
            SubGroup(
                name=f"worker-{i}",
                parent="worker",
                min_member=members,
                topology_constraint=constraint,
            )
        )
    return groups, mine


def notebook(workload: Workload) -> Plan:
    return Plan(owner=workload.top, default_priority_class=BUILD_PRIORITY_CLASS)
