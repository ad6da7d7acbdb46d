"""Leader election wiring: which replica schedules, binds and groups.

With ``--leader-elect`` a Lease (``kai_py.apiclient.leader``) decides; without
it this process always leads. The scheduling loop, the binder and the
pod-grouper ask ``current()`` before they act and wait on it while they
do not lead; each keeps watching (so a standby's watches are open) but
starts from a fresh LIST when it takes over. Their API clients are made with
``fence``, so each write is refused at the moment it would be sent once this
process does not lead, whatever work it comes from.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, Final

import kopf

from kai_py.apiclient.informer import AsyncTransport
from kai_py.apiclient.kube import Kube, load_api_client
from kai_py.apiclient.leader import ElectionConfig, LeaderElector, Leadership
from kai_py.controllers.settings import OperatorSettings

log = logging.getLogger(__name__)

_ELECTOR_KEY: Final = "kai_py_leader_elector"
_TASK_KEY: Final = "kai_py_leader_task"

_leadership = Leadership(elected=False)
_config: ElectionConfig | None = None


def configure(settings: OperatorSettings, config: ElectionConfig | None = None) -> None:
    """Before the operator starts: elect a leader, or always lead."""
    global _leadership, _config
    _leadership = Leadership(elected=settings.leader_elect)
    _config = config or ElectionConfig(name=settings.lease_name, namespace=settings.lease_namespace)


def current() -> Leadership:
    return _leadership


def leading() -> bool:
    return _leadership.is_leader


def fence(method: str, path: str) -> None:
    """The roles' ``Kube(fence=...)``: refuse a write while this process does not lead
    (always the current ``Leadership``: ``configure`` may replace it)."""
    _leadership.fence(method, path)


def abort_writes_on_loss(transport: AsyncTransport) -> None:
    """When this process stops leading, reset the connections of ``transport``'s writes
    still in flight: what a partition holds of them must not reach the API server
    after another replica took over (a write not answered by the deadline is given up)."""

    def listener(leading: bool) -> None:
        if not leading:
            aborted = transport.abort_writes()
            if aborted:
                log.warning("not leading: writes in flight abandoned", extra={"writes": aborted})

    _leadership.on_change(listener)


async def start(memo: Any, **_: Any) -> None:
    if not _leadership.elected or _config is None:
        return
    # Election requests time out well within the renew deadline, and are never sent
    # again by the client itself: the elector decides what to do about a failed one.
    kube = Kube(
        await asyncio.to_thread(load_api_client), timeout=_config.request_timeout, retries=False
    )
    elector = LeaderElector(kube, _config, _leadership)
    memo[_ELECTOR_KEY] = elector
    memo[_TASK_KEY] = asyncio.create_task(elector.run(), name="kai-py-leader-election")
    log.info(
        "leader election",
        extra={"lease": f"{_config.namespace}/{_config.name}", "identity": _config.identity},
    )


async def stop(memo: Any, **_: Any) -> None:
    task = memo.get(_TASK_KEY)
    if isinstance(task, asyncio.Task):
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    elector = memo.get(_ELECTOR_KEY)
    if isinstance(elector, LeaderElector):
        _leadership.set(False)
        await asyncio.to_thread(elector.release)


def register(registry: kopf.OperatorRegistry) -> None:
    kopf.on.startup(registry=registry, id="leader-election-start")(start)
    kopf.on.cleanup(registry=registry, id="leader-election-stop")(stop)


register(kopf.get_default_registry())
