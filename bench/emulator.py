"""Emulator throughput: creates/s and watch events/s with 10,000 pods.

In process (the Store API the simulated controllers use) and over HTTP
(aiohttp client against EmulatedAPIServer). Targets: >= 2,000 creates/s and
>= 10,000 watch events/s. Not a test: numbers only.

    python bench/emulator.py [--pods N] [--concurrency C] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any

import aiohttp

from kai_py.emulator.storage.store import Store


def pod(i: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"pod-{i:05d}",
            "namespace": "default",
            "labels": {"app": "bench", "shard": str(i % 16)},
        },
        "spec": {
            "schedulerName": "kai-scheduler",
            "containers": [
                {
                    "name": "main",
                    "image": "busybox:1.36",
                    "resources": {
                        "requests": {"cpu": "100m", "memory": "128Mi", "nvidia.com/gpu": "1"},
                        "limits": {"nvidia.com/gpu": "1"},
                    },
                }
            ],
        },
    }


async def in_process(n: int) -> dict[str, float]:
    store = Store(history_size=max(20_000, 2 * n))
    start_rv = str(store.resource_version)
    watch = store.watch("pods", resource_version=start_rv)
    t0 = time.perf_counter()
    for i in range(n):
        await store.create("pods", pod(i))
    create_s = time.perf_counter() - t0
    watch.close()  # queued events are kept; iteration ends after them
    t0 = time.perf_counter()
    live = 0
    async for _ in watch:
        live += 1
    live_s = time.perf_counter() - t0
    replay = store.watch("pods", resource_version=start_rv)
    replay.close()
    t0 = time.perf_counter()
    replayed = 0
    async for _ in replay:
        replayed += 1
    replay_s = time.perf_counter() - t0
    assert live == replayed == n
    t0 = time.perf_counter()
    items, _ = await store.list("pods", field_selector="spec.nodeName=")
    list_s = time.perf_counter() - t0
    assert len(items) == n
    return {
        "creates_per_s": n / create_s,
        "watch_events_per_s": n / live_s,
        "replay_events_per_s": n / replay_s,
        "list_s": list_s,
    }


_SERVE = """
import asyncio, sys
from kai_py.emulator.apiserver.server import EmulatedAPIServer
async def main():
    async with EmulatedAPIServer(history_size=int(sys.argv[1])) as srv:
        print(srv.url, srv.store.resource_version, flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
asyncio.run(main())
"""


async def over_http(n: int, concurrency: int) -> dict[str, float]:
    # The server runs in its own process, as for kubectl or an operator: a client
    # in the same process would share its core and halve both.
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _SERVE,
        str(max(20_000, 2 * n)),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stdin is not None
    base, start_rv = (await proc.stdout.readline()).decode().split()
    try:
        return await _http_load(f"{base}/api/v1/namespaces/default/pods", start_rv, n, concurrency)
    finally:
        proc.stdin.close()
        await proc.wait()


async def _http_load(url: str, start_rv: str, n: int, concurrency: int) -> dict[str, float]:
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        # Bodies are encoded up front: the client's own JSON work is not the server's.
        bodies = [json.dumps(pod(i)).encode() for i in range(n)]
        headers = {"Content-Type": "application/json"}
        queue: asyncio.Queue[int] = asyncio.Queue()
        for i in range(n):
            queue.put_nowait(i)

        async def worker() -> None:
            while not queue.empty():
                i = queue.get_nowait()
                async with session.post(url, data=bodies[i], headers=headers) as resp:
                    assert resp.status == 201, await resp.text()
                    await resp.read()

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        create_s = time.perf_counter() - t0

        t0 = time.perf_counter()
        events = 0
        async with session.get(
            url, params={"watch": "1", "resourceVersion": start_rv, "timeoutSeconds": "60"}
        ) as resp:
            async for line in resp.content:
                if line.strip():
                    json.loads(line)
                    events += 1
                    if events == n:
                        break
        watch_s = time.perf_counter() - t0
    return {"creates_per_s": n / create_s, "watch_events_per_s": n / watch_s}


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "pods": args.pods,
        "in_process": await in_process(args.pods),
        "http": await over_http(args.pods, args.concurrency),
        "http_concurrency": args.concurrency,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    result = asyncio.run(main_async(args))
    if args.json:
        print(json.dumps(result))
        return
    ip, http = result["in_process"], result["http"]
    print(f"emulator bench, {args.pods} pods")
    print(f"  in-process  creates/s       {ip['creates_per_s']:10,.0f}   (target >= 2,000)")
    print(f"  in-process  watch events/s  {ip['watch_events_per_s']:10,.0f}   (target >= 10,000)")
    print(f"  in-process  replay events/s {ip['replay_events_per_s']:10,.0f}")
    print(f"  in-process  list all        {ip['list_s'] * 1000:10,.0f} ms")
    print(
        f"  HTTP        creates/s       {http['creates_per_s']:10,.0f}   "
        f"({args.concurrency} concurrent clients)"
    )
    print(f"  HTTP        watch events/s  {http['watch_events_per_s']:10,.0f}")


if __name__ == "__main__":
    main()
