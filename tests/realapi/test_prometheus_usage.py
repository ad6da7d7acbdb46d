"""Time-based fair share's ``clientType: prometheus`` against a real Prometheus server.

The server is built from its Go module by ``scripts/prometheus-binary.sh`` (``.ci/run``
builds it and sets ``KAI_PY_PROMETHEUS_BIN``); it scrapes the operator's metrics
endpoint (``kai_py.metrics.serve``) every second, where a scheduling cycle's
``kai_queue_allocated_*`` and the cluster capacity are exported. Then KAI's usage
queries are asked of it, and the usage the scheduler gets is each queue's share
of the capacity over the window.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from realapi_server import REPO, free_port

from kai_py import metrics
from kai_py.controllers.usage import PrometheusUsage, UsageSource, fetch_prometheus
from kai_py.scheduler.timeshare.settings import UsageDB
from kai_py.simulate.simulation import Simulation
from kai_py.state.documents import Document
from kai_py.state.usage import capacity_of

NODE_AND_QUEUES = """
apiVersion: v1
kind: Node
metadata: {name: gpu-1}
status: {allocatable: {cpu: "64", memory: 512Gi, nvidia.com/gpu: "16"}}
---
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: team-a}
spec:
  resources:
    gpu: {quota: 0, limit: -1, overQuotaWeight: 1}
    cpu: {quota: -1, limit: -1}
    memory: {quota: -1, limit: -1}
---
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: team-b}
spec:
  resources:
    gpu: {quota: 0, limit: -1, overQuotaWeight: 1}
    cpu: {quota: -1, limit: -1}
    memory: {quota: -1, limit: -1}
"""
POD = """
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: default, labels: {{kai.scheduler/queue: {queue}}}}}
spec:
  schedulerName: kai-scheduler
  containers:
  - name: main
    image: x
    resources: {{limits: {{nvidia.com/gpu: "{gpus}", cpu: "1", memory: 1Gi}}}}
"""
#: kai-py exports the capacity itself (no kube-state-metrics in this test).
CAPACITY = {
    "gpuCapacityMetric": 'sum(kai_py_cluster_capacity{resource="nvidia_com_gpu"})',
    "cpuCapacityMetric": 'sum(kai_py_cluster_capacity{resource="cpu"})',
    "memoryCapacityMetric": 'sum(kai_py_cluster_capacity{resource="memory"})',
    "queryResolution": "1s",
}


def prometheus_binary() -> Path:
    """The binary; skips only when it cannot be built here (CI always builds it)."""
    wanted = os.environ.get("KAI_PY_PROMETHEUS_BIN")
    if wanted:
        assert Path(wanted).exists(), f"KAI_PY_PROMETHEUS_BIN={wanted!r} does not exist"
        return Path(wanted)
    built = subprocess.run(
        [str(REPO / "scripts" / "prometheus-binary.sh")], capture_output=True, text=True
    )
    if built.returncode != 0:
        if os.environ.get("CI"):
            raise AssertionError(f"scripts/prometheus-binary.sh failed: {built.stderr[-2000:]}")
        pytest.skip(f"no Prometheus could be built here: {built.stderr.strip()[-300:]}")
    return Path(built.stdout.strip())


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    binary = prometheus_binary()
    target = free_port()
    metrics.serve(target)  # the operator's /metrics, as `kai-py run --metrics-port`
    work = tmp_path_factory.mktemp("prometheus")
    (work / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        f"- job_name: kai-py\n  static_configs: [{{targets: ['127.0.0.1:{target}']}}]\n",
        encoding="utf-8",
    )
    port = free_port()
    proc = subprocess.Popen(
        [
            str(binary),
            f"--config.file={work / 'prometheus.yml'}",
            f"--storage.tsdb.path={work / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=open(work / "prometheus.log", "w"),  # noqa: SIM115 (closed with the process)
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{base}/-/ready", timeout=1) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            assert proc.poll() is None, (work / "prometheus.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "Prometheus did not get ready in 30 s"
            time.sleep(0.2)
        yield base
    finally:
        proc.terminate()
        proc.wait(10)


def scraped(base: str, query: str) -> int:
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": query})
    with urllib.request.urlopen(url, timeout=5) as answer:
        return len(json.loads(answer.read())["data"]["result"])


def test_kais_queries_on_a_real_prometheus_give_each_queues_share(prometheus: str) -> None:
    text = "---".join(
        [
            NODE_AND_QUEUES,
            POD.format(name="a", queue="team-a", gpus=12),
            POD.format(name="b", queue="team-b", gpus=4),
        ]
    )
    docs = [Document("test", body) for body in yaml.safe_load_all(text)]
    sim = Simulation(docs, now=time.time())
    outcome = sim.run(1)
    assert outcome.last is not None and len(outcome.last.binds) == 2
    queues = [d.body for d in docs if d.body["kind"] == "Queue"]
    # What the operator exports after each cycle.
    metrics.record_decisions(outcome.last, sim.built.snapshot, queues)
    metrics.record_capacity(capacity_of(sim.built.snapshot))
    deadline = time.monotonic() + 20
    while scraped(prometheus, "count_over_time(kai_queue_allocated_gpus[1m])") < 2:
        assert time.monotonic() < deadline, "Prometheus did not scrape kai-py's metrics"
        time.sleep(0.5)
    time.sleep(3)  # a few samples of each
    params = UsageDB(client_type="prometheus", window=60.0, extra=CAPACITY)
    usage = fetch_prometheus(prometheus, params, time.time())
    # 12 and 4 of 16 GPUs at every sample: three quarters and a quarter of the capacity.
    assert usage["team-a"].gpu == pytest.approx(0.75)
    assert usage["team-b"].gpu == pytest.approx(0.25)
    # With a half-life the shares of a constant allocation stay the same.
    decayed = fetch_prometheus(
        prometheus, UsageDB(window=60.0, half_life=5.0, extra=CAPACITY), time.time()
    )
    assert decayed["team-a"].gpu == pytest.approx(0.75)
    # The source the operator runs: fetched in its thread, read by the cycle.
    source = UsageSource.make(
        UsageDB(
            client_type="prometheus",
            connection_string=prometheus,
            window=60.0,
            fetch_interval=0.2,
            extra=CAPACITY,
        )
    )
    try:
        deadline = time.monotonic() + 10
        while source.prometheus is not None and source.prometheus.version == 0:
            assert time.monotonic() < deadline, source.prometheus.failure
            time.sleep(0.1)
        snapshot = sim.built.snapshot
        source.apply(snapshot, time.time())
        got = {q.name: q.usage.gpu for q in snapshot.queues if q.usage is not None}
        assert got["team-a"] == pytest.approx(0.75) and got["team-b"] == pytest.approx(0.25)
    finally:
        source.close()


def test_an_absent_prometheus_leaves_the_last_usage(prometheus: str) -> None:
    params = UsageDB(
        client_type="prometheus", window=60.0, extra={**CAPACITY, "usageQueryTimeout": "1s"}
    )
    source = PrometheusUsage(params, prometheus)
    source.fetch_once()
    known, version = source.current()
    assert known is not None and version == 1
    source.base = f"http://127.0.0.1:{free_port()}"  # nobody listens there
    began = time.monotonic()
    source.fetch_once()
    assert time.monotonic() - began < 5
    assert source.current() == (known, 1)
    assert source.failure is not None and "Connection refused" in source.failure
