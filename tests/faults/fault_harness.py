"""The fault suite's harness: an emulated GPU cluster, the operator as a subprocess,
a burst of work, and invariants checked from the API while faults happen.

Invariants (sampled every ``SAMPLE_SECONDS`` and checked at the end):

- a pod is bound at most once: its node never changes, at most one BindRequest
  of it ends ``Succeeded``, and the binder posts at most one ``Bound`` event
  ("bound to node", not "already bound") per pod (it posts them for binds onto
  named cards only);
- no card over 100 %: per physical card (the UUID the kubelet hands out) the
  fractions of the shared pods that see it plus 1 per whole-GPU pod on it; per
  node, the GPUs of bound unfinished pods (reservation pods included, shared
  pods excluded: their card is the reservation pod's) within the node's GPUs;
  every ``OutOfnvidia.com/gpu`` rejection by the kubelet counts too;
- every schedulable pod is eventually bound and finishes ("lost" otherwise: a
  bare pod deleted by anyone but a scheduler eviction is lost for good);
- the operator deletes no pod it did not decide to evict: every pod deletion
  the emulated API server served (outside the reservation namespace) must be
  an eviction (``pods/eviction``, the scheduler's decision), never a plain
  DELETE (``undecided_deletions``, with who asked in the notes);
- no reservation pod without a shared pod once the clean-up has run;
- no BindRequest non-terminal for longer than ``STUCK_SECONDS``;
- with leader election, no write accepted from a replica after it lost the Lease
  (from the API server's record of accepted writes: the replica is the pid in
  kai-py's User-Agent, the Lease's holder the replica whose Lease write was
  accepted last); the figures also give the longest time two replicas wrote at
  once (the old leader's last accepted write minus the new leader's first).
"""

from __future__ import annotations

import contextlib
import errno
import os
import random
import re
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kai_py.api import keys
from kai_py.api.objects import parse_time
from kai_py.controllers.webhooks import deviceaccess
from kai_py.emulator import annotations as ann
from kai_py.emulator.cluster_spec import parse_cluster
from kai_py.emulator.dev_cluster import ThreadedDevCluster
from kai_py.emulator.storage.errors import ApiError

Json = dict[str, Any]
REPO = Path(__file__).resolve().parents[2]
#: The checkout whose operator runs (to compare with another branch: the same suite
#: against its operator, e.g. KAI_PY_FAULT_OPERATOR_REPO=/path/to/main).
OPERATOR_REPO = Path(os.environ.get("KAI_PY_FAULT_OPERATOR_REPO") or REPO)
NS = "team-a"
NODES = 3
GPUS = 4
SAMPLE_SECONDS = 0.25
STUCK_SECONDS = 45.0
#: The seed of every random choice; KAI_PY_FAULT_SEED overrides it (printed with the table).
SEED = int(os.environ.get("KAI_PY_FAULT_SEED", "8"))

SPEC = {
    "nodes": [{"name": "gpu", "count": NODES, "gpus": GPUS, "cpu": "32", "memory": "256Gi"}],
    "namespaces": [NS],
}
BINDER_ENV = {
    "KAI_PY_BINDER_SWEEP_PERIOD": "1",
    "KAI_PY_BINDER_SWEEP_MIN_AGE": "2",
    "KAI_PY_BINDER_RETRY_BASE_DELAY": "0.2",
}


# ------------------------------------------------------------------ manifests
def queue(name: str, parent: str | None = None) -> Json:
    spec: Json = {
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


def gpu_job(
    name: str, pods: int, seconds: float, min_member: int | None = None, q: str = "team-a"
) -> Json:
    annotations = {keys.BATCH_MIN_MEMBER_ANNOTATION: str(min_member)} if min_member else {}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {keys.QUEUE_LABEL: q},
            "annotations": annotations,
        },
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "backoffLimit": 20,
            "template": {
                "metadata": {"annotations": {ann.RUN_SECONDS: str(seconds)}},
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
            },
        },
    }


