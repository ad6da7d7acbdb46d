"""Node predicates with a cache: can this task run on this node, resources aside?

Answers are cached per (task shape, node), because the pods of one job, and
often of many jobs, share a shape; a node's labels and taints do not change
within a session. The predicates themselves are plugins
(``plugins/predicates.py``) on the framework's ``predicates`` extension point.
"""

from __future__ import annotations

from kai_py.scheduler.framework import Framework
from kai_py.scheduler.model import Node, Shape, Task
from kai_py.scheduler.podaffinity import PodAffinity


class PredicateCache:
    """The cached static predicates, then (not cached) pod affinity, when it applies."""

    def __init__(self, framework: Framework, pod_affinity: PodAffinity | None = None) -> None:
        self._framework = framework
        self._cache: dict[tuple[Shape, str], str | None] = {}
        self._pod_affinity = pod_affinity

    def check(self, task: Task, node: Node) -> str | None:
        key = (task.shape, node.name)
        try:
            result = self._cache[key]
        except KeyError:
            result = self._cache[key] = self._framework.check_node(task, node)
        if result is None and self._pod_affinity is not None and self._pod_affinity.applies(task):
            return self._pod_affinity.check(task, node)
        return result
