"""KAI's ``Config`` and this scheduler's ``SchedulingShard``, applied while running.

The scheduler part watches both kinds (``kai.scheduler/v1``). Its own shard (the one
named by ``--shard``, ``default`` without it) gives the scheduler's configuration
(``kai_py.conf.kaiconfig.shard_settings``): the next cycle runs with it, no restart.
The Config (``kai-config``) gives the node-pool label key. Deleting the shard goes
back to the command line's configuration.

Each object read gets KAI's status conditions (``Deployed``, ``Available``,
``DependenciesFulfilled``) for the generation applied, and ``NotApplied`` naming
each field and value given that kai-py does not apply. A shard's status is written
by that shard's scheduler, the Config's by the ``default`` shard's. The writes go
through the scheduling loop's client, so only the leader writes
(``kai_py.controllers.scheduling`` calls ``report``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Final

import kopf

from kai_py.api import keys
from kai_py.api.common import ManifestError
from kai_py.api.kaiconfig import KaiConfig, SchedulingShard
from kai_py.apiclient.kube import Kube, KubeError, path_of
from kai_py.conf.kaiconfig import NotApplied, global_settings, shard_settings
from kai_py.controllers import watches
from kai_py.controllers.settings import DEFAULT_SHARD, OperatorSettings, current
from kai_py.scheduler.model import Config

log = logging.getLogger(__name__)

Json = dict[str, Any]

#: KAI's condition types its clients wait for (True for the object's generation).
READY_CONDITIONS: Final = (
    ("Deployed", "deployed"),
    ("Available", "available"),
    ("DependenciesFulfilled", "dependencies_fulfilled"),
)
NOT_APPLIED: Final = "NotApplied"
#: True while another SchedulingShard has the same partitionLabelValue.
POOL_SHARED: Final = "PoolShared"


@dataclass(slots=True)
class Live:
    """What the objects say now, for the scheduling loop."""

    #: Bumped on every change the loop must act on (its idle gate runs the next cycle).
    version: int = 0
    #: The shard's configuration; None until the shard is read (the command line's).
    config: Config | None = None
    #: False while the Config switches the scheduler off (spec.scheduler.service.enabled).
    scheduling: bool = True
    #: Every shard by name -> the pool it serves (its partitionLabelValue).
    served: dict[str, str] = field(default_factory=dict)
    #: Status patches to send, by status path.
    pending: dict[str, Json] = field(default_factory=dict)
    #: This scheduler's own shard as last read (checked again when another shard changes).
    own: Json | None = None


_live = Live()


def live() -> Live:
    return _live


def reset() -> None:
    """A fresh start (an operator started again in the same process)."""
    global _live
    _live = Live()


def scheduler_config(settings: OperatorSettings) -> Config:
    """The configuration of the next cycle: the shard's, else the command line's."""
    if _live.config is not None:
        return _live.config
    return replace(settings.scheduler, placement=settings.placement)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def conditions(
    body: Json,
    not_applied: list[NotApplied],
    invalid: str | None = None,
    shared_with: list[str] | None = None,
) -> list[Json]:
    """The object's conditions for its generation; a condition whose status did not
    change keeps its lastTransitionTime."""
    meta = body.get("metadata") or {}
    generation = meta.get("generation") or 0
    previous = {c.get("type"): c for c in ((body.get("status") or {}).get("conditions") or [])}
    wanted: list[tuple[str, str, str, str]] = []
    for kind, reason in READY_CONDITIONS:
        if invalid and kind != "DependenciesFulfilled":
            wanted.append((kind, "False", "invalid", invalid))
        else:
            wanted.append((kind, "True", reason, "read by kai-py"))
    if invalid:
        wanted.append((NOT_APPLIED, "True", "Invalid", invalid))
    elif not_applied:
        text = "; ".join(n.text() for n in not_applied)
        wanted.append((NOT_APPLIED, "True", "FieldsNotApplied", text))
    else:
        wanted.append((NOT_APPLIED, "False", "AllApplied", "kai-py applies every field given"))
    if shared_with is not None:
        pool = (body.get("spec") or {}).get("partitionLabelValue") or '""'
        if shared_with:
            text = (
                f"spec.partitionLabelValue={pool}: SchedulingShard {', '.join(shared_with)} "
                "serves this pool too; their schedulers would place pods on the same nodes: "
                "give each shard its own pool"
            )
            wanted.append((POOL_SHARED, "True", "SamePartitionLabelValue", text))
        else:
            wanted.append((POOL_SHARED, "False", "OwnPool", "no other shard serves this pool"))
    out = []
    for kind, status, reason, message in wanted:
        before = previous.get(kind) or {}
        changed = before.get("status") != status
        out.append(
            {
                "type": kind,
                "status": status,
                "observedGeneration": generation,
                "lastTransitionTime": _now() if changed else before.get("lastTransitionTime"),
                "reason": reason,
                "message": message,
            }
        )
    return out


def _same(body: Json, wanted: list[Json]) -> bool:
    def key(c: Json) -> tuple[Any, ...]:
        return (
            c.get("type"),
            c.get("status"),
            c.get("observedGeneration"),
            c.get("reason"),
            c.get("message"),
        )

    have = (body.get("status") or {}).get("conditions") or []
    return sorted(map(key, have)) == sorted(map(key, wanted))


def _queue_status(plural: str, body: Json, wanted: list[Json]) -> None:
    name = str((body.get("metadata") or {}).get("name") or "")
    path = path_of(
        keys.KAI_CONFIG_GROUP, keys.KAI_CONFIG_VERSION, plural, name=name, subresource="status"
    )
    if _same(body, wanted):
        _live.pending.pop(path, None)
    else:
        _live.pending[path] = {"status": {"conditions": wanted}}


def shard_event(type: str | None, body: Json, memo: Any = None) -> None:
    settings = current()
    meta = body.get("metadata") or {}
    name = str(meta.get("name") or "")
    if type == "DELETED":
        _live.served.pop(name, None)
        if name == settings.shard:
            _live.config = None
            _live.own = None
            _live.version += 1
            log.info(
                "SchedulingShard deleted: back to the command line's settings",
                extra={"schedulingshard": name},
            )
        elif _live.own is not None:
            _own_shard(_live.own, settings)  # its pool may be its own again
        return
    _live.served[name] = str((body.get("spec") or {}).get("partitionLabelValue") or "")
    if name == settings.shard:
        _own_shard(body, settings)
    elif _live.own is not None:
        _own_shard(_live.own, settings)  # another shard may now serve the same pool


def _shared_with(name: str, body: Json) -> list[str]:
    pool = str((body.get("spec") or {}).get("partitionLabelValue") or "")
    return sorted(other for other, value in _live.served.items() if other != name and value == pool)


def _own_shard(body: Json, settings: OperatorSettings) -> None:
    _live.own = body
    meta = body.get("metadata") or {}
    name = str(meta.get("name") or "")
    shared = _shared_with(name, body)
    base = replace(settings.scheduler, placement=settings.placement)
    try:
        shard = SchedulingShard.from_manifest(body)
    except ManifestError as exc:
        # Kept out by the API server's schema; here only if stored before the CRD was.
        log.warning(
            "SchedulingShard not applied: scheduling with the command line's settings",
            extra={"schedulingshard": name, "error": str(exc)},
        )
        _live.config = base
        _live.version += 1
        _queue_status("schedulingshards", body, conditions(body, [], str(exc), shared))
        return
    applied = shard_settings(shard.spec, base, settings.node_pool)
    if applied.config != _live.config:
        _live.config = applied.config
        _live.version += 1
        log.info(
            "SchedulingShard applied",
            extra={
                "schedulingshard": name,
                "generation": meta.get("generation"),
                "placement": applied.config.placement,
                "actions": list(applied.config.actions),
            },
        )
    for item in applied.not_applied:
        log.debug(
            "SchedulingShard: not applied", extra={"schedulingshard": name, "detail": item.text()}
        )
    _queue_status("schedulingshards", body, conditions(body, applied.not_applied, None, shared))


def config_event(type: str | None, body: Json, memo: Any = None) -> None:
    settings = current()
    name = str((body.get("metadata") or {}).get("name") or "")
    if type == "DELETED":
        if name == keys.KAI_CONFIG_NAME:
            settings.node_pool_label = keys.NODE_POOL_LABEL
            _live.scheduling = True
            _live.version += 1
        return
    if settings.shard != DEFAULT_SHARD and name != keys.KAI_CONFIG_NAME:
        return
    if name != keys.KAI_CONFIG_NAME:
        # KAI's operator reads one Config, by name; say so on any other.
        skip = NotApplied("metadata.name", name, f"kai-py reads only {keys.KAI_CONFIG_NAME}")
        _queue_status("configs", body, conditions(body, [skip]))
        return
    try:
        config = KaiConfig.from_manifest(body)
    except ManifestError as exc:
        log.warning(
            "Config not applied: the node-pool label stays",
            extra={"error": str(exc), "node_pool_label": settings.node_pool_label},
        )
        if settings.shard == DEFAULT_SHARD:
            _queue_status("configs", body, conditions(body, [], invalid=str(exc)))
        return
    applied = global_settings(config.spec, settings.scheduler_name, settings.lease_namespace)
    if applied.node_pool_label != settings.node_pool_label:
        settings.node_pool_label = applied.node_pool_label
        _live.version += 1
    if applied.scheduling != _live.scheduling:
        _live.scheduling = applied.scheduling
        _live.version += 1
        log.info("the Config switches scheduling", extra={"scheduling": applied.scheduling})
    if settings.shard == DEFAULT_SHARD:
        _queue_status("configs", body, conditions(body, applied.not_applied))


async def report(kube: Kube) -> None:
    """Send the status patches waiting (the scheduling loop calls this while leading)."""
    for path, patch in list(_live.pending.items()):
        try:
            await kube.arequest("PATCH", path, patch, content_type="application/merge-patch+json")
        except KubeError as exc:
            if exc.code != 404:  # a 404: the object is gone, nothing to report on
                log.warning("cannot write status", extra={"path": path, "error": str(exc)})
                continue
        if _live.pending.get(path) is patch:
            del _live.pending[path]


def register(registry: kopf.OperatorRegistry) -> None:
    group, version = keys.KAI_CONFIG_GROUP, keys.KAI_CONFIG_VERSION
    watches.on_events(registry, group, version, "schedulingshards", shard_event)
    watches.on_events(registry, group, version, "configs", config_event)