def shared_pod(name: str, fraction: float, seconds: float, q: str = "team-a") -> Json:
    """A shared pod as the pod webhook admits it (its own rules, a random prefix):
    KAI's ``runai/shared-gpu-configmap`` and its two ConfigMaps."""
    body: Json = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {keys.QUEUE_LABEL: q},
            "annotations": {
                keys.GPU_FRACTION_ANNOTATION: str(fraction),
                ann.RUN_SECONDS: str(seconds),
            },
        },
        "spec": {
            "schedulerName": "kai-scheduler",
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "busybox"}],
        },
    }
    mutation = deviceaccess.mutate(body, "kai-scheduler")
    assert mutation is not None
    body["spec"] = mutation.spec
    body["metadata"]["annotations"].update(mutation.annotations)
    return body


# ------------------------------------------------------------------ the operator
@dataclass
class OperatorProcess:
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def kill9(self) -> None:
        if self.process.poll() is None:
            self.process.kill()  # SIGKILL: no clean-up, no lease release
            self.process.wait(10)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.kill9()


_WRITES = (b"POST", b"PUT", b"PATCH", b"DELETE")


class PartitionProxy:
    """A TCP proxy to the API server for one replica, that ``cut`` partitions: no
    byte passes either way until ``heal`` (what was sent meanwhile is held, as a
    network that retransmits delivers it late). A side that reset its connection
    (RST) during the cut has its held bytes dropped, as a kernel drops unsent data on
    a reset; one that closed it gracefully has them delivered."""

    def __init__(self, upstream: str) -> None:
        host, port = upstream.rsplit("//", 1)[-1].rsplit(":", 1)
        self.upstream = (host, int(port))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.healed = threading.Event()
        self.healed.set()
        self.dropped = 0  # connections whose held bytes were dropped (a reset)
        self.held_write = b""  # the request line of the write ``cut_at_next_write`` held
        self._cut_at_write = False
        self._cut_path = b""
        threading.Thread(target=self._accept, daemon=True).start()

    def cut(self) -> None:
        self.healed.clear()

    def cut_at_next_write(self, path_part: bytes = b"") -> None:
        """Cut as the next write (POST, PUT, PATCH, DELETE) from the replica whose
        request line holds ``path_part`` comes, and hold it: a write in flight when the
        partition starts."""
        self._cut_at_write = True
        self._cut_path = path_part

    def heal(self) -> None:
        self.healed.set()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream)
            except OSError:
                client.close()
                continue
            for src, dst, up in ((client, server, True), (server, client, False)):
                threading.Thread(target=self._pump, args=(src, dst, up), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, up: bool) -> None:
        try:
            while True:
                if not self._through_cut(src):
                    break
                ready, _, _ = select.select([src], [], [], 0.05)
                if not ready:
                    continue
                data = src.recv(65536)
                line = data.split(b"\r\n", 1)[0]
                if (
                    up
                    and self._cut_at_write
                    and line.split(b" ", 1)[0] in _WRITES
                    and self._cut_path in line
                ):
                    self._cut_at_write = False
                    self.held_write = line
                    self.healed.clear()
                if not self._through_cut(src):
                    break
                if not data:
                    dst.shutdown(socket.SHUT_WR)
                    return
                dst.sendall(data)
        except OSError:
            pass
        for sock in (src, dst):  # a reset: pass it on (SO_LINGER 0), nothing more
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                sock.close()

    def _through_cut(self, src: socket.socket) -> bool:
        """Wait out a cut; False when ``src`` reset its connection meanwhile: what it
        sent is dropped (its kernel would not send it again), though still readable
        here."""
        if self.healed.is_set():
            return True
        self.healed.wait()
        if src.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == errno.ECONNRESET:
            self.dropped += 1
            return False
        return True

    def kubeconfig(self, original: str, path: Path) -> str:
        text = Path(original).read_text()
        host, port = self.upstream
        path.write_text(text.replace(f"{host}:{port}", f"127.0.0.1:{self.port}"))
        return str(path)

    def close(self) -> None:
        self.listener.close()


