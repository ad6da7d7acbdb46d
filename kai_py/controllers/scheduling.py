"""The scheduling loop: watch events feed the cache; every period a cycle runs.

Watch events come from the operator's own watches (``kai_py.controllers.watches``:
no per-object state, nothing written to the watched objects). The loop is an asyncio task started in
``@kopf.on.startup`` and stopped in ``@kopf.on.cleanup``. It waits until the
cache is warm (every kind listed once and the watches have delivered what the
list held), then every ``schedule_period`` seconds:

1. deletes Failed BindRequests (the pod is decided again),
2. builds a snapshot from the cache, runs ``run_cycle``,
3. writes the decisions (``kai_py.writes.writer``).

A failing cycle is logged and the next one runs; a failing write is logged
and the others go on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import kopf
from prometheus_client import Counter, Histogram

from kai_py import metrics
from kai_py.api import keys
from kai_py.api.bindrequest import bind_key
from kai_py.api.objects import meta
from kai_py.apiclient.informer import AsyncTransport, attach_transport
from kai_py.apiclient.kube import Kube, KubeError, list_paged, load_api_client, path_of
from kai_py.apiclient.leader import Leadership
from kai_py.controllers import kaiconfig, leadership, watches
from kai_py.controllers.settings import OperatorSettings, current
from kai_py.controllers.usage import UsageSource
from kai_py.gpu import cards
from kai_py.scheduler.cycle import configured_actions, run_cycle
from kai_py.scheduler.model import Config
from kai_py.scheduler.plugins import PLUGINS
from kai_py.state.cache import (
    BINDREQUESTS,
    CONFIGMAPS,
    KINDS,
    NODES,
    PODGROUPS,
    PODS,
    PRIORITY_CLASSES,
    PVCS,
    PVS,
    QUEUES,
    STORAGE_CLASSES,
    TOPOLOGIES,
    ClusterCache,
)
from kai_py.state.documents import InputError
from kai_py.state.gcpause import load_then_freeze, paused_gc
from kai_py.state.idle import IdleGate
from kai_py.state.partition import Partition
from kai_py.state.usage import capacity_of
from kai_py.writes.writer import (
    BackgroundWriter,
    EventRecorder,
    Outcome,
    Writer,
    bindrequest_writes,
    plan,
)

log = logging.getLogger("kai_py.scheduling")

CYCLE_SECONDS: Final = Histogram(
    "kai_cycle_duration_seconds",
    "Duration of one scheduling cycle (snapshot, actions, writes)",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
PODS_SCHEDULED: Final = Counter(
    "kai_pods_scheduled_total", "Pods for which a BindRequest was created"
)
#: Give up waiting for the watches to deliver a first listing after this long.
WARM_TIMEOUT_SECONDS: Final = 60.0
#: The largest share of the loop's time that cycles take (see ``_lead_term``).
CYCLE_SHARE: Final = 0.5
#: BindRequests, evictions and deletions in flight at once (async requests: no threads).
URGENT_WRITES: Final = 32
#: The key the BindRequests are signed with (the chart's Secret; docs/deploy.md, "Security").
_BIND_KEY: Final = bind_key(os.environ)
#: How often the cache is checked against fresh LISTs for deletions a watch missed.
RESYNC_SECONDS: Final = 300.0

_LIST_PATHS: Final = {
    NODES: path_of("", "v1", "nodes"),
    PODS: path_of("", "v1", "pods"),
    QUEUES: path_of(keys.GROUP, keys.QUEUE_VERSION, "queues"),
    PODGROUPS: path_of(keys.GROUP, keys.PODGROUP_VERSION, "podgroups"),
    PRIORITY_CLASSES: path_of("scheduling.k8s.io", "v1", "priorityclasses"),
    BINDREQUESTS: path_of(keys.GROUP, keys.BINDREQUEST_VERSION, "bindrequests"),
    CONFIGMAPS: path_of("", "v1", "configmaps"),
    PVCS: path_of("", "v1", "persistentvolumeclaims"),
    PVS: path_of("", "v1", "persistentvolumes"),
    STORAGE_CLASSES: path_of("storage.k8s.io", "v1", "storageclasses"),
    TOPOLOGIES: path_of(keys.TOPOLOGY_GROUP, keys.TOPOLOGY_VERSION, "topologies"),
}


@dataclass
class LoopState:
    settings: OperatorSettings
    cache: ClusterCache
    kube: Kube | None = None
    recorder: EventRecorder = field(default_factory=EventRecorder)
    task: asyncio.Task[None] | None = None
    cycles: int = 0
    last_error: str | None = None
    last_outcome: Outcome | None = None
    #: Status and Event writes, sent while the next cycles run (binds never wait for them).
    background: BackgroundWriter | None = None
    #: The async HTTP stack the loop's requests go through (closed at the stop).
    transport: AsyncTransport | None = None
    #: Skips cycles over an unchanged cache (kai_py/state/idle.py).
    idle: IdleGate = field(default_factory=IdleGate)
    #: Seconds the last cycle waited for its URGENT writes (the API server's time; logged).
    write_seconds: float = 0.0
    #: The version of KAI's Config / SchedulingShard the last cycle ran with.
    kai_config_version: int = 0
    #: Time-based fair share's usage (None while usageDBConfig is not set).
    usage: UsageSource | None = None


_state: LoopState | None = None


def state() -> LoopState:
    """The loop's state (made afresh at each operator start)."""
    global _state
    if _state is None:
        settings = current()
        _state = LoopState(
            settings=settings,
            cache=ClusterCache(settings.scheduler_name, partition=settings.partition),
        )
    return _state


