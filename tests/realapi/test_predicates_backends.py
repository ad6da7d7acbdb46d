"""KAI's predicates and scores that need more than a node's labels, end to end on both
backends (the emulator and a real kube-apiserver): the operator reads the objects they
depend on (ConfigMaps) through its own watches, and the reasons reach the pod's Events.
"""

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

from kai_py.api import keys

NS = "team-a"


def _queues(custom: k8s.CustomObjectsApi) -> None:
    create_queues(custom, queue("root"), queue("team-a", parent="root"))


def _node_of(core: k8s.CoreV1Api, name: str) -> str | None:
    node: str | None = core.read_namespaced_pod(name, NS).spec.node_name
    return node


def _unschedulable(core: k8s.CoreV1Api, name: str, words: str) -> list[Any]:
    return [
        e
        for e in events_of(core, NS, name)
        if e.reason == "Unschedulable" and words in (e.message or "")
    ]


def test_a_pod_waits_for_the_configmap_it_mounts(
    backend: Backend, operator: Operator, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi
) -> None:
    _queues(custom)
    create_podgroup(custom, podgroup("cfg", NS, "team-a"))
    body = pod("cfg-0", NS, "cfg", gpus=0)
    body["spec"]["volumes"] = [{"name": "settings", "configMap": {"name": "settings"}}]
    body["spec"]["containers"][0]["volumeMounts"] = [{"name": "settings", "mountPath": "/etc/s"}]
    create_pod(core, body)
    why = 'configmap team-a/settings (volume "settings") does not exist'
    wait_for(
        lambda: _unschedulable(core, "cfg-0", why),
        timeout=30,
        what=f"an Unschedulable event naming the ConfigMap\n{operator.log}",
    )
    assert _node_of(core, "cfg-0") is None
    core.create_namespaced_config_map(
        NS, {"metadata": {"name": "settings"}, "data": {"mode": "fast"}}
    )
    wait_for(
        lambda: _node_of(core, "cfg-0"),
        timeout=30,
        what=f"cfg-0 bound once its ConfigMap exists\n{operator.log}",
    )


def test_pods_asking_for_one_host_port_land_on_different_nodes(
    backend: Backend, operator: Operator, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi
) -> None:
    _queues(custom)
    # Three nodes (two GPU nodes, one CPU node): three pods on port 8080 take one each,
    # the fourth finds the port taken everywhere.
    for i in range(4):
        create_podgroup(custom, podgroup(f"web-{i}", NS, "team-a"))
        body = pod(f"web-{i}", NS, f"web-{i}", gpus=0)
        body["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 8080}]
        create_pod(core, body)

    def three_bound() -> set[str] | None:
        nodes = [_node_of(core, f"web-{i}") for i in range(4)]
        placed = [n for n in nodes if n]
        return set(placed) if len(placed) == 3 else None

    nodes = wait_for(three_bound, timeout=40, what=f"three web pods bound\n{operator.log}")
    assert nodes == {"gpu-0", "gpu-1", "cpu-0"}
    waiting = next(f"web-{i}" for i in range(4) if not _node_of(core, f"web-{i}"))
    wait_for(
        lambda: _unschedulable(core, waiting, "hostPort 8080/TCP is taken"),
        timeout=30,
        what=f"an Unschedulable event naming the port\n{operator.log}",
    )


def _cpu_pod(name: str, labels: dict[str, str] | None = None, **affinity: Any) -> dict[str, Any]:
    body = pod(name, NS, name, gpus=0)
    body["metadata"]["labels"].update(labels or {})
    if affinity:
        body["spec"]["affinity"] = affinity
    return body


def _bound(core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, body: dict[str, Any]) -> str:
    name = body["metadata"]["name"]
    create_podgroup(custom, podgroup(name, NS, "team-a"))
    create_pod(core, body)
    node: str = wait_for(lambda: _node_of(core, name), timeout=30, what=f"{name} bound")
    return node


def test_preferred_affinity_and_anti_affinity_choose_the_node_before_binpack(
    backend: Backend, operator: Operator, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi
) -> None:
    """As KAI's node-order e2e: a pod preferring to be beside a pod lands on its node, one
    preferring to be apart does not. Binpack alone would put every CPU-only pod here on
    cpu-0 (the least idle CPU)."""
    _queues(custom)
    assert _bound(core, custom, _cpu_pod("plain")) == "cpu-0"
    anchor = pod("anchor", NS, "anchor", gpus=1)
    anchor["metadata"]["labels"]["app"] = "anchor"
    anchor_node = _bound(core, custom, anchor)
    assert anchor_node.startswith("gpu-")
    term = {
        "weight": 10,
        "podAffinityTerm": {
            "labelSelector": {"matchLabels": {"app": "anchor"}},
            "topologyKey": "kubernetes.io/hostname",
        },
    }
    near = _cpu_pod("near", podAffinity={"preferredDuringSchedulingIgnoredDuringExecution": [term]})
    assert _bound(core, custom, near) == anchor_node
    term["podAffinityTerm"]["labelSelector"] = {"matchLabels": {"app": "cpu"}}
    lonely = _cpu_pod("lonely-0", {"app": "cpu"})
    assert _bound(core, custom, lonely) == "cpu-0"
    apart = _cpu_pod(
        "apart",
        {"app": "cpu"},
        podAntiAffinity={"preferredDuringSchedulingIgnoredDuringExecution": [term]},
    )
    assert _bound(core, custom, apart) != "cpu-0"


def test_preferred_node_affinity_chooses_the_node_before_binpack(
    backend: Backend, operator: Operator, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi
) -> None:
    _queues(custom)
    preference = {
        "weight": 50,
        "preference": {
            "matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": ["gpu-1"]}
            ]
        },
    }
    body = _cpu_pod(
        "picky", nodeAffinity={"preferredDuringSchedulingIgnoredDuringExecution": [preference]}
    )
    assert _bound(core, custom, body) == "gpu-1"
    assert _bound(core, custom, _cpu_pod("plain")) == "cpu-0"
    assert not [e for e in events_of(core, NS, "picky") if e.reason == "NotApplied"]


