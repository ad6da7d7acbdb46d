"""Kubeflow's kinds: the training operator's jobs (one gang of all replicas) and
Notebooks (one group, priority class build)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from kai_py.podgrouper.kinds.common import (
    Obj,
    Plan,
    Workload,
    invalid,
    mapping,
    needs_manifest,
    non_negative_int,
)

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


def training_job(workload: Workload) -> Plan:
    top = workload.top
    needs_manifest(top)
    policy = mapping(mapping(top.spec().get("runPolicy")).get("schedulingPolicy"))
    own = policy.get("priorityClass")
    return Plan(
        owner=top,
        min_member=_min_member(top),
        priority_class=own if isinstance(own, str) and own else None,
    )


def notebook(workload: Workload) -> Plan:
    return Plan(owner=workload.top, default_priority_class=BUILD_PRIORITY_CLASS)
