"""The binder: Kopf wiring of the BindRequest reconcile (logic in kai_py.binder).

- BindRequests (``scheduling.run.ai/v1alpha2``): every watch event offers a
  pending request to a ``BindQueue``, the pending requests it knows are offered
  again every ``RECONCILE_PERIOD`` seconds (a retry's time comes without an
  event), and a pass over a fresh LIST every ``LIST_PERIOD`` seconds offers them
  all, so a request is driven to an end (Succeeded, or Failed and decided again
  by the scheduler) whatever events or writes were lost. Kopf writes nothing to
  them (``on.event`` only).
- Pods, from the operator's pod watch (nothing is written to them): the
  scheduler's unbound pods are noted (``PodHints``: a Regular bind of one needs
  no GET of the pod), and a shared pod that ended or went releases its
  reservation pods when no other shared pod uses them; a reservation pod that
  went while shared pods are bound to its card is made again (no pod is deleted).
- A clean-up pass over the reservation pods and shared pods every
  ``sweep_period`` seconds, from the first second on: what a missed event
  left behind is found from state.

Only the leader (``kai_py.controllers.leadership``) binds and cleans up.
Importing the module registers the handlers with Kopf's default registry;
``register(registry)`` puts them on another one (tests).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any, Final

import kopf

from kai_py.api import keys
from kai_py.apiclient.eventpost import EventPoster
from kai_py.apiclient.informer import AsyncTransport, attach_transport
from kai_py.apiclient.kube import KubeError, RetryingKube, load_api_client
from kai_py.binder import stagger
from kai_py.binder.binding import COMPONENT, Binder, BinderConfig, is_pending
from kai_py.binder.bindqueue import BindQueue
from kai_py.binder.podhints import PodHints
from kai_py.controllers import leadership, settings, watches

_MEMO_KEY: Final = "kai_py_binder"
_QUEUE_KEY: Final = "kai_py_binder_queue"
_SWEEPER_KEY: Final = "kai_py_binder_sweeper"
_RECONCILER_KEY: Final = "kai_py_binder_reconciler"
_WORK_KEY: Final = "kai_py_binder_pod_work"
_TRANSPORT_KEY: Final = "kai_py_binder_transport"
#: Seconds between offers of the pending BindRequests the queue knows (no API call).
RECONCILE_PERIOD: Final = 2.0
#: Seconds between passes over a fresh LIST of all BindRequests. In a burst of
#: thousands each LIST was a few per cent of the operator's and the emulator's CPU
#: (bench/e2e.py) every 2 s; retries need no LIST (RECONCILE_PERIOD).
LIST_PERIOD: Final = 10.0
#: A LIST pass is followed by a pause of at least this many times its own length.
RECONCILE_SHARE: Final = 10.0
log = logging.getLogger(__name__)

_config = BinderConfig.from_env()


def configure(config: BinderConfig) -> None:
    """Set the binder's configuration (before the operator starts)."""
    global _config
    _config = config


def current_config() -> BinderConfig:
    return _config


def _binder(memo: Any) -> Binder:
    binder = memo.get(_MEMO_KEY)
    if not isinstance(binder, Binder):
        raise RuntimeError("the binder is not started yet")
    return binder


#: Bind attempts run in a pool of their own and a Fraction bind may wait there up to
#: ``reservation_timeout`` for its card: enough workers that waiting binds do not hold
#: up the others (they only wait: the event loop sends their requests).
BIND_WORKERS: Final = 64


async def start(memo: Any, **_: Any) -> None:
    # Transient API errors are asked again in place, so they rarely cost an attempt
    # (each of which counts towards the request's backoffLimit).
    kube = RetryingKube(await asyncio.to_thread(load_api_client), fence=leadership.fence)
    memo[_TRANSPORT_KEY] = transport = attach_transport(kube)
    leadership.abort_writes_on_loss(transport)
    hints = PodHints(lambda: settings.current().scheduler_name)
    binder = Binder(
        kube, _config, events=EventPoster(kube, COMPONENT, background=True), hints=hints
    )
    queue = BindQueue(binder, workers=BIND_WORKERS)
    memo[_MEMO_KEY] = binder
    memo[_QUEUE_KEY] = queue
    memo[_WORK_KEY] = watches.SerialPerKey(8, "kai-py-binder-pods")
    memo[_SWEEPER_KEY] = asyncio.create_task(_sweep_forever(binder))
    memo[_RECONCILER_KEY] = asyncio.create_task(_reconcile_forever(queue))


async def stop(memo: Any, **_: Any) -> None:
    for key in (_SWEEPER_KEY, _RECONCILER_KEY):
        task = memo.get(key)
        if isinstance(task, asyncio.Task):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    queue = memo.get(_QUEUE_KEY)
    if isinstance(queue, BindQueue):
        await queue.close()
    work = memo.get(_WORK_KEY)
    if isinstance(work, watches.SerialPerKey):
        work.close()
    binder = memo.get(_MEMO_KEY)
    if isinstance(binder, Binder):
        binder.events.close()
    transport = memo.get(_TRANSPORT_KEY)
    if isinstance(transport, AsyncTransport):
        await transport.close()


