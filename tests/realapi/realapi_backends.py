"""The two backends the same operator tests run on: the emulator and a real kube-apiserver.

Both give a kubeconfig (an admin's) for a cluster with the operator tests'
small fleet (``SMALL_CLUSTER``: two 4-GPU nodes and one CPU node), the
kai-py CRDs, and the namespaces ``team-a`` and the reservation namespace.

- ``emulator``: kai-py's own API server with its simulated kubelets and
  controllers, in process (``ThreadedDevCluster``).
- ``real``: etcd and kube-apiserver (built by ``scripts/k8s-binaries.sh``),
  with the same simulated kubelets, device plugins, Job/ReplicaSet/
  Deployment controllers and default scheduler running against it over
  HTTPS with an admin token (``HttpClient``), and kube-controller-manager's
  garbage collector; none of its other controllers.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from operator_helpers import SMALL_CLUSTER
from realapi_server import ADMIN_TOKEN, RealApiServer, binaries_dir

from kai_py.api import keys
from kai_py.emulator.apiserver.threaded import LoopThread
from kai_py.emulator.clientgo.client import NODES
from kai_py.emulator.clientgo.http_client import HttpClient
from kai_py.emulator.cluster_spec import ClusterSpec, parse_cluster
from kai_py.emulator.controllers.manager import ControllerManager
from kai_py.emulator.dev_cluster import ThreadedDevCluster, kai_crds
from kai_py.emulator.nodes.fleet import NodeFleet
from kai_py.emulator.timesource import SystemClock

BACKENDS = ["emulator", "real"]
NOT_READY = "node.kubernetes.io/not-ready"


def require_binaries() -> Path:
    """The binaries' folder; skips (outside CI only) or fails loudly when they are missing."""
    folder = binaries_dir()
    wanted = os.environ.get("KAI_PY_K8S_BIN")
    names = ("kube-apiserver", "kube-controller-manager", "etcd")
    if folder is None or not all((folder / name).exists() for name in names):
        if wanted or os.environ.get("CI"):
            raise AssertionError(
                f"KAI_PY_K8S_BIN={wanted!r} but {'/'.join(names)} are not all there: "
                "run scripts/k8s-binaries.sh"
            )
        pytest.skip(
            "no kube-apiserver/etcd built here: run scripts/k8s-binaries.sh (CI always does)"
        )
    return folder


class SimulatedNodes(LoopThread):
    """kai-py's kubelets, device plugins and built-in controllers, against a server over HTTP."""

    def __init__(self, url: str, token: str, ca_file: str, spec: ClusterSpec) -> None:
        super().__init__("kai-py-simulated-nodes")
        self._args = (url, token, ca_file)
        self._spec = spec
        self._tasks: list[asyncio.Task[None]] = []
        self._client: HttpClient | None = None
        self.fleet: NodeFleet | None = None

    def start(self) -> SimulatedNodes:
        self._thread.start()

        async def run() -> None:
            self._client = HttpClient(*self._args)
            clock = SystemClock()
            self.fleet = NodeFleet(self._client, self._spec, clock)
            controllers = ControllerManager(self._client, clock)
            loop = asyncio.get_running_loop()
            self._tasks = [loop.create_task(self.fleet.run()), loop.create_task(controllers.run())]

            async def ready() -> None:
                assert self.fleet is not None
                await self.fleet.ready.wait()
                await controllers.ready.wait()

            waiter = loop.create_task(ready())
            done, _ = await asyncio.wait(
                [waiter, *self._tasks], return_when=asyncio.FIRST_COMPLETED, timeout=60
            )
            if waiter not in done:
                waiter.cancel()
                for task in self._tasks:
                    if task.done():
                        task.result()
                raise TimeoutError("the simulated nodes did not get ready")
            await self._untaint_ready_nodes()

        self.call(run(), timeout=90)
        return self

    async def _untaint_ready_nodes(self) -> None:
        """What kube-controller-manager's node lifecycle controller does for a Ready node.

        The real API server's TaintNodesByCondition admission plugin gives
        every new Node the ``node.kubernetes.io/not-ready:NoSchedule`` taint;
        the node lifecycle controller takes it away once the kubelet reports
        Ready. No controller manager runs here, so this does it once.
        """
        assert self._client is not None
        nodes, _ = await self._client.list(NODES)
        for node in nodes:
            taints = node.get("spec", {}).get("taints") or []
            kept = [t for t in taints if t.get("key") != NOT_READY]
            if kept != taints:
                name = node["metadata"]["name"]
                await self._client.patch(NODES, name, {"spec": {"taints": kept or None}})

    def stop(self) -> None:
        async def down() -> None:
            for task in self._tasks:
                task.cancel()
            for task in self._tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            if self._client is not None:
                await self._client.close()

        with contextlib.suppress(Exception):
            self.call(down())
        self._stop_loop()


