"""Loops in a queue tree (queues whose parents lead back to themselves) and the
level of each queue.

``kai-py simulate`` refuses an input with such a loop or a tree deeper than
``MAX_QUEUE_DEPTH``; the operator leaves those queues out and schedules the
rest. Both name a loop and a level the same way. Nothing here recurses on the
depth of the tree: it is user data, and may be thousands of levels deep.
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


def levels(parents: Mapping[str, str | None]) -> dict[str, int]:
    """Each queue's level, 1 for a root: of the queues whose parents lead to a root
    (not those in a loop or under a parent missing from ``parents``). Linear time."""
    found: dict[str, int] = {}
    lost: set[str] = set()  # no level: each queue is walked over once either way
    for name in parents:
        path: list[str] = []
        on_path: set[str] = set()
        up: str | None = name
        while (
            up is not None
            and up in parents
            and up not in found
            and up not in lost
            and up not in on_path
        ):
            path.append(up)
            on_path.add(up)
            up = parents[up]
        if up is None or up in found:
            above = 0 if up is None else found[up]
            for member in reversed(path):
                above = found[member] = above + 1
        else:  # a missing parent, a loop, or a queue under one: none on the path has a level
            lost.update(path)
    return found


def level_text(name: str, parent: str | None, level: int, limit: int) -> str:
    """Why a queue is too deep (for a ``spec.parentQueue`` problem)."""
    return (
        f"{parent!r} makes Queue {name} level {level} of the queue tree; kai-py takes "
        f"queue trees at most {limit} levels deep (a root queue is level 1)"
    )