# ---------------------------------------------------------------- handlers
# The handlers are async on purpose: Kopf runs sync handlers in a thread pool, and the
# cache is read by the loop on the event loop without locks.
_HANDLERS: Final = (
    "pod_event",
    "node_event",
    "queue_event",
    "podgroup_event",
    "priorityclass_event",
    "bindrequest_event",
    "bind",  # the binder's BindRequest events
    "pod-grouper",
)


class _QuietCacheHandlers(logging.Filter):
    """Drops Kopf's "Handler 'pod_event' succeeded." line: one per watch event is noise."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.INFO:
            return True
        text = str(record.msg)
        return not any(text == f"Handler {name!r} succeeded." for name in _HANDLERS)


logging.getLogger("kopf.objects").addFilter(_QuietCacheHandlers())


def _observe(kind: str, event_type: str | None, body: Mapping[str, Any]) -> None:
    try:
        state().cache.observe(kind, event_type, body)
    except Exception:  # one odd object must not stop the watch
        log.exception("cannot cache", extra={"kind": kind, "object": meta(body).get("name")})


def pod_event(type: str | None, body: dict[str, Any], memo: Any) -> None:
    _observe(PODS, type, body)


def watch_selectors(kind: str, partition: Partition) -> tuple[str | None, ...]:
    """The label selectors of the scheduler's watches of ``kind``: the API server sends
    a shard its pool's objects only, so its memory and cycle shrink with the pool.

    Nodes and BindRequests carry their pool's label. A pod's pool is its own label, else
    its PodGroup's: a named pool's shard also watches unlabelled pods and keeps those of
    its PodGroups (the cache). The default shard watches every PodGroup, to tell an
    unlabelled pod of another pool's PodGroup from a pod whose PodGroup is missing."""
    if kind in (NODES, BINDREQUESTS) or (kind == PODGROUPS and partition.value):
        return (partition.selector(),)
    if kind == PODS:
        unlabelled = Partition(partition.label).selector()
        return (partition.selector(), unlabelled) if partition.value else (unlabelled,)
    return (None,)


def _selectors(kind: str) -> watches.Selectors:
    return lambda: watch_selectors(kind, current().partition)


# Pods come from the operator's own pod watch (kai_py.controllers.watches), not Kopf's.
watches.on_pods(kopf.get_default_registry(), pod_event, _selectors(PODS))


def _observer(kind: str) -> watches.Listener:
    def listener(type: str | None, body: dict[str, Any], memo: Any) -> None:
        _observe(kind, type, body)

    return listener


# Every kind the cache keeps comes from the operator's own watches, not Kopf's.
for _kind, (_group, _version, _plural) in {
    NODES: ("", "v1", "nodes"),
    QUEUES: (keys.GROUP, keys.QUEUE_VERSION, "queues"),
    PODGROUPS: (keys.GROUP, keys.PODGROUP_VERSION, "podgroups"),
    PRIORITY_CLASSES: ("scheduling.k8s.io", "v1", "priorityclasses"),
    BINDREQUESTS: (keys.GROUP, keys.BINDREQUEST_VERSION, "bindrequests"),
    CONFIGMAPS: ("", "v1", "configmaps"),  # names only: pods that need one wait for it
    PVCS: ("", "v1", "persistentvolumeclaims"),  # and the volume predicate's inputs
    PVS: ("", "v1", "persistentvolumes"),
    STORAGE_CLASSES: ("storage.k8s.io", "v1", "storageclasses"),
    TOPOLOGIES: (keys.TOPOLOGY_GROUP, keys.TOPOLOGY_VERSION, "topologies"),  # gangs' domains
}.items():
    watches.on_events(
        kopf.get_default_registry(),
        _group,
        _version,
        _plural,
        _observer(_kind),
        _selectors(_kind) if _kind in (NODES, PODGROUPS, BINDREQUESTS) else None,
    )
