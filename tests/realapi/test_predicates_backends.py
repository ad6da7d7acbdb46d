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
