"""PodGroups whose status a cycle's plan found already right, so later plans skip them.

Comparing a PodGroup's wanted status with its stored one formats and parses
nine resource quantities plus its conditions; at 10,000 PodGroups that is a
large share of a cycle that changes almost none of them. The wanted status is a
function of what the plan knows as a key (the PodGroup's resourceVersion, the
job's reasons, resources and phase): when the key is the one found right last
time, the status is right now too. Only "right, nothing to write" is
remembered; a PodGroup that needs a patch is compared in full every time.
"""

from __future__ import annotations

from collections.abc import Hashable


class StatusMemo:
    def __init__(self) -> None:
        self._right: dict[str, Hashable] = {}
        self._next: dict[str, Hashable] = {}

    def is_right(self, uid: str, key: Hashable) -> bool:
        """The status was found right for exactly this key by the last plan."""
        if self._right.get(uid) == key:
            self._next[uid] = key
            return True
        return False

    def found_right(self, uid: str, key: Hashable) -> None:
        self._next[uid] = key

    def done(self) -> None:
        """The end of a plan: keep only what it saw (PodGroups gone are forgotten)."""
        self._right, self._next = self._next, {}
