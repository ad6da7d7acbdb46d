"""End to end on the emulator: a burst of one-GPU pods, from the first create to all Running.

The emulated cluster (``DevCluster``: API server, kubelets, device plugins, built-in
controllers) and the operator (``python -m kai_py.controllers.operator``, all three
parts, no leader election) run as separate processes and talk over HTTP, as they
would on a real cluster. This process creates the pods (bare pods, ``nvidia.com/gpu:
1``, in one namespace; the pod-grouper gives each a PodGroup) and watches them.

Per run it measures: seconds from the first create to all pods created, to all bound
(``spec.nodeName`` set) and to all Running, pods/s (pods / seconds to all Running), the operator's peak
RSS (``VmHWM``) and CPU seconds, and the API requests the operator made per pod
(counted by the emulator per client, verb and resource, from the first create to all
Running, and again once the operator has gone quiet after it, which adds the Events
and status writes still queued then; the benchmark's own creates and watch are not
counted), and the emulator's CPU seconds (the two processes share the machine, and
every request costs the emulator too). Prints min / median of ``--runs`` runs
(default 3), each on a fresh cluster and operator.

    python bench/e2e.py                                  # 500 nodes x 8 GPUs, 4,000 pods
    python bench/e2e.py --nodes 50 --pods 400 --runs 1   # a quick look
    python bench/e2e.py --nodes 500 --pods 4000 --json   # one JSON object
    python bench/e2e.py --backend real --shards 2        # node pools: a scheduler per pool

``--shards N`` labels the nodes into N node pools and the pods round-robin, and runs a
scheduler process per pool (``--node-pool``) beside one binder and pod-grouper process;
the operator's CPU is then all of theirs, its peak RSS the largest process's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from kai_py.api import eventloop, keys
from kai_py.emulator.clientgo.http_client import SIMULATED_AGENT

REPO = Path(__file__).resolve().parents[1]
NAMESPACE = "bench"
#: The benchmark's own requests carry this User-Agent (not counted as the operator's).
AGENT = "kai-py-e2e-bench"

# The emulated cluster, in its own process. Commands on stdin: "counts" (print the
# request counts as one JSON line), "reset" (zero them), "quit".
_EMULATOR = """
import asyncio, json, logging, sys
from kai_py.api import eventloop
from kai_py.emulator.cluster_spec import parse_cluster
from kai_py.emulator.dev_cluster import DevCluster
from kai_py.emulator.storage.store import Store

# A request cut short when the operator stops is not news.
logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)

async def main():
    nodes, gpus, kubeconfig = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    spec = parse_cluster(json.loads(sys.argv[5]))
    store = Store(history_size=max(20_000, 50 * nodes * gpus))
    async with DevCluster(spec, kubeconfig_path=kubeconfig, store=store) as cluster:
        counts = cluster.server.request_counts
        print(cluster.url, flush=True)
        loop = asyncio.get_running_loop()
        while True:
            line = (await loop.run_in_executor(None, sys.stdin.readline)).strip()
            if line in ("", "quit"):
                break
            if line == "reset":
                counts.clear()
            print(json.dumps(dict(counts)), flush=True)

# The loop `kai-py dev` runs on (KAI_PY_EVENT_LOOP chooses it for both processes).
eventloop.run(main(), eventloop.loop_factory())
"""


# The same cluster on a real kube-apiserver and etcd (``--backend real``; built by
# scripts/k8s-binaries.sh, found as the real-API test tier finds them), with kai-py's
# simulated kubelets and device plugins against it over HTTPS. Prints the URL, the CA
# file, the token and the pids whose CPU counts (this process, etcd, kube-apiserver);
# "counts" counts the requests of the audit log since the last "reset".
_REAL = """
import collections, json, logging, sys, tempfile
from pathlib import Path
sys.path[:0] = ["tests/realapi", "tests/operator"]
from realapi_backends import start_real
from realapi_server import ADMIN_TOKEN, binaries_dir
from kai_py.emulator.cluster_spec import parse_cluster

found = binaries_dir()
if found is None or not all((found / n).exists() for n in ("kube-apiserver", "etcd")):
    sys.exit("--backend real: no kube-apiserver and etcd here; build them with "
             "scripts/k8s-binaries.sh (or set KAI_PY_K8S_BIN to their folder)")

logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)
nodes, gpus, kubeconfig = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
spec = parse_cluster(json.loads(sys.argv[5]))
with tempfile.TemporaryDirectory(prefix="kai-py-e2e-real-") as work:
    sys.stdout, real_stdout = sys.stderr, sys.stdout  # start_real's notes are not answers
    server, simulated = start_real(Path(work), spec)
    sys.stdout = real_stdout
    Path(kubeconfig).write_text(Path(server.kubeconfig_path).read_text())
    pids = [p.pid for p in server.processes if p.poll() is None]
    print(json.dumps({"url": server.url, "ca": server.ca_file, "token": ADMIN_TOKEN,
                      "pids": pids}), flush=True)
    offset = 0
    try:
        for line in sys.stdin:
            line = line.strip()
            if line in ("", "quit"):
                break
            counts = collections.Counter()
            with server.audit_log.open("rb") as log:
                log.seek(offset)
                data = log.read()
            end = data.rfind(b"\\n") + 1  # a line still being written counts next time
            for raw in data[:end].splitlines():
                try:
                    event = json.loads(raw)
                except ValueError:
                    continue
                ref = event.get("objectRef") or {}
                if event.get("stage") != "ResponseComplete" or not ref.get("resource"):
                    continue
                resource = ref["resource"] + ("/" + ref["subresource"] if ref.get("subresource") else "")
                agent = (event.get("userAgent") or "-").split("/", 1)[0]
                counts[f"{agent} {event.get('verb')} {resource}"] += 1
            if line == "reset":
                offset += end
                counts.clear()
            print(json.dumps(dict(counts)), flush=True)
    finally:
        simulated.stop()
        server.stop()
"""


def cluster_spec(nodes: int, gpus: int, shards: int) -> dict[str, Any]:
    """The nodes; with ``shards``, cut into as many node pools (pool-0, ...)."""
    group = {"gpus": gpus, "cpu": "64", "memory": "512Gi"}
    if not shards:
        groups = [{"name": "gpu", "count": nodes, **group}]
    else:
        groups = [
            {
                "name": f"gpu-{k}",
                "count": nodes // shards + (1 if k < nodes % shards else 0),
                "labels": {keys.NODE_POOL_LABEL: f"pool-{k}"},
                **group,
            }
            for k in range(shards)
        ]
    return {"nodes": groups, "namespaces": [NAMESPACE]}


def pod(i: int, shards: int = 0) -> dict[str, Any]:
    labels = {keys.NODE_POOL_LABEL: f"pool-{i % shards}"} if shards else {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"p-{i:05d}", "namespace": NAMESPACE, "labels": labels},
        "spec": {
            "schedulerName": "kai-scheduler",
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "resources": {
                        "requests": {"cpu": "100m", "memory": "128Mi"},
                        "limits": {"nvidia.com/gpu": "1"},
                    },
                }
            ],
        },
    }


@dataclass
class Run:
    pods: int
    to_created_s: float
    to_bound_s: float
    to_running_s: float
    pods_per_s: float
    operator_peak_rss_mb: float
    operator_cpu_s: float
    emulator_cpu_s: float
    requests_per_pod: float
    requests_per_pod_settled: float
    # The cluster's CPU seconds by process (the emulator; or the simulated nodes, etcd
    # and kube-apiserver)
    cluster_cpu_s: dict[str, float] = field(default_factory=dict)
    requests: dict[str, int] = field(default_factory=dict)
    requests_settled: dict[str, int] = field(default_factory=dict)


def _proc_status(pid: int, key: str) -> float:
    """A ``kB`` figure from /proc/<pid>/status, in MB (0 where /proc is missing)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


