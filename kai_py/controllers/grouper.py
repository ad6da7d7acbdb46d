"""The pod-grouper: every pod of the scheduler gets a PodGroup (logic in
kai_py.cluster.podgrouping, rules in kai_py.scheduler.podgrouper).

Pods are watched with ``@kopf.on.event`` only, so Kopf writes nothing to
them (no finalizers, no progress annotations); the only write to a pod is the
``pod-group-name`` annotation, and only when it is missing or different.
PodGroup deletions are watched so that a deleted group is created again on
its pods' next event.

Importing the module registers the handlers with Kopf's default registry;
``register(registry)`` puts them on another one (tests).
"""

from __future__ import annotations

import logging
from typing import Any, Final

import kopf

from kai_py.api import keys
from kai_py.cluster.kube import Kube, KubeError, load_api_client
from kai_py.cluster.podgrouping import PodGrouperService
from kai_py.controllers import settings

_MEMO_KEY: Final = "kai_py_pod_grouper"
log = logging.getLogger(__name__)


def _service(memo: Any) -> PodGrouperService:
    service = memo.get(_MEMO_KEY)
    if not isinstance(service, PodGrouperService):
        raise RuntimeError("the pod-grouper is not started yet")
    return service


async def start(memo: Any, **_: Any) -> None:
    memo[_MEMO_KEY] = PodGrouperService(
        Kube(load_api_client()), scheduler_name=lambda: settings.current().scheduler_name
    )


def _ours(type: str | None, body: Any, memo: Any, **_: Any) -> bool:
    """Cheap filter on the event loop: live pods of the scheduler not grouped yet."""
    if type == "DELETED":
        return False
    service = memo.get(_MEMO_KEY)
    if isinstance(service, PodGrouperService):
        return service.needs_work(body)
    spec = body.get("spec") or {}
    return bool(spec.get("schedulerName") == settings.current().scheduler_name)


def _deleted(type: str | None, **_: Any) -> bool:
    return type == "DELETED"


def pod_event(body: Any, memo: Any, logger: Any, **_: Any) -> None:
    try:
        outcome = _service(memo).handle(dict(body))
    except (KubeError, RuntimeError) as exc:
        # on.event handlers are not retried: the pod's next event tries again.
        logger.warning("pod-grouper: %s", exc)
        return
    if outcome.annotated or outcome.created:
        logger.info(
            "pod-grouper: pod in PodGroup %s%s",
            outcome.group,
            " (created)" if outcome.created else "",
        )


def podgroup_event(
    type: str | None, namespace: str | None, name: str | None, memo: Any, **_: Any
) -> None:
    if type == "DELETED" and name:
        service = memo.get(_MEMO_KEY)
        if isinstance(service, PodGrouperService):
            service.group_deleted(namespace or "default", name)


def register(registry: kopf.OperatorRegistry) -> None:
    kopf.on.startup(registry=registry, id="pod-grouper-start")(start)
    kopf.on.event("", "v1", "pods", id="pod-grouper", when=_ours, registry=registry)(pod_event)
    kopf.on.event(
        keys.GROUP,
        keys.PODGROUP_VERSION,
        "podgroups",
        id="pod-grouper-groups",
        when=_deleted,
        registry=registry,
    )(podgroup_event)


register(kopf.get_default_registry())
