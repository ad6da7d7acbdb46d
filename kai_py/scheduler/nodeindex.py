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
        self._levels: list[int] = []  # the keys of _buckets, sorted (a bucket stays once made)
        self._walks: dict[tuple[int, bool], list[list[str]]] = {}  # free_gpu_buckets' answers
        # Nodes releasing resources, bucketed by whole GPUs free once releases are done
        # (pipelined placements pick the best of these).
        self._future: dict[int, set[str]] = {}
        self._future_of: dict[str, int] = {}
        for node in nodes:
            self.update(node)

    def update(self, node: Node) -> None:
        # Whole GPUs free now and not promised to pipelined pods: what a placement
        # now can take (a node whose free cards are all promised is not offered).
        # Node.free_gpus_now / free_gpus_future written out: this runs for every
        # change of every node.
        releasing = node.releasing
        now = node.allocatable.gpu - node.used.gpu
        future = now + releasing.gpu - node.pipelined.gpu
        new = max(0, math.floor((future if future < now else now) + EPS))
        # A node with no pod slot left (status.allocatable.pods) takes no task, whatever
        # its GPUs: in bucket 0, no whole-GPU search walks it. Node.pod_slots written out.
        slots = node.max_pods - node.pods
        slots_later = slots + node.pods_releasing - node.pods_pipelined
        if slots < 1 or slots_later < 1:
            new = 0
        old = self._bucket_of.get(node.name)
        if old != new:
            if old is not None:
                names = self._buckets[old]
                del names[bisect.bisect_left(names, node.name)]
            bucket = self._buckets.get(new)
            if bucket is None:
                bucket = self._buckets[new] = []
                bisect.insort(self._levels, new)
                self._walks.clear()
            bisect.insort(bucket, node.name)
            self._bucket_of[node.name] = new
        if (
            releasing.cpu > EPS
            or releasing.memory > EPS
            or releasing.gpu > EPS
            or node.pods_releasing  # a pod slot alone frees up when it goes
            or (node.groups and any(g.releasing > EPS for g in node.groups.values()))
        ):
            later: int | None = max(0, math.floor(future + EPS)) if slots_later >= 1 else 0
        else:
            later = None
        was = self._future_of.get(node.name)
        if was != later:
            if was is not None:
                self._future[was].discard(node.name)
                del self._future_of[node.name]
            if later is not None:
                self._future.setdefault(later, set()).add(node.name)
                self._future_of[node.name] = later

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

    def free_gpu_buckets(self, need: int, spread: bool) -> list[list[str]]:
        """The buckets of nodes with at least ``need`` free GPUs, best first (fewest for
        binpack), each sorted by name.

        The buckets themselves, not copies (a copy of a thousand names per task cost
        more than the search), in a list that is kept: the caller must not change the
        list, nor a node while walking them.
        """
        # The lists are kept per (need, order) until a new level appears: the buckets
        # are changed in place, never replaced.
        found = self._walks.get((need, spread))
        if found is None:
            levels = reversed(self._levels) if spread else self._levels
            found = [self._buckets[level] for level in levels if level >= need]
            self._walks[(need, spread)] = found
        return found