def start_operator(kubeconfig: str, log_path: Path, *args: str) -> OperatorProcess:
    env = {**os.environ, "KUBECONFIG": kubeconfig, **BINDER_ENV}
    for var in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):
        env.pop(var, None)
    out = log_path.open("ab")
    process = subprocess.Popen(
        [sys.executable, "-m", "kai_py.controllers.operator", "--schedule-period", "0.2", *args],
        stdout=out,
        stderr=subprocess.STDOUT,
        cwd=OPERATOR_REPO,
        env=env,
    )
    out.close()
    return OperatorProcess(process, log_path)


# ------------------------------------------------------------------ invariants
@dataclass
class Figures:
    scenario: str
    runs: int = 1
    double_binds: int = 0
    over_card_seconds: float = 0.0
    rejections: int = 0
    lost_pods: int = 0
    leftover_reservations: int = 0
    stuck_bindrequests: int = 0
    complete_seconds: float | None = None
    failover_seconds: float | None = None
    undecided_deletions: int = 0
    #: Writes accepted from a replica that did not hold the Lease any more.
    writes_after_lost_lease: int = 0
    #: Per change of leader: the old leader's last accepted write minus the new
    #: leader's first, in seconds (the longest; below 0: a gap, nobody wrote twice).
    two_writers_seconds: float | None = None
    notes: list[str] = field(default_factory=list)

    def clean(self) -> bool:
        return not (
            self.writes_after_lost_lease
            or self.double_binds
            or self.over_card_seconds
            or self.rejections
            or self.lost_pods
            or self.leftover_reservations
            or self.stuck_bindrequests
            or self.undecided_deletions
        )


