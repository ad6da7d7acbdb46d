"""``kai-py dev``: an emulated cluster with GPU nodes that kubectl can use.

Starts the API server, the simulated nodes and the built-in controllers,
applies kai-py's CRDs, starts the operator, and prints the
``export KUBECONFIG=...`` line once the operator's webhooks answer (and its
/metrics, with ``--metrics-port``), so that what a user applies right after
pasting it is admitted by them. Runs until Ctrl-C or SIGTERM, either of which
stops it cleanly (exit 0), during start-up too. Exit 2: a bad cluster file;
exit 1: the cluster could not start (e.g. the port is taken).

The operator runs as its own process against the kubeconfig, as it would
against a real cluster. That also keeps the layers apart: the emulator
never imports the scheduler or the controllers.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Awaitable, Sequence
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import urlsplit

import yaml

from kai_py.api import eventloop, keys
from kai_py.emulator.cluster_spec import ClusterSpec, ClusterSpecError, load_cluster
from kai_py.emulator.dev_cluster import DevCluster
from kai_py.emulator.storage.errors import ApiError

#: The module that will run the kai-py operator (``python -m <module>``).
#: Until it exists, ``kai-py dev`` runs the emulator alone and says so.
OPERATOR_MODULE = "kai_py.controllers.operator"
#: What the operator runs in ``kai-py dev``: every part, webhooks included.
DEV_CONTROLLERS = "scheduler,binder,podgrouper,webhooks"
#: The name of the webhook configurations Kopf keeps in the emulated cluster.
DEV_WEBHOOKS = "kai-py-dev"
#: How long the start waits for the operator's webhooks (and metrics) to answer (s).
WEBHOOK_WAIT = 30.0


def _say(message: str, stream: TextIO | None = None) -> None:
    print(message, file=stream or sys.stdout, flush=True)


def operator_command() -> list[str] | None:
    """How to start the operator, or None while it is not part of kai-py yet."""
    try:
        found = importlib.util.find_spec(OPERATOR_MODULE)
    except (ImportError, ValueError):
        found = None
    if found is None:
        return None
    return [sys.executable, "-m", OPERATOR_MODULE]


def node_pools(spec: ClusterSpec) -> list[str]:
    """The node pools the description's node groups put nodes in (their labels)."""
    return sorted(
        {g.labels[keys.NODE_POOL_LABEL] for g in spec.nodes if g.labels.get(keys.NODE_POOL_LABEL)}
    )


def shard_arguments(pool: str) -> list[str]:
    """The operator's arguments for the scheduler shard of ``pool``: the main operator
    is the default shard (nodes without the label) and does not schedule onto them."""
    return ["--controllers", "scheduler", "--node-pool", pool]


def _summary(spec: ClusterSpec) -> str:
    groups = spec.node_groups()
    gpus = sum(group.gpus for group in groups.values())
    products = sorted({g.gpu_product for g in groups.values() if g.gpus})
    what = f"{len(groups)} nodes, {gpus} GPUs"
    if products:
        what += f" ({', '.join(products)})"
    pools = node_pools(spec)
    if pools:
        what += f"; node pools {', '.join(pools)}, each with its own scheduler"
    return what


def read_manifests(paths: Sequence[Path]) -> list[dict[str, Any]]:
    """The objects in YAML files, or in the *.yaml / *.yml files of folders (sorted)."""
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            files.extend(sorted(p for p in path.iterdir() if p.suffix in (".yaml", ".yml")))
        else:
            files.append(path)
    objects: list[dict[str, Any]] = []
    for file in files:
        for doc in yaml.safe_load_all(file.read_text(encoding="utf-8")):
            if isinstance(doc, dict):
                objects.append(doc)
    return objects


async def apply_manifests(cluster: DevCluster, objects: list[dict[str, Any]]) -> list[str]:
    """Create each object, as `kubectl create` would; returns one problem line per failure."""
    problems: list[str] = []
    for obj in objects:
        group, _, version = str(obj.get("apiVersion") or "").rpartition("/")
        kind = str(obj.get("kind") or "")
        name = str((obj.get("metadata") or {}).get("name") or "?")
        found = [
            rt for rt in cluster.store.registry.in_group_version(group, version) if rt.kind == kind
        ]
        if not found:
            problems.append(
                f"{kind} {name}: the cluster does not serve {obj.get('apiVersion')} {kind}"
            )
            continue
        namespace = (obj.get("metadata") or {}).get("namespace") or "default"
        try:
            await cluster.store.create(
                found[0], obj, namespace=namespace if found[0].namespaced else None
            )
        except ApiError as exc:
            problems.append(f"{kind} {name}: {exc.message}")
    return problems


