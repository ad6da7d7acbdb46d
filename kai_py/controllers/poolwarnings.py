"""A Warning Event on a pod or PodGroup that names a node pool no shard serves.

A scheduler serves one pool (``--node-pool``; "" = the nodes without the label), so
a pod labelled with a pool that has no scheduler would wait without a word. The
pod-grouper, which sees every pod of the scheduler and every PodGroup whatever their
pool, posts one Warning Event per object (not per cycle): reason
``NodePoolNotServed``. The pools served are the ``partitionLabelValue`` of the
SchedulingShard objects (the chart makes one per shard), and the label key is the
Config's ``spec.global.nodePoolLabelKey``. The check waits a few seconds after an
object is seen, so that a shard created with its pods, or listed after them at a
start, counts.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any, Final

import kopf

from kai_py.api import keys
from kai_py.apiclient.eventpost import apost_event, involved
from kai_py.apiclient.kube import Kube, load_api_client
from kai_py.controllers import leadership, settings, watches

log = logging.getLogger(__name__)

Json = dict[str, Any]

REASON: Final = "NodePoolNotServed"
COMPONENT: Final = "pod-grouper"
#: Seconds between seeing an object and checking its pool.
SETTLE_SECONDS: Final = 3.0

#: SchedulingShard name -> the pool it serves.
_served: dict[str, str] = {}
_label_key: list[str] = [keys.NODE_POOL_LABEL]
#: uids of the objects warned about (forgotten when they are deleted).
_warned: set[str] = set()
_kube: list[Kube] = []
#: Checks under way: the loop keeps only a weak reference to a task.
_checks: set[asyncio.Task[None]] = set()


def label_key() -> str:
    """The node-pool label key: the Config's ``spec.global.nodePoolLabelKey``, else KAI's."""
    return _label_key[0]


def unserved_pool(obj: Mapping[str, Any], label_key: str, served: set[str]) -> str | None:
    """The pool ``obj`` names when no shard serves it, else None."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    value = labels.get(label_key)
    if value is None or value in served:
        return None
    return str(value)


def message(kind: str, pool: str, label_key: str) -> str:
    return (
        f'no scheduling shard serves the node pool "{pool}" ({label_key}): no '
        f'SchedulingShard has partitionLabelValue "{pool}", so this {kind} is not '
        "scheduled until one does"
    )


def _shard_event(type: str | None, body: Json, memo: Any) -> None:
    name = str((body.get("metadata") or {}).get("name") or "")
    if type == "DELETED":
        _served.pop(name, None)
    else:
        _served[name] = str((body.get("spec") or {}).get("partitionLabelValue") or "")


def _config_event(type: str | None, body: Json, memo: Any) -> None:
    if (body.get("metadata") or {}).get("name") != keys.KAI_CONFIG_NAME:
        return
    g = (body.get("spec") or {}).get("global") or {}
    key = g.get("nodePoolLabelKey") if type != "DELETED" else None
    _label_key[0] = key if isinstance(key, str) and key else keys.NODE_POOL_LABEL


def _seen(kind: str, type: str | None, body: Json) -> None:
    uid = str((body.get("metadata") or {}).get("uid") or "")
    if type == "DELETED":
        _warned.discard(uid)
        return
    if not uid or uid in _warned:
        return
    if unserved_pool(body, _label_key[0], {"", *_served.values()}) is None:
        return
    loop = asyncio.get_running_loop()

    def start() -> None:
        task = loop.create_task(_check(kind, body))
        _checks.add(task)
        task.add_done_callback(_checks.discard)

    loop.call_later(SETTLE_SECONDS, start)


async def _check(kind: str, body: Json) -> None:
    uid = str(body["metadata"]["uid"])
    label_key = _label_key[0]
    pool = unserved_pool(body, label_key, {"", *_served.values()})
    if pool is None or uid in _warned or not leadership.leading():
        return
    _warned.add(uid)
    if not _kube:
        _kube.append(Kube(await asyncio.to_thread(load_api_client), fence=leadership.fence))
    ref = involved(body, kind=kind)
    await apost_event(_kube[0], ref, "Warning", REASON, message(kind, pool, label_key), COMPONENT)


def _pod_event(type: str | None, body: Json, memo: Any) -> None:
    if (body.get("spec") or {}).get("schedulerName") == settings.current().scheduler_name:
        _seen("Pod", type, body)


def _podgroup_event(type: str | None, body: Json, memo: Any) -> None:
    _seen("PodGroup", type, body)


def register(registry: kopf.OperatorRegistry) -> None:
    group, version = keys.KAI_CONFIG_GROUP, keys.KAI_CONFIG_VERSION
    watches.on_events(registry, group, version, "schedulingshards", _shard_event)
    watches.on_events(registry, group, version, "configs", _config_event)
    watches.on_pods(registry, _pod_event)
    watches.on_events(registry, keys.GROUP, keys.PODGROUP_VERSION, "podgroups", _podgroup_event)