# KAI's Config and this shard's SchedulingShard: settings applied on the next cycle.
kaiconfig.register(kopf.get_default_registry())


#: "true": the per-card metrics get a series per pod on a card too (docs/metrics.md).
CARD_PODS_ENV: Final = "KAI_PY_METRICS_CARD_PODS"


def _card_pods_wanted() -> bool:
    return os.environ.get(CARD_PODS_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def _card_rows(cache: ClusterCache) -> list[cards.CardRow]:
    """The watch cache's cards (this shard's nodes), at scrape time: copies of its maps
    (one step each under the GIL) while the event loop goes on changing them."""
    reserved = {
        (node, group): (uuid, f"{key[0]}/{key[1]}")
        for key, (node, group, uuid) in list(cache.group_cards.items())
    }
    return cards.card_rows(
        list(cache.objects[NODES].values()), list(cache.objects[PODS].values()), reserved
    )


@kopf.on.startup()
async def start_loop(**_: Any) -> None:
    # Kopf runs startup handlers before it starts watching, so a fresh cache misses nothing
    # (and an operator started again in the same process starts from scratch).
    global _state
    settings = current()
    kaiconfig.reset()
    _state = s = LoopState(
        settings=settings,
        cache=ClusterCache(settings.scheduler_name, partition=settings.partition),
        recorder=EventRecorder(refresh=settings.event_refresh),
    )
    metrics.serve(settings.metrics_port)
    metrics.watch_cards(lambda: _card_rows(s.cache), card_pods=_card_pods_wanted())
    s.kube = Kube(await asyncio.to_thread(load_api_client), fence=leadership.fence)
    s.transport = attach_transport(s.kube)
    leadership.abort_writes_on_loss(s.transport)
    s.background = BackgroundWriter(s.kube)
    s.task = asyncio.get_running_loop().create_task(run_loop(s), name="kai-py-scheduling-loop")
    log.info(
        "scheduling loop started",
        extra={
            "scheduler": s.settings.scheduler_name,
            "shard": s.settings.shard,
            "node_pool": s.settings.partition.selector(),
            "period_s": s.settings.schedule_period,
            "placement": s.settings.placement,
        },
    )


@kopf.on.cleanup()
async def stop_loop(**_: Any) -> None:
    s = state()
    task, s.task = s.task, None
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
    if s.background is not None:
        await s.background.close()
    if s.transport is not None:
        await s.transport.close()
    log.info("scheduling loop stopped", extra={"cycles": s.cycles})


# -------------------------------------------------------------------- loop
async def warm_up(s: LoopState, timeout: float = WARM_TIMEOUT_SECONDS) -> None:
    """List each kind and load the listings into the cache (a fresh start, also after
    taking over leadership); objects the watches delivered meanwhile are kept when newer.
    """
    assert s.kube is not None
    kube = s.kube
    deadline = time.monotonic() + timeout
    pending = list(KINDS)
    async with load_then_freeze():  # what the cache loads lives on: kai_py.state.gcpause
        await _load(s, kube, pending, deadline)
    log.info("cache loaded", extra={k: len(v) for k, v in s.cache.objects.items()})


async def _load(s: LoopState, kube: Kube, pending: list[str], deadline: float) -> None:
    while pending:
        for kind in list(pending):

            def load_page(items: list[dict[str, Any]], kind: str = kind) -> None:
                for item in items:
                    s.cache.observe(kind, "ADDED", item)

            try:
                # Page by page: the cache keeps projections, never a whole listing.
                listing = await _list_kind(s, kube, kind, load_page)
            except KubeError as exc:
                if exc.code == 404:  # the resource is not served (e.g. CRDs not installed)
                    log.warning(
                        "cannot list; scheduling without them",
                        extra={"kind": kind, "error": str(exc)},
                    )
                    s.cache.mark_warm(kind)
                    pending.remove(kind)
                else:
                    log.warning("cannot list yet", extra={"kind": kind, "error": str(exc)})
                continue
            s.cache.resync(kind, listing)  # with the pages observed: ClusterCache.load
            s.cache.mark_warm(kind)
            pending.remove(kind)
        if pending:
            if time.monotonic() > deadline:
                raise TimeoutError(f"cannot list {', '.join(pending)}")
            await asyncio.sleep(min(1.0, s.settings.schedule_period))


async def _list_kind(
    s: LoopState,
    kube: Kube,
    kind: str,
    on_page: Callable[[list[dict[str, Any]]], None] | None = None,
) -> dict[str, Any]:
    """LIST ``kind`` as the scheduler's watches see it (one LIST per selector), as one
    listing of uids."""
    items: list[dict[str, Any]] = []
    first: dict[str, Any] | None = None
    for selector in watch_selectors(kind, s.cache.partition):
        listing = await list_paged(kube, _LIST_PATHS[kind], on_page, label_selector=selector)
        items.extend(listing.get("items") or [])
        first = first or listing
    # The first listing's version, the oldest: what a later LIST missed because it was
    # created in between is newer, so ClusterCache.resync keeps it.
    return {**(first or {}), "items": items}


async def list_pods_of_new_nodes(s: LoopState) -> None:
    """List the pods of the nodes that joined a named pool since the pods were listed:
    the cache dropped those that came before their node (``ClusterCache.new_nodes``)."""
    assert s.kube is not None
    cache = s.cache
    for node in sorted(cache.new_nodes):

        def load_page(items: list[dict[str, Any]]) -> None:
            for item in items:
                cache.observe(PODS, "ADDED", item)

        for selector in watch_selectors(PODS, cache.partition):
            await list_paged(
                s.kube,
                _LIST_PATHS[PODS],
                load_page,
                label_selector=selector,
                field_selector=f"spec.nodeName={node}",
            )
        cache.new_nodes.discard(node)  # listed (a failure above tries it again next cycle)


async def run_loop(s: LoopState) -> None:
    lead = leadership.current()
    while True:
        term = await lead.wait_leading()
        # Cancelled the moment the term ends: a cycle of a lapsed term writes nothing more.
        await lead.while_leading(_lead_term(s, lead, term), term)
        if lead.term == term:
            log.info("not leading any more: scheduling stops until this process leads again")


async def _lead_term(s: LoopState, lead: Leadership, term: int) -> None:
    """Cycles while this process leads (one term); a new term starts from fresh LISTs."""
    while True:
        try:
            await warm_up(s)
            break
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("warm-up failed; trying again")
            await asyncio.sleep(s.settings.schedule_period)
        if not lead.is_leader or lead.term != term:
            return
    if s.usage is not None:
        s.usage.new_term()
    next_resync = time.monotonic() + RESYNC_SECONDS
    while lead.is_leader and lead.term == term:
        started = time.monotonic()
        if started >= next_resync:
            next_resync = started + RESYNC_SECONDS
            await resync(s)
        try:
            if s.cache.new_nodes:
                await list_pods_of_new_nodes(s)
            await run_one_cycle(s)
            s.last_error = None
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            text = f"{type(exc).__name__}: {exc}"
            if text != s.last_error:  # the same failure every second is logged once
                log.exception("scheduling cycle failed; the next one runs as usual")
            s.last_error = text
        elapsed = time.monotonic() - started
        CYCLE_SECONDS.observe(elapsed)
        metrics.record_cycle(elapsed, ok=s.last_error is None)
        metrics.record_cache({kind: len(objs) for kind, objs in s.cache.objects.items()})
        await asyncio.sleep(pause_after(elapsed, s.write_seconds, s.settings.schedule_period))


def _usage_source(s: LoopState, config: Config) -> None:
    """Keep the usage source in step with the configuration's usageDBConfig."""
    wanted = config.usage_db
    if s.usage is not None and s.usage.params == wanted:
        return
    if s.usage is not None:
        s.usage.close()
    s.usage = UsageSource.make(wanted) if wanted is not None else None


def pause_after(elapsed: float, write_seconds: float, period: float) -> float:
    """Seconds to wait after a cycle of ``elapsed`` seconds, ``write_seconds`` of them
    waiting for its writes: the rest of the period, and at least as long as the
    cycle's own work would need to stay within CYCLE_SHARE of the time.

    A cycle costs O(cached objects) however few pods are new: in a burst, cycles back
    to back would take the process's CPU from the pod-grouper and the binder that feed
    and empty them. The wait for the cycle's writes is the API server's time, not ours:
    counting it paused the loop 16 s after a cycle whose 1,577 binds took 15 s to
    write, while 1,500 grouped pods waited (docs/operator.md, bench/e2e.py)."""
    busy = max(0.0, elapsed - write_seconds)
    return max(0.0, period - elapsed, busy * (1.0 - CYCLE_SHARE) / CYCLE_SHARE)


async def resync(s: LoopState) -> None:
    """Drop what fresh LISTs no longer have (deletions a restarted watch did not report)."""
    assert s.kube is not None
    for kind in KINDS:
        try:
            listing = await _list_kind(s, s.kube, kind)  # uids only
        except KubeError as exc:
            log.debug("resync: cannot list", extra={"kind": kind, "error": str(exc)})
            continue
        dropped = s.cache.resync(kind, listing)
        if dropped:
            log.info("resync: gone without a watch event", extra={"kind": kind, "count": dropped})


async def run_one_cycle(s: LoopState) -> Outcome:
    # The collector stays off until the cycle's objects are gone, the wait for its writes
    # included: on again while they lived, it walked them all (young, then middle
    # generation) after each cycle, 15 % of the operator's CPU in a 4,000-pod burst.
    with paused_gc():
        return await _one_cycle(s)


async def _one_cycle(s: LoopState) -> Outcome:
    assert s.kube is not None
    writer = Writer(s.kube, concurrency=URGENT_WRITES, background=s.background)
    s.write_seconds = 0.0
    began = time.monotonic()
    now = time.time()
    live = kaiconfig.live()
    if live.pending:
        await kaiconfig.report(s.kube)
    if live.version != s.kai_config_version:
        s.kai_config_version = live.version
        s.idle.generation = None  # new settings: decide again over the same cluster
    if not live.scheduling:
        return Outcome()  # KAI's Config switched the scheduler off
    config = kaiconfig.scheduler_config(s.settings)
    _usage_source(s, config)
    if s.usage is not None and s.usage.due(now):
        s.idle.generation = None  # usage moved the fair shares: decide again
    if not s.idle.due(s.cache.generation, now):
        return Outcome()  # nothing changed since a cycle that decided nothing
    view = s.cache.view(now)
    cleanup = bindrequest_writes(view, s.cache)
    if cleanup:
        waited = time.monotonic()
        await writer.apply(cleanup)
        s.write_seconds += time.monotonic() - waited
        view = s.cache.view(now)
    opened = time.perf_counter()
    try:
        built = await asyncio.to_thread(view.build, now, config)
    except InputError as exc:
        # Not expected: the view builds with strict=False (one unreadable object is left
        # out with a Warning Event) and leaves bad queue trees out before the builder.
        raise RuntimeError(f"cannot build a snapshot: {exc}") from None
    metrics.record_open_session(time.perf_counter() - opened)
    metrics.record_left_out(
        [*(kind for kind, _, _ in built.left_out), *("Queue" for _ in view.left_out)]
    )
    queues = s.cache.objects[QUEUES]
    if s.usage is not None:
        s.usage.load({meta(q).get("name", ""): q for q in queues.values()})
        s.usage.apply(built.snapshot, now)
    actions = metrics.timed_actions(configured_actions(config))
    framework = metrics.timed_framework(config, PLUGINS)
    decisions = await asyncio.to_thread(run_cycle, built.snapshot, actions, framework)
    metrics.record_searches(decisions.searches)
    closing = time.perf_counter()
    writes = plan(view, built, decisions, now, s.recorder, s.cache, sign_key=_BIND_KEY)
    if s.usage is not None:
        metrics.record_capacity(capacity_of(built.snapshot))
        writes.extend(
            s.usage.after(
                built.snapshot, now, {meta(q).get("name", ""): q for q in queues.values()}
            )
        )
    metrics.record_close_session(time.perf_counter() - closing)
    metrics.record_decisions(
        decisions, built.snapshot, s.cache.objects[QUEUES].values(), s.cache.partition.name
    )
    waited = time.monotonic()
    outcome = await writer.apply(writes)
    s.write_seconds += time.monotonic() - waited
    quiet = not (
        cleanup
        or decisions.binds
        or decisions.evictions
        or decisions.pipelined
        or decisions.ungated  # pods let go from the queue-admission gate
    )
    s.idle.ran(view.generation, now, view.wake_at, quiet and not outcome.failed)
    s.cycles += 1
    s.last_outcome = outcome
    binds = sum(1 for w in writes if w.what.startswith("bind ")) if writes else 0
    if binds:
        PODS_SCHEDULED.inc(binds - sum(1 for f in outcome.failures if f.startswith("bind ")))
    if decisions.binds or decisions.evictions or outcome.failed:
        log.info(
            "cycle",
            extra={
                "cycle": s.cycles,
                "binds": len(decisions.binds),
                "pipelined": len(decisions.pipelined),
                "evictions": len(decisions.evictions),
                "writes": len(writes),
                "failed": outcome.failed,
                "duration_s": round(time.monotonic() - began, 3),
                "waiting_for_binds_s": round(s.write_seconds, 3),  # of duration_s
            },
        )
    return outcome