class Checker:
    """Samples the cluster's state from the store (not over HTTP: faults do not hit it)."""

    def __init__(self, cluster: ThreadedDevCluster, figures: Figures) -> None:
        self.cluster = cluster
        self.figures = figures
        self.bound_to: dict[str, str] = {}  # pod uid -> node
        self.double: set[str] = set()
        self.br_first_seen: dict[str, float] = {}
        self.br_done: set[str] = set()
        self.succeeded: dict[str, set[str]] = {}  # pod uid -> its Succeeded BindRequests
        self.stuck: set[str] = set()
        self.rejected: set[str] = set()
        self.over: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fault-checker", daemon=True)
        self.samples = 0
        self.errors = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_SECONDS):
            try:
                self.sample()
            except Exception:  # the emulator restarting: the next sample tries again
                self.errors += 1

    def _list(self, kind: str, namespace: str | None = None) -> list[Json]:
        items, _ = self.cluster.call(self.cluster.store.list(kind, namespace), timeout=10)
        return list(items)

    def sample(self) -> None:
        pods = self._list("pods")
        nodes = self._list("nodes")
        now = time.monotonic()
        for pod in pods:
            m, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
            if status.get("phase") == "Failed" and str(status.get("reason") or "").startswith(
                "OutOf"
            ):
                self.rejected.add(m["uid"])
            node = spec.get("nodeName")
            if node and self.bound_to.setdefault(m["uid"], node) != node:
                self.double.add(m["uid"])
        over = overcommitted(pods, nodes)
        if over:
            self.figures.over_card_seconds += SAMPLE_SECONDS * len(over)
            self.over.extend(over)
        for br in self._list("bindrequests"):
            uid = br["metadata"]["uid"]
            phase = (br.get("status") or {}).get("phase")
            first = self.br_first_seen.setdefault(uid, now)
            if phase in ("Succeeded", "Failed"):
                self.br_done.add(uid)
            if phase == "Succeeded":
                for ref in br["metadata"].get("ownerReferences") or []:
                    if ref.get("kind") == "Pod":
                        self.succeeded.setdefault(str(ref.get("uid")), set()).add(uid)
            elif now - first > STUCK_SECONDS:
                self.stuck.add(f"{br['metadata']['namespace']}/{br['metadata']['name']}")
        self.samples += 1

    def bound_events(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for event in self._list("events"):
            if event.get("reason") != "Bound" or "already bound" in str(event.get("message")):
                continue
            if (event.get("source") or {}).get("component") != "kai-py-binder":
                continue
            uid = str((event.get("involvedObject") or {}).get("uid") or "")
            counts[uid] = counts.get(uid, 0) + 1
        return counts

    def finish(self) -> None:
        twice = {pod for pod, done in self.succeeded.items() if len(done) > 1}
        twice |= {pod for pod, n in self.bound_events().items() if n > 1}
        self.figures.double_binds = len(self.double | twice)
        self.figures.rejections = len(self.rejected)
        self.figures.stuck_bindrequests = len(self.stuck)


def _gpus(value: object) -> float:
    """A node's GPUs; 0 for a value that is no number (a bad node holds nothing)."""
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return 0.0


def overcommitted(pods: list[Json], nodes: list[Json]) -> list[str]:
    """Cards over 100 % and nodes over their GPUs, among bound unfinished pods.

    Per physical card (the UUIDs the kubelet puts in ``visible-devices``): the
    fractions of the shared pods that see it plus 1 per whole-GPU pod on it
    (reservation pods hold the card for the shared pods, so they add nothing).
    Per node: the GPUs of whole-GPU pods, reservation pods included.
    """
    card_load: dict[str, float] = {}
    node_gpus: dict[str, float] = {}
    for pod in pods:
        m, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
        node = spec.get("nodeName")
        if not node or status.get("phase") in ("Succeeded", "Failed"):
            continue
        annotations = m.get("annotations") or {}
        fraction = annotations.get(keys.GPU_FRACTION_ANNOTATION)
        if fraction is None:
            gpus = sum(
                float(((c.get("resources") or {}).get("limits") or {}).get(keys.GPU_RESOURCE, 0))
                for c in spec.get("containers") or []
            )
            node_gpus[node] = node_gpus.get(node, 0.0) + gpus
        if m.get("namespace") == keys.RESERVATION_NAMESPACE:
            continue
        share = float(fraction) if fraction is not None else 1.0
        for card in filter(None, str(annotations.get(ann.VISIBLE_DEVICES, "")).split(",")):
            card_load[card] = card_load.get(card, 0.0) + share
    over = [f"card {c}: {load:g}" for c, load in card_load.items() if load > 1.0 + 1e-6]
    capacity = {
        n["metadata"]["name"]: _gpus(
            ((n.get("status") or {}).get("allocatable") or {}).get(keys.GPU_RESOURCE, 0)
        )
        for n in nodes
    }
    for node, used in node_gpus.items():
        if used > capacity.get(node, 0.0) + 1e-6:
            over.append(f"node {node}: {used:g} of {capacity.get(node, 0.0):g} GPUs")
    return over


# ------------------------------------------------------------------ a scenario run
class Run:
    """One scenario: cluster, operator(s), burst, checker; ``finish`` fills the figures."""

    def __init__(
        self, scenario: str, tmp: Path, seed: int = SEED, spec: Json | None = None
    ) -> None:
        self.tmp = tmp
        self.random = random.Random(f"{seed}-{scenario}")
        self.figures = Figures(scenario)
        self.cluster = ThreadedDevCluster(
            parse_cluster(spec or SPEC, "faults"),
            kubeconfig_path=tmp / "kubeconfig",
            bookmark_interval=1.0,
            job_failure_backoff=0.5,
        )
        self.operators: list[OperatorProcess] = []
        self.checker: Checker | None = None
        self.expected_jobs: list[str] = []
        self.expected_pods: list[str] = []

    def __enter__(self) -> Run:
        self.cluster.start()
        store = self.cluster.store
        for q in (queue("root"), queue("team-a", "root"), queue("team-b", "root")):
            self.cluster.call(store.create("queues", q))
        self.cluster.cluster.server.accepted_writes = []
        self.checker = Checker(self.cluster, self.figures)
        self.checker.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.checker is not None:
            self.checker.stop()
        for op in self.operators:
            op.stop()
        self.cluster.stop()

    def operator(self, *args: str, kubeconfig: str | None = None) -> OperatorProcess:
        op = start_operator(
            kubeconfig or self.cluster.kubeconfig_path,
            self.tmp / f"operator-{len(self.operators)}.log",
            *args,
        )
        self.operators.append(op)
        return op

    @property
    def logs(self) -> str:
        return "\n".join(f"--- {op.log_path.name}\n{op.log[-6000:]}" for op in self.operators)

    def call(self, awaitable: Any, timeout: float = 30.0) -> Any:
        return self.cluster.call(awaitable, timeout=timeout)

    def burst(
        self,
        jobs: int = 3,
        pods: int = 4,
        gang: int = 3,
        halves: int = 6,
        quarters: int = 4,
        tag: str = "",
    ) -> None:
        """Whole-GPU Jobs, a gang, 0.5 and 0.25 shared pods: more than the 12 GPUs at once."""
        store = self.cluster.store
        for i in range(jobs):
            name = f"train{tag}-{i}"
            self.call(store.create("jobs", gpu_job(name, pods, seconds=2)))
            self.expected_jobs.append(name)
        if gang:
            name = f"gang{tag}"
            self.call(store.create("jobs", gpu_job(name, gang, seconds=2, min_member=gang)))
            self.expected_jobs.append(name)
        for i in range(halves):
            name = f"half{tag}-{i}"
            self.call(store.create("pods", shared_pod(name, 0.5, seconds=3)))
            self.expected_pods.append(name)
        for i in range(quarters):
            name = f"quarter{tag}-{i}"
            self.call(store.create("pods", shared_pod(name, 0.25, seconds=3)))
            self.expected_pods.append(name)

    # ---- completion --------------------------------------------------------------------
    def _job_done(self, name: str) -> bool:
        job = self.call(self.cluster.store.get("jobs", NS, name))
        return any(
            c.get("type") == "Complete" and c.get("status") == "True"
            for c in (job.get("status") or {}).get("conditions") or []
        )

    def _pod_state(self, name: str) -> str:
        """done, deleted (by the binder: its card went) or waiting."""
        try:
            pod = self.call(self.cluster.store.get("pods", NS, name))
        except ApiError as exc:
            if exc.code == 404:
                return "deleted"
            raise
        return "done" if (pod.get("status") or {}).get("phase") == "Succeeded" else "waiting"

    def waiting(self) -> list[str]:
        out = [f"job {j}" for j in self.expected_jobs if not self._job_done(j)]
        out += [f"pod {p}" for p in self.expected_pods if self._pod_state(p) == "waiting"]
        return out

    def wait_complete(self, since: float, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        left = self.waiting()
        last: tuple[float, list[str]] | None = None  # when the last ones finished, and which
        while left and time.monotonic() < deadline:
            time.sleep(0.5)
            now_left = self.waiting()
            if len(now_left) < len(left):
                last = (time.monotonic() - since, [w for w in left if w not in now_left])
            left = now_left
        if last is not None:
            self.figures.notes.append(f"last done at {last[0]:.1f} s: {', '.join(last[1])}")
        self.figures.lost_pods = len(left)
        if left:
            self.figures.notes.append(f"not done: {', '.join(left[:10])}")
            self.figures.notes.append(f"their pods: {self.describe_waiting(left)}")
        else:
            self.figures.complete_seconds = time.monotonic() - since
        gone = [p for p in self.expected_pods if self._pod_state(p) == "deleted"]
        evicted_pods = {name for _, name in self.pod_deletions(evictions=True)}
        undecided = self.pod_deletions(evictions=False)
        self.figures.undecided_deletions = len(undecided)
        if undecided:
            self.figures.notes.append(
                f"pods deleted with no eviction decided (namespace/name by client): "
                f"{sorted(set(undecided))[:10]}"
            )
        # A bare pod gone is gone for good: lost unless the scheduler evicted it.
        lost = [p for p in gone if p not in evicted_pods]
        self.figures.lost_pods += len(lost)
        if lost:
            self.figures.notes.append(f"bare pods deleted, lost for good: {lost}")
        evicted = [p for p in gone if p in evicted_pods]
        if evicted:
            events, _ = self.call(self.cluster.store.list("events", NS))
            why = sorted(
                {
                    str(e.get("message"))[:160]
                    for e in events
                    if e.get("reason") == "Evict"
                    and any(p in str(e.get("message")) for p in evicted)
                }
            )
            self.figures.notes.append(
                f"evicted by the scheduler (bare pods, gone): {evicted} {why}"
            )

    def pod_deletions(self, *, evictions: bool) -> list[tuple[str, str]]:
        """Pods outside the reservation namespace that HTTP clients (the operator: the
        harness and the simulated nodes and controllers work in-process) evicted, or
        deleted outright: (client, name)."""
        wanted = "pods/eviction" if evictions else "pods"
        return [
            (client, name)
            for client, resource, namespace, name in self.cluster.cluster.server.deletions
            if resource == wanted and namespace != keys.RESERVATION_NAMESPACE
        ]

    def describe_waiting(self, left: list[str]) -> list[str]:
        """Phase, node and scheduling condition of the pods of what did not finish."""
        pods, _ = self.call(self.cluster.store.list("pods", NS))
        names = {w.split(" ", 1)[1] for w in left}
        out = []
        for pod in pods:
            m = pod["metadata"]
            owner = (m.get("labels") or {}).get("job-name") or m["name"]
            if owner not in names:
                continue
            status = pod.get("status") or {}
            scheduled = [
                str(c.get("message"))[:120]
                for c in status.get("conditions") or []
                if c.get("type") == "PodScheduled" and c.get("status") == "False"
            ]
            out.append(
                f"{m['name']}: {status.get('phase')} {status.get('reason') or ''} on "
                f"{pod['spec'].get('nodeName')} {scheduled}"
            )
        return out

    def leftover_reservations(self) -> list[str]:
        pods, _ = self.call(self.cluster.store.list("pods"))
        used: set[tuple[str, str]] = set()
        for pod in pods:
            labels = pod["metadata"].get("labels") or {}
            group = labels.get(keys.GPU_GROUP_LABEL)
            live = (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
            if group and live and pod["metadata"]["namespace"] != keys.RESERVATION_NAMESPACE:
                used.add((str(pod["spec"].get("nodeName")), group))
        out = []
        for pod in pods:
            if pod["metadata"]["namespace"] != keys.RESERVATION_NAMESPACE:
                continue
            group = (pod["metadata"].get("labels") or {}).get(keys.GPU_GROUP_LABEL)
            if (pod["spec"].get("nodeName"), group) not in used:
                out.append(pod["metadata"]["name"])
        return out

    def finish(self, since: float, timeout: float = 90.0) -> Figures:
        """Wait for the work to finish and the clean-up to run; fill in the figures."""
        self.wait_complete(since, timeout)
        deadline = time.monotonic() + 10.0
        left = self.leftover_reservations()
        while left and time.monotonic() < deadline:
            time.sleep(0.5)
            left = self.leftover_reservations()
        self.figures.leftover_reservations = len(left)
        assert self.checker is not None
        self.checker.sample()
        self.checker.finish()
        if self.checker.over:
            self.figures.notes.append(f"over 100 %: {sorted(set(self.checker.over))[:5]}")
        if self.checker.stuck:
            self.figures.notes.append(f"stuck: {sorted(self.checker.stuck)[:5]}")
        self.check_fencing()
        record(self.figures)
        return self.figures

    def check_fencing(self) -> None:
        """Writes of replicas that no longer held the Lease, and the overlap of two
        leaders' writes, from the API server's record of accepted writes."""
        writes = list(self.cluster.cluster.server.accepted_writes or [])
        lost, overlap, notes = fencing(writes)
        self.figures.writes_after_lost_lease = lost
        self.figures.two_writers_seconds = overlap
        self.figures.notes.extend(notes)

    def wait_for(self, check: Callable[[], Any], timeout: float, what: str) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            result = check()
            if result:
                return result
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}\n{self.logs}")
            time.sleep(0.05)


_PID = re.compile(r"kai-py/(\d+)")


def fencing(writes: list[tuple[float, str, str, str]]) -> tuple[int, float | None, list[str]]:
    """From accepted writes ``(time, User-Agent, method, path)``: how many came from a
    replica (a pid that wrote the Lease) while another held the Lease; per change of
    holder, the old holder's last accepted write minus the new one's first (the max);
    notes on the writes refused by the invariant."""
    holder: str | None = None
    late: list[str] = []
    last_write: dict[str, float] = {}
    changes: list[tuple[str, str, float]] = []  # (old, new, when the new one took it)
    firsts: dict[tuple[str, float], float] = {}
    electing: set[str] = set()
    for when, agent, method, path in sorted(writes):
        match = _PID.search(agent)
        if match is None:
            continue
        pid = match.group(1)
        if "/leases" in path:
            electing.add(pid)
            if holder is not None and pid != holder:
                changes.append((holder, pid, when))
            holder = pid
            continue
        if pid in electing and pid != holder:
            late.append(f"{time.strftime('%H:%M:%S', time.localtime(when))} {pid} {method} {path}")
        last_write[pid] = when
        if changes and changes[-1][1] == pid:
            firsts.setdefault((pid, changes[-1][2]), when)
    overlaps = []
    for old, new, taken in changes:
        first = firsts.get((new, taken))
        old_last = max(
            (
                w
                for w, agent, _, path in writes
                if f"kai-py/{old}" in agent and "/leases" not in path
            ),
            default=None,
        )
        if first is not None and old_last is not None:
            overlaps.append(old_last - first)
    notes = [f"write accepted after its replica lost the Lease: {w}" for w in late[:10]]
    return len(late), max(overlaps) if overlaps else None, notes


def created_age(obj: Json) -> float:
    created = parse_time((obj.get("metadata") or {}).get("creationTimestamp"))
    return time.time() - created if created is not None else 0.0


# ------------------------------------------------------------------ the table
RESULTS: list[Figures] = []


def record(figures: Figures) -> None:
    RESULTS.append(figures)


def table(results: list[Figures] | None = None, seed: int = SEED) -> str:
    rows = results if results is not None else RESULTS
    merged: dict[str, Figures] = {}
    completes: dict[str, list[float]] = {}
    for f in rows:
        m = merged.setdefault(f.scenario, Figures(f.scenario, runs=0))
        m.runs += f.runs
        m.double_binds += f.double_binds
        m.over_card_seconds += f.over_card_seconds
        m.rejections += f.rejections
        m.lost_pods += f.lost_pods
        m.leftover_reservations += f.leftover_reservations
        m.stuck_bindrequests += f.stuck_bindrequests
        m.undecided_deletions += f.undecided_deletions
        if f.complete_seconds is not None:
            completes.setdefault(f.scenario, []).append(f.complete_seconds)
        if f.failover_seconds is not None:
            m.failover_seconds = max(m.failover_seconds or 0.0, f.failover_seconds)
        m.writes_after_lost_lease += f.writes_after_lost_lease
        if f.two_writers_seconds is not None:
            m.two_writers_seconds = max(
                m.two_writers_seconds if m.two_writers_seconds is not None else -1e9,
                f.two_writers_seconds,
            )
    head = (
        "scenario | runs | double binds | card-seconds over 100 % | kubelet GPU rejections | "
        "lost pods | leftover reservation pods | stuck BindRequests | "
        "time to complete after faults stop (s, max)"
    )
    lines = [f"fault suite figures (seed {seed})", head, "|".join(["---"] * 9)]
    for name, m in merged.items():
        done = completes.get(name)
        lines.append(
            f"{name} | {m.runs} | {m.double_binds} | {m.over_card_seconds:g} | {m.rejections} | "
            f"{m.lost_pods} | {m.leftover_reservations} | {m.stuck_bindrequests} | "
            f"{max(done):.1f}"
            if done
            else f"{name} | {m.runs} | {m.double_binds} | "
            f"{m.over_card_seconds:g} | {m.rejections} | {m.lost_pods} | "
            f"{m.leftover_reservations} | {m.stuck_bindrequests} | -"
        )
    for f in rows:
        for note in f.notes:
            lines.append(f"{f.scenario}: {note}")
    for name, m in merged.items():
        if m.failover_seconds is not None:
            lines.append(f"failover with two replicas ({name}): {m.failover_seconds:.1f} s")
        if m.two_writers_seconds is not None:
            lines.append(
                f"{name}: writes accepted after the Lease was lost: "
                f"{m.writes_after_lost_lease}; old leader's last write - new leader's "
                f"first: {m.two_writers_seconds:+.2f} s (max; above 0: both wrote)"
            )
        if m.undecided_deletions:
            lines.append(
                f"{name}: {m.undecided_deletions} pods deleted by the operator, no eviction"
            )
    return "\n".join(lines)
