"""Time-based fair share in the operator: where each cycle's queue usage comes from.

docs/fairshare.md. With ``usageDBConfig`` set (SchedulingShard or scheduler
configuration), every cycle's queues carry their usage (``Queue.usage``):

- ``embedded`` (the default): the scheduler keeps the usage itself
  (``state.usage.UsageHistory``): after each cycle what each queue holds is
  recorded; the buckets are written to each Queue's ``status.usageHistory`` at
  most once per ``fetchInterval``, and read back from the cache when a process
  starts leading, so a restart or a new leader goes on from them;
- ``prometheus``: a thread asks Prometheus every ``fetchInterval`` with KAI's
  queries (``sum_over_time`` of ``kai_queue_allocated_*`` over the window,
  divided by the node capacity over the same window). A cycle only reads the
  last answer: it never waits for Prometheus. A query that fails or is slow
  keeps the last known usage, with a warning and ``kai_usage_query_latency_
  milliseconds``; usage older than ``stalenessPeriod`` is still used, with a
  warning (KAI's lister does the same).
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from kai_py import metrics
from kai_py.api import keys
from kai_py.apiclient.kube import MERGE_PATCH, path_of
from kai_py.scheduler.model import Snapshot
from kai_py.scheduler.resources import Res
from kai_py.scheduler.timeshare.settings import UsageDB, window_duration
from kai_py.state.usage import UsageHistory, capacity_of
from kai_py.writes.writer import STATUS, Write, with_uid

log = logging.getLogger("kai_py.usage")

#: KAI's default metrics (overridable with extraParams, as in KAI).
ALLOCATION_METRICS: Final = {
    "gpu": ("gpuAllocationMetric", "kai_queue_allocated_gpus"),
    "cpu": ("cpuAllocationMetric", "kai_queue_allocated_cpu_cores"),
    "memory": ("memoryAllocationMetric", "kai_queue_allocated_memory_bytes"),
}
CAPACITY_METRICS: Final = {
    "gpu": ("gpuCapacityMetric", 'sum(kube_node_status_capacity{resource="nvidia_com_gpu"})'),
    "cpu": ("cpuCapacityMetric", 'sum(kube_node_status_capacity{resource="cpu"})'),
    "memory": ("memoryCapacityMetric", 'sum(kube_node_status_capacity{resource="memory"})'),
}
DEFAULT_PROMETHEUS: Final = "http://prometheus-operated.kai-scheduler.svc.cluster.local:9090"



# ----------------------------------------------------------------- Prometheus
def queries(params: UsageDB, now: float) -> dict[str, tuple[str, str]]:
    """resource -> (usage query, capacity query), as KAI builds them, at ``now``."""
    resolution = params.extra.get("queryResolution", "1m")
    if params.window_type == "tumbling":
        # No start time: windows counted from the epoch, as the embedded source does.
        start = params.tumbling_start if params.tumbling_start is not None else 0.0
        reset = (
            now
            if now <= start
            else start + math.floor((now - start) / params.window) * (params.window)
        )
        window = f"{max(1, int(now - reset))}s"
    else:
        window = f"{int(params.window)}s"

    def over_window(metric: str) -> str:
        if params.half_life:
            # The decay of each sample by its age: 0.5 ^ ((now - t) / half-life).
            metric = f"(({metric}) * (0.5^(({int(now)} - time()) / {params.half_life:g})))"
        return f"sum_over_time(({metric})[{window}:{resolution}])"

    out: dict[str, tuple[str, str]] = {}
    for res in ("gpu", "cpu", "memory"):
        key, default = ALLOCATION_METRICS[res]
        ckey, cdefault = CAPACITY_METRICS[res]
        out[res] = (
            over_window(params.extra.get(key, default)),
            over_window(params.extra.get(ckey, cdefault)),
        )
    return out


def _instant(base: str, query: str, now: float, timeout: float) -> list[dict[str, Any]]:
    url = f"{base.rstrip('/')}/api/v1/query?" + urllib.parse.urlencode(
        {"query": query, "time": f"{now:.3f}"}
    )
    with urllib.request.urlopen(url, timeout=timeout) as answer:
        body = json.loads(answer.read())
    if body.get("status") != "success":
        raise RuntimeError(f"{body.get('errorType')}: {body.get('error')}")
    data = body.get("data") or {}
    if data.get("resultType") != "vector":
        raise RuntimeError(f"expected a vector, got {data.get('resultType')}")
    result: list[dict[str, Any]] = data.get("result") or []
    return result


def fetch_prometheus(
    base: str, params: UsageDB, now: float, timeout: float = 10.0
) -> dict[str, Res]:
    """Each queue's usage over the window / the capacity over it (KAI's normalisation)."""
    usage: dict[str, dict[str, float]] = {}
    for res, (used_q, capacity_q) in queries(params, now).items():
        capacity = _instant(base, capacity_q, now, timeout)
        if not capacity:
            raise RuntimeError(f"no data for the cluster capacity query {capacity_q}")
        total = float(capacity[0]["value"][1])
        for sample in _instant(base, used_q, now, timeout):
            name = (sample.get("metric") or {}).get("queue_name")
            if not name:
                continue
            value = float(sample["value"][1])
            usage.setdefault(name, {})[res] = value / total if total > 0 else 0.0
    return {name: Res.of(values) for name, values in usage.items()}


class PrometheusUsage:
    """The last usage Prometheus gave, refreshed by a thread every ``fetchInterval``."""

    def __init__(
        self,
        params: UsageDB,
        base: str,
        fetch: Callable[[str, UsageDB, float, float], dict[str, Res]] = fetch_prometheus,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.params, self.base, self._fetch, self._clock = params, base, fetch, clock
        self.usage: dict[str, Res] | None = None
        self.fetched_at: float | None = None
        self.version = 0  # bumped on every new answer
        self.failure: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="kai-py-usage", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.fetch_once()
            self._stop.wait(self.params.fetch_interval)

    def fetch_once(self) -> None:
        began = time.monotonic()
        timeout = window_duration(self.params.extra.get("usageQueryTimeout", "10s"))
        try:
            usage = self._fetch(self.base, self.params, self._clock(), timeout)
        except Exception as exc:  # any failure: keep the last usage, say so
            elapsed = time.monotonic() - began
            metrics.record_usage_query(elapsed)
            text = f"{type(exc).__name__}: {exc}"
            with self._lock:
                self.failure = text
            log.warning(
                "usage query to Prometheus at %s failed after %.1f s (%s); the last known "
                "usage is used (fetched %s)",
                self.base,
                elapsed,
                text,
                "never"
                if self.fetched_at is None
                else f"{self._clock() - self.fetched_at:.0f} s ago",
            )
            return
        metrics.record_usage_query(time.monotonic() - began)
        with self._lock:
            self.usage, self.fetched_at, self.failure = usage, self._clock(), None
            self.version += 1

    def current(self) -> tuple[dict[str, Res] | None, int]:
        with self._lock:
            if (
                self.fetched_at is not None
                and self._clock() - self.fetched_at > self.params.staleness
            ):
                log.warning(
                    "usage from Prometheus is stale: last fetched %.0f s ago (stalenessPeriod "
                    "%.0f s); it is still used",
                    self._clock() - self.fetched_at,
                    self.params.staleness,
                )
            return self.usage, self.version


# ----------------------------------------------------------------- the source
@dataclass
class UsageSource:
    """One scheduler's usage for time-based fair share (made again when its settings change)."""

    params: UsageDB
    history: UsageHistory | None = None
    prometheus: PrometheusUsage | None = None
    loaded: bool = False
    persisted_at: float | None = None
    version: int = 0
    _last_version: int = field(default=-1)

    @classmethod
    def make(cls, params: UsageDB) -> UsageSource:
        source = cls(params)
        if params.client_type == "prometheus":
            base = params.connection_string or os.environ.get(
                params.connection_string_env_var or "", ""
            )
            source.prometheus = PrometheusUsage(params, base or DEFAULT_PROMETHEUS)
            source.prometheus.start()
        else:
            source.history = UsageHistory(params)
        return source

    def close(self) -> None:
        if self.prometheus is not None:
            self.prometheus.stop()

    def load(self, queues: Mapping[str, Mapping[str, Any]]) -> None:
        """Take the embedded history back from the Queues' status (once per term)."""
        if self.history is None or self.loaded:
            return
        self.loaded = True
        statuses = [
            (name, (q.get("status") or {}).get("usageHistory"))
            for name, q in queues.items()
            if isinstance((q.get("status") or {}).get("usageHistory"), Mapping)
        ]
        for problem in self.history.load([(n, s) for n, s in statuses if s is not None]):
            log.warning("%s", problem)

    def new_term(self) -> None:
        """Leading again: another leader may have kept the history since; read it back."""
        if self.history is not None:
            self.history = UsageHistory(self.params)
            self.loaded = False
            self.persisted_at = None

    def due(self, now: float) -> bool:
        """True when the usage changed since the last cycle: the idle gate must let a
        cycle run, the fair shares moved though the cluster did not. Embedded usage
        drifts every second; a cycle is due again once per fetchInterval for it."""
        if self.prometheus is not None:
            version = self.prometheus.version
        else:
            version = int(now // self.params.fetch_interval)
        changed = version != self._last_version
        self._last_version = version
        return changed

    def apply(self, snapshot: Snapshot, now: float) -> None:
        """Give the snapshot's queues their usage (nothing known yet: none used)."""
        if self.prometheus is not None:
            usage, _ = self.prometheus.current()
        else:
            assert self.history is not None
            usage = self.history.usage(now)
        zero = Res()
        for queue in snapshot.queues:
            queue.usage = (usage or {}).get(queue.name, zero)

    def after(
        self, snapshot: Snapshot, now: float, queues: Mapping[str, Mapping[str, Any]]
    ) -> list[Write]:
        """Record what each queue holds after the cycle; the status writes when due."""
        if self.history is None:
            return []
        self.history.record(
            now, {q.name: q.allocated for q in snapshot.queues}, capacity_of(snapshot)
        )
        if self.persisted_at is not None and now - self.persisted_at < self.params.fetch_interval:
            return []
        self.persisted_at = now
        writes: list[Write] = []
        for q in snapshot.queues:
            obj = queues.get(q.name)
            if obj is None:
                continue
            writes.append(
                Write(
                    f"Queue {q.name} usage history",
                    "PATCH",
                    path_of(keys.GROUP, keys.QUEUE_VERSION, "queues", None, q.name, "status"),
                    with_uid({"status": {"usageHistory": self.history.to_status(q.name)}}, obj),
                    content_type=MERGE_PATCH,
                    ok_codes=(404, 409),
                    lane=STATUS,
                    key=f"queue-usage {q.name}",
                )
            )
        return writes
