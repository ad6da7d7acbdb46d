"""``DevCluster``: the whole emulated cluster as one object, for ``kai-py dev`` and tests.

API server + simulated nodes (kubelets, device plugins) + built-in
controllers (Job, CronJob, Deployment, ReplicaSet, a default scheduler), with the
kai-py CRDs applied. Async::

    async with DevCluster() as cluster:              # default: 4 x 8 GPU + 2 CPU nodes
        print(cluster.kubeconfig_path)               # KUBECONFIG for kubectl / clients
        await cluster.store.create("pods", {...})    # in process, no HTTP
        cluster.faults.add(verb="create", resource="pods", code=500, fraction=0.3)
        cluster.node_faults.add(verb="patch", resource="pods/status", code=409, times=3)
        cluster.drop_watches()                       # every watch, HTTP and in process
        await cluster.restart()                      # stop everything, start on the same state

From sync code (kubectl, the sync kubernetes client), ``ThreadedDevCluster``
runs the same thing on a loop in a background thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from kai_py.api import keys
from kai_py.api.install import install_objects
from kai_py.emulator import kubeflow
from kai_py.emulator.apiserver.faults import FaultSet
from kai_py.emulator.apiserver.server import EmulatedAPIServer
from kai_py.emulator.apiserver.threaded import LoopThread
from kai_py.emulator.clientgo.client import Json
from kai_py.emulator.clientgo.store_client import StoreClient
from kai_py.emulator.cluster_spec import ClusterSpec, default_cluster
from kai_py.emulator.controllers.manager import ControllerManager
from kai_py.emulator.nodes.fleet import NodeFleet
from kai_py.emulator.nodes.kubelet import Kubelet
from kai_py.emulator.storage.errors import ApiError
from kai_py.emulator.storage.store import Store
from kai_py.emulator.timesource import Clock, SystemClock

log = logging.getLogger(__name__)
T = TypeVar("T")


def kai_crds() -> list[Json]:
    """The CustomResourceDefinitions of kai-py (Queue, PodGroup, BindRequest)."""
    try:
        from kai_py.api.crdgen import crd_documents
    except ImportError:  # pragma: no cover - only while the API package is being built
        return _crds_from_repo()
    return [dict(doc) for doc in crd_documents()]


def _crds_from_repo() -> list[Json]:
    import yaml

    folder = Path(__file__).resolve().parents[2] / "crds"
    docs: list[Json] = []
    for path in sorted(folder.glob("*.yaml")):
        docs.extend(d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict))
    return docs


class DevCluster:
    """An emulated cluster running on the current event loop."""

    def __init__(
        self,
        spec: ClusterSpec | None = None,
        *,
        port: int = 0,
        kubeconfig_path: str | os.PathLike[str] | None = None,
        clock: Clock | None = None,
        store: Store | None = None,
        default_scheduler: bool = True,
        apply_crds: bool = True,
        events: bool = True,
        heartbeat: bool = True,
        job_failure_backoff: float = 10.0,
        bookmark_interval: float = 10.0,
        node_faults: FaultSet | None = None,
        kubeflow_crds: bool = False,
    ) -> None:
        self.spec = spec or default_cluster()
        self.clock: Clock = clock or SystemClock()
        self.server = EmulatedAPIServer(
            port=port,
            kubeconfig_path=kubeconfig_path,
            store=store,
            bookmark_interval=bookmark_interval,
        )
        #: Faults for the simulated nodes and controllers (``server.faults`` is for HTTP).
        self.node_faults = node_faults if node_faults is not None else FaultSet()
        self._options: dict[str, Any] = {
            "default_scheduler": default_scheduler,
            "events": events,
            "heartbeat": heartbeat,
            "job_failure_backoff": job_failure_backoff,
        }
        self._apply_crds = apply_crds
        self._kubeflow_crds = kubeflow_crds
        self.fleet: NodeFleet | None = None
        self.controllers: ControllerManager | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._bootstrapped = False
        self._down_nodes: set[str] = set()

    # ---- what tests and users reach for -----------------------------------------------------

    @property
    def store(self) -> Store:
        return self.server.store

    @property
    def faults(self) -> FaultSet:
        """Faults for requests over HTTP (the operator, kubectl, clients under test)."""
        return self.server.faults

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def kubeconfig_path(self) -> str:
        return self.server.kubeconfig_path

    @property
    def running(self) -> bool:
        return bool(self._tasks)

    def kubelet(self, node: str) -> Kubelet:
        assert self.fleet is not None, "not started"
        kubelet = self.fleet.kubelet_of(node)
        if kubelet is None:
            raise KeyError(node)
        return kubelet

    async def fail_node(self, node: str) -> None:
        """Make a node unreachable (its kubelet stops; Ready=Unknown, unreachable taints)."""
        assert self.fleet is not None, "not started"
        await self.fleet.fail_node(node)

    def wedge_node(self, node: str, wedged: bool = True) -> None:
        """Keep a node Ready while its kubelet starts nothing new (False: starts again)."""
        assert self.fleet is not None, "not started"
        self.fleet.wedge_node(node, wedged)

    async def recover_node(self, node: str) -> None:
        """Bring an unreachable node back; its kubelet takes up its pods again."""
        assert self.fleet is not None, "not started"
        await self.fleet.recover_node(node)

    def drop_watches(self) -> int:
        """End every open watch, HTTP and in-process; watchers must resume on their own."""
        return self.store.close_watches()

    # ---- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> DevCluster:
        if self._tasks:
            return self
        await self.server.start()
        if not self._bootstrapped:
            await self._bootstrap()
            self._bootstrapped = True
        client = StoreClient(self.store, faults=self.node_faults)
        self.fleet = NodeFleet(
            client,
            self.spec,
            self.clock,
            events=self._options["events"],
            heartbeat=self._options["heartbeat"],
            down=self._down_nodes,
        )
        self.controllers = ControllerManager(
            client,
            self.clock,
            default_scheduler=self._options["default_scheduler"],
            job_failure_backoff=self._options["job_failure_backoff"],
            events=self._options["events"],
        )
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self.fleet.run(), name="kai-py-nodes"),
            loop.create_task(self.controllers.run(), name="kai-py-controllers"),
        ]
        fleet, controllers = self.fleet, self.controllers

        async def both_ready() -> None:
            await fleet.ready.wait()
            await controllers.ready.wait()

        ready = loop.create_task(both_ready())
        watched: list[asyncio.Task[None]] = [ready, *self._tasks]
        done, _ = await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED, timeout=30)
        if ready not in done:
            ready.cancel()
            crashed = [t for t in self._tasks if t.done() and not t.cancelled()]
            await self.stop()
            if crashed:
                crashed[0].result()  # raises why it stopped
            raise TimeoutError("the emulated nodes and controllers did not start")
        return self

    async def _bootstrap(self) -> None:
        """What a fresh cluster has: namespaces and, for kai-py, its CRDs."""
        for name in [keys.RESERVATION_NAMESPACE, *self.spec.namespaces]:
            with contextlib.suppress(ApiError):  # 409: there already (restarted store)
                await self.store.create(
                    "namespaces",
                    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
                )
        if self._apply_crds:
            extra = kubeflow.kubeflow_crds() if self._kubeflow_crds else []
            for crd in [*kai_crds(), *extra]:
                try:
                    await self.store.create("customresourcedefinitions", crd)
                except ApiError as exc:
                    if exc.code != 409:
                        raise
            # What the Helm chart installs besides the CRDs: KAI's PriorityClasses,
            # the default queues (real objects, as `kubectl get queues` shows them)
            # and the reservation ServiceAccount.
            for obj in install_objects():
                with contextlib.suppress(ApiError):  # 409: there already (restarted store)
                    await self.store.create(str(obj["kind"]), obj)

    async def stop(self) -> None:
        """Stop nodes, controllers and the server; the state stays for ``start``."""
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self.server.stop()

    async def restart(self) -> None:
        """A full restart (API server, kubelets, controllers) on the same state and port."""
        await self.stop()
        await self.start()

    async def close(self) -> None:
        await self.stop()
        await self.server.close()

    async def __aenter__(self) -> DevCluster:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ---- waiting -----------------------------------------------------------------------------

    async def wait_for(
        self,
        check: Callable[[], Awaitable[T | None]],
        timeout: float = 10.0,
        interval: float = 0.01,
    ) -> T:
        """Poll ``check`` until it returns something other than None/False."""
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            result = await check()
            if result is not None and result is not False:
                return result
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError("condition not met in time")
            await asyncio.sleep(interval)

    async def wait_pod_phase(
        self, namespace: str, name: str, phase: str, timeout: float = 10.0
    ) -> Json:
        async def check() -> Json | None:
            try:
                pod = await self.store.get("pods", namespace, name)
            except ApiError:
                return None
            return pod if (pod.get("status") or {}).get("phase") == phase else None

        return await self.wait_for(check, timeout)


class ThreadedDevCluster(LoopThread):
    """A ``DevCluster`` on its own event loop in a daemon thread, for sync code."""

    def __init__(self, spec: ClusterSpec | None = None, **kwargs: Any) -> None:
        super().__init__("kai-py-dev-cluster")
        self._spec = spec
        self._kwargs = kwargs
        self._cluster: DevCluster | None = None

    @property
    def cluster(self) -> DevCluster:
        assert self._cluster is not None, "not started"
        return self._cluster

    @property
    def kubeconfig_path(self) -> str:
        return self.cluster.kubeconfig_path

    @property
    def store(self) -> Store:
        return self.cluster.store

    def start(self) -> ThreadedDevCluster:
        self._thread.start()

        async def make() -> DevCluster:
            return await DevCluster(self._spec, **self._kwargs).start()

        self._cluster = self.call(make())
        return self

    def restart(self) -> None:
        self.call(self.cluster.restart())

    def stop(self) -> None:
        if self._cluster is not None:
            self.call(self._cluster.close())
            self._cluster = None
        self._stop_loop()

    def __enter__(self) -> ThreadedDevCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def dev_cluster_in_thread(
    spec: ClusterSpec | None = None, **kwargs: Any
) -> Iterator[ThreadedDevCluster]:
    cluster = ThreadedDevCluster(spec, **kwargs).start()
    try:
        yield cluster
    finally:
        cluster.stop()
