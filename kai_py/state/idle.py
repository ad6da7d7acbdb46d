"""When a scheduling cycle can be skipped: nothing changed and no timer is due.

A cycle reads only the cache (``ClusterCache.generation`` counts its changes)
and the clock. So when the cache is as it was at the start of the last cycle,
that cycle decided nothing that changes the cluster (no bind, eviction or
nomination, no failed write), and the view's own timer (a pod waiting for its
PodGroup) has not come, the next cycle would decide the same: it is skipped.

The scheduler's own timers (a stale gang's grace period, a queue's preempt /
reclaim min-runtime, a PodGroup's preemption delay, a deletion deadline) are
not tracked one by one: a full cycle runs at least every ``max_idle`` seconds,
so such a timer takes effect at most that much later on a cluster where
nothing else happens. The same full cycle retries status writes that failed
in the background (they change nothing in the cache).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

#: A full cycle runs at least this often on an unchanged cluster.
MAX_IDLE_SECONDS: Final = 10.0


@dataclass(slots=True)
class IdleGate:
    max_idle: float = MAX_IDLE_SECONDS
    #: The cache generation the last quiet cycle started from (None: run the next one).
    generation: int | None = None
    wake_at: float = float("inf")
    last_full: float = float("-inf")

    def due(self, generation: int, now: float) -> bool:
        """True when a cycle must run."""
        return (
            self.generation is None
            or generation != self.generation
            or now >= self.wake_at
            or now - self.last_full >= self.max_idle
        )

    def ran(self, generation: int, now: float, wake_at: float, quiet: bool) -> None:
        """A full cycle over the view taken at ``generation`` ran at ``now``.

        ``quiet``: it decided nothing that changes the cluster and no write failed.
        """
        self.generation = generation if quiet else None
        self.wake_at = wake_at
        self.last_full = now
