"""Nodes bucketed by free whole GPUs, so binpack and spread pick in O(buckets).

Within a bucket nodes are kept sorted by name, which makes ties between
equal nodes break the same way on every run.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterator, KeysView

from kai_py.scheduler.model import Node
from kai_py.scheduler.resources import EPS


class NodeIndex:
    def __init__(self, nodes: list[Node]) -> None:
        self._buckets: dict[int, list[str]] = {}
        self._bucket_of: dict[str, int] = {}
        # Nodes releasing resources, bucketed by whole GPUs free once releases are done
        # (pipelined placements pick the best of these).
        self._future: dict[int, set[str]] = {}
        self._future_of: dict[str, int] = {}
        for node in nodes:
            self.update(node)

    @staticmethod
    def _free(node: Node) -> int:
        # Whole GPUs free now and not promised to pipelined pods: what a placement
        # now can take (a node whose free cards are all promised is not offered).
        free = min(node.free_gpus_now(), node.free_gpus_future())
        return max(0, math.floor(free + EPS))

    def update(self, node: Node) -> None:
        new = self._free(node)
        old = self._bucket_of.get(node.name)
        if old != new:
            if old is not None:
                names = self._buckets[old]
                del names[bisect.bisect_left(names, node.name)]
            bisect.insort(self._buckets.setdefault(new, []), node.name)
            self._bucket_of[node.name] = new
        releasing = node.releasing
        if (
            releasing.cpu > EPS
            or releasing.memory > EPS
            or releasing.gpu > EPS
            or any(g.releasing > EPS for g in node.groups.values())
        ):
            future: int | None = max(0, math.floor(node.free_gpus_future() + EPS))
        else:
            future = None
        was = self._future_of.get(node.name)
        if was != future:
            if was is not None:
                self._future[was].discard(node.name)
                del self._future_of[node.name]
            if future is not None:
                self._future.setdefault(future, set()).add(node.name)
                self._future_of[node.name] = future

    @property
    def releasing(self) -> KeysView[str]:
        """Names of the nodes releasing resources."""
        return self._future_of.keys()

    def releasing_by_future_gpus(self, need: int, spread: bool) -> Iterator[list[str]]:
        """Releasing nodes with at least ``need`` GPUs free once releases are done, a
        bucket of equal whole GPUs at a time, best bucket first (fewest for binpack)."""
        levels = sorted(
            (b for b, names in self._future.items() if b >= need and names), reverse=spread
        )
        for level in levels:
            yield list(self._future[level])  # a copy: the caller may allocate

    def by_free_gpus(self, need: int, spread: bool) -> Iterator[str]:
        """Names of nodes with at least ``need`` free GPUs, best first.

        The buckets themselves, not copies (a copy of a thousand names per task cost
        more than the search): the caller must not change a node while iterating.
        """
        levels = sorted((b for b in self._buckets if b >= need), reverse=spread)
        for level in levels:
            yield from self._buckets[level]
