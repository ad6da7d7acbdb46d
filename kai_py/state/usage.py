"""The embedded usage source of time-based fair share: usage kept by the scheduler itself.

docs/fairshare.md. What each queue held (GPUs, CPU, memory) and what the
cluster could give are integrated over time into buckets of a fixed length
(``bucket``: a 32nd of the window, at least a second), one list per queue and
one for the cluster's capacity. A queue's usage is the sum of its buckets in
the window (the last ``windowSize`` for a sliding window; since the latest
reset for a tumbling one), each weighed by ``0.5 ** (age / halfLifePeriod)``
when a half-life is set, divided by the cluster's capacity summed the same
way: KAI's normalisation. The buckets are what is kept in the API (the Queue's
``status.usageHistory``), so a restarted or new leader goes on from them.
Pure: the caller gives the time.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from kai_py.scheduler.model import Snapshot
from kai_py.scheduler.resources import Res
from kai_py.scheduler.timeshare.settings import UsageDB

#: Buckets a window is cut into: the sliding window moves by a 32nd of itself.
BUCKETS_PER_WINDOW: Final = 32
#: The key under which the cluster's capacity is kept beside the queues.
CAPACITY: Final = ""


@dataclass(slots=True)
class UsageHistory:
    params: UsageDB
    #: Per queue (and ``CAPACITY``): bucket index -> resource-seconds held in it.
    buckets: dict[str, dict[int, Res]] = field(default_factory=dict)
    last: float | None = None  # when ``held`` was last given
    held: dict[str, Res] = field(default_factory=dict)

    @property
    def bucket(self) -> float:
        return max(1.0, self.params.window / BUCKETS_PER_WINDOW)

    def _origin(self) -> float:
        # Tumbling windows reset at tumblingWindowStartTime + n * windowSize: buckets are
        # cut from that instant so that a reset falls on a bucket's edge.
        start = self.params.tumbling_start if self.params.window_type == "tumbling" else None
        return start or 0.0

    def record(self, now: float, held: Mapping[str, Res], capacity: Res) -> None:
        """What each queue holds from ``now`` on (and the cluster's capacity); what was
        held since the previous call is added to the buckets first."""
        if self.last is not None and now > self.last:
            self._integrate(self.last, now)
        self.last = now if self.last is None else max(self.last, now)
        self.held = {name: res.copy() for name, res in held.items()}
        self.held[CAPACITY] = capacity.copy()
        self._forget(now)

    def _integrate(self, start: float, end: float) -> None:
        size, origin = self.bucket, self._origin()
        t = start
        while t < end:
            index = math.floor((t - origin) / size)
            edge = min(end, origin + (index + 1) * size)
            dt = edge - t
            for name, res in self.held.items():
                if res.gpu or res.cpu or res.memory:
                    slot = self.buckets.setdefault(name, {}).setdefault(index, Res())
                    slot.add(Res(res.cpu * dt, res.memory * dt, res.gpu * dt))
            t = edge

    def window_start(self, now: float) -> float:
        p = self.params
        if p.window_type == "tumbling":
            start = p.tumbling_start if p.tumbling_start is not None else 0.0
            if now <= start:
                return now
            return start + math.floor((now - start) / p.window) * p.window
        return now - p.window

    def _forget(self, now: float) -> None:
        first = math.floor((self.window_start(now) - self._origin()) / self.bucket)
        for slots in self.buckets.values():
            for index in [i for i in slots if i < first]:
                del slots[index]
        for name in [n for n, s in self.buckets.items() if not s]:
            del self.buckets[name]

    def usage(self, now: float) -> dict[str, Res]:
        """Each queue's usage over the window, normalised to the cluster's capacity over
        it (what was held up to ``now`` counted)."""
        if self.last is not None and now > self.last:
            self._integrate(self.last, now)
            self.last = now
        size, origin = self.bucket, self._origin()
        start = self.window_start(now)
        half = self.params.half_life

        def total(slots: Mapping[int, Res]) -> Res:
            out = Res()
            for index, amount in slots.items():
                lo = origin + index * size
                hi = lo + size
                part = (min(hi, now) - max(lo, start)) / size
                if part <= 0:
                    continue
                weight = min(1.0, part)
                if half:
                    weight *= 0.5 ** ((now - (lo + hi) / 2) / half)
                out.add(Res(amount.cpu * weight, amount.memory * weight, amount.gpu * weight))
            return out

        capacity = total(self.buckets.get(CAPACITY, {}))
        out: dict[str, Res] = {}
        for name, slots in self.buckets.items():
            if name == CAPACITY:
                continue
            used = total(slots)
            out[name] = Res(
                used.cpu / capacity.cpu if capacity.cpu > 0 else 0.0,
                used.memory / capacity.memory if capacity.memory > 0 else 0.0,
                used.gpu / capacity.gpu if capacity.gpu > 0 else 0.0,
            )
        return out

    # ------------------------------------------------- kept in the API
    def to_status(self, name: str) -> dict[str, Any]:
        """One queue's part for its ``status.usageHistory`` (the capacity rides along in
        each queue's, so that any one Queue is enough to start from)."""

        def rows(slots: Mapping[int, Res]) -> list[list[float]]:
            return [[i, r.gpu, r.cpu, r.memory] for i, r in sorted(slots.items())]

        return {
            "bucketSeconds": self.bucket,
            "origin": self._origin(),
            "until": self.last,
            "used": rows(self.buckets.get(name, {})),
            "capacity": rows(self.buckets.get(CAPACITY, {})),
        }

    def load(self, statuses: Iterable[tuple[str, Mapping[str, Any]]]) -> list[str]:
        """Take the buckets back from Queues' ``status.usageHistory``; returns a problem
        per Queue whose history cannot be used (another bucket size: it starts over)."""
        problems: list[str] = []
        for name, status in statuses:
            where = f"Queue {name}: status.usageHistory"
            try:
                if (
                    float(status.get("bucketSeconds", 0)) != self.bucket
                    or float(status.get("origin", 0)) != self._origin()
                ):
                    problems.append(f"{where}: kept for another window; usage starts over")
                    continue
                used = _slots(status.get("used") or [])
                capacity = _slots(status.get("capacity") or [])
            except (TypeError, ValueError) as exc:
                problems.append(f"{where}: {exc}; usage starts over")
                continue
            if used:
                self.buckets[name] = used
            mine = self.buckets.setdefault(CAPACITY, {})
            for index, res in capacity.items():
                mine.setdefault(index, res)
            until = status.get("until")
            if isinstance(until, int | float):
                self.last = max(self.last or 0.0, float(until))
        return problems


def _slots(rows: object) -> dict[int, Res]:
    if not isinstance(rows, list):
        raise ValueError(f"expected a list of [bucket, gpu, cpu, memory], got {rows!r}")
    out: dict[int, Res] = {}
    for row in rows:
        if not isinstance(row, list) or len(row) != 4:
            raise ValueError(f"expected [bucket, gpu, cpu, memory], got {row!r}")
        out[int(row[0])] = Res(float(row[2]), float(row[3]), float(row[1]))
    return out


def capacity_of(snapshot: Snapshot) -> Res:
    """What the cluster could give: the allocatable of its ready nodes (usage is
    normalised to it, by the operator's usage source and by ``simulate --over-time``)."""
    total = Res()
    for node in snapshot.nodes:
        if node.ready:
            total.add(node.allocatable)
    return total
