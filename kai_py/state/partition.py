"""Node pools: which nodes, pods, PodGroups and BindRequests one scheduler shard serves.

A shard serves the objects whose node-pool label (``kai.scheduler/node-pool`` unless
configured otherwise) has its value; the default shard (value ``""``) serves those
without the label, as KAI's ``DoesNotExist`` selector. The same rule is sent to the
API server as a label selector (so a shard's watches, memory and cycle shrink with its
pool) and applied again to what reaches the cache (``simulate`` files and any watch that
could not be filtered).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from kai_py.api import keys

#: The pool name metrics and status conditions use for the default shard, as KAI's.
DEFAULT_POOL_NAME: Final = "default"


@dataclass(frozen=True, slots=True)
class Partition:
    label: str = keys.NODE_POOL_LABEL
    value: str = ""  # "" = objects without the label

    @property
    def name(self) -> str:
        """The pool's name in status conditions and metrics ("default" for "")."""
        return self.value or DEFAULT_POOL_NAME

    def selector(self) -> str:
        """The label selector of the pool's objects, as the API server takes it."""
        return f"{self.label}={self.value}" if self.value else f"!{self.label}"

    def holds(self, labels: Mapping[str, Any] | None) -> bool:
        """Whether an object with these labels is in the pool."""
        own = labels.get(self.label) if labels else None
        return own is None if not self.value else own == self.value

    def labels(self) -> dict[str, str]:
        """Labels that put a new object (a BindRequest) in the pool."""
        return {self.label: self.value} if self.value else {}
