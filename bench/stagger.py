"""Staggered start: the delay it adds for a pair of engines on one card, on the emulator.
Not a test: numbers only.

One emulated node with 1 GPU, the operator as a separate process
(``--schedule-period 0.2``). Each round creates two pods of ``gpu-fraction: 0.5``
(one card) whose containers are Ready ``--ready`` seconds after they start
(``kai-py.dev/ready-seconds``, an engine loading its model), with staggered start
off and then on, and measures from create until both are Ready. With it on, the
second is bound only once the first is Ready: the pair takes about one readiness
time more; "beyond readiness" is what the binder adds on top (the first Ready ->
the second bound).

    python bench/stagger.py [--rounds 3] [--ready 2] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from figures import MinMedian

from kai_py.api import keys
from kai_py.controllers.webhooks import deviceaccess
from kai_py.emulator.cluster_spec import parse_cluster
from kai_py.emulator.dev_cluster import ThreadedDevCluster

CLUSTER = {"nodes": [{"name": "one", "count": 1, "gpus": 1}], "namespaces": ["bench"]}
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


def engine(name: str, staggered: bool, ready: float) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "bench",
            "labels": {keys.QUEUE_LABEL: "bench"},
            "annotations": {
                keys.GPU_FRACTION_ANNOTATION: "0.5",
                keys.STAGGERED_START_ANNOTATION: "true" if staggered else "false",
                "kai-py.dev/ready-seconds": f"{ready:g}",
            },
        },
        "spec": {
            "schedulerName": keys.DEFAULT_SCHEDULER_NAME,
            "containers": [{"name": "vllm", "image": "x"}],
        },
    }
    mutation = deviceaccess.mutate(body, keys.DEFAULT_SCHEDULER_NAME)
    assert mutation is not None
    body["spec"] = mutation.spec
    body["metadata"]["annotations"].update(mutation.annotations)
    return body


def _ready(pod: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def pair(
    cluster: ThreadedDevCluster, tag: str, staggered: bool, ready: float
) -> tuple[float, float]:
    """(create -> both Ready, first Ready -> second bound) in seconds."""
    store = cluster.store
    names = [f"{tag}-a", f"{tag}-b"]
    t0 = time.perf_counter()
    for name in names:
        cluster.call(store.create("pods", engine(name, staggered, ready)))
    first_ready: float | None = None
    second_bound: float | None = None
    while True:
        pods = [cluster.call(store.get("pods", "bench", n)) for n in names]
        now = time.perf_counter()
        if first_ready is None and any(_ready(p) for p in pods):
            first_ready = now
        if second_bound is None and all((p.get("spec") or {}).get("nodeName") for p in pods):
            second_bound = now
        if all(_ready(p) for p in pods):
            both = now - t0
            break
        if now - t0 > 120:
            raise SystemExit(f"{names} not both Ready within 120 s")
        time.sleep(0.02)
    for name in names:
        cluster.call(store.delete("pods", "bench", name))
    for name in names:
        while True:
            try:
                cluster.call(store.get("pods", "bench", name))
            except Exception:
                break
            time.sleep(0.02)
    assert first_ready is not None and second_bound is not None
    return both, second_bound - first_ready


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ready", type=float, default=2.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="kai-py-bench-"))
    with ThreadedDevCluster(
        parse_cluster(CLUSTER, "bench"), kubeconfig_path=folder / "kubeconfig"
    ) as cluster:
        cluster.call(cluster.store.create("queues", QUEUE))
        env = {**os.environ, "KUBECONFIG": cluster.kubeconfig_path}
        with (folder / "operator.log").open("wb") as out:
            operator = subprocess.Popen(
                [sys.executable, "-m", "kai_py.controllers.operator", "--schedule-period", "0.2"],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
            )
        try:
            pair(cluster, "warm", False, args.ready)
            off = [pair(cluster, f"off-{i}", False, args.ready) for i in range(args.rounds)]
            on = [pair(cluster, f"on-{i}", True, args.ready) for i in range(args.rounds)]
        finally:
            operator.send_signal(signal.SIGINT)
            operator.wait(15)
    result = {
        "off_both_ready_s": MinMedian(b for b, _ in off),
        "on_both_ready_s": MinMedian(b for b, _ in on),
        "added_s": MinMedian(a - b for (a, _), (b, _) in zip(on, off, strict=True)),
        "on_first_ready_to_second_bound_s": MinMedian(g for _, g in on),
    }
    if args.json:
        print(json.dumps(result))
        return
    print(
        f"two engines, gpu-fraction 0.5 each, one card, Ready {args.ready:g} s after start, "
        f"{args.rounds} rounds (min / median):"
    )
    print(f"  create -> both Ready, staggered start off: {result['off_both_ready_s']} s")
    print(f"  create -> both Ready, staggered start on:  {result['on_both_ready_s']} s")
    print(f"  added by staggered start (on - off, per round): {result['added_s']} s")
    print(
        f"  beyond readiness (first Ready -> second bound): {result['on_first_ready_to_second_bound_s']} s"
    )


if __name__ == "__main__":
    main()
