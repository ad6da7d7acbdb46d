"""KAI's SchedulingShard and Config read by a running operator, on both backends:
a change is applied on the next cycle, without a restart, and what kai-py does not
apply is named in a condition on the object."""

from __future__ import annotations

import time
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
GROUP, VERSION = "kai.scheduler", "v1"


def _shard(custom: k8s.CustomObjectsApi) -> dict[str, Any]:
    got: dict[str, Any] = custom.get_cluster_custom_object(
        GROUP, VERSION, "schedulingshards", "default"
    )
    return got


def _condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    generation = obj["metadata"]["generation"]
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c["type"] == kind and c.get("observedGeneration") == generation:
            return dict(c)
    return None


def _applied(custom: k8s.CustomObjectsApi, operator: Operator) -> dict[str, Any]:
    """The shard once the scheduler has read its current generation (KAI's wait)."""
    return wait_for(
        lambda: _condition(_shard(custom), "Deployed"),
        timeout=30,
        what=f"Deployed for the shard's generation\n{operator.log}",
    )


def _place(core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, name: str, op: Operator) -> str:
    create_podgroup(custom, podgroup(name, NS, "team-a"))
    create_pod(core, pod(name, NS, name, gpus=1))

    def node() -> str | None:
        p = core.read_namespaced_pod(name, NS)
        return str(p.spec.node_name) if p.status.phase == "Running" else None

    return wait_for(node, timeout=30, what=f"{name} Running\n{op.log}")


def _put(custom: k8s.CustomObjectsApi, plural: str, body: dict[str, Any]) -> None:
    """Create the object, or give the one there (the install's default shard and
    Config, on a cluster made as kai-py dev makes one) this spec."""
    try:
        custom.create_cluster_custom_object(GROUP, VERSION, plural, body)
    except k8s.ApiException as exc:
        if exc.status != 409:
            raise
        name = body["metadata"]["name"]
        old = custom.get_cluster_custom_object(GROUP, VERSION, plural, name)
        body = {
            **body,
            "metadata": {**body["metadata"], "resourceVersion": old["metadata"]["resourceVersion"]},
        }
        custom.replace_cluster_custom_object(GROUP, VERSION, plural, name, body)


def _placement(custom: k8s.CustomObjectsApi, strategy: str) -> None:
    custom.patch_cluster_custom_object(
        GROUP,
        VERSION,
        "schedulingshards",
        "default",
        {"spec": {"placementStrategy": {"gpu": strategy, "cpu": strategy}}},
    )


def test_the_shards_placement_strategy_applies_without_a_restart(
    backend: Backend, operator: Operator, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi
) -> None:
    create_queues(custom, queue("root"), queue("team-a", parent="root"))
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "SchedulingShard",
        "metadata": {"name": "default"},
        "spec": {"placementStrategy": {"gpu": "binpack", "cpu": "binpack"}},
    }
    _put(custom, "schedulingshards", body)
    _applied(custom, operator)
    # Binpack: the second pod joins the first on its node.
    first = _place(core, custom, "a", operator)
    assert _place(core, custom, "b", operator) == first
    # Spread, same process: the next pod goes to the emptier node.
    _placement(custom, "spread")
    _applied(custom, operator)
    other = _place(core, custom, "c", operator)
    assert other != first
    # Binpack again: the fullest node that fits (2 of 4 used there, 1 on the other).
    _placement(custom, "binpack")
    _applied(custom, operator)
    assert _place(core, custom, "d", operator) == first
    assert operator.process.poll() is None  # never restarted
    # Every field given was applied.
    not_applied = _condition(_shard(custom), "NotApplied")
    assert not_applied is not None and not_applied["status"] == "False", not_applied


def test_an_unknown_plugin_is_named_in_a_not_applied_condition(
    backend: Backend, operator: Operator, custom: k8s.CustomObjectsApi
) -> None:
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "SchedulingShard",
        "metadata": {"name": "default"},
        "spec": {
            "plugins": {"numa": {"enabled": True}, "proportion": {"arguments": {"kValue": "-2"}}},
            "queueDepthPerAction": {"allocate": 10},
        },
    }
    _put(custom, "schedulingshards", body)
    _applied(custom, operator)
    got = _condition(_shard(custom), "NotApplied")
    assert got is not None and got["status"] == "True", got
    assert got["reason"] == "FieldsNotApplied"
    message = got["message"]
    assert 'spec.plugins.numa={"enabled": true}: kai-py has no plugin of this name' in message
    # kValue is applied; a value KAI would not take is named.
    assert "spec.plugins.proportion.arguments.kValue=-2: invalid" in message
    assert "spec.queueDepthPerAction.allocate=10" in message
    # KAI's Config: the default shard's scheduler reports on it too.
    config = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Config",
        "metadata": {"name": "kai-config"},
        "spec": {
            "global": {"nodePoolLabelKey": "example.com/pool", "replicaCount": 2},
            "admission": {"blockNvidiaVisibleDevices": True},
        },
    }
    _put(custom, "configs", config)

    def config_not_applied() -> dict[str, Any] | None:
        got = custom.get_cluster_custom_object(GROUP, VERSION, "configs", "kai-config")
        return _condition(got, "NotApplied")

    got = wait_for(config_not_applied, timeout=30, what=f"the Config's status\n{operator.log}")
    assert "spec.global.replicaCount=2" in got["message"]
    assert 'spec.admission={"blockNvidiaVisibleDevices": true}' in got["message"]
    assert "nodePoolLabelKey" not in got["message"]  # applied