def _cache_loaded(operator: Operator) -> None:
    # Failing at once would stop the operator while it is still starting (a traceback).
    wait_for(lambda: "cache loaded" in operator.log, timeout=30, what=operator.log)


def _claim(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}},
            **spec,
        },
    }


def _with_claim(body: dict[str, Any], claim: str) -> dict[str, Any]:
    body["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]
    return body


def test_a_pod_waits_for_its_claim_and_for_an_immediate_claim_to_be_bound(
    backend: Backend, operator: Operator, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi
) -> None:
    _queues(custom)
    create_podgroup(custom, podgroup("vol", NS, "team-a"))
    create_pod(core, _with_claim(pod("vol-0", NS, "vol", gpus=0), "data"))
    wait_for(
        lambda: _unschedulable(
            core, "vol-0", 'persistentvolumeclaim team-a/data (volume "data") does not exist'
        ),
        timeout=30,
        what=f"an Unschedulable event naming the claim\n{operator.log}",
    )
    # No class: nothing makes its volume, it waits for one to be bound to it.
    core.create_namespaced_persistent_volume_claim(NS, _claim("data", storageClassName=""))
    wait_for(
        lambda: _unschedulable(
            core,
            "vol-0",
            "pod has unbound immediate PersistentVolumeClaims (persistentvolumeclaim team-a/data)",
        ),
        timeout=30,
        what=f"an Unschedulable event for the unbound claim\n{operator.log}",
    )
    assert _node_of(core, "vol-0") is None


def test_a_bound_volume_decides_the_node(
    operator: Operator,
    core: k8s.CoreV1Api,
    custom: k8s.CustomObjectsApi,
) -> None:
    _cache_loaded(operator)
    _queues(custom)
    core.create_persistent_volume(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": "local-gpu-1"},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"],
                "local": {"path": "/mnt/disk"},
                "nodeAffinity": {
                    "required": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {
                                        "key": "kubernetes.io/hostname",
                                        "operator": "In",
                                        "values": ["gpu-1"],
                                    }
                                ]
                            }
                        ]
                    }
                },
            },
        }
    )
    core.create_namespaced_persistent_volume_claim(
        NS, _claim("local", storageClassName="", volumeName="local-gpu-1")
    )
    # Binpack alone would put a CPU-only pod on cpu-0.
    assert _bound(core, custom, _with_claim(_cpu_pod("local-0"), "local")) == "gpu-1"


def test_a_first_consumer_claim_gets_a_node_its_class_allows(
    operator: Operator,
    core: k8s.CoreV1Api,
    custom: k8s.CustomObjectsApi,
) -> None:
    _cache_loaded(operator)
    _queues(custom)
    k8s.StorageV1Api(core.api_client).create_storage_class(
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {"name": "late"},
            "provisioner": "example.com/disk",
            "volumeBindingMode": "WaitForFirstConsumer",
            "allowedTopologies": [
                {"matchLabelExpressions": [{"key": "kubernetes.io/hostname", "values": ["gpu-0"]}]}
            ],
        }
    )
    core.create_namespaced_persistent_volume_claim(NS, _claim("late", storageClassName="late"))
    assert _bound(core, custom, _with_claim(_cpu_pod("late-0"), "late")) == "gpu-0"
    pvc = core.read_namespaced_persistent_volume_claim("late", NS)
    assert pvc.metadata.annotations[keys.SELECTED_NODE_ANNOTATION] == "gpu-0"


def test_a_claim_of_a_class_with_no_storageclass_is_bound_to_a_volume_and_its_pod_runs(
    operator: Operator,
    core: k8s.CoreV1Api,
    custom: k8s.CustomObjectsApi,
) -> None:
    # KAI's "Schedule pod with PV and PVC": no StorageClass "manual" exists; the
    # PersistentVolume controller binds the claim to the volume by the class's name.
    _cache_loaded(operator)
    _queues(custom)
    core.create_persistent_volume(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": "manual-pv"},
            "spec": {
                "storageClassName": "manual",
                "capacity": {"storage": "10Mi"},
                "accessModes": ["ReadWriteOnce"],
                "hostPath": {"path": "/tmp"},
            },
        }
    )
    core.create_namespaced_persistent_volume_claim(
        NS,
        _claim("manual", storageClassName="manual", resources={"requests": {"storage": "1k"}}),
    )
    _bound(core, custom, _with_claim(_cpu_pod("manual-0"), "manual"))
    pvc = core.read_namespaced_persistent_volume_claim("manual", NS)
    assert (pvc.status.phase, pvc.spec.volume_name) == ("Bound", "manual-pv")
    assert pvc.status.capacity == {"storage": "10Mi"}
    assert pvc.metadata.annotations["pv.kubernetes.io/bind-completed"] == "yes"
    assert pvc.metadata.annotations["pv.kubernetes.io/bound-by-controller"] == "yes"
    pv = core.read_persistent_volume("manual-pv")
    assert (pv.status.phase, pv.spec.claim_ref.uid) == ("Bound", pvc.metadata.uid)
    wait_for(
        lambda: core.read_namespaced_pod("manual-0", NS).status.phase == "Running",
        timeout=30,
        what="manual-0 running",
    )
