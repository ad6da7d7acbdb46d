"""Leader election on a coordination.k8s.io Lease, against the emulated API server."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kai_py.apiclient.informer import AsyncTransport
from kai_py.apiclient.kube import Kube, KubeError, NotLeader, load_api_client, path_of
from kai_py.apiclient.leader import ElectionConfig, LeaderElector, Leadership
from kai_py.emulator.apiserver.threaded import ThreadedServer, run_in_thread


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ThreadedServer]:
    with run_in_thread(kubeconfig_path=tmp_path / "kubeconfig") as srv:
        yield srv


def _elector(server: ThreadedServer, who: str, clock: list[float]) -> LeaderElector:
    kube = Kube(load_api_client(server.kubeconfig_path))
    config = ElectionConfig(identity=who, lease_duration=8, renew_deadline=6, retry_period=1)
    return LeaderElector(kube, config, Leadership(elected=True), clock=lambda: clock[0])


def test_one_holder_and_a_takeover_only_after_the_lease_runs_out(server: ThreadedServer) -> None:
    clock = [0.0]
    a, b = _elector(server, "a", clock), _elector(server, "b", clock)
    assert a.try_once() is True  # creates the Lease (and its namespace)
    assert b.try_once() is False
    for _ in range(20):  # a renews every second: b never takes over
        clock[0] += 1
        assert a.try_once() is True
        assert b.try_once() is False
    # a dies: b sees the Lease unchanged for lease_duration by its own clock, then takes it.
    clock[0] += 7
    assert b.try_once() is False
    clock[0] += 1.5
    assert b.try_once() is True
    lease = a.kube.get(a.path)["spec"]
    assert lease["holderIdentity"] == "b" and lease["leaseTransitions"] == 1
    assert a.try_once() is False  # a, back, does not lead again while b renews


def test_two_replicas_never_both_win_one_lease(server: ThreadedServer) -> None:
    # Both see an expired Lease at once: the resourceVersion makes one write fail.
    clock = [0.0]
    a, b, c = (_elector(server, w, clock) for w in "abc")
    assert c.try_once()
    a.try_once(), b.try_once()  # both observe c's record
    clock[0] += 20
    wins = [a.try_once(), b.try_once()]
    assert wins.count(True) == 1


def test_a_leader_that_cannot_renew_steps_down_and_a_clean_stop_releases(
    server: ThreadedServer,
) -> None:
    async def main() -> None:
        kube = Kube(load_api_client(server.kubeconfig_path))
        config = ElectionConfig(identity="a", lease_duration=2, renew_deadline=1, retry_period=0.1)
        lead = Leadership(elected=True)
        elector = LeaderElector(kube, config, lead)
        task = asyncio.create_task(elector.run())
        assert await asyncio.wait_for(lead.wait_leading(), 5) == 1
        fault = server.server.faults.add(verb="*", resource="leases", code=500)
        await asyncio.wait_for(lead.wait_change(), 5)
        assert not lead.is_leader
        server.server.faults.remove(fault)
        assert await asyncio.wait_for(lead.wait_leading(), 5) == 2  # a new term
        task.cancel()
        await asyncio.to_thread(elector.release)
        other = LeaderElector(kube, ElectionConfig(identity="b"), Leadership(elected=True))
        assert await asyncio.to_thread(other.try_once)  # at once: the Lease was given up

    asyncio.run(main())


def test_leader_election_is_on_by_default_only_in_a_pod(monkeypatch: pytest.MonkeyPatch) -> None:
    from kai_py.controllers.operator import _parser
    from kai_py.controllers.settings import OperatorSettings

    def settings(*argv: str) -> OperatorSettings:
        return OperatorSettings.from_args(_parser().parse_args(list(argv)))

    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    assert settings().leader_elect is False
    assert settings("--leader-elect").leader_elect is True
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("POD_NAMESPACE", "kai-system")
    on = settings()
    assert (on.leader_elect, on.lease_name, on.lease_namespace) == (
        True,
        "kai-py-operator",
        "kai-system",
    )
    off = settings("--no-leader-elect", "--lease-name", "x", "--lease-namespace", "y")
    assert (off.leader_elect, off.lease_name, off.lease_namespace) == (False, "x", "y")


def test_each_scheduling_shard_elects_on_its_own_lease_the_default_keeps_its_names() -> None:
    from kai_py.controllers.operator import _parser
    from kai_py.controllers.settings import OperatorSettings

    def settings(*argv: str) -> OperatorSettings:
        return OperatorSettings.from_args(_parser().parse_args(list(argv)))

    # Before shards: the names an upgrade must keep electing on.
    assert settings().lease_name == "kai-py-operator"
    assert settings("--controllers", "scheduler").lease_name == "kai-py-scheduler"
    default = settings("--controllers", "scheduler", "--node-pool", "")
    assert (default.shard, default.partition.selector()) == ("default", "!kai.scheduler/node-pool")
    pool_a = settings("--controllers", "scheduler", "--node-pool", "pool-a")
    assert (pool_a.shard, pool_a.lease_name) == ("pool-a", "kai-py-scheduler-pool-a")
    assert pool_a.partition.selector() == "kai.scheduler/node-pool=pool-a"
    named = settings(
        "--controllers",
        "scheduler",
        "--shard",
        "h100",
        "--node-pool",
        "a",
        "--node-pool-label",
        "x/pool",
    )
    assert (named.lease_name, named.partition.selector()) == ("kai-py-scheduler-h100", "x/pool=a")
    with pytest.raises(SystemExit, match="runs the scheduler only"):
        settings("--node-pool", "pool-a")  # the binder and pod-grouper run once
    with pytest.raises(SystemExit, match="--node-pool: 'a b' is not a label value"):
        settings("--controllers", "scheduler", "--node-pool", "a b")


# ------------------------------------------------------------------ fencing
class _HangingLeases:
    """A fake API for the elector: the Lease is created, then every request hangs
    (a partition: the renewal gets no answer) until ``release`` is set."""

    def __init__(self) -> None:
        self.calls = 0
        self.release = threading.Event()

    def get(self, path: str) -> dict[str, object]:
        self.calls += 1
        if self.calls > 1:
            self.release.wait(30)
            raise KubeError(0, "TimeoutError", "no answer")
        raise KubeError(404, "NotFound", "no lease")

    def create(self, path: str, body: dict[str, object]) -> dict[str, object]:
        return body

    def request(self, method: str, path: str, body: object = None) -> dict[str, object]:
        raise AssertionError("not reached")


def test_a_leader_whose_renewal_hangs_is_deposed_at_the_deadline_by_its_own_clock(
    server: ThreadedServer,
) -> None:
    """The elector is stuck in a renewal that gets no answer; by the fake clock the
    renew deadline passes: from that moment the process does not lead and a write
    through a fenced client is refused before it is sent (nothing reaches the API)."""

    async def main() -> None:
        clock = [100.0]
        lead = Leadership(elected=True, clock=lambda: clock[0])
        api = _HangingLeases()
        config = ElectionConfig(identity="a", lease_duration=8, renew_deadline=6, retry_period=1)
        elector = LeaderElector(api, config, lead, clock=lambda: clock[0])  # type: ignore[arg-type]
        task = asyncio.create_task(elector.run())
        try:
            assert await asyncio.wait_for(lead.wait_leading(), 5) == 1
            kube = Kube(load_api_client(server.kubeconfig_path), fence=lead.fence)
            path = path_of("", "v1", "namespaces")
            body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "fenced-1"}}
            await asyncio.to_thread(kube.create, path, body)  # leading: sent
            while api.calls < 2:  # the next round's renewal is under way, and hangs
                await asyncio.sleep(0.01)
            clock[0] = 105.9
            assert lead.is_leader
            clock[0] = 106.0  # 6 s after the start of the last successful renewal
            assert not lead.is_leader
            body2 = {**body, "metadata": {"name": "fenced-2"}}
            with pytest.raises(NotLeader):
                await asyncio.to_thread(kube.create, path, body2)
            assert kube.get(path + "/fenced-1") and not _exists(kube, path + "/fenced-2")
            assert kube.get(path + "/default")  # reads are not fenced
        finally:
            api.release.set()
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    asyncio.run(main())


def _exists(kube: Kube, path: str) -> bool:
    try:
        kube.get(path)
    except KubeError as exc:
        assert exc.code == 404
        return False
    return True


def test_a_renewal_the_api_server_does_not_answer_ends_leadership_within_the_deadline(
    server: ThreadedServer,
) -> None:
    """Real time, real API: the Lease's requests hang for 5 s (a partition). The
    leader stops leading (and says so) within its 1 s renew deadline, not after its
    client's timeouts and retries; its fenced writes are refused meanwhile."""

    async def main() -> None:
        config = ElectionConfig(identity="a", lease_duration=2, renew_deadline=1, retry_period=0.1)
        lead = Leadership(elected=True)
        elector_kube = Kube(
            load_api_client(server.kubeconfig_path), timeout=config.request_timeout, retries=False
        )
        elector = LeaderElector(elector_kube, config, lead)
        task = asyncio.create_task(elector.run())
        try:
            assert await asyncio.wait_for(lead.wait_leading(), 5) == 1
            server.server.faults.add(verb="*", resource="leases", latency=5.0)
            hung = time.monotonic()
            await asyncio.wait_for(lead.wait_change(), 3)
            assert not lead.is_leader
            assert time.monotonic() - hung < 1.0 + 0.3
            kube = Kube(load_api_client(server.kubeconfig_path), fence=lead.fence)
            with pytest.raises(NotLeader):
                kube.create(
                    path_of("", "v1", "namespaces"),
                    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "late"}},
                )
        finally:
            server.server.faults.clear()
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    asyncio.run(main())


