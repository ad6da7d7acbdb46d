"""The binder: Kopf handlers that carry out BindRequests (logic in kai_py.cluster.binding).

- BindRequests (``scheduling.run.ai/v1alpha2``) in phase Pending or unset, on
  create, resume and update: one attempt per call; a failed attempt that may
  be retried raises ``kopf.TemporaryError`` with the request's back-off delay.
- Pods, through ``@kopf.on.event`` only (nothing is written to pods by Kopf):
  a shared pod that ended or went releases its reservation pods when no other
  shared pod uses them; a reservation pod that went takes its running shared
  pods with it.
- A clean-up pass over the reservation pods every ``sweep_period`` seconds.

Importing the module registers the handlers with Kopf's default registry;
``register(registry)`` puts them on another one (tests).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, Final

import kopf

from kai_py.api import keys
from kai_py.cluster import metrics
from kai_py.cluster.binding import Binder, BinderConfig, is_pending
from kai_py.cluster.kube import Kube, load_api_client

_MEMO_KEY: Final = "kai_py_binder"
_SWEEPER_KEY: Final = "kai_py_binder_sweeper"
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
        raise kopf.TemporaryError("the binder is not started yet", delay=1)
    return binder


#: Sync handlers share Kopf's thread pool and a Fraction bind may wait there up to
#: ``reservation_timeout`` for its card: keep enough workers that waiting binds
#: do not hold up the other handlers.
MIN_WORKERS: Final = 32


async def start(memo: Any, settings: Any = None, **_: Any) -> None:
    if settings is not None:
        workers = settings.execution.max_workers
        if workers is None or workers < MIN_WORKERS:
            settings.execution.max_workers = MIN_WORKERS
    binder = Binder(Kube(load_api_client()), _config)
    memo[_MEMO_KEY] = binder
    memo[_SWEEPER_KEY] = asyncio.create_task(_sweep_forever(binder))


async def stop(memo: Any, **_: Any) -> None:
    task = memo.get(_SWEEPER_KEY)
    if isinstance(task, asyncio.Task):
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _sweep_forever(binder: Binder) -> None:
    while True:
        await asyncio.sleep(binder.config.sweep_period)
        try:
            released = await asyncio.to_thread(binder.sweep)
        except Exception as exc:  # the next pass tries again
            log.warning("reservation clean-up failed: %s", exc)
            continue
        if released:
            log.info("released unused reservation pods: %s", ", ".join(released))


def _pending(body: Any, **_: Any) -> bool:
    return is_pending(body)


def bind(body: Any, retry: int, memo: Any, **_: Any) -> None:
    outcome = _binder(memo).reconcile(dict(body), retry)
    metrics.record_binder(outcome.phase, outcome.retry_in)
    if outcome.retry_in is not None:
        raise kopf.TemporaryError(outcome.reason, delay=outcome.retry_in)


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
    binder = _binder(memo)
    pod = dict(body)
    if (pod.get("metadata") or {}).get("namespace") == binder.config.reservation_namespace:
        deleted = binder.reservation_gone(pod)
        if deleted:
            logger.warning("reservation pod gone; deleted shared pods %s", ", ".join(deleted))
        return
    released = binder.pod_gone(pod)
    if released:
        logger.info("released reservation pods %s", ", ".join(released))


def register(registry: kopf.OperatorRegistry) -> None:
    kopf.on.startup(registry=registry, id="binder-start")(start)
    kopf.on.cleanup(registry=registry, id="binder-stop")(stop)
    resource = (keys.GROUP, keys.BINDREQUEST_VERSION, "bindrequests")
    for on in (kopf.on.resume, kopf.on.create, kopf.on.update):
        on(*resource, id="bind", when=_pending, registry=registry)(bind)
    kopf.on.event("", "v1", "pods", id="binder-gpu-pods", when=_gpu_pod_event, registry=registry)(
        gpu_pod_event
    )


register(kopf.get_default_registry())
