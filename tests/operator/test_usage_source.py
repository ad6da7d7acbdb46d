"""The operator's usage source for time-based fair share (kai_py/controllers/usage.py).

The embedded source writes its history to the Queues' status at a bounded rate
and a new leader goes on from it; the Prometheus source never makes a cycle
wait (a slow or failing query leaves the last known usage, with a warning and
the latency metric), after KAI's usage lister tests (``usagedb_test.go``:
``TestGetResourceUsage``: no data, fresh data, stale data).
"""

from __future__ import annotations

import logging
import threading
import time

import pytest

from kai_py import metrics
from kai_py.controllers.usage import PrometheusUsage, UsageSource, queries
from kai_py.scheduler.model import Node, Queue, Snapshot
from kai_py.scheduler.resources import Res
from kai_py.scheduler.timeshare.settings import UsageDB


def snapshot(held: dict[str, float]) -> Snapshot:
    queues = [Queue(n, None, Res(), Res(), Res(gpu=1)) for n in held]
    for q in queues:
        q.allocated = Res(gpu=held[q.name])
    return Snapshot([Node("n", Res(gpu=8))], queues, [])


def objects(names: list[str]) -> dict[str, dict[str, object]]:
    return {n: {"metadata": {"name": n, "uid": f"u-{n}"}} for n in names}


def test_embedded_history_is_written_at_most_once_per_fetch_interval() -> None:
    source = UsageSource.make(UsageDB(window=3600.0, fetch_interval=60.0))
    queues = objects(["a", "b"])
    first = source.after(snapshot({"a": 8, "b": 0}), 0.0, queues)
    assert sorted(w.what for w in first) == [
        "Queue a usage history",
        "Queue b usage history",
    ]
    assert first[0].path.endswith("/queues/a/status") and first[0].key == "queue-usage a"
    assert source.after(snapshot({"a": 8, "b": 0}), 30.0, queues) == []
    assert len(source.after(snapshot({"a": 0, "b": 8}), 60.0, queues)) == 2


def test_a_new_leader_goes_on_from_the_queue_status() -> None:
    params = UsageDB(window=3600.0, fetch_interval=60.0)
    old = UsageSource.make(params)
    queues = objects(["a", "b"])
    old.after(snapshot({"a": 8, "b": 0}), 0.0, queues)
    writes = old.after(snapshot({"a": 8, "b": 0}), 600.0, queues)
    stored = {w.what.split()[1]: {"status": w.body["status"]} for w in writes}  # type: ignore[index]
    new = UsageSource.make(params)
    new.load(stored)
    snap = snapshot({"a": 0, "b": 0})
    new.apply(snap, 600.0)
    got = {q.name: q.usage for q in snap.queues}
    assert got["a"] is not None and got["a"].gpu == pytest.approx(1.0)
    assert got["b"] is not None and got["b"].gpu == 0.0


def test_embedded_usage_makes_a_cycle_due_once_per_fetch_interval() -> None:
    source = UsageSource.make(UsageDB(fetch_interval=60.0))
    assert source.due(0.0)
    assert not source.due(30.0)
    assert source.due(61.0)


class SlowFetch:
    def __init__(self) -> None:
        self.release = threading.Event()
        self.calls = 0
        self.fail = False

    def __call__(self, base: str, params: UsageDB, now: float, timeout: float) -> dict[str, Res]:
        self.calls += 1
        if self.calls > 1:
            self.release.wait(5)
        if self.fail:
            raise OSError("connection refused")
        return {"a": Res(gpu=0.5)}


def test_a_slow_prometheus_never_blocks_the_cycle() -> None:
    fetch = SlowFetch()
    source = PrometheusUsage(UsageDB(client_type="prometheus", fetch_interval=0.01), "x", fetch)
    source.fetch_once()  # the first answer
    assert source.current() == ({"a": Res(gpu=0.5)}, 1)
    source.start()  # the next query hangs in its thread
    time.sleep(0.1)
    began = time.monotonic()
    usage, version = source.current()
    assert time.monotonic() - began < 0.05
    assert usage == {"a": Res(gpu=0.5)} and version == 1  # the last known usage
    source.stop()
    fetch.release.set()


def test_a_failing_query_keeps_the_last_usage_with_a_warning_and_the_metric(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    fetch = SlowFetch()
    fetch.release.set()
    source = PrometheusUsage(UsageDB(client_type="prometheus"), "http://prom:9090", fetch)
    assert source.current() == (None, 0)  # no data yet: no usage (KAI: an error)
    source.fetch_once()
    before = metrics.USAGE_QUERY_LATENCY._sum.get()  # type: ignore[attr-defined]
    count = sum(
        s.value
        for m in metrics.USAGE_QUERY_LATENCY.collect()
        for s in m.samples
        if s.name.endswith("_count")
    )
    fetch.fail = True
    # The histogram is the process's: a usage thread another test left running may
    # observe into it too. Count this thread's observations, and the histogram's growth.
    here: list[float] = []
    record = metrics.record_usage_query

    def recording(seconds: float) -> None:
        if threading.get_ident() == threading.main_thread().ident:
            here.append(seconds)
        record(seconds)

    monkeypatch.setattr(metrics, "record_usage_query", recording)
    with caplog.at_level(logging.WARNING, "kai_py.usage"):
        source.fetch_once()
    assert source.current() == ({"a": Res(gpu=0.5)}, 1)
    assert source.failure == "OSError: connection refused"
    assert "usage query to Prometheus at http://prom:9090 failed" in caplog.text
    after = sum(
        s.value
        for m in metrics.USAGE_QUERY_LATENCY.collect()
        for s in m.samples
        if s.name.endswith("_count")
    )
    assert len(here) == 1  # the failed query was observed once
    assert after >= count + 1 and metrics.USAGE_QUERY_LATENCY._sum.get() >= before  # type: ignore[attr-defined]


def test_stale_usage_is_used_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    clock = [1000.0]
    fetch = SlowFetch()
    source = PrometheusUsage(
        UsageDB(client_type="prometheus", staleness=300.0), "x", fetch, clock=lambda: clock[0]
    )
    source.fetch_once()
    clock[0] += 600.0
    with caplog.at_level(logging.WARNING, "kai_py.usage"):
        assert source.current()[0] == {"a": Res(gpu=0.5)}
    assert "usage from Prometheus is stale: last fetched 600 s ago" in caplog.text


def test_kais_queries() -> None:
    sliding = queries(UsageDB(window=3600.0), 1000.0)
    assert sliding["gpu"] == (
        "sum_over_time((kai_queue_allocated_gpus)[3600s:1m])",
        'sum_over_time((sum(kube_node_status_capacity{resource="nvidia_com_gpu"}))[3600s:1m])',
    )
    decayed = queries(
        UsageDB(window=600.0, half_life=60.0, extra={"gpuCapacityMetric": "sum(cap)"}), 5000.0
    )
    assert decayed["gpu"][1] == (
        "sum_over_time((((sum(cap)) * (0.5^((5000 - time()) / 60))))[600s:1m])"
    )
    tumbling = queries(UsageDB(window=3600.0, window_type="tumbling", tumbling_start=0.0), 5400.0)
    assert tumbling["cpu"][0] == "sum_over_time((kai_queue_allocated_cpu_cores)[1800s:1m])"