class Backend:
    """The cluster in its own process: kai-py's emulator, or a real kube-apiserver."""

    def __init__(self, kind: str, nodes: int, gpus: int, kubeconfig: Path, shards: int = 0) -> None:
        script = _REAL if kind == "real" else _EMULATOR
        spec = json.dumps(cluster_spec(nodes, gpus, shards))
        self.process = subprocess.Popen(
            [sys.executable, "-c", script, str(nodes), str(gpus), str(kubeconfig), NAMESPACE, spec],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )
        assert self.process.stdout is not None
        first = self.process.stdout.readline().strip()
        if not first:
            raise RuntimeError(f"the {kind} cluster did not start")
        self.token: str | None = None
        self.ca_file: str | None = None
        self.pids = {("simulated cluster" if kind == "real" else "emulator"): self.process.pid}
        if kind == "real":
            answer = json.loads(first)
            self.url, self.token, self.ca_file = answer["url"], answer["token"], answer["ca"]
            self.pids.update(zip(("etcd", "kube-apiserver"), answer["pids"], strict=False))
        else:
            self.url = first

    def cpu_seconds(self) -> dict[str, float]:
        """CPU seconds so far of each of the cluster's processes."""
        return {name: _cpu_seconds(pid) for name, pid in self.pids.items()}

    def command(self, line: str) -> dict[str, int]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()
        answer: dict[str, int] = json.loads(self.process.stdout.readline())
        return answer

    def close(self) -> None:
        if self.process.poll() is None:
            assert self.process.stdin is not None
            self.process.stdin.write("quit\n")
            self.process.stdin.close()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_operator(kubeconfig: Path, log: Path, *arguments: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "KAI_PY_LOG_FORMAT": "text"}
    for var in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):
        env.pop(var, None)
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "kai_py.controllers.operator", "--no-leader-elect", *arguments],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            env=env,
        )


