"""Time for the simulated nodes and controllers, injectable so tests run fast.

``SystemClock`` is the wall clock. ``ManualClock`` only moves when a test
calls ``advance``; sleepers wake in deadline order, so a pod that runs
for an hour Succeeds in a millisecond of test time.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
import time
from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    def time(self) -> float:
        """Seconds since the epoch."""

    async def sleep(self, seconds: float) -> None: ...


#: The last second formatted and its text: most writes in a burst share the second.
_last_second: tuple[int, str] = (-1, "")


def rfc3339(seconds: float) -> str:
    """metav1.Time's wire form: second precision, UTC, 'Z'."""
    global _last_second
    whole = math.floor(seconds)
    if _last_second[0] != whole:  # one tuple swapped whole: safe across threads
        _last_second = (whole, datetime.fromtimestamp(whole, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
    return _last_second[1]


def parse_rfc3339(value: str) -> float | None:
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except (ValueError, AttributeError):
        return None


class SystemClock:
    def time(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


class ManualClock:
    """A clock that tests move by hand. Not thread-safe: use from one loop."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self._now = start
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    def time(self) -> float:
        return self._now

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._now + seconds, next(self._seq), future))
        await future

    def advance(self, seconds: float) -> None:
        """Move time on and wake everyone whose deadline has come."""
        self._now += seconds
        while self._sleepers and self._sleepers[0][0] <= self._now:
            _, _, future = heapq.heappop(self._sleepers)
            if not future.done():
                future.set_result(None)
