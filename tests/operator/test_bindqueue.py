"""BindQueue: every pending BindRequest is driven to an end, from events and from state."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from kai_py.binder.binding import Outcome
from kai_py.binder.bindqueue import BindQueue


def _br(uid: str, phase: str | None = None) -> dict[str, Any]:
    br: dict[str, Any] = {"metadata": {"name": uid, "namespace": "ns", "uid": uid}, "spec": {}}
    if phase:
        br["status"] = {"phase": phase}
    return br


class FakeBinder:
    """Answers each attempt with the next outcome; the API lists ``listed``."""

    def __init__(self, outcomes: list[Outcome]) -> None:
        self.outcomes = outcomes
        self.calls: list[tuple[str, int]] = []
        self.release = threading.Event()
        self.release.set()
        self.listed: list[dict[str, Any]] = []
        self.kube = self

    def get(self, path: str) -> dict[str, Any]:
        return {"items": self.listed}

    def request(self, method: str, path: str, **_: Any) -> dict[str, Any]:
        return self.get(path)

    def reconcile(self, br: dict[str, Any], retry: int = 0) -> Outcome:
        self.release.wait(5)
        self.calls.append((br["metadata"]["uid"], retry))
        return self.outcomes.pop(0)


def test_one_attempt_at_a_time_and_a_retry_waits_for_its_time() -> None:
    async def main() -> None:
        clock = [0.0]
        binder = FakeBinder(
            [Outcome("Pending", "no card yet", 1, retry_in=2.0), Outcome("Succeeded", "ok", 1)]
        )
        queue = BindQueue(binder, workers=2, clock=lambda: clock[0])  # type: ignore[arg-type]
        binder.release.clear()
        assert queue.offer(_br("a"))
        assert not queue.offer(_br("a"))  # in flight: the second event is not a second bind
        binder.release.set()
        while queue.busy:
            await asyncio.sleep(0.01)
        assert not queue.offer(_br("a"))  # its retry is not due yet
        clock[0] = 2.5
        assert queue.offer(_br("a"))
        while queue.busy:
            await asyncio.sleep(0.01)
        # The second attempt knows one attempt failed (a lost status write changes nothing).
        assert binder.calls == [("a", 0), ("a", 1)]
        assert not queue.offer(_br("a", "Succeeded"))
        await queue.close()

    asyncio.run(main())


def test_a_pending_request_whose_event_was_lost_is_taken_up_by_the_reconcile() -> None:
    async def main() -> None:
        binder = FakeBinder([Outcome("Succeeded", "ok", 0)])
        binder.listed = [_br("lost"), _br("done", "Succeeded"), _br("gave-up", "Failed")]
        queue = BindQueue(binder)  # type: ignore[arg-type]
        assert await queue.reconcile() == 1
        while queue.busy:
            await asyncio.sleep(0.01)
        assert binder.calls == [("lost", 0)]
        await queue.close()

    asyncio.run(main())


def test_an_attempt_that_raises_is_tried_again() -> None:
    async def main() -> None:
        clock = [0.0]
        binder = FakeBinder([])  # pop from an empty list: the attempt raises
        queue = BindQueue(binder, clock=lambda: clock[0])  # type: ignore[arg-type]
        assert queue.offer(_br("x"))
        while queue.busy:
            await asyncio.sleep(0.01)
        assert not queue.offer(_br("x"))
        clock[0] = 5.0
        binder.outcomes.append(Outcome("Succeeded", "ok", 0))
        assert queue.offer(_br("x"))
        while queue.busy:
            await asyncio.sleep(0.01)
        assert queue.outcomes["x"].phase == "Succeeded"
        await queue.close()

    asyncio.run(main())


def test_a_stale_offer_of_a_finished_request_is_not_a_second_attempt() -> None:
    async def main() -> None:
        binder = FakeBinder([Outcome("Succeeded", "ok", 0)])
        queue = BindQueue(binder)  # type: ignore[arg-type]
        assert queue.offer(_br("a"))
        while queue.busy:
            await asyncio.sleep(0.01)
        # A LIST taken before the status write still shows it Pending.
        binder.listed = [_br("a")]
        assert await queue.reconcile() == 0
        assert not queue.offer(_br("a"))
        assert binder.calls == [("a", 0)]
        await queue.close()

    asyncio.run(main())


def test_a_retry_comes_when_due_without_an_event_or_a_list() -> None:
    async def main() -> None:
        clock = [0.0]
        binder = FakeBinder(
            [Outcome("Pending", "no card yet", 1, retry_in=2.0), Outcome("Succeeded", "ok", 1)]
        )
        queue = BindQueue(binder, clock=lambda: clock[0])  # type: ignore[arg-type]
        assert queue.offer(_br("a"))
        assert queue.offer(_br("b"))  # will be deleted before its retry
        binder.outcomes.insert(1, Outcome("Pending", "no card yet", 1, retry_in=2.0))
        while queue.busy:
            await asyncio.sleep(0.01)
        assert queue.retry_due() == 0  # not due yet
        queue.deleted(_br("b"))
        clock[0] = 2.5
        assert queue.retry_due() == 1
        while queue.busy:
            await asyncio.sleep(0.01)
        assert sorted(binder.calls) == [("a", 0), ("a", 1), ("b", 0)]
        clock[0] = 10.0
        assert queue.retry_due() == 0  # finished: nothing left to offer
        await queue.close()

    asyncio.run(main())


def test_a_request_gone_from_the_list_is_not_offered_again_from_memory() -> None:
    async def main() -> None:
        clock = [0.0]
        binder = FakeBinder([Outcome("Pending", "no card yet", 1, retry_in=1.0)])
        queue = BindQueue(binder, clock=lambda: clock[0])  # type: ignore[arg-type]
        assert queue.offer(_br("a"))
        while queue.busy:
            await asyncio.sleep(0.01)
        binder.listed = []  # deleted, and its DELETED event lost
        assert await queue.reconcile() == 0
        clock[0] = 5.0
        assert queue.retry_due() == 0
        assert binder.calls == [("a", 0)]
        await queue.close()

    asyncio.run(main())
