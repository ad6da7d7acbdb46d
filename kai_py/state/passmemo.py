"""A map kept from one pass (a build, a view, a plan) to the next, holding no more than
the cluster: what a pass did not keep is dropped at its end.

The operator's cache remembers what its passes read or found (parsed Tasks and
PodGroups by version, what a pod's manifest says by the manifest's identity,
PodGroup statuses found right); an object gone from the cluster is simply not
kept by the next pass, so nothing needs deleting.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class PassMemo(Generic[K, V]):
    def __init__(self) -> None:
        self._last: dict[K, V] = {}
        self._now: dict[K, V] = {}

    def get(self, key: K) -> V | None:
        """What the last pass kept under ``key``."""
        return self._last.get(key)

    def seen(self, key: K) -> V | None:
        """What this pass or the last kept under ``key``."""
        found = self._now.get(key)
        return found if found is not None else self._last.get(key)

    def keep(self, key: K, value: V) -> None:
        """Keep ``value`` for the next pass."""
        self._now[key] = value

    def find(self, key: K | None, make: Callable[[], V]) -> V:
        """What the last pass kept under ``key``, else ``make()``; kept for the next
        pass either way. Without a key (an object with no version to know it by) it
        is made afresh and not kept."""
        if key is None:
            return make()
        found = self._last.get(key)
        if found is None:
            found = make()
        self._now[key] = found
        return found

    def done(self) -> None:
        """The end of a pass: from now on, what it kept."""
        self._last, self._now = self._now, {}
