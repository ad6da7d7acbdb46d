"""Preferred node affinity and preferred pod (anti-)affinity: scores that order the
nodes a task fits on, as kube-scheduler's NodeAffinity and InterPodAffinity scores.

- Node affinity: the sum of the weights of the preferred terms the node's labels
  match, normalised to 0-100 by the highest sum among the nodes that fit.
- Pod affinity: for each preferred term, its weight for every pod the term selects
  in the node's topology domain (the nodes sharing the node's value of the term's
  ``topologyKey``; every pod the session has there counts), negative for an
  anti-affinity term; normalised to 0-100 between the lowest and highest totals.

The two are added, as KAI adds the scores of its kube-scheduler plugins, and they
outweigh binpack or spread (KAI weighs a kube-scheduler plugin's score above every
placement score of its own): among nodes of the same score the usual order holds.
Only the task's own preferred terms count, not those of pods already placed.
"""

from __future__ import annotations

from collections.abc import Sequence

from kai_py.scheduler.model import Node, Task
from kai_py.scheduler.podaffinity import PodAffinity

MAX_SCORE = 100.0


def has_preferences(task: Task) -> bool:
    return bool(task.preferred_affinity or task.preferred_pod_affinity)


def scores(task: Task, nodes: Sequence[Node], pod_affinity: PodAffinity) -> list[float]:
    """Each node's score for ``task``, higher is better."""
    total = [0.0] * len(nodes)
    if task.preferred_affinity:
        raw = [
            float(
                sum(
                    weight
                    for weight, reqs in task.preferred_affinity
                    if all(r.matches(node.labels) for r in reqs)
                )
            )
            for node in nodes
        ]
        top = max(raw)
        if top > 0:
            total = [t + MAX_SCORE * r / top for t, r in zip(total, raw, strict=True)]
    if task.preferred_pod_affinity:
        raw = [_pod_affinity_score(task, node, pod_affinity) for node in nodes]
        low, high = min(raw), max(raw)
        if high > low:
            total = [
                t + MAX_SCORE * (r - low) / (high - low) for t, r in zip(total, raw, strict=True)
            ]
    return total


def _pod_affinity_score(task: Task, node: Node, pod_affinity: PodAffinity) -> float:
    score = 0.0
    for weight, term in task.preferred_pod_affinity:
        value = node.labels.get(term.topology_key)
        if value is None:
            continue
        for other in pod_affinity.pods_in(term, value):
            if other.key != task.key and term.selects(
                other.labels, other.namespace, task.namespace
            ):
                score += weight
    return score