def test_a_pod_naming_a_pool_no_shard_serves_gets_one_warning(
    backend: Backend, operator: Operator, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi
) -> None:
    create_queues(custom, queue("root"), queue("team-a", parent="root"))
    shard = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "SchedulingShard",
        "metadata": {"name": "pool-a"},
        "spec": {"partitionLabelValue": "pool-a"},
    }
    _put(custom, "schedulingshards", shard)
    for name, pool in (("served", "pool-a"), ("lost", "pool-b")):
        create_podgroup(custom, podgroup(name, NS, "team-a"))
        body = pod(name, NS, name, gpus=1)
        body["metadata"].setdefault("labels", {})["kai.scheduler/node-pool"] = pool
        create_pod(core, body)

    def warnings(name: str) -> list[Any]:
        return [e for e in events_of(core, NS, name) if e.reason == "NodePoolNotServed"]

    got = wait_for(lambda: warnings("lost"), timeout=30, what=f"the warning\n{operator.log}")
    assert got[0].type == "Warning"
    assert 'no scheduling shard serves the node pool "pool-b"' in got[0].message
    time.sleep(3)  # several cycles and grouper passes later: still one, none on "served"
    assert [(e.count or 1) for e in warnings("lost")] == [1]
    assert warnings("served") == []


def test_the_config_switches_scheduling_off_and_on(
    backend: Backend, operator: Operator, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi
) -> None:
    create_queues(custom, queue("root"), queue("team-a", parent="root"))

    def switch(enabled: bool) -> None:
        config = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "Config",
            "metadata": {"name": "kai-config"},
            "spec": {"scheduler": {"service": {"enabled": enabled}}},
        }
        _put(custom, "configs", config)

        def read() -> dict[str, Any] | None:
            got = custom.get_cluster_custom_object(GROUP, VERSION, "configs", "kai-config")
            return _condition(got, "Deployed")

        wait_for(read, timeout=30, what=f"the Config read\n{operator.log}")

    switch(False)
    create_podgroup(custom, podgroup("off", NS, "team-a"))
    create_pod(core, pod("off", NS, "off", gpus=1))
    time.sleep(3)  # many cycles of 0.2 s: none binds while scheduling is off
    assert not core.read_namespaced_pod("off", NS).spec.node_name
    switch(True)
    wait_for(
        lambda: core.read_namespaced_pod("off", NS).spec.node_name,
        timeout=30,
        what=f"the pod bound once scheduling is on\n{operator.log}",
    )


def test_two_shards_on_one_pool_are_said_so_on_the_schedulers_shard(
    backend: Backend, operator: Operator, custom: k8s.CustomObjectsApi
) -> None:
    default = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "SchedulingShard",
        "metadata": {"name": "default"},
        "spec": {"partitionLabelValue": ""},
    }
    _put(custom, "schedulingshards", default)
    twin = {**default, "metadata": {"name": "twin"}}
    custom.create_cluster_custom_object(GROUP, VERSION, "schedulingshards", twin)

    def pool_shared(status: str) -> dict[str, Any] | None:
        got = _condition(_shard(custom), "PoolShared")
        return got if got is not None and got["status"] == status else None

    got = wait_for(lambda: pool_shared("True"), timeout=30, what=f"PoolShared\n{operator.log}")
    assert got["message"].startswith('spec.partitionLabelValue="": SchedulingShard twin serves')
    custom.delete_cluster_custom_object(GROUP, VERSION, "schedulingshards", "twin")
    wait_for(lambda: pool_shared("False"), timeout=30, what=f"PoolShared False\n{operator.log}")


def _restrict(custom: k8s.CustomObjectsApi, on: bool) -> None:
    custom.patch_cluster_custom_object(
        GROUP,
        VERSION,
        "schedulingshards",
        "default",
        {"spec": {"args": {"restrict-node-scheduling": str(on).lower()}}},
    )


def test_the_shards_restrict_node_scheduling_flag_applies_without_a_restart(
    backend: Backend, operator: Operator, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi
) -> None:
    create_queues(custom, queue("root"), queue("team-a", parent="root"))
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "SchedulingShard",
        "metadata": {"name": "default"},
        "spec": {"args": {"restrict-node-scheduling": "true"}},
    }
    _put(custom, "schedulingshards", body)
    _applied(custom, operator)
    # One node is a GPU worker, none a CPU worker.
    names = sorted(n.metadata.name for n in core.list_node().items)
    gpu_worker = names[-1]
    core.patch_node(
        gpu_worker, {"metadata": {"labels": {"node-role.kubernetes.io/gpu-worker": ""}}}
    )
    assert _place(core, custom, "gpu", operator) == gpu_worker
    create_podgroup(custom, podgroup("cpu", NS, "team-a"))
    create_pod(core, pod("cpu", NS, "cpu", gpus=0))
    time.sleep(3)  # many cycles of 0.2 s: no node has the CPU worker label
    assert not core.read_namespaced_pod("cpu", NS).spec.node_name
    # Off, same process: the CPU-only pod goes anywhere.
    _restrict(custom, False)
    _applied(custom, operator)
    wait_for(
        lambda: core.read_namespaced_pod("cpu", NS).spec.node_name,
        timeout=30,
        what=f"the CPU pod bound once the restriction is off\n{operator.log}",
    )
    assert operator.process.poll() is None  # never restarted
    not_applied = _condition(_shard(custom), "NotApplied")
    assert not_applied is not None and not_applied["status"] == "False", not_applied
