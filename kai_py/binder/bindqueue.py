"""Drives every pending BindRequest to an end, from events and from state.

A BindRequest is offered on each watch event and again by a periodic pass
over a fresh LIST (``reconcile``), so a lost event, a failed write or a
restart never leaves one Pending: what matters is the object's state, not
one event or one retry. Between LISTs, ``retry_due`` offers again the pending
requests last seen in an offer (a retry's time comes without an event), at no
API cost. Offers are de-duplicated: one attempt per request
at a time, and a request that asked to be retried later waits for its
time, and a request this process drove to an end is not attempted again on a
stale offer. Attempts run in a dedicated thread pool (a Fraction bind may wait
for its card), never on the event loop.

Nothing is written to the BindRequest but its status (by ``Binder``): no
progress annotations, so no annotation write can fail and lose a retry.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final

from kai_py import metrics
from kai_py.api import keys
from kai_py.apiclient.kube import list_all, path_of
from kai_py.binder.binding import Binder, Outcome, is_pending

log = logging.getLogger(__name__)

#: How many finished requests are remembered (stale offers of older ones cost one
#: attempt that finds the pod bound and the status written).
FINISHED_KEPT: Final = 65536
#: After an attempt that raised (a bug or an unexpected answer), try again after this long.
ERROR_RETRY_SECONDS: Final = 2.0


class BindQueue:
    def __init__(
        self,
        binder: Binder,
        *,
        workers: int = 32,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.binder = binder
        self._clock = clock
        self._executor = ThreadPoolExecutor(workers, thread_name_prefix="kai-py-bind")
        self._inflight: set[str] = set()
        self._due: dict[str, float] = {}  # uid -> when the next attempt may start
        self._attempts: dict[str, int] = {}  # uid -> failed attempts seen by this process
        self._tasks: set[asyncio.Task[None]] = set()
        self.outcomes: dict[str, Outcome] = {}  # uid -> last outcome (tests, logs)
        #: uids this process drove to an end (status written): a stale offer of one (a
        #: LIST or an event from before that write) is not a second attempt.
        self._finished: OrderedDict[str, None] = OrderedDict()
        #: uid -> the latest version offered of each request still pending (read-only).
        self._pending: dict[str, Mapping[str, Any]] = {}
        #: uids waiting for their turn on a shared card (staggered start).
        self._waiting: set[str] = set()

    @property
    def busy(self) -> int:
        return len(self._inflight)

    def offer(self, br: Mapping[str, Any]) -> bool:
        """Start an attempt for ``br`` if it is pending, idle and due; True if started."""
        m = br.get("metadata") or {}
        uid = str(m.get("uid") or "")
        if not uid:
            return False
        if not is_pending(br) or m.get("deletionTimestamp"):
            self._forget(uid)
            return False
        if uid in self._finished:
            return False
        self._pending[uid] = br
        if uid in self._inflight or self._due.get(uid, 0.0) > self._clock():
            return False
        self._inflight.add(uid)
        task = asyncio.get_running_loop().create_task(self._attempt(uid, dict(br)))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return True

    async def _attempt(self, uid: str, br: dict[str, Any]) -> None:
        loop = asyncio.get_running_loop()
        try:
            outcome = await loop.run_in_executor(
                self._executor, self.binder.reconcile, br, self._attempts.get(uid, 0)
            )
        except Exception:
            log.exception("bind attempt failed; trying again", extra={"bindrequest": _name(br)})
            self._due[uid] = self._clock() + ERROR_RETRY_SECONDS
            return
        finally:
            self._inflight.discard(uid)
        self.outcomes[uid] = outcome
        if outcome.waiting:
            self._waiting.add(uid)
        else:
            self._waiting.discard(uid)
            metrics.record_binder(outcome.phase, outcome.retry_in)
        if outcome.retry_in is not None:
            self._due[uid] = self._clock() + outcome.retry_in
            self._attempts[uid] = outcome.failed_attempts
        else:
            self._due.pop(uid, None)
            self._attempts.pop(uid, None)
            self._pending.pop(uid, None)
            self._waiting.discard(uid)
            self._finished[uid] = None
            while len(self._finished) > FINISHED_KEPT:
                self._finished.popitem(last=False)

    async def reconcile(self) -> int:
        """Offer every pending BindRequest of a fresh LIST; returns how many were started."""
        listing = await asyncio.to_thread(
            list_all,
            self.binder.kube,
            path_of(keys.GROUP, keys.BINDREQUEST_VERSION, "bindrequests"),
        )
        items = listing.get("items") or []
        listed = {str((br.get("metadata") or {}).get("uid") or "") for br in items}
        for uid in [u for u in {*self._due, *self._pending} if u not in listed]:
            self._forget(uid)
        return sum(1 for br in items if self.offer(br))

    def retry_due(self) -> int:
        """Offer again the pending requests known from earlier offers (no API call);
        returns how many were started."""
        return sum(1 for br in list(self._pending.values()) if self.offer(br))

    def wake_waiting(self) -> int:
        """A pod on a shared card became Ready: the requests waiting for their turn look
        at their card now rather than at their next due time. Returns how many started."""
        if not self._waiting:
            return 0
        for uid in self._waiting:
            self._due.pop(uid, None)
        return sum(
            1
            for uid in list(self._waiting)
            if uid in self._pending and self.offer(self._pending[uid])
        )

    def deleted(self, br: Mapping[str, Any]) -> None:
        """A request was deleted: it is not offered again."""
        self._forget(str((br.get("metadata") or {}).get("uid") or ""))

    def _forget(self, uid: str) -> None:
        self._waiting.discard(uid)
        self._due.pop(uid, None)
        self._attempts.pop(uid, None)
        self._pending.pop(uid, None)
        self.outcomes.pop(uid, None)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        self._executor.shutdown(wait=False, cancel_futures=True)


def _name(br: Mapping[str, Any]) -> str:
    m = br.get("metadata") or {}
    return f"{m.get('namespace')}/{m.get('name')}"