async def _serve(
    spec: ClusterSpec,
    kubeconfig: Path | None,
    port: int,
    no_operator: bool,
    apply: Sequence[Path] = (),
    metrics_port: int | None = None,
) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    tmpdir: tempfile.TemporaryDirectory[str] | None = None
    if kubeconfig is None:
        tmpdir = tempfile.TemporaryDirectory(prefix="kai-py-dev-")
        kubeconfig = Path(tmpdir.name) / "kubeconfig"
    cluster = DevCluster(spec, port=port, kubeconfig_path=kubeconfig, kubeflow_crds=True)
    operator: subprocess.Popen[bytes] | None = None
    shards: dict[str, subprocess.Popen[bytes]] = {}
    try:
        try:
            await cluster.start()
        except OSError as exc:
            _say(
                f"kai-py dev: cannot start the API server on port {port}: {exc.strerror or exc}",
                sys.stderr,
            )
            return 1
        _say(f"kai-py dev: emulated cluster at {cluster.url}: {_summary(spec)}")
        _say(
            "kai-py dev: CRDs (kai-py and Kubeflow jobs), KAI's PriorityClasses and default "
            f"queues applied; namespace {keys.RESERVATION_NAMESPACE} created"
        )
        if not no_operator:
            operator = _start_operator(cluster.kubeconfig_path, metrics_port=metrics_port)
            # The export line waits for the webhooks: objects applied before they answer
            # would be admitted unmutated and unvalidated.
            if operator is not None:
                ready = await _until(stop, _webhooks_answer(cluster, operator), WEBHOOK_WAIT)
                if ready:
                    _say("kai-py dev: admission webhooks served by the operator")
                elif not stop.is_set():
                    _say(
                        f"kai-py dev: the operator's webhooks are not up after "
                        f"{WEBHOOK_WAIT:.0f} s",
                        sys.stderr,
                    )
            if (
                operator is not None
                and metrics_port is not None
                and not stop.is_set()
                and not await _until(stop, _port_answers(metrics_port, operator), WEBHOOK_WAIT)
            ):
                _say(
                    f"kai-py dev: the operator's /metrics on port {metrics_port} does "
                    f"not answer after {WEBHOOK_WAIT:.0f} s",
                    sys.stderr,
                )
            for pool in node_pools(spec) if operator is not None else []:
                shard = _start_operator(cluster.kubeconfig_path, shard_arguments(pool))
                if shard is not None:
                    shards[pool] = shard
        if stop.is_set():  # Ctrl-C or SIGTERM while starting
            _say("kai-py dev: stopping")
            return 0
        _say(f"export KUBECONFIG={Path(cluster.kubeconfig_path).resolve()}")
        if metrics_port is not None and operator is not None:
            _say(f"kai-py dev: the operator's metrics at http://127.0.0.1:{metrics_port}/metrics")
        if apply:
            objects = read_manifests(apply)
            problems = await apply_manifests(cluster, objects)
            for problem in problems:
                _say(f"kai-py dev: cannot apply {problem}", sys.stderr)
            _say(
                f"kai-py dev: applied {len(objects) - len(problems)} objects from "
                f"{', '.join(str(p) for p in apply)}; watch them with: kubectl get pods -A"
            )
        _say("kai-py dev: running; Ctrl-C or SIGTERM stops it")
        while not stop.is_set():
            waiter = asyncio.ensure_future(stop.wait())
            await asyncio.wait([waiter], timeout=1.0)
            waiter.cancel()
            if operator is not None and operator.poll() is not None:
                _say(
                    f"kai-py dev: the operator exited with code {operator.returncode}; "
                    "the emulator keeps running",
                    sys.stderr,
                )
                operator = None
            for pool, shard in list(shards.items()):
                if shard.poll() is not None:
                    _say(
                        f"kai-py dev: the scheduler of node pool {pool} exited with code "
                        f"{shard.returncode}; the emulator keeps running",
                        sys.stderr,
                    )
                    del shards[pool]
        _say("kai-py dev: stopping")
        return 0
    finally:
        for shard in shards.values():
            _stop_operator(shard)
        if operator is not None:
            _stop_operator(operator)
        await cluster.close()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
        if tmpdir is not None:
            tmpdir.cleanup()


