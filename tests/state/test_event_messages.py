"""Event messages name their object once, whether the source is a file or the object itself."""

from __future__ import annotations

from typing import Any

from kai_py.scheduler.model import Config
from kai_py.state.builder import build
from kai_py.state.documents import Document

NODE = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {"name": "gpu-0"},
    "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "4"}},
}
QUEUES = [
    {
        "apiVersion": "scheduling.run.ai/v2",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": {"parentQueue": parent} if parent else {},
    }
    for name, parent in (("root", None), ("team", "root"))
]


def _pod(name: str, fraction: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "ml",
            "uid": f"uid-{name}",
            "labels": {"kai.scheduler/queue": "team"},
            "annotations": {"gpu-fraction": fraction, "pod-group-name": f"pg-{name}"},
        },
        "spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "c"}]},
    }


def _group(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": f"pg-{name}", "namespace": "ml"},
        "spec": {"minMember": 1, "queue": "team"},
    }


def _invalid_pod_message(source: str) -> str:
    docs = [
        Document("nodes", NODE),
        *(Document("queues", q) for q in QUEUES),
        Document("groups", _group("p")),
        Document(source, _pod("p", "2")),
    ]
    built = build(docs, 0.0, Config())
    (event,) = [e for e in built.events if e.reason == "InvalidPod"]
    return event.message


def test_the_operators_source_is_not_repeated() -> None:
    message = _invalid_pod_message("Pod ml/p")  # how the operator's cache names documents
    assert message.startswith("Pod ml/p: metadata.annotations[gpu-fraction]: ")
    assert message.count("Pod ml/p") == 1


def test_a_files_name_still_leads() -> None:
    message = _invalid_pod_message("jobs.yaml#2")
    assert message.startswith("jobs.yaml#2: Pod ml/p: metadata.annotations[gpu-fraction]: ")


# ------------------------------------------------------------ one message, one place
def _cycle_events(*pods: dict[str, Any], min_member: int = 1) -> list[Any]:
    from kai_py.scheduler.cycle import run_cycle

    group = _group("g")
    group["spec"]["minMember"] = min_member
    docs = [
        Document("nodes", NODE),
        *(Document("queues", q) for q in QUEUES),
        Document("groups", group),
        *(Document(f"Pod ml/{p['metadata']['name']}", p) for p in pods),
    ]
    built = build(docs, 0.0, Config())
    return [*built.events, *run_cycle(built.snapshot).events]


def _whole(name: str, gpus: str) -> dict[str, Any]:
    pod = _pod(name, "0.5")
    del pod["metadata"]["annotations"]["gpu-fraction"]
    pod["metadata"]["annotations"]["pod-group-name"] = "pg-g"
    pod["spec"]["containers"] = [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]
    return pod


def test_a_gangs_reason_is_on_its_podgroup_and_its_pods_point_there() -> None:
    events = _cycle_events(_whole("a", "3"), _whole("b", "3"), min_member=2)
    (group,) = [e for e in events if e.kind == "PodGroup" and e.reason == "Unschedulable"]
    pods = [e for e in events if e.kind == "Pod" and e.reason == "Unschedulable"]
    assert {e.name for e in pods} == {"a", "b"}
    assert "nvidia.com/gpu" in group.message or "GPU" in group.message
    for event in pods:
        assert event.message != group.message
        assert "kubectl describe podgroup pg-g -n ml" in event.message
        assert "PodGroup ml/pg-g" in event.message


def test_a_single_pods_event_says_why_in_full() -> None:
    events = _cycle_events(_whole("solo", "5"))
    (group,) = [e for e in events if e.kind == "PodGroup" and e.reason == "Unschedulable"]
    (pod,) = [e for e in events if e.kind == "Pod" and e.reason == "Unschedulable"]
    assert pod.message == group.message


def test_an_invalid_pod_gets_one_warning_with_the_cause() -> None:
    bad = _pod("bad", "2")
    bad["metadata"]["annotations"]["pod-group-name"] = "pg-g"
    events = _cycle_events(bad)
    (invalid,) = [e for e in events if e.kind == "Pod" and e.reason == "InvalidPod"]
    (pointer,) = [e for e in events if e.kind == "Pod" and e.reason == "Unschedulable"]
    assert "gpu-fraction" in invalid.message
    assert "gpu-fraction" not in pointer.message  # the cause is said once, by InvalidPod
    assert "InvalidWorkload" in pointer.message
