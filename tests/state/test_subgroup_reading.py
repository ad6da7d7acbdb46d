"""A PodGroup's spec.subGroups and its pods' kai.scheduler/subgroup-name labels become
the job's sub-group tree; a pod naming no leaf of it is said on the pod, and a pending
one is kept out of the job (as KAI keeps it out of every sub-group)."""

from __future__ import annotations

from typing import Any

from kai_py.scheduler.model import Config, SubGroup, SubGroups, TaskStatus
from kai_py.state.builder import build
from kai_py.state.documents import Document

NODE = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {"name": "gpu-0"},
    "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "8"}},
}
QUEUE = {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": "team"}}
PODGROUP = {
    "apiVersion": "scheduling.run.ai/v2alpha2",
    "kind": "PodGroup",
    "metadata": {"name": "lws", "namespace": "ml"},
    "spec": {
        "queue": "team",
        "minSubGroup": 1,
        "subGroups": [
            {"name": "decode", "minSubGroup": 2},
            {"name": "decode-leader", "parent": "decode", "minMember": 1},
            {"name": "decode-workers", "parent": "decode", "minMember": 3},
            {"name": "prefill", "minMember": 0},
        ],
    },
}


def _pod(name: str, subgroup: str | None, node: str | None = None) -> dict[str, Any]:
    labels = {"kai.scheduler/subgroup-name": subgroup} if subgroup is not None else {}
    spec: dict[str, Any] = {"schedulerName": "kai-scheduler", "containers": [{"name": "c"}]}
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "ml",
            "labels": labels,
            "annotations": {"pod-group-name": "lws"},
        },
        "spec": spec,
    }
    if node is not None:
        spec["nodeName"] = node
        pod["status"] = {"phase": "Running"}
    return pod


def _build(*pods: dict[str, Any]) -> Any:
    docs = [Document("test", d) for d in (NODE, QUEUE, PODGROUP, *pods)]
    return build(docs, 0.0, Config())


def test_the_tree_is_read_with_the_fewest_pods_that_start_it() -> None:
    built = _build(_pod("leader", "decode-leader"), _pod("w-0", "decode-workers"))
    (job,) = built.snapshot.jobs
    assert job.subgroups == SubGroups(
        groups={
            "decode": SubGroup("decode", None, 0, 2, ("decode-leader", "decode-workers")),
            "decode-leader": SubGroup("decode-leader", "decode", 1),
            "decode-workers": SubGroup("decode-workers", "decode", 3),
            "prefill": SubGroup("prefill", None, 0),
        },
        top=("decode", "prefill"),
        min_sub_group=1,
    )
    # One top sub-group is needed; prefill (minMember 0) needs no pod.
    assert job.min_member == 0
    assert [t.name for t in job.tasks] == ["leader", "w-0"]


def test_a_pod_naming_no_leaf_is_said_and_kept_out_while_pending() -> None:
    built = _build(
        _pod("typo", "decode-worker"),
        _pod("mid", "decode"),
        _pod("bare", None),
        _pod("running", "nope", node="gpu-0"),
    )
    (job,) = built.snapshot.jobs
    # A running one keeps its node (what it holds still counts) but no sub-group counts it.
    assert [(t.name, t.status) for t in job.tasks] == [("running", TaskStatus.RUNNING)]
    said = {e.name: e.message for e in built.events if e.reason == "SubGroupNotFound"}
    assert set(said) == {"typo", "mid", "bare", "running"}
    assert all(e.type == "Warning" for e in built.events if e.reason == "SubGroupNotFound")
    assert (
        "Pod ml/typo: metadata.labels[kai.scheduler/subgroup-name]: sub-group "
        "'decode-worker' does not exist in PodGroup ml/lws; it is not scheduled" in said["typo"]
    )
    assert "'decode' has child sub-groups" in said["mid"]
    assert "metadata.labels[kai.scheduler/subgroup-name] is not set" in said["bare"]
    assert "keeps its node but counts for no sub-group" in said["running"]
    assert "(leaf sub-groups: decode-leader, decode-workers, prefill)" in said["typo"]
