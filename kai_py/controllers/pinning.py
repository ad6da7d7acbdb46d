"""Blockers of pinned binds: none survives the process that made them.

A pinned bind holds a node's other free cards with short-lived blocker pods
(``kai_py.binder.pinned_binding``). If the operator dies mid-bind, they
would hold those cards for nothing: at start-up (without leader election:
before any bind of this process can start, since Kopf runs start-up handlers
first) and at the start of each term of leadership, every blocker of another
process is deleted, and a periodic pass of the leader deletes expired ones.
A standby deletes nothing: the leader's blockers are in use. Registered with
the binder.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, Final

import kopf

from kai_py.apiclient.kube import Kube, load_api_client
from kai_py.binder.binding import BinderConfig
from kai_py.binder.pinned_binding import sweep_blockers
from kai_py.controllers import leadership

log = logging.getLogger(__name__)

_TASK_KEY: Final = "pinning-blocker-sweeper"
SWEEP_PERIOD: Final = 30.0


async def start(memo: Any, **_: Any) -> None:
    kube = Kube(load_api_client(), fence=leadership.fence)
    namespace = BinderConfig.from_env().reservation_namespace
    if leadership.leading():
        await _sweep_stale(kube, namespace)
    memo[_TASK_KEY] = asyncio.create_task(_sweep_forever(kube, namespace))


async def stop(memo: Any, **_: Any) -> None:
    task = memo.get(_TASK_KEY)
    if isinstance(task, asyncio.Task):
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _sweep_stale(kube: Kube, namespace: str) -> None:
    deleted = await asyncio.to_thread(sweep_blockers, kube, namespace, startup=True)
    if deleted:
        log.warning("deleted blocker pods left by an earlier binder", extra={"pods": list(deleted)})


async def _sweep_forever(kube: Kube, namespace: str) -> None:
    lead = leadership.current()
    term = lead.term if lead.is_leader else 0  # the start-up's sweep covered this term
    while True:
        if lead.term != term or not lead.is_leader:
            term = await lead.wait_leading()
            try:
                await _sweep_stale(kube, namespace)
            except Exception as exc:  # the periodic pass deletes them once expired
                log.warning("blocker clean-up failed", extra={"error": str(exc)})
        await asyncio.sleep(SWEEP_PERIOD)
        if not lead.is_leader:
            continue
        try:
            deleted = await asyncio.to_thread(sweep_blockers, kube, namespace, startup=False)
        except Exception as exc:  # the next pass tries again
            log.warning("blocker clean-up failed", extra={"error": str(exc)})
            continue
        if deleted:
            log.warning("deleted expired blocker pods", extra={"pods": list(deleted)})


def register(registry: kopf.OperatorRegistry) -> None:
    kopf.on.startup(registry=registry, id="pinning-blockers-start")(start)
    kopf.on.cleanup(registry=registry, id="pinning-blockers-stop")(stop)


register(kopf.get_default_registry())