def wait_ready(operator: subprocess.Popen[bytes], log: Path, timeout: float = 120.0) -> None:
    """Until the scheduling loop has loaded its cache (the watches are open by then)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if operator.poll() is not None:
            raise RuntimeError(f"the operator stopped:\n{log.read_text()[-3000:]}")
        if "cache loaded" in log.read_text(errors="replace"):
            return
        time.sleep(0.2)
    raise TimeoutError("the operator did not load its cache")


async def burst(
    backend: Backend, pods: int, concurrency: int, timeout: float, shards: int = 0
) -> tuple[float, float, float]:
    """Create the pods; seconds from the first create to all created, to all bound and to
    all Running."""
    headers = {"User-Agent": AGENT, "Content-Type": "application/json"}
    if backend.token:
        headers["Authorization"] = f"Bearer {backend.token}"
    base = f"{backend.url}/api/v1/namespaces/{NAMESPACE}/pods"
    tls = ssl.create_default_context(cafile=backend.ca_file) if backend.ca_file else None
    connector = aiohttp.TCPConnector(limit=concurrency + 1, ssl=tls if tls else True)
    bound: dict[str, float] = {}
    running: dict[str, float] = {}
    async with aiohttp.ClientSession(connector=connector, headers=headers) as session:
        async with session.get(base) as resp:
            rv = (await resp.json())["metadata"]["resourceVersion"]
        all_running = asyncio.Event()

        def seen(obj: dict[str, Any]) -> None:
            name = (obj.get("metadata") or {}).get("name")
            if not name:
                return
            now = time.monotonic()
            if (obj.get("spec") or {}).get("nodeName"):
                bound.setdefault(name, now)
            if (obj.get("status") or {}).get("phase") == "Running":
                running.setdefault(name, now)
                if len(running) >= pods:
                    all_running.set()

        async def watch(since: str) -> None:
            # A real API server ends a watch it finds slow to read (and any at its
            # timeout): go on from the last version seen, or LIST again once that is gone.
            while not all_running.is_set():
                params = {"watch": "1", "resourceVersion": since, "timeoutSeconds": "300"}
                async with session.get(
                    base, params=params, timeout=aiohttp.ClientTimeout(None)
                ) as r:
                    async for line in r.content:
                        if not line.strip():
                            continue
                        event = json.loads(line)
                        obj = event.get("object") or {}
                        if event.get("type") == "ERROR":
                            async with session.get(base) as resp:
                                listing = await resp.json()
                            for item in listing["items"]:
                                seen(item)
                            since = listing["metadata"]["resourceVersion"]
                            break
                        since = (obj.get("metadata") or {}).get("resourceVersion") or since
                        if event.get("type") in ("ADDED", "MODIFIED"):
                            seen(obj)
                            if all_running.is_set():
                                return

        watcher = asyncio.create_task(watch(rv))
        await asyncio.sleep(0.2)  # the watch is open before the first create
        bodies = [json.dumps(pod(i, shards)).encode() for i in range(pods)]
        todo = iter(range(pods))

        async def create() -> None:
            for i in todo:
                async with session.post(base, data=bodies[i]) as resp:
                    if resp.status != 201:
                        raise RuntimeError(f"create: {resp.status} {await resp.text()}")

        started = time.monotonic()
        await asyncio.gather(*(create() for _ in range(concurrency)))
        created = time.monotonic() - started
        try:
            await asyncio.wait_for(all_running.wait(), timeout)
        finally:
            watcher.cancel()
    if len(bound) < pods or len(running) < pods:
        raise TimeoutError(f"{len(bound)} bound, {len(running)} Running of {pods}")
    return created, max(bound.values()) - started, max(running.values()) - started


def _ours(counts: dict[str, int]) -> Counter[str]:
    """The operator's requests: not the benchmark's, nor (on a real API server) those of
    the simulated kubelets and controllers."""
    others = (AGENT + " ", SIMULATED_AGENT + " ")
    return Counter({k: v for k, v in counts.items() if not k.startswith(others)})


def settle(emulator: Backend, counts: dict[str, int], limit: float = 60.0) -> Counter[str]:
    """The operator's requests once it has gone quiet after the burst (Events and status
    writes still queued when the last pod ran): counts unchanged for 2 s, at most
    ``limit`` seconds."""
    deadline = time.monotonic() + limit
    last, same = _ours(counts), 0
    while same < 2 and time.monotonic() < deadline:
        time.sleep(1.0)
        now = _ours(emulator.command("counts"))
        same = same + 1 if now == last else 0
        last = now
    return last


def one_run(args: argparse.Namespace, tmp: Path, index: int) -> Run:
    kubeconfig = tmp / f"kubeconfig-{index}"
    log = tmp / f"operator-{index}.log"
    emulator = Backend(args.backend, args.nodes, args.gpus, kubeconfig, args.shards)
    # One process for all three parts; with --shards, one binder and pod-grouper and a
    # scheduler per node pool (each waits for its cache: "cache loaded").
    parts: list[tuple[list[str], bool]] = (
        [([], True)]
        if not args.shards
        else [
            (["--controllers", "binder,podgrouper"], False),
            *(
                (["--controllers", "scheduler", "--node-pool", f"pool-{k}"], True)
                for k in range(args.shards)
            ),
        ]
    )
    operators: list[subprocess.Popen[bytes]] = []
    try:
        for k, (arguments, schedules) in enumerate(parts):
            part_log = log if k == 0 else log.with_suffix(f".{k}.log")
            operators.append(start_operator(kubeconfig, part_log, *arguments))
            if schedules:
                wait_ready(operators[-1], part_log)
        time.sleep(1.0)  # let the start-up passes settle
        emulator.command("reset")
        cpu0 = sum(_cpu_seconds(o.pid) for o in operators)
        emulator_cpu0 = emulator.cpu_seconds()
        to_created, to_bound, to_running = asyncio.run(
            burst(emulator, args.pods, args.concurrency, args.timeout, args.shards)
        )
        counts = emulator.command("counts")
        cpu = sum(_cpu_seconds(o.pid) for o in operators) - cpu0
        cluster_cpu = {
            name: round(seconds - emulator_cpu0[name], 1)
            for name, seconds in emulator.cpu_seconds().items()
        }
        # The largest process's: each would have a machine (a pod) of its own.
        peak = max(_proc_status(o.pid, "VmHWM") for o in operators)
        settled = settle(emulator, counts)
    finally:
        for operator in operators:
            if operator.poll() is None:
                operator.send_signal(signal.SIGINT)
        for operator in operators:
            try:
                operator.wait(20)
            except subprocess.TimeoutExpired:
                operator.kill()
                operator.wait()
        emulator.close()
    if args.keep_logs:
        print(f"operator log: {log}", file=sys.stderr)
    ours = _ours(counts)
    return Run(
        pods=args.pods,
        to_created_s=round(to_created, 2),
        to_bound_s=round(to_bound, 2),
        to_running_s=round(to_running, 2),
        pods_per_s=round(args.pods / to_running, 1),
        operator_peak_rss_mb=round(peak, 1),
        operator_cpu_s=round(cpu, 1),
        emulator_cpu_s=round(sum(cluster_cpu.values()), 1),
        cluster_cpu_s=cluster_cpu,
        requests_per_pod=round(sum(ours.values()) / args.pods, 2),
        requests_per_pod_settled=round(sum(settled.values()) / args.pods, 2),
        requests=dict(ours.most_common()),
        requests_settled=dict(settled.most_common()),
    )


def _spread(values: list[float], unit: str = "", digits: int = 2) -> str:
    return (
        f"min {min(values):.{digits}f}{unit}, median {statistics.median(values):.{digits}f}{unit}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--gpus", type=int, default=8, help="GPUs per node")
    parser.add_argument("--pods", type=int, default=4000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--backend",
        choices=("emulator", "real"),
        default="emulator",
        help="the cluster: kai-py's emulator, or a real kube-apiserver and etcd "
        "(built by scripts/k8s-binaries.sh) with the simulated kubelets",
    )
    parser.add_argument(
        "--shards",
        type=int,
        default=0,
        help="cut the nodes into N node pools (pool-0, ...), the pods labelled round-robin, "
        "and run a scheduler process per pool plus one binder and pod-grouper process "
        "(operator CPU: all of them; peak RSS: the largest)",
    )
    parser.add_argument("--concurrency", type=int, default=16, help="concurrent creates")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per run")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--keep-logs", action="store_true", help="keep the operator's logs")
    args = parser.parse_args()
    # The operator and the emulator run on it (KAI_PY_EVENT_LOOP); figures depend on it.
    loop = eventloop.name(eventloop.loop_factory())
    tmpdir = tempfile.mkdtemp(prefix="kai-py-e2e-") if args.keep_logs else None
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="kai-py-e2e-") as scratch:
        tmp = Path(tmpdir or scratch)
        for i in range(args.runs):
            run = one_run(args, tmp, i)
            runs.append(run)
            if not args.json:
                print(
                    f"run {i + 1}/{args.runs}: created {run.to_created_s:.2f} s, bound "
                    f"{run.to_bound_s:.2f} s, Running "
                    f"{run.to_running_s:.2f} s ({run.pods_per_s:.0f} pods/s), operator peak "
                    f"RSS {run.operator_peak_rss_mb:.0f} MB, CPU {run.operator_cpu_s:.0f} s "
                    f"({', '.join(f'{k} {v:.0f} s' for k, v in run.cluster_cpu_s.items())}), "
                    f"{run.requests_per_pod:.2f} API "
                    f"requests per pod ({run.requests_per_pod_settled:.2f} once settled)",
                    flush=True,
                )
    by_verb: Counter[str] = Counter()
    for key, value in runs[0].requests_settled.items():
        by_verb[key.split(" ", 1)[1]] += value
    if args.json:
        summary = {
            key: {
                "min": min(getattr(r, key) for r in runs),
                "median": statistics.median(getattr(r, key) for r in runs),
            }
            for key in (
                "to_created_s",
                "to_bound_s",
                "to_running_s",
                "pods_per_s",
                "operator_peak_rss_mb",
                "operator_cpu_s",
                "emulator_cpu_s",
                "requests_per_pod",
                "requests_per_pod_settled",
            )
        }
        print(
            json.dumps(
                {
                    "nodes": args.nodes,
                    "shards": args.shards,
                    "gpus_per_node": args.gpus,
                    "pods": args.pods,
                    "event_loop": loop,
                    "runs": [asdict(r) for r in runs],
                    "summary": summary,
                }
            )
        )
        return 0
    print(
        f"{args.nodes} nodes x {args.gpus} GPUs, {args.pods} one-GPU pods, "
        f"{len(runs)} run(s), {loop} event loop, "
        + (f"{args.shards} scheduler shards, " if args.shards else "")
        + "min / median:"
    )
    print(f"  first create -> all created  {_spread([r.to_created_s for r in runs], ' s')}")
    print(f"  first create -> all bound    {_spread([r.to_bound_s for r in runs], ' s')}")
    print(f"  first create -> all Running  {_spread([r.to_running_s for r in runs], ' s')}")
    print(f"  pods/s (to all Running)      {_spread([r.pods_per_s for r in runs], '', 1)}")
    print(
        f"  operator peak RSS            {_spread([r.operator_peak_rss_mb for r in runs], ' MB', 0)}"
    )
    print(f"  operator CPU                 {_spread([r.operator_cpu_s for r in runs], ' s', 1)}")
    cluster = "emulator" if args.backend == "emulator" else "cluster (all processes)"
    print(f"  {cluster + ' CPU':28s} {_spread([r.emulator_cpu_s for r in runs], ' s', 1)}")
    print(f"  API requests per pod         {_spread([r.requests_per_pod for r in runs])}")
    print(f"  ... once settled             {_spread([r.requests_per_pod_settled for r in runs])}")
    print("  requests by verb and resource once settled (run 1, per pod):")
    for key, value in by_verb.most_common():
        print(f"    {key:40s} {value / args.pods:6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
