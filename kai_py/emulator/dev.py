"""``kai-py dev``: an emulated cluster with GPU nodes that kubectl can use.

Starts the API server, the simulated nodes and the built-in controllers,
applies kai-py's CRDs, prints the ``export KUBECONFIG=...`` line, and runs
until Ctrl-C or SIGTERM, then stops cleanly (exit 0). Exit 2: a bad
cluster file; exit 1: the cluster could not start (e.g. the port is taken).

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
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

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
        _say(f"export KUBECONFIG={Path(cluster.kubeconfig_path).resolve()}")
        if not no_operator:
            operator = _start_operator(cluster.kubeconfig_path)
            # Objects applied before the webhooks answer would be admitted unmutated.
            if operator is not None and await _webhooks_served(cluster, timeout=30):
                _say("kai-py dev: admission webhooks served by the operator")
            elif operator is not None:
                _say("kai-py dev: the operator's webhooks are not up after 30 s", sys.stderr)
            for pool in node_pools(spec) if operator is not None else []:
                shard = _start_operator(cluster.kubeconfig_path, shard_arguments(pool))
                if shard is not None:
                    shards[pool] = shard
        if apply:
            objects = read_manifests(apply)
            problems = await apply_manifests(cluster, objects)
            for problem in problems:
                _say(f"kai-py dev: cannot apply {problem}", sys.stderr)
            _say(
                f"kai-py dev: applied {len(objects) - len(problems)} objects from "
                f"{', '.join(str(p) for p in apply)}; watch them with: kubectl get pods -A"
            )
        _say("kai-py dev: running; Ctrl-C stops it")
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
    kubeconfig: str, arguments: Sequence[str] | None = None
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


async def _webhooks_served(cluster: DevCluster, timeout: float) -> bool:
    """Whether the operator's webhook configurations have their webhooks (Kopf makes
    them empty, then fills them in once its server listens) within ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        filled = True
        for kind in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
            found, _ = await cluster.store.list(kind)
            filled = filled and any(
                c.get("webhooks") and (c.get("metadata") or {}).get("name") == DEV_WEBHOOKS
                for c in found
            )
        if filled:
            return True
        await asyncio.sleep(0.1)
    return False


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
    try:
        loop = eventloop.loop_factory()
    except ValueError as exc:
        _say(f"kai-py dev: {exc}", sys.stderr)
        return 2
    try:
        return eventloop.run(_serve(spec, kubeconfig, port, no_operator, apply), loop)
    except KeyboardInterrupt:  # a second Ctrl-C while stopping
        return 130
