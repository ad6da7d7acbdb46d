"""A burst of pods: how long until the binds are written, with and without write lanes.

One scheduling cycle (``run_one_cycle``, in process) over a cache of N nodes x 8
GPUs and P pending one-GPU pods (one PodGroup each), against a fake API that
answers every request after a fixed latency. Most pods do not fit, so the cycle
also writes a PodScheduled condition, an Event and a PodGroup status for each.

Prints min / median of 3 for:
- lanes: seconds until the cycle returns (its binds written; status and Events
  queued in the background writer), and until the background writer is drained;
- one lane (every write awaited by the cycle, as before the lanes).

    python bench/burst.py                  # 100 nodes, 3,000 pods, 2 ms per request
    python bench/burst.py --pods 1000 --latency 0.005
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

from kai_py.controllers.scheduling import LoopState, run_one_cycle
from kai_py.controllers.settings import OperatorSettings
from kai_py.state.cache import NODES, PODGROUPS, PODS, QUEUES, ClusterCache
from kai_py.writes.writer import BackgroundWriter

Json = dict[str, Any]


class SlowApi:
    """Every request takes ``latency`` seconds; a POST answers its body (with a uid)."""

    def __init__(self, latency: float) -> None:
        self.latency = latency
        self.requests = 0

    def request(self, method: str, path: str, body: Any = None, **_: Any) -> Json:
        time.sleep(self.latency)
        self.requests += 1
        if method == "POST" and isinstance(body, dict):
            meta = {
                **(body.get("metadata") or {}),
                "uid": f"u{self.requests}",
                "resourceVersion": "1",
            }
            return {**body, "metadata": meta}
        return {}

    def get(self, path: str) -> Json:
        return self.request("GET", path)


def cache(nodes: int, pods: int) -> ClusterCache:
    c = ClusterCache()
    for i in range(nodes):
        c.observe(
            NODES,
            None,
            {
                "metadata": {"name": f"n{i}", "uid": f"n{i}", "resourceVersion": "1"},
                "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8"}},
            },
        )
    c.observe(
        QUEUES,
        None,
        {
            "apiVersion": "scheduling.run.ai/v2",
            "kind": "Queue",
            "metadata": {"name": "q", "uid": "q", "resourceVersion": "1"},
            "spec": {"resources": {"gpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1}}},
        },
    )
    for i in range(pods):
        c.observe(
            PODGROUPS,
            None,
            {
                "apiVersion": "scheduling.run.ai/v2alpha2",
                "kind": "PodGroup",
                "metadata": {
                    "name": f"g{i}",
                    "namespace": "ns",
                    "uid": f"g{i}",
                    "resourceVersion": "1",
                    "creationTimestamp": "2026-01-01T00:00:00Z",
                },
                "spec": {"minMember": 1, "queue": "q"},
            },
        )
        c.observe(
            PODS,
            "ADDED",
            {
                "metadata": {
                    "name": f"p{i}",
                    "namespace": "ns",
                    "uid": f"p{i}",
                    "resourceVersion": "1",
                    "annotations": {"pod-group-name": f"g{i}"},
                    "creationTimestamp": "2026-01-01T00:00:00Z",
                },
                "spec": {
                    "schedulerName": "kai-scheduler",
                    "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
                },
                "status": {"phase": "Pending"},
            },
        )
    return c


async def one(nodes: int, pods: int, latency: float, lanes: bool) -> tuple[float, float, int]:
    api = SlowApi(latency)
    state = LoopState(settings=OperatorSettings(), cache=cache(nodes, pods), kube=api)  # type: ignore[arg-type]
    if lanes:
        state.background = BackgroundWriter(api)  # type: ignore[arg-type]
    started = time.monotonic()
    await run_one_cycle(state)
    returned = time.monotonic() - started
    if state.background is not None:
        await state.background.drain(timeout=3600)
        await state.background.close()
    return returned, time.monotonic() - started, api.requests


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--pods", type=int, default=3000)
    parser.add_argument("--latency", type=float, default=0.002)
    args = parser.parse_args()
    print(
        f"{args.nodes} nodes x 8 GPUs, {args.pods} pending pods, {args.latency * 1000:g} ms per request"
    )
    for lanes in (True, False):
        runs = [asyncio.run(one(args.nodes, args.pods, args.latency, lanes)) for _ in range(3)]
        returned = [r[0] for r in runs]
        drained = [r[1] for r in runs]
        label = "write lanes" if lanes else "one lane  "
        print(
            f"{label}: cycle returns (binds written) min {min(returned):.2f} s, median "
            f"{statistics.median(returned):.2f} s; all writes done min {min(drained):.2f} s, "
            f"median {statistics.median(drained):.2f} s; {runs[0][2]} requests"
        )


if __name__ == "__main__":
    main()
