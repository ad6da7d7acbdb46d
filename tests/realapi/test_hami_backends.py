"""HAMi's pod annotations through the operator, on both backends (emulator and a real
kube-apiserver): an empty pin is no constraint, and the pod's Events say it was ignored."""

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


def _running(core: k8s.CoreV1Api, name: str) -> Any:
    p = core.read_namespaced_pod(name, NS)
    return p if p.status.phase == "Running" else None


def test_an_empty_pin_is_ignored_with_a_normal_event(
    backend: Backend, operator: Operator, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi
) -> None:
    create_queues(custom, queue("root"), queue("team-a", parent="root"))
    create_podgroup(custom, podgroup("blank", NS, "team-a"))
    body = pod("blank", NS, "blank", gpus=1)
    body["metadata"]["annotations"]["nvidia.com/use-gpuuuid"] = "  "
    create_pod(core, body)
    wait_for(lambda: _running(core, "blank"), timeout=40, what=f"blank Running\n{operator.log}")

    def ignored() -> list[Any]:
        return [e for e in events_of(core, NS, "blank") if e.reason == "GpuPinIgnored"]

    (event, *_) = wait_for(ignored, timeout=20, what=f"a GpuPinIgnored event\n{operator.log}")
    assert event.type == "Normal"
    assert (
        "Pod team-a/blank: metadata.annotations[nvidia.com/use-gpuuuid]='  ' is empty, so it "
        "is ignored (no constraint, as in HAMi v2.10)" in event.message
    )


def test_hami_keys_kai_py_does_not_apply_are_warned_on_the_pod_and_the_node(
    backend: Backend, operator: Operator, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi
) -> None:
    create_queues(custom, queue("root"), queue("team-a", parent="root"))
    create_podgroup(custom, podgroup("moded", NS, "team-a"))
    body = pod("moded", NS, "moded", gpus=1)
    body["metadata"]["annotations"]["nvidia.com/vgpu-mode"] = "mig"
    create_pod(core, body)
    core.patch_node("gpu-0", {"metadata": {"annotations": {"hami.io/device-cordon": "GPU-x"}}})
    # Placed without the key, as if it were absent.
    wait_for(lambda: _running(core, "moded"), timeout=40, what=f"moded Running\n{operator.log}")

    def warned(name: str, namespace: str | None) -> list[Any]:
        if namespace is not None:
            found = events_of(core, namespace, name)
        else:
            selector = f"involvedObject.name={name},involvedObject.kind=Node"
            found = core.list_event_for_all_namespaces(field_selector=selector).items
        return [e for e in found if e.reason == "NotApplied" and e.type == "Warning"]

    (event, *_) = wait_for(lambda: warned("moded", NS), timeout=20, what=operator.log)
    assert (
        "Pod team-a/moded: metadata.annotations[nvidia.com/vgpu-mode] is not applied by "
        "kai-py (value 'mig':" in event.message
    )
    (event, *_) = wait_for(lambda: warned("gpu-0", None), timeout=30, what=operator.log)
    assert (
        "Node gpu-0: metadata.annotations[hami.io/device-cordon] is not applied by kai-py "
        "(value 'GPU-x':" in event.message
    )
