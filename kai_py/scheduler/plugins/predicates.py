"""Node predicates: Ready, cordoned, taints and tolerations, node selector and
required affinity, and the GPU memory label that memory shares need."""

from __future__ import annotations

from kai_py.api.keys import GPU_MEMORY_NODE_LABEL
from kai_py.scheduler.framework import Framework
from kai_py.scheduler.model import Config, Node, Task

_BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})
_NO_MATCH = "node(s) didn't match Pod's node affinity/selector"


def ready(task: Task, node: Node) -> str | None:
    return None if node.ready else "node(s) were not ready"


def schedulable(task: Task, node: Node) -> str | None:
    return "node(s) were unschedulable" if node.unschedulable else None


def taints(task: Task, node: Node) -> str | None:
    for taint in node.taints:
        if taint.effect in _BLOCKING_EFFECTS and not any(
            t.tolerates(taint) for t in task.tolerations
        ):
            shown = f"{taint.key}={taint.value}" if taint.value else taint.key
            return f"node(s) had untolerated taint {{{shown}: {taint.effect}}}"
    return None


def node_selector(task: Task, node: Node) -> str | None:
    for key, value in task.node_selector.items():
        if node.labels.get(key) != value:
            return _NO_MATCH
    return None


def node_affinity(task: Task, node: Node) -> str | None:
    if task.affinity and not any(
        all(req.matches(node.labels) for req in term) for term in task.affinity
    ):
        return _NO_MATCH
    return None


def gpu_memory_label(task: Task, node: Node) -> str | None:
    if task.gpu_memory_mib > 0 and node.gpu_memory_mib <= 0:
        return f"node(s) had no {GPU_MEMORY_NODE_LABEL} label, needed to share a GPU by memory"
    return None


def register(framework: Framework, config: Config) -> None:
    framework.predicates.extend(
        [
            ("ready", ready),
            ("schedulable", schedulable),
            ("taints", taints),
            ("nodeSelector", node_selector),
            ("nodeAffinity", node_affinity),
            ("gpuMemoryLabel", gpu_memory_label),
        ]
    )
