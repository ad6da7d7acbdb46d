"""Event messages name their object once, whether the source is a file or the object itself."""

from __future__ import annotations

from typing import Any

from kai_py.cluster.builder import build
from kai_py.cluster.inputs import Document
from kai_py.scheduler.model import Config

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
