"""Node predicates: can this task run on this node at all, resources aside?

Answers are cached per (task shape, node), because the pods of one job, and
often of many jobs, share a shape; a node's labels and taints do not change
within a session.
"""

from __future__ import annotations

from kai_py.api.keys import GPU_MEMORY_NODE_LABEL
from kai_py.scheduler.model import Node, Task

_BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


def check(task: Task, node: Node) -> str | None:
    """None when ``task`` may run on ``node``; otherwise a kube-scheduler style phrase."""
    if not node.ready:
        return "node(s) were not ready"
    if node.unschedulable:
        return "node(s) were unschedulable"
    for taint in node.taints:
        if taint.effect in _BLOCKING_EFFECTS and not any(
            t.tolerates(taint) for t in task.tolerations
        ):
            shown = f"{taint.key}={taint.value}" if taint.value else taint.key
            return f"node(s) had untolerated taint {{{shown}: {taint.effect}}}"
    for key, value in task.node_selector.items():
        if node.labels.get(key) != value:
            return "node(s) didn't match Pod's node affinity/selector"
    if task.affinity and not any(
        all(req.matches(node.labels) for req in term) for term in task.affinity
    ):
        return "node(s) didn't match Pod's node affinity/selector"
    if task.gpu_memory_mib > 0 and node.gpu_memory_mib <= 0:
        return f"node(s) had no {GPU_MEMORY_NODE_LABEL} label, needed to share a GPU by memory"
    return None


class PredicateCache:
    def __init__(self) -> None:
        self._cache: dict[tuple[object, str], str | None] = {}

    def check(self, task: Task, node: Node) -> str | None:
        key = (task.shape, node.name)
        try:
            return self._cache[key]
        except KeyError:
            result = self._cache[key] = check(task, node)
            return result
