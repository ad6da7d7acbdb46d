"""The pod-grouper: every pod of the scheduler gets a PodGroup (logic in
kai_py.podgrouper.service, rules in kai_py.podgrouper.rules).

Pods are watched with ``@kopf.on.event`` only, so Kopf writes nothing to
them (no finalizers, no progress annotations); the only write to a pod is the
``pod-group-name`` annotation, and only when it is missing or different.
PodGroup deletions are watched so that a deleted group is created again on
its pods' next event. Pods whose grouping failed (a bad annotation, an owner
not readable yet) are tried again every 15 s, since a fixed Job does not make
its pods change; those whose last try met an API error, every 2 s.

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
from kai_py.apiclient.informer import AsyncTransport, attach_transport
from kai_py.apiclient.kube import Kube, KubeError, load_api_client
from kai_py.controllers import leadership, poolwarnings, settings, watches
from kai_py.podgrouper.service import OwnerResolver, PodGrouperService

_MEMO_KEY: Final = "kai_py_pod_grouper"
_RETRY_KEY: Final = "kai_py_pod_grouper_retry"
_WORK_KEY: Final = "kai_py_pod_grouper_work"
_TRANSPORT_KEY: Final = "kai_py_pod_grouper_transport"
#: Pods grouped at once, on the event loop (each waits on a PodGroup create and a pod
#: patch): in threads, 16 paced a 4,000-pod burst at about 125 pods/s, 48 at about 220.
GROUPER_WORKERS: Final = 48
log = logging.getLogger(__name__)


def _service(memo: Any) -> PodGrouperService:
    service = memo.get(_MEMO_KEY)
    if not isinstance(service, PodGrouperService):
        raise RuntimeError("the pod-grouper is not started yet")
    return service


_retry_period = 15.0
_owner_ttl = 10.0
#: Seconds before a pod whose grouping met an API error (no answer, 5xx, a conflict) is
#: tried again, unless an event of it comes first: its own events may not come soon.
API_RETRY_SECONDS: Final = 2.0


def configure(retry_period: float = 15.0, owner_ttl: float = 10.0) -> None:
    """Before the start: seconds between passes over the pods whose grouping failed,
    and how long fetched owners are cached."""
    global _retry_period, _owner_ttl
    _retry_period, _owner_ttl = retry_period, owner_ttl


async def start(memo: Any, **_: Any) -> None:
    kube = Kube(load_api_client(), fence=leadership.fence)
    memo[_TRANSPORT_KEY] = transport = attach_transport(kube)
    leadership.abort_writes_on_loss(transport)
    service = PodGrouperService(
        kube,
        scheduler_name=lambda: settings.current().scheduler_name,
        owners=OwnerResolver(kube, ttl=_owner_ttl),
        pool_label=poolwarnings.label_key,
    )
    memo[_MEMO_KEY] = service
    memo[_WORK_KEY] = watches.SerialPerKey(GROUPER_WORKERS, "kai-py-grouper", threads=False)
    memo[_RETRY_KEY] = asyncio.create_task(_retry_forever(service, _retry_period))


async def stop(memo: Any, **_: Any) -> None:
    work = memo.get(_WORK_KEY)
    if isinstance(work, watches.SerialPerKey):
        work.close()
    task = memo.get(_RETRY_KEY)
    if isinstance(task, asyncio.Task):
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    transport = memo.get(_TRANSPORT_KEY)
    if isinstance(transport, AsyncTransport):
        await transport.close()


async def _retry_forever(service: PodGrouperService, period: float) -> None:
    lead = leadership.current()
    term = 0
    waited = 0.0
    while True:
        if lead.term != term or not lead.is_leader:
            # A new term (or the first): pods that came while another replica led, or
            # whose events went to a standby, are found from a fresh LIST.
            term = await lead.wait_leading()
            try:
                outcomes = await service.group_all()
            except Exception as exc:
                log.warning("pod-grouper pass over all pods failed", extra={"error": str(exc)})
                term = 0
                await asyncio.sleep(1.0)
                continue
            if outcomes:
                log.info("pod-grouper: grouped from a listing", extra={"pods": len(outcomes)})
        # Pods whose last try met an API error are tried again every few seconds; the
        # pass over all pending pods (a bad annotation waits for its fix) every period.
        tick = min(period, API_RETRY_SECONDS)
        await asyncio.sleep(tick)
        waited += tick
        if not lead.is_leader:
            continue
        full = waited >= period
        if not full and not service.api_failed:
            continue
        if full:
            waited = 0.0
        try:
            outcomes = await service.retry_pending(api_failed_only=not full)
        except Exception as exc:  # the next pass tries again
            log.warning("pod-grouper retry pass failed", extra={"error": str(exc)})
            continue
        grouped = [o.group for o in outcomes if o.annotated]
        if grouped:
            log.info(
                "pod-grouper: grouped on retry", extra={"podgroups": [str(g) for g in grouped]}
            )


def _ours(type: str | None, body: Any, memo: Any, **_: Any) -> bool:
    """Cheap filter on the event loop: live pods of the scheduler not grouped yet."""
    if type == "DELETED" or not leadership.leading():
        return False
    service = memo.get(_MEMO_KEY)
    if isinstance(service, PodGrouperService):
        return service.needs_work(body)
    spec = body.get("spec") or {}
    return bool(spec.get("schedulerName") == settings.current().scheduler_name)


async def pod_event(body: Any, memo: Any, logger: Any, **_: Any) -> None:
    """Group one pod."""
    try:
        outcome = await _service(memo).handle(dict(body))
    except (KubeError, RuntimeError) as exc:
        # on.event handlers are not retried: the pod's next event tries again.
        logger.warning("pod-grouper: failed", extra={"error": str(exc)})
        return
    if outcome.annotated or outcome.created:
        logger.info(
            "pod-grouper: pod in PodGroup",
            extra={
                "podgroup": f"{(body.get('metadata') or {}).get('namespace')}/{outcome.group}",
                "podgroup_created": outcome.created,
            },
        )


def _on_pod(type: str | None, body: dict[str, Any], memo: Any) -> None:
    """The pod watch's listener: the grouping runs as a task of its own (``SerialPerKey``)."""
    work = memo.get(_WORK_KEY)
    if not isinstance(work, watches.SerialPerKey) or not _ours(type, body, memo):
        return
    key = watches.pod_key(body)
    logger = watches.ObjectLog(log, {"pod": key})
    work.submit(key, lambda pod: pod_event(pod, memo, logger), body)


def podgroup_event(
    type: str | None, namespace: str | None, name: str | None, memo: Any, **_: Any
) -> None:
    if type == "DELETED" and name:
        service = memo.get(_MEMO_KEY)
        if isinstance(service, PodGrouperService):
            service.group_deleted(namespace or "default", name)


def _on_podgroup(type: str | None, body: dict[str, Any], memo: Any) -> None:
    if type == "DELETED":
        m = body.get("metadata") or {}
        podgroup_event(type, m.get("namespace"), m.get("name"), memo)


def register(registry: kopf.OperatorRegistry) -> None:
    kopf.on.startup(registry=registry, id="pod-grouper-start")(start)
    kopf.on.cleanup(registry=registry, id="pod-grouper-stop")(stop)
    watches.on_pods(registry, _on_pod)
    watches.on_events(registry, keys.GROUP, keys.PODGROUP_VERSION, "podgroups", _on_podgroup)
    poolwarnings.register(registry)  # a pool no shard serves: one Warning Event per object


register(kopf.get_default_registry())