async def _reconcile_forever(queue: BindQueue) -> None:
    lead = leadership.current()
    next_list, term = 0.0, 0
    while True:
        leading = await lead.wait_leading()
        if leading != term:
            # A new term starts from a fresh LIST (events went unoffered while another led).
            next_list, term = 0.0, leading
        began = time.monotonic()
        if began < next_list:
            queue.retry_due()
            await asyncio.sleep(RECONCILE_PERIOD)
            continue
        try:
            started = await queue.reconcile()
        except Exception as exc:  # the next pass tries again
            log.warning("BindRequest reconcile pass failed", extra={"error": str(exc)})
            next_list = 0.0
        else:
            if started:
                log.info("reconcile: pending BindRequests taken up", extra={"count": started})
            # A pass over many BindRequests (a LIST of thousands) takes at most a tenth
            # of the time: the pause grows with it (watch events still offer at once).
            now = time.monotonic()
            next_list = now + max(LIST_PERIOD, RECONCILE_SHARE * (now - began))
        await asyncio.sleep(RECONCILE_PERIOD)


async def _sweep_forever(binder: Binder) -> None:
    lead = leadership.current()
    while True:
        await lead.wait_leading()
        try:
            released = await asyncio.to_thread(binder.sweep)
            orphaned = await asyncio.to_thread(binder.orphaned_shared_pods)
        except Exception as exc:  # the next pass tries again
            log.warning("reservation clean-up failed", extra={"error": str(exc)})
        else:
            if released:
                log.info("released unused reservation pods", extra={"pods": list(released)})
            if orphaned:
                log.warning(
                    "reservation pods made again for shared pods whose card went",
                    extra={"pods": list(orphaned)},
                )
        await asyncio.sleep(binder.config.sweep_period)


def _bind_event(type: str | None, body: Any, memo: Any) -> None:
    queue = memo.get(_QUEUE_KEY)
    if not isinstance(queue, BindQueue):
        return
    if type == "DELETED":
        queue.deleted(body)
    elif leadership.leading() and is_pending(body):
        queue.offer(body)


def _gpu_pod_event(type: str | None, body: Any, **_: Any) -> bool:
    """Deleted or finished pods that shared a card, and deleted reservation pods."""
    m = body.get("metadata") or {}
    labels = m.get("labels") or {}
    if keys.GPU_GROUP_LABEL not in labels:
        return False
    if type == "DELETED":
        return True
    phase = (body.get("status") or {}).get("phase")
    return phase in ("Succeeded", "Failed") and m.get("namespace") != _config.reservation_namespace


def gpu_pod_event(type: str | None, body: Any, memo: Any, logger: Any, **_: Any) -> None:
    if not leadership.leading():
        return  # the leader's handler (or its sweep) does it
    binder = _binder(memo)
    pod = dict(body)
    try:
        if (pod.get("metadata") or {}).get("namespace") == binder.config.reservation_namespace:
            warned = binder.reservation_gone(pod)
            if warned:
                logger.warning(
                    "reservation pod gone under shared pods", extra={"shared_pods": warned}
                )
            return
        released = binder.pod_gone(pod)
    except KubeError as exc:
        # Not retried by Kopf (an event handler): the clean-up pass finds it from state.
        logger.warning("binder clean-up on a pod event failed", extra={"error": str(exc)})
        return
    if released:
        logger.info("released reservation pods", extra={"pods": list(released)})


def _on_pod(type: str | None, body: dict[str, Any], memo: Any) -> None:
    """The pod watch's listener (on the event loop): the clean-up runs in a thread."""
    binder = memo.get(_MEMO_KEY)
    if isinstance(binder, Binder) and binder.hints is not None:
        binder.hints.observe(type, body)
    queue = memo.get(_QUEUE_KEY)
    if (
        isinstance(queue, BindQueue)
        and type != "DELETED"
        and keys.GPU_GROUP_LABEL in ((body.get("metadata") or {}).get("labels") or {})
        and stagger.is_ready(body)
        and leadership.leading()
    ):
        queue.wake_waiting()  # staggered start: the next pod on this card may go
    work = memo.get(_WORK_KEY)
    if not isinstance(work, watches.SerialPerKey) or not _gpu_pod_event(type, body):
        return
    key = watches.pod_key(body)
    logger = watches.ObjectLog(log, {"pod": key})
    work.submit(key, lambda pod: gpu_pod_event(type, pod, memo, logger), body)


def register(registry: kopf.OperatorRegistry) -> None:
    kopf.on.startup(registry=registry, id="binder-start")(start)
    kopf.on.cleanup(registry=registry, id="binder-stop")(stop)
    watches.on_events(
        registry,
        keys.GROUP,
        keys.BINDREQUEST_VERSION,
        "bindrequests",
        lambda type, body, memo: _bind_event(type, body, memo),
    )
    watches.on_pods(registry, _on_pod)


register(kopf.get_default_registry())

# The pinned binds' blocker clean-up runs wherever the binder does.
from kai_py.controllers import pinning as _pinning  # noqa: E402, F401
