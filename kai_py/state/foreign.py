"""Other schedulers' bound pods, kept as what they hold per node.

On a shared cluster most pods belong to other schedulers (the default
scheduler's Deployments, DaemonSets): at 140,000 pods, about 100,000. The
scheduler needs of them only what each holds on its node. Keeping them as
manifests and parsing every one in every cycle made them most of a cycle's
cost; here each is parsed once, when its watch event arrives, and a cycle
reads one sum per node. A node's sum is recomputed from its pods when one of
them changed (not kept by adding and subtracting, which would drift).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kai_py.api.objects import WorkloadError, is_newer, meta, resource_version
from kai_py.scheduler.resources import Res
from kai_py.state.convert import requests_by_name, split_requests

Key = tuple[str, str]  # (namespace, name)


@dataclass(frozen=True, slots=True)
class ForeignPod:
    uid: str
    resource_version: int | None
    node: str
    #: What it holds; None when its requests do not parse (then it is not counted,
    #: as ``kai-py simulate`` does not count it).
    request: Res | None


class ForeignPods:
    """Bound, unfinished pods of other schedulers, by key, and their use per node."""

    def __init__(self) -> None:
        self._pods: dict[Key, ForeignPod] = {}
        self._by_node: dict[str, dict[Key, Res]] = {}
        self._sums: dict[str, Res] = {}
        self._dirty: set[str] = set()
        #: Pods per node, every kept pod (one whose requests do not parse still takes
        #: one of the node's pod slots); a count, so kept by adding and subtracting.
        self._pods_on: dict[str, int] = {}
        #: Per node, the few pods that hold more than CPU, memory and GPUs (rdma/ib,
        #: ephemeral-storage...): what they hold of those.
        self._extended_on: dict[str, dict[Key, dict[str, float]]] = {}

    def __len__(self) -> int:
        return len(self._pods)

    def __contains__(self, key: object) -> bool:
        return key in self._pods

    def get(self, key: Key) -> ForeignPod | None:
        return self._pods.get(key)

    def items(self) -> list[tuple[Key, ForeignPod]]:
        return list(self._pods.items())

    def newer(self, key: Key, body: Mapping[str, Any]) -> bool:
        """False when ``body`` is an older version of the pod kept under ``key``."""
        current = self._pods.get(key)
        if current is None:
            return True
        return is_newer(current.uid or None, current.resource_version, body)

    def put(self, key: Key, body: Mapping[str, Any], node: str) -> None:
        self.pop(key)
        extended: dict[str, float] | None = None
        try:
            request: Res | None
            request, extended = split_requests(requests_by_name(body))
        except WorkloadError:
            request = None
        if extended is not None:
            self._extended_on.setdefault(node, {})[key] = extended
        pod = ForeignPod(str(meta(body).get("uid") or ""), resource_version(body), node, request)
        self._pods[key] = pod
        self._pods_on[node] = self._pods_on.get(node, 0) + 1
        if request is not None:
            self._by_node.setdefault(node, {})[key] = request
            self._dirty.add(node)

    def pop(self, key: Key, uid: str = "") -> bool:
        """Forget the pod (only if it is ``uid``, when given); True if it was kept."""
        current = self._pods.get(key)
        if current is None or (uid and current.uid not in ("", uid)):
            return False
        del self._pods[key]
        left = self._pods_on[current.node] - 1
        if left:
            self._pods_on[current.node] = left
        else:
            del self._pods_on[current.node]
        extended = self._extended_on.get(current.node)
        if extended is not None and extended.pop(key, None) is not None and not extended:
            del self._extended_on[current.node]
        on_node = self._by_node.get(current.node)
        if on_node is not None and on_node.pop(key, None) is not None:
            self._dirty.add(current.node)
            if not on_node:
                del self._by_node[current.node]
        return True

    def used(self) -> dict[str, Res]:
        """Per node: what other schedulers' pods hold there (a copy; the sums are not changed
        in place, so a view built in a worker thread keeps its own)."""
        for node in self._dirty:
            pods = self._by_node.get(node)
            if not pods:
                self._sums.pop(node, None)
                continue
            total = Res()
            for request in pods.values():
                total.add(request)
            self._sums[node] = total
        self._dirty.clear()
        return dict(self._sums)

    def extended_used(self) -> dict[str, dict[str, float]]:
        """Per node: what these pods hold besides CPU, memory and GPUs (summed each time:
        few pods ask for such resources)."""
        out: dict[str, dict[str, float]] = {}
        for node, pods in self._extended_on.items():
            total = out[node] = {}
            for amounts in pods.values():
                for name, amount in amounts.items():
                    total[name] = total.get(name, 0.0) + amount
        return out

    def pods_per_node(self) -> dict[str, int]:
        """Per node: how many of these pods are bound there (a copy)."""
        return dict(self._pods_on)

    def counted(self) -> int:
        return sum(len(pods) for pods in self._by_node.values())
