"""Topology-aware gangs on both backends: a Topology object, and a PyTorchJob-shaped
gang (a master and two workers) that requires one rack, placed within one."""

from __future__ import annotations

from typing import Any

from kubernetes import client as k8s
from operator_helpers import (
    Operator,
    create_pod,
    create_podgroup,
    create_queues,
    events_of,
    pod,
    podgroup,
    queue,
    wait_for,
)
from realapi_backends import Backend

NS = "team-a"
RACK = "example.com/rack"
TOPOLOGY: dict[str, Any] = {
    "apiVersion": "kai.scheduler/v1alpha1",
    "kind": "Topology",
    "metadata": {"name": "network"},
    "spec": {
        "levels": [{"nodeLabel": RACK, "alias": "rack"}, {"nodeLabel": "kubernetes.io/hostname"}]
    },
}


def _node_of(core: k8s.CoreV1Api, name: str) -> str | None:
    found = core.read_namespaced_pod(name, NS)
    return str(found.spec.node_name) if found.status.phase == "Running" else None


def test_a_gang_that_requires_a_rack_runs_within_one(
    backend: Backend, operator: Operator, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi
) -> None:
    create_queues(custom, queue("root"), queue("team-a", parent="root"))
    custom.create_cluster_custom_object("kai.scheduler", "v1alpha1", "topologies", TOPOLOGY)
    stored = custom.get_cluster_custom_object("kai.scheduler", "v1alpha1", "topologies", "network")
    assert stored["spec"] == TOPOLOGY["spec"]
    # One rack per GPU node.
    for node, rack in (("gpu-0", "r1"), ("gpu-1", "r2")):
        core.patch_node(node, {"metadata": {"labels": {RACK: rack}}})
    # Two GPUs held on one node: binpack alone would put two of the gang's three
    # pods beside them and the third on the other node, across racks.
    create_podgroup(custom, podgroup("busy", NS, "team-a"))
    create_pod(core, pod("busy-0", NS, "busy", gpus=2))
    busy = wait_for(lambda: _node_of(core, "busy-0"), 40, f"busy-0 Running\n{operator.log}")
    group = podgroup("dist", NS, "team-a", min_member=3)
    group["spec"]["topologyConstraint"] = {"topology": "network", "requiredTopologyLevel": "rack"}
    create_podgroup(custom, group)
    names = ["dist-master-0", "dist-worker-0", "dist-worker-1"]
    for name in names:
        body = pod(name, NS, "dist")
        role = "master" if "master" in name else "worker"
        body["metadata"]["labels"]["training.kubeflow.org/replica-type"] = role
        create_pod(core, body)

    def placed() -> set[str] | None:
        nodes = {_node_of(core, name) for name in names}
        return None if None in nodes else {str(n) for n in nodes}

    nodes = wait_for(placed, 40, f"the gang Running\n{operator.log}")
    other = "gpu-1" if busy == "gpu-0" else "gpu-0"
    assert nodes == {other}
    rack = "r2" if other == "gpu-1" else "r1"
    messages = wait_for(
        lambda: [e.message for e in events_of(core, NS, "dist") if e.reason == "TopologyDomain"],
        20,
        "the TopologyDomain Event",
    )
    assert messages == [f"PodGroup {NS}/dist: 3 pods placed in rack {rack} of topology network"]
