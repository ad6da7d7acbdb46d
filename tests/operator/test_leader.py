"""Leader election on a coordination.k8s.io Lease, against the emulated API server."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from kai_py.apiclient.kube import Kube, load_api_client
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
