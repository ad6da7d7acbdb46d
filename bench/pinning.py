"""Pinned versus unpinned: seconds from create to Running on the emulator, and the
blockers a pinned bind needs on an 8-card node. Not a test: numbers only.

One emulated node with 8 GPUs (its device plugin hands out the lowest free
card), the operator as a separate process (``--schedule-period 0.2``). Each
round creates a 1-GPU pod, unpinned, then pinned to the node's highest card
(the one the plugin would give last), waits until it runs, and deletes it.

    python bench/pinning.py [--rounds 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kai_py.emulator.cluster_spec import gpu_uuid, parse_cluster
from kai_py.emulator.dev_cluster import ThreadedDevCluster

NODE = "big-0"
CLUSTER = {"nodes": [{"name": "big", "count": 1, "gpus": 8}], "namespaces": ["bench"]}
QUEUE = {
    "apiVersion": "scheduling.run.ai/v2",
    "kind": "Queue",
    "metadata": {"name": "bench"},
    "spec": {
        "resources": {
            r: {"quota": -1, "limit": -1, "overQuotaWeight": 1} for r in ("gpu", "cpu", "memory")
        }
    },
}


def pod(name: str, card: str | None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "bench",
            "labels": {"kai.scheduler/queue": "bench"},
            "annotations": {"nvidia.com/use-gpuuuid": card} if card else {},
        },
        "spec": {
            "schedulerName": "kai-scheduler",
            "containers": [
                {"name": "main", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
            ],
        },
    }


def run_once(cluster: ThreadedDevCluster, name: str, card: str | None) -> float:
    store = cluster.store
    t0 = time.perf_counter()
    cluster.call(store.create("pods", pod(name, card)))
    while True:
        current = cluster.call(store.get("pods", "bench", name))
        if (current.get("status") or {}).get("phase") == "Running":
            took = time.perf_counter() - t0
            break
        if time.perf_counter() - t0 > 60:
            raise SystemExit(f"{name} did not run within 60 s")
        time.sleep(0.01)
    seen = current["metadata"]["annotations"].get("kai-py.dev/visible-devices")
    if card and seen != card:
        raise SystemExit(f"{name} got {seen}, not {card}")
    cluster.call(store.delete("pods", "bench", name))
    while True:
        try:
            cluster.call(store.get("pods", "bench", name))
        except Exception:
            return took
        time.sleep(0.01)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="kai-py-bench-"))
    log_path = folder / "operator.log"
    with ThreadedDevCluster(
        parse_cluster(CLUSTER, "bench"), kubeconfig_path=folder / "kubeconfig"
    ) as cluster:
        cluster.call(cluster.store.create("queues", QUEUE))
        env = {**os.environ, "KUBECONFIG": cluster.kubeconfig_path}
        with log_path.open("wb") as out:
            operator = subprocess.Popen(
                [sys.executable, "-m", "kai_py.controllers.operator", "--schedule-period", "0.2"],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
            )
        try:
            run_once(cluster, "warm-up", None)
            card = gpu_uuid(NODE, 7)
            plain = [run_once(cluster, f"plain-{i}", None) for i in range(args.rounds)]
            pinned = [run_once(cluster, f"pinned-{i}", card) for i in range(args.rounds)]
        finally:
            operator.send_signal(signal.SIGINT)
            operator.wait(15)
    blockers = [int(n) for n in re.findall(r"(\d+) blocker\(s\)", log_path.read_text())]
    result = {
        "unpinned_s": {"min": min(plain), "median": statistics.median(plain)},
        "pinned_s": {"min": min(pinned), "median": statistics.median(pinned)},
        "blockers_per_pinned_bind": blockers,
    }
    if args.json:
        print(json.dumps(result))
        return
    print(f"create -> Running, 1 GPU, 8-card node, {args.rounds} rounds (min / median):")
    print(
        f"  unpinned: {result['unpinned_s']['min']:.2f} s / {result['unpinned_s']['median']:.2f} s"
    )
    print(f"  pinned:   {result['pinned_s']['min']:.2f} s / {result['pinned_s']['median']:.2f} s")
    print(f"blockers per pinned bind (card 7 of 8, node otherwise empty): {blockers}")


if __name__ == "__main__":
    main()
