"""The whole operator (``python -m kai_py.controllers.operator``, conftest's ``operator``
fixture): pods without a group -> pod-grouper -> scheduler -> BindRequest -> binder ->
the emulated kubelet runs them."""

from __future__ import annotations

import time
from typing import Any

from kai_py.api import keys
from kai_py.emulator.dev_cluster import ThreadedDevCluster
from kai_py.emulator.storage.errors import ApiError

NS = "team-a"


def _wait(check: Any, timeout: float, what: str, log: Any) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}\n{log()}")
        time.sleep(0.1)


def _queue(name: str, parent: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "resources": {
            r: {"quota": -1, "limit": -1, "overQuotaWeight": 1} for r in ("gpu", "cpu", "memory")
        }
    }
    if parent:
        spec["parentQueue"] = parent
    return {
        "apiVersion": "scheduling.run.ai/v2",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": spec,
    }


def _container(fraction_cm: str | None) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "busybox"}
    if fraction_cm:
        container["env"] = [
            {
                "name": "NVIDIA_VISIBLE_DEVICES",
                "valueFrom": {
                    "configMapKeyRef": {"name": fraction_cm, "key": "NVIDIA_VISIBLE_DEVICES"}
                },
            }
        ]
    else:
        container["resources"] = {"limits": {keys.GPU_RESOURCE: "1"}}
    return container


def test_jobs_and_fractions_run_end_to_end(cluster: ThreadedDevCluster, operator: Any) -> None:
    store = cluster.store
    cluster.call(store.create("queues", _queue("root")))
    cluster.call(store.create("queues", _queue("team-a", "root")))
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "train",
            "namespace": NS,
            "labels": {keys.QUEUE_LABEL: "team-a"},
            "annotations": {keys.BATCH_MIN_MEMBER_ANNOTATION: "2"},
        },
        "spec": {
            "parallelism": 2,
            "completions": 2,
            "template": {
                "spec": {
                    "schedulerName": "kai-scheduler",
                    "restartPolicy": "Never",
                    "containers": [_container(None)],
                }
            },
        },
    }
    cluster.call(store.create("jobs", job))
    for name in ("half-0", "half-1"):
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": NS,
                "labels": {keys.QUEUE_LABEL: "team-a"},
                "annotations": {keys.GPU_FRACTION_ANNOTATION: "0.5"},
            },
            "spec": {"schedulerName": "kai-scheduler", "containers": [_container(f"{name}-gpu")]},
        }
        cluster.call(store.create("pods", pod))

    def all_running() -> list[dict[str, Any]] | None:
        pods, _ = cluster.call(store.list("pods", NS))
        ok = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
        return ok if len(ok) == 4 else None

    pods = _wait(all_running, 30, "four pods Running", lambda: operator.log)
    by_name = {p["metadata"]["name"]: p for p in pods}
    job_pods = [p for n, p in by_name.items() if n.startswith("train-")]
    groups = {p["metadata"]["annotations"][keys.POD_GROUP_ANNOTATION] for p in job_pods}
    assert len(groups) == 1
    (group,) = groups
    pg = cluster.call(store.get("podgroups", NS, group))
    assert pg["spec"]["minMember"] == 2

    shared = [by_name["half-0"], by_name["half-1"]]
    seen = {p["metadata"]["annotations"]["kai-py.dev/visible-devices"] for p in shared}
    labels = {p["metadata"]["labels"][keys.GPU_GROUP_LABEL] for p in shared}
    nodes = {p["spec"]["nodeName"] for p in shared}
    # Binpack: both halves on one card, held by one reservation pod.
    assert len(seen) == 1 and len(labels) == 1 and len(nodes) == 1
    reservations, _ = cluster.call(store.list("pods", keys.RESERVATION_NAMESPACE))
    assert len(reservations) == 1
    holder = reservations[0]
    assert holder["spec"]["nodeName"] in nodes
    assert holder["metadata"]["annotations"][keys.RESERVED_GPU_INDEX_ANNOTATION] in seen

    brs, _ = cluster.call(store.list("bindrequests", NS))
    assert len(brs) == 4
    assert {(b.get("status") or {}).get("phase") for b in brs} == {"Succeeded"}

    for p in shared:
        cluster.call(store.delete("pods", NS, p["metadata"]["name"]))

    def released() -> bool:
        try:
            cluster.call(store.get("pods", keys.RESERVATION_NAMESPACE, holder["metadata"]["name"]))
        except ApiError as exc:
            return exc.code == 404
        return False

    # Released on the pods' deletion, or else by the sweep every 5 s; 20 s leaves room on a busy CI machine.
    _wait(released, 20, "the reservation pod released", lambda: operator.log)
