"""Each pending PodGroup's place in line, from the order a cycle's allocate took jobs up.

The scheduler returns the order (``Decisions.order``); this turns it into positions
(in the job's queue and in the cluster, with the jobs of higher priority ahead of it
in its queue) and decides when a position is worth a write: a PodGroup's
``status.queuePosition`` is rewritten only when it moved by at least a step, small
near the head of the line and larger further back (``step``), so a long line that
shifts by one every cycle does not cost a write per group per cycle. A status write
sent for another reason carries the exact position (docs/kubectl.md, "Queue position").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kai_py.scheduler.model import ALLOCATED, PENDING, PIPELINED, RUNNING, Job

#: Positions up to this are rewritten on any change; beyond it, on a change of a tenth.
EXACT_HEAD = 10


@dataclass(slots=True, frozen=True)
class Position:
    in_queue: int
    in_cluster: int
    higher_priority_ahead: int

    def status(self) -> dict[str, int]:
        return {
            "inQueue": self.in_queue,
            "inCluster": self.in_cluster,
            "higherPriorityAhead": self.higher_priority_ahead,
        }


def _waiting(job: Job) -> bool:
    """Still in line after the cycle: a pod of it waits and the gang has not started
    (as ``writer.podgroup_phase`` says Pending)."""
    holding = waiting = 0
    for task in job.tasks:
        status = task.status
        if status is RUNNING or status is ALLOCATED:
            holding += 1
        elif status is PENDING or status is PIPELINED:
            waiting += 1
    return waiting > 0 and not (holding and holding >= job.min_alive)


def positions(order: Sequence[str], jobs: Mapping[str, Job]) -> dict[str, Position]:
    """Job uid -> its position (1-based) among the jobs still waiting, in ``order``."""
    found: dict[str, Position] = {}
    # Queue -> priority -> jobs of it seen: a cluster has few priorities (its
    # PriorityClasses), so counting those above a job's is a short loop, not a search.
    per_queue: dict[str, dict[int, int]] = {}
    cluster = 0
    for uid in order:
        job = jobs.get(uid)
        if job is None or not _waiting(job):
            continue
        cluster += 1
        seen = per_queue.setdefault(job.queue, {})
        mine = job.priority
        ahead = higher = 0
        for priority, count in seen.items():
            ahead += count
            if priority > mine:
                higher += count
        found[uid] = Position(ahead + 1, cluster, higher)
        seen[mine] = seen.get(mine, 0) + 1
    return found


def step(position: int) -> int:
    """The least move of a position that is written: 1 near the head, a tenth further back."""
    return 1 if position <= EXACT_HEAD else position // EXACT_HEAD


def _moved(old: object, new: int) -> bool:
    if not isinstance(old, int) or isinstance(old, bool):
        return True
    return abs(old - new) >= step(min(old, new))


def position_patch(current: object, wanted: Position | None) -> tuple[bool, Any]:
    """Whether ``status.queuePosition`` needs a write, and its value (None removes it)."""
    if wanted is None:
        return current is not None, None
    if not isinstance(current, Mapping):
        return True, wanted.status()
    moved = _moved(current.get("inQueue"), wanted.in_queue) or _moved(
        current.get("inCluster"), wanted.in_cluster
    )
    return moved, wanted.status()


def exact(current: object, wanted: Position | None) -> bool:
    """The stored position is the wanted one to the figure."""
    if wanted is None:
        return current is None
    return isinstance(current, Mapping) and dict(current) == wanted.status()