@dataclass
class Backend:
    name: str
    kubeconfig_path: str
    server: RealApiServer | None = None  # the real one, for what only it has (tokens, audit)
    emulated: ThreadedDevCluster | None = None

    def __str__(self) -> str:
        return self.name


def _prepare(server: RealApiServer) -> RealApiServer:
    """Start a server with what every cluster here has: the kai-py CRDs, the
    reservation namespace and ``default``."""
    server.start()
    server.apply_crds(kai_crds())
    for ns in (keys.RESERVATION_NAMESPACE, "default"):
        server.namespace(ns)
    return server


class ServersAhead:
    """Each test's real API server is started while the test before it runs.

    Starting etcd and kube-apiserver (its post-start hooks) and establishing the CRDs
    takes several seconds, most of a short test's time, while a test mostly waits on
    the operator. Each test still gets a server of its own that no other test used;
    only the moment it is started moves earlier. A server a test is done with is
    stopped in the background too (kube-apiserver's graceful shutdown takes a second
    or more); ``close`` (at the end of the session) waits for all of them.
    """

    def __init__(self) -> None:
        self._next: concurrent.futures.Future[RealApiServer] | None = None
        self._pool = concurrent.futures.ThreadPoolExecutor(2, "kai-py-real-servers")
        self._stopping: list[concurrent.futures.Future[None]] = []
        self._count = 0

    def _submit(self, root: Path, bin_dir: Path) -> concurrent.futures.Future[RealApiServer]:
        self._count += 1
        server = RealApiServer(root / f"real-server-{os.getpid()}-{self._count}", bin_dir)
        return self._pool.submit(_prepare, server)

    def take(self, workdir: Path) -> RealApiServer:
        """A started server; ``workdir`` links to its folder (logs, audit log)."""
        bin_dir = require_binaries()
        # Beside the tests' own folders, so pytest keeps and removes them with those.
        root = workdir.parent.parent
        current = self._next or self._submit(root, bin_dir)
        self._next = self._submit(root, bin_dir)
        server = current.result()  # a failed start raises here, in the test that needed it
        workdir.symlink_to(server.workdir, target_is_directory=True)
        return server

    def stop_later(self, server: RealApiServer) -> None:
        self._stopping.append(self._pool.submit(server.stop))

    def close(self) -> None:
        if self._next is not None:
            with contextlib.suppress(Exception):
                self._next.result().stop()
            self._next = None
        for stopping in self._stopping:
            stopping.result()
        self._stopping.clear()
        self._pool.shutdown()


AHEAD = ServersAhead()


def start_real(workdir: Path, spec: ClusterSpec) -> tuple[RealApiServer, SimulatedNodes]:
    server = AHEAD.take(workdir)
    try:
        for ns in spec.namespaces:
            server.namespace(ns)
        nodes = SimulatedNodes(server.url, ADMIN_TOKEN, server.ca_file, spec).start()
    except BaseException:
        server.stop()
        raise
    print(f"real kube-apiserver ready in {server.startup_seconds:.1f} s")
    return server, nodes


@contextlib.contextmanager
def backend_cluster(
    name: str, tmp_path: Path, cluster: dict[str, Any] | None = None
) -> Iterator[Backend]:
    spec = parse_cluster(cluster or SMALL_CLUSTER, "test")
    if name == "emulator":
        with ThreadedDevCluster(
            spec, kubeconfig_path=tmp_path / "kubeconfig", bookmark_interval=1.0
        ) as running:
            yield Backend(name, running.kubeconfig_path, emulated=running)
        return
    server, nodes = start_real(tmp_path / "real", spec)
    try:
        yield Backend(name, server.kubeconfig_path, server=server)
    finally:
        nodes.stop()
        AHEAD.stop_later(server)
