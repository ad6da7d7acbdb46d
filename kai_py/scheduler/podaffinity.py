"""Required pod affinity and anti-affinity, as kube-scheduler (and KAI's podaffinity plugin).

Unlike the other predicates this depends on where pods are in the session,
so it is not cached. A topology domain is the set of nodes sharing a value of
the term's ``topologyKey``; the pods in it are every pod the session has on
those nodes (running, releasing, placed or pipelined this cycle).

- Affinity: the node's domain must hold a pod the term selects. A node
  without the key fails. As in kube-scheduler, when no pod anywhere matches
  and the pod matches its own term, it may go anywhere (the first of a group).
- Anti-affinity: the node's domain must hold no pod the term selects; and no
  pod already in the domain may have an anti-affinity term selecting the pod.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from kai_py.scheduler.model import Node, PodAffinityTerm, Task

AFFINITY = "node(s) didn't match pod affinity rules"
ANTI_AFFINITY = "node(s) didn't match pod anti-affinity rules"
EXISTING_ANTI_AFFINITY = "node(s) didn't satisfy existing pods anti-affinity rules"


class PodAffinity:
    def __init__(self, nodes: Iterable[Node], any_anti_affinity: bool) -> None:
        self.nodes = list(nodes)
        self.any_anti_affinity = any_anti_affinity
        self._domains: dict[tuple[str, str], list[Node]] = {}

    def applies(self, task: Task) -> bool:
        return bool(task.pod_affinity or task.pod_anti_affinity or self.any_anti_affinity)

    def check(self, task: Task, node: Node) -> str | None:
        for term in task.pod_affinity:
            value = node.labels.get(term.topology_key)
            if value is None:
                return AFFINITY
            if any(self._selects(term, task, other) for other in self.pods_in(term, value)):
                continue
            first = term.selects(task.labels, task.namespace, task.namespace) and not any(
                self._selects(term, task, other) for n in self.nodes for other in n.tasks.values()
            )
            if not first:
                return AFFINITY
        for term in task.pod_anti_affinity:
            value = node.labels.get(term.topology_key)
            if value is not None and any(
                self._selects(term, task, other) for other in self.pods_in(term, value)
            ):
                return ANTI_AFFINITY
        if self.any_anti_affinity and self._repelled(task, node):
            return EXISTING_ANTI_AFFINITY
        return None

    def _repelled(self, task: Task, node: Node) -> bool:
        """A pod already placed has an anti-affinity term that selects ``task`` here."""
        for other_node in self.nodes:
            for other in other_node.tasks.values():
                if _same_pod(other, task):
                    continue
                for term in other.pod_anti_affinity:
                    value = node.labels.get(term.topology_key)
                    if (
                        value is not None
                        and other_node.labels.get(term.topology_key) == value
                        and term.selects(task.labels, task.namespace, other.namespace)
                    ):
                        return True
        return False

    def pods_in(self, term: PodAffinityTerm, value: str) -> Iterator[Task]:
        key = (term.topology_key, value)
        domain = self._domains.get(key)
        if domain is None:
            domain = self._domains[key] = [
                n for n in self.nodes if n.labels.get(term.topology_key) == value
            ]
        for node in domain:
            yield from node.tasks.values()

    @staticmethod
    def _selects(term: PodAffinityTerm, task: Task, other: Task) -> bool:
        return not _same_pod(other, task) and term.selects(
            other.labels, other.namespace, task.namespace
        )


def _same_pod(a: Task, b: Task) -> bool:
    """The pod itself, or its planned new place (a move), is not its own neighbour."""
    return a.key == b.key
