"""Failover with two replicas: how long after a ``kill -9`` of the leader the Lease
moves and the new leader binds its first pod.

Two operators (``--leader-elect``, the chart's schedule period of 1 s) run against
the emulated cluster (3 nodes x 4 GPUs). Each run waits until the standby is warm,
kills the leader with SIGKILL and at once creates pods that need a GPU (none can be
bound by the dead leader), then times, from the kill: the Lease naming the other
replica, and the first of those pods bound. The killed replica is started again as
the next run's standby. Prints min / median / p95 of both.

    python bench/failover.py              # 10 kills
    python bench/failover.py --runs 20
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kai_py.api import keys
from kai_py.emulator import annotations as ann
from kai_py.emulator.cluster_spec import parse_cluster
from kai_py.emulator.dev_cluster import ThreadedDevCluster

REPO = Path(__file__).resolve().parents[1]
NS = "team-a"
LEASE_NS = "kai-scheduler"
PODS = 4
SPEC = {
    "nodes": [{"name": "gpu", "count": 3, "gpus": 4, "cpu": "32", "memory": "256Gi"}],
    "namespaces": [NS],
}


def queue(name: str, parent: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "resources": {
            r: {"quota": -1, "limit": -1, "overQuotaWeight": 1} for r in ("gpu", "cpu", "memory")
        }
    }
    if parent:
        spec["parentQueue"] = parent
    return {
        "apiVersion": "scheduling.run.ai/v2",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": spec,
    }


def pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {keys.QUEUE_LABEL: "team-a"},
            "annotations": {ann.RUN_SECONDS: "600"},
        },
        "spec": {
            "schedulerName": "kai-scheduler",
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "resources": {"limits": {keys.GPU_RESOURCE: "1"}},
                }
            ],
        },
    }


def start(kubeconfig: str, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "KUBECONFIG": kubeconfig}
    for var in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):
        env.pop(var, None)
    with log.open("ab") as out:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "kai_py.controllers.operator",
                "--leader-elect",
                "--lease-namespace",
                LEASE_NS,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            env=env,
        )


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20, method="inclusive")[18]


def spread(values: list[float]) -> str:
    return f"{min(values):.2f} / {statistics.median(values):.2f} / {p95(values):.2f} s"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--settle", type=float, default=4.0, help="seconds the new standby warms")
    args = parser.parse_args()
    moved: list[float] = []
    bound: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        cluster = ThreadedDevCluster(
            parse_cluster(SPEC, "failover"), kubeconfig_path=Path(tmp) / "kc"
        )
        cluster.start()
        store = cluster.store
        for q in (queue("root"), queue("team-a", "root")):
            cluster.call(store.create("queues", q))
        kubeconfig = cluster.kubeconfig_path
        logs = Path(tmp)
        replicas = [start(kubeconfig, logs / f"op-{i}.log") for i in range(2)]

        def holder() -> str:
            try:
                lease = cluster.call(store.get("leases", LEASE_NS, "kai-py-operator"))
            except Exception:
                return ""
            return str((lease.get("spec") or {}).get("holderIdentity") or "")

        def first_bound(names: list[str]) -> bool:
            pods, _ = cluster.call(store.list("pods", NS))
            return any(p["metadata"]["name"] in names and p["spec"].get("nodeName") for p in pods)

        try:
            for run in range(args.runs):
                deadline = time.monotonic() + 30
                while not holder() and time.monotonic() < deadline:
                    time.sleep(0.1)
                time.sleep(args.settle)
                lead = holder()
                leader = next(p for p in replicas if f"_{p.pid}_" in lead)
                names = [f"r{run}-{i}" for i in range(PODS)]
                killed = time.monotonic()
                leader.kill()
                for name in names:
                    cluster.call(store.create("pods", pod(name)))
                took_lease = took_bind = None
                while time.monotonic() - killed < 40 and (took_lease is None or took_bind is None):
                    now = time.monotonic()
                    if took_lease is None and holder() not in ("", lead):
                        took_lease = now - killed
                    if took_bind is None and first_bound(names):
                        took_bind = now - killed
                    time.sleep(0.02)
                leader.wait(10)
                if took_lease is None or took_bind is None:
                    print(f"run {run + 1}: no failover within 40 s (logs in {tmp})", flush=True)
                    return 1
                moved.append(took_lease)
                bound.append(took_bind)
                print(
                    f"run {run + 1}: Lease moved {took_lease:.2f} s, first bind {took_bind:.2f} s",
                    flush=True,
                )
                for name in names:
                    cluster.call(store.delete("pods", NS, name, grace_period_seconds=0))
                replicas[replicas.index(leader)] = start(kubeconfig, logs / f"op-r{run}.log")
        finally:
            for p in replicas:
                p.kill()
                p.wait(10)
            cluster.stop()
    print(f"failover after kill -9 of the leader, {len(moved)} runs (min / median / p95):")
    print(f"Lease moved: {spread(moved)}")
    print(f"first bind by the new leader: {spread(bound)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