def _start_operator(
    kubeconfig: str, arguments: Sequence[str] | None = None, metrics_port: int | None = None
) -> subprocess.Popen[bytes] | None:
    """The hook where the operator starts against the emulated cluster (``arguments``:
    another part than the whole operator, e.g. a node pool's scheduler)."""
    command = operator_command()
    if command is None:
        _say(
            "kai-py dev: the kai-py operator is not available yet; running the emulator "
            "alone (pods of kai-scheduler stay Pending)"
        )
        return None
    # The operator serves the admission webhooks too (HAMi's resources, device access,
    # validation), over plain HTTP on loopback, with configurations Kopf keeps.
    if arguments is not None:
        command = [*command, *arguments]
        _say(f"kai-py dev: starting a node pool's scheduler: {' '.join(command)}")
        return subprocess.Popen(command, env=dict(os.environ, KUBECONFIG=kubeconfig))
    command = [*command, "--controllers", DEV_CONTROLLERS]
    if metrics_port is not None:
        command += ["--metrics-port", str(metrics_port)]
    env = dict(
        os.environ,
        KUBECONFIG=kubeconfig,
        KAI_PY_WEBHOOK_ADDR="127.0.0.1",
        KAI_PY_WEBHOOK_PORT=str(_free_port()),
        KAI_PY_WEBHOOK_MANAGED=DEV_WEBHOOKS,
    )
    env.pop("KAI_PY_WEBHOOK_CERT_DIR", None)
    _say(f"kai-py dev: starting the operator: {' '.join(command)}")
    return subprocess.Popen(command, env=env)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _until(stop: asyncio.Event, check: Awaitable[bool], timeout: float) -> bool:
    """``check``'s answer, or False once ``stop`` is set or ``timeout`` has passed."""
    checking = asyncio.ensure_future(check)
    stopping = asyncio.ensure_future(stop.wait())
    try:
        done, _ = await asyncio.wait(
            [checking, stopping], timeout=timeout, return_when=asyncio.FIRST_COMPLETED
        )
        return checking in done and checking.result()
    finally:
        for task in (checking, stopping):
            task.cancel()
        await asyncio.gather(checking, stopping, return_exceptions=True)


async def _webhooks_answer(cluster: DevCluster, operator: subprocess.Popen[bytes]) -> bool:
    """Once the operator's webhook configurations have their webhooks (Kopf makes them
    empty, then fills them in) and every URL they name takes a connection; False if
    the operator exits first."""
    while operator.poll() is None:
        urls: set[str] = set()
        filled = True
        for kind in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
            found, _ = await cluster.store.list(kind)
            mine = [c for c in found if (c.get("metadata") or {}).get("name") == DEV_WEBHOOKS]
            filled = filled and any(c.get("webhooks") for c in mine)
            urls.update(
                str((w.get("clientConfig") or {}).get("url") or "")
                for c in mine
                for w in c.get("webhooks") or []
            )
        if filled:
            ports = {urlsplit(u).port for u in urls if u}
            answers = [await _port_answers(p) for p in ports if p is not None]
            if all(answers):
                return True
        await asyncio.sleep(0.1)
    return False


async def _port_answers(port: int, operator: subprocess.Popen[bytes] | None = None) -> bool:
    """Whether 127.0.0.1:``port`` takes a connection; with ``operator``, waits until it
    does (False if the operator exits first)."""
    while True:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            if operator is None or operator.poll() is not None:
                return False
            await asyncio.sleep(0.1)
            continue
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        return True


def _stop_operator(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=5)


def run_dev(
    cluster_file: Path | None,
    kubeconfig: Path | None,
    port: int,
    no_operator: bool,
    apply: Sequence[Path] = (),
    metrics_port: int | None = None,
) -> int:
    """The ``kai-py dev`` command; returns the exit code."""
    try:
        spec = load_cluster(cluster_file)
    except ClusterSpecError as exc:
        _say(f"kai-py dev: bad cluster file: {exc}", sys.stderr)
        return 2
    missing = [str(p) for p in apply if not p.exists()]
    if missing:
        _say(f"kai-py dev: --apply: {', '.join(missing)} does not exist", sys.stderr)
        return 2
    try:
        read_manifests(apply)
    except (OSError, yaml.YAMLError) as exc:
        _say(f"kai-py dev: --apply: cannot read the manifests: {exc}", sys.stderr)
        return 2
    if not 0 <= port <= 65535:
        _say(f"kai-py dev: --port {port} is not a TCP port (0-65535)", sys.stderr)
        return 2
    if metrics_port is not None and not 1 <= metrics_port <= 65535:
        _say(f"kai-py dev: --metrics-port {metrics_port} is not a TCP port (1-65535)", sys.stderr)
        return 2
    if metrics_port is not None and no_operator:
        _say(
            f"kai-py dev: --metrics-port {metrics_port} with --no-operator: no operator runs "
            "to serve metrics; leave one of them out",
            sys.stderr,
        )
        return 2
    try:
        loop = eventloop.loop_factory()
    except ValueError as exc:
        _say(f"kai-py dev: {exc}", sys.stderr)
        return 2
    try:
        return eventloop.run(_serve(spec, kubeconfig, port, no_operator, apply, metrics_port), loop)
    except KeyboardInterrupt:  # a second Ctrl-C while stopping
        return 130