def test_a_write_is_fenced_when_it_is_sent_not_when_it_was_queued(
    server: ThreadedServer,
) -> None:
    """Over the async stack: a write waits for the only connection while a slow GET
    holds it; the leadership lapses meanwhile; the write is then refused, and work of
    the lapsed term run with ``while_leading`` is cancelled at the deadline."""

    async def main() -> None:
        clock = [0.0]
        lead = Leadership(elected=True, clock=lambda: clock[0])
        lead.renewed(6.0)
        kube = Kube(load_api_client(server.kubeconfig_path), fence=lead.fence)
        transport = AsyncTransport(
            kube.api_client.configuration, pool_size=1, timeout=10, fence=kube.fence
        )
        kube.attach(transport)
        try:
            server.server.faults.add(verb="list", resource="namespaces", latency=0.5, times=1)
            slow = asyncio.create_task(kube.arequest("GET", path_of("", "v1", "namespaces")))
            await asyncio.sleep(0.1)
            body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "queued"}}
            write = asyncio.create_task(
                kube.arequest("POST", path_of("", "v1", "namespaces"), body)
            )
            await asyncio.sleep(0.1)
            clock[0] = 6.0  # the deadline passes while the write waits for the connection
            await slow
            with pytest.raises(NotLeader):
                await write
            assert not _exists(kube, path_of("", "v1", "namespaces", None, "queued"))

            clock[0] = 10.0
            lead.renewed(16.0)
            assert lead.term == 2  # a lapsed leadership renewed late is a new term

            # Real time: nobody says the term ended (the elector is late): the deadline does.
            real = Leadership(elected=True)
            real.renewed(time.monotonic() + 0.3)
            progress: list[str] = []

            async def work() -> None:
                progress.append("started")
                await asyncio.sleep(30)
                progress.append("finished")

            await asyncio.wait_for(real.while_leading(work(), real.term), 2)
            assert progress == ["started"]
        finally:
            server.server.faults.clear()
            await transport.close()

    asyncio.run(main())
