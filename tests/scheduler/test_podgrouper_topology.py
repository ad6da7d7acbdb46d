"""The pod-grouper copies a workload's topology annotations into its PodGroup's
spec.topologyConstraint, from the top owner (the pod's own when it has none), as KAI's."""

from __future__ import annotations

from typing import Any

from kai_py.api import keys
from kai_py.podgrouper.rules import Grouped, GroupingFailed, group_pod

NS = "team-a"
ANNOTATIONS = {
    keys.TOPOLOGY_ANNOTATION: "network",
    keys.TOPOLOGY_REQUIRED_ANNOTATION: "block",
    keys.TOPOLOGY_PREFERRED_ANNOTATION: "rack",
}


def _pod(annotations: dict[str, str] | None = None, owner: dict[str, Any] | None = None) -> Any:
    meta: dict[str, Any] = {"name": "p", "namespace": NS, "uid": "u-p"}
    if annotations:
        meta["annotations"] = annotations
    if owner:
        m = owner["metadata"]
        meta["ownerReferences"] = [
            {
                "apiVersion": owner["apiVersion"],
                "kind": owner["kind"],
                "name": m["name"],
                "uid": m["uid"],
                "controller": True,
            }
        ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"schedulerName": keys.DEFAULT_SCHEDULER_NAME, "containers": [{"name": "c"}]},
    }


def _pytorchjob(annotations: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "dist", "namespace": NS, "uid": "u-kf", "annotations": annotations},
        "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1}, "Worker": {"replicas": 3}}},
    }


def test_the_top_owners_annotations_become_the_constraint() -> None:
    job = _pytorchjob(ANNOTATIONS)
    result = group_pod(_pod(owner=job), [job])
    assert isinstance(result, Grouped)
    constraint = result.pod_group.spec.topology_constraint
    assert constraint is not None
    assert (constraint.topology, constraint.required_topology_level) == ("network", "block")
    assert constraint.preferred_topology_level == "rack"
    spec = result.pod_group.to_manifest()["spec"]
    assert spec["topologyConstraint"] == {
        "topology": "network",
        "requiredTopologyLevel": "block",
        "preferredTopologyLevel": "rack",
    }


def test_a_bare_pod_carries_its_own_and_the_pods_are_not_read_under_an_owner() -> None:
    bare = group_pod(
        _pod({keys.TOPOLOGY_ANNOTATION: "network", keys.TOPOLOGY_REQUIRED_ANNOTATION: "rack"})
    )
    assert isinstance(bare, Grouped)
    constraint = bare.pod_group.spec.topology_constraint
    assert constraint is not None and constraint.required_topology_level == "rack"
    assert constraint.preferred_topology_level is None
    # KAI reads the top owner only: a pod's own annotations under an owner are not used.
    job = _pytorchjob({})
    owned = group_pod(_pod(ANNOTATIONS, owner=job), [job])
    assert isinstance(owned, Grouped)
    assert owned.pod_group.spec.topology_constraint is None
    assert "topologyConstraint" not in owned.pod_group.to_manifest()["spec"]


def test_a_level_without_the_topologys_name_is_copied_for_the_workload_refused_in_a_template() -> (
    None
):
    # The workload's own: copied as written, name missing (the scheduler then says in a
    # Warning on the PodGroup that it is not applied).
    bare = group_pod(_pod({keys.TOPOLOGY_REQUIRED_ANNOTATION: "rack"}))
    assert isinstance(bare, Grouped)
    constraint = bare.pod_group.spec.topology_constraint
    assert constraint is not None
    assert (constraint.topology, constraint.required_topology_level) == (None, "rack")
    # A sub-group's, from a JobSet's pod template: refused, naming the template's field.
    template = {
        "metadata": {"annotations": {keys.TOPOLOGY_PREFERRED_ANNOTATION: "rack"}},
        "spec": {"parallelism": 1},
    }
    jobset = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js", "namespace": NS, "uid": "u-js"},
        "spec": {"replicatedJobs": [{"name": "w", "replicas": 1, "template": template}]},
    }
    pod = _pod(owner=jobset)
    pod["metadata"]["labels"] = {
        "jobset.sigs.k8s.io/replicatedjob-name": "w",
        "jobset.sigs.k8s.io/job-index": "0",
    }
    refused = group_pod(pod, [jobset])
    assert isinstance(refused, GroupingFailed), refused
    [warning] = refused.warnings
    assert "spec.replicatedJobs[0].template.metadata.annotations" in str(warning)
    assert keys.TOPOLOGY_ANNOTATION in str(warning) and "is required" in str(warning)
