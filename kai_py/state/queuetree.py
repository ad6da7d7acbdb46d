"""Loops in a queue tree: queues whose parents lead back to themselves.

``kai-py simulate`` refuses an input with such a loop; the operator leaves the
queues of the loop out and schedules the rest. Both name a loop the same way.
"""

from __future__ import annotations

from collections.abc import Mapping

import networkx as nx


def parent_loops(parents: Mapping[str, str | None]) -> list[list[str]]:
    """Each loop once, its members in parent order, starting with the one that comes
    first in ``parents`` (loops in that order too). A parent missing from ``parents``
    ends a chain; it makes no loop."""
    graph = nx.DiGraph()
    graph.add_nodes_from(parents)
    graph.add_edges_from((q, p) for q, p in parents.items() if p is not None and p in parents)
    order = {name: i for i, name in enumerate(parents)}
    loops = []
    for cycle in nx.simple_cycles(graph):  # each queue has one parent: the loops are disjoint
        first = min(range(len(cycle)), key=lambda i: order[cycle[i]])
        loops.append(cycle[first:] + cycle[:first])
    return sorted(loops, key=lambda loop: order[loop[0]])


def loop_text(loop: list[str]) -> str:
    """``a -> b -> c -> a``."""
    return " -> ".join([*loop, loop[0]])
