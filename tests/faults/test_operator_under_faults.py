"""The operator (a subprocess) against the emulated cluster under faults (issue 8).

Each scenario runs a burst of whole-GPU Jobs, a gang and 0.5 / 0.25 shared
pods on 3 nodes x 4 GPUs while something goes wrong, then lets everything
finish and checks the invariants of ``fault_harness`` (sampled throughout);
the reclaim of a gang whose eviction fails runs two Jobs of its own instead.
Randomness is seeded (``KAI_PY_FAULT_SEED``, printed with the figures table).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from fault_harness import NS, SEED, Figures, Json, PartitionProxy, Run, gpu_job, shared_pod

from kai_py.api import keys
from kai_py.emulator.storage.errors import ApiError

pytestmark = pytest.mark.slow


def _assert_clean(figures: Figures, run: Run) -> None:
    assert figures.clean(), f"{figures}\n{run.logs}"
    # The double-bind check by BindRequest saw binds succeed (it is not vacuous).
    assert run.checker is not None and run.checker.succeeded, "no Succeeded BindRequest seen"
    assert figures.complete_seconds is not None


def _fraction_bind_pending(run: Run) -> bool:
    brs, _ = run.call(run.cluster.store.list("bindrequests"))
    return any(
        (b.get("spec") or {}).get("receivedResourceType") == "Fraction"
        and (b.get("status") or {}).get("phase") in (None, "", "Pending")
        for b in brs
    )


def test_kill_9_at_random_moments_and_mid_fraction_bind(tmp_path: Path) -> None:
    with Run("kill -9 and restart", tmp_path) as run:
        run.operator()
        run.burst()
        # Once while a Fraction bind is under way, then at a random moment.
        run.wait_for(lambda: _fraction_bind_pending(run), 30, "a Fraction bind under way")
        run.operators[-1].kill9()
        time.sleep(run.random.uniform(0.2, 1.0))
        run.operator()
        time.sleep(run.random.uniform(1.0, 4.0))
        run.operators[-1].kill9()
        run.burst(jobs=1, gang=0, halves=2, quarters=2, tag="-b")  # arrives while it is down
        # Down long enough for shared pods to finish: their release is missed.
        time.sleep(run.random.uniform(3.0, 5.0))
        run.operator()
        _assert_clean(run.finish(since=time.monotonic()), run)


def test_api_errors_conflicts_latency_and_dropped_watches_during_a_burst(tmp_path: Path) -> None:
    with Run("500s, 409s, latency, dropped watches", tmp_path) as run:
        faults = run.cluster.cluster.faults
        faults.add(verb="*", resource="*", code=500, fraction=0.1)
        faults.add(verb="create", resource="*", code=409, fraction=0.05)
        faults.add(verb="patch", resource="*", code=409, fraction=0.05)
        faults.add(verb="*", resource="*", latency=0.03, fraction=0.5)
        run.operator()
        run.burst()
        for _ in range(8):
            time.sleep(1.0)
            run.cluster.call_soon(run.cluster.cluster.drop_watches)
        faults.clear()
        _assert_clean(run.finish(since=time.monotonic()), run)


def test_the_emulated_api_server_restarts_mid_burst(tmp_path: Path) -> None:
    with Run("emulator restart", tmp_path) as run:
        run.operator()
        run.burst()
        time.sleep(run.random.uniform(1.0, 3.0))
        run.cluster.restart()
        _assert_clean(run.finish(since=time.monotonic()), run)


def test_a_burst_larger_than_the_nodes_pod_capacity(tmp_path: Path) -> None:
    """Nodes that admit 3 pods each (status.allocatable.pods): a burst of 8 whole-GPU
    pods fits the 8 GPUs but not the 6 pod slots, and shared pods bring reservation
    pods. The kubelet rejects a pod over its node's limit (OutOfpods: a rejection in
    the figures, and a bare pod lost); none may be sent to it."""
    spec = {
        "nodes": [{"name": "small", "count": 2, "gpus": 4, "cpu": "32", "pods": 3}],
        "namespaces": [NS],
    }
    with Run("burst over pods allocatable", tmp_path, spec=spec) as run:
        run.operator()
        run.burst(jobs=2, pods=4, gang=0, halves=2, quarters=2)
        figures = run.finish(since=time.monotonic())
        assert run.checker is not None
        assert not run.checker.rejected, f"kubelet rejections: {figures}\n{run.logs}"
        _assert_clean(figures, run)


def test_a_node_fails_and_recovers(tmp_path: Path) -> None:
    with Run("node failure and recovery", tmp_path) as run:
        run.operator()
        run.burst()
        time.sleep(1.5)
        nodes, _ = run.call(run.cluster.store.list("nodes"))
        victim = sorted(n["metadata"]["name"] for n in nodes)[run.random.randrange(len(nodes))]
        run.call(run.cluster.cluster.fail_node(victim))
        run.burst(jobs=1, gang=0, halves=2, quarters=0, tag="-b")  # placed while it is down
        time.sleep(4.0)
        run.call(run.cluster.cluster.recover_node(victim))
        _assert_clean(run.finish(since=time.monotonic()), run)


def test_a_ready_node_that_starts_nothing_is_avoided(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # gpu-0 wins every tie by name: before, the shared pods were placed there again
    # after each Failed bind and never reached gpu-1 or gpu-2.
    monkeypatch.setenv("KAI_PY_BINDER_RESERVATION_TIMEOUT", "2")
    with Run("a Ready node that starts nothing", tmp_path) as run:
        run.cluster.cluster.wedge_node("gpu-0")  # a flag: safe from this thread
        run.operator()
        run.burst(jobs=0, gang=0, halves=4, quarters=0)
        figures = run.finish(since=time.monotonic(), timeout=60.0)
        _assert_clean(figures, run)
        pods, _ = run.call(run.cluster.store.list("pods", NS))
        assert {p["spec"].get("nodeName") for p in pods} <= {"gpu-1", "gpu-2"}
        events, _ = run.call(run.cluster.store.list("events", NS))
        scheduled = [e["message"] for e in events if e.get("reason") == "Scheduled"]
        assert any("node gpu-0 is avoided until" in m for m in scheduled), scheduled


#: Two replicas electing on one Lease.
LEADER_ARGS = ("--leader-elect", "--lease-namespace", "kai-scheduler")


def _lease_holder(run: Run) -> str | None:
    """Who holds the operator's Lease now (None: nobody yet, or not readable)."""
    try:
        lease = run.call(run.cluster.store.get("leases", "kai-scheduler", "kai-py-operator"))
    except Exception:
        return None
    return (lease.get("spec") or {}).get("holderIdentity")


def test_two_replicas_and_the_leader_is_killed(tmp_path: Path) -> None:
    with Run("two replicas, leader kill -9", tmp_path) as run:
        a, b = run.operator(*LEADER_ARGS), run.operator(*LEADER_ARGS)
        first = run.wait_for(lambda: _lease_holder(run), 20, "a leader")
        run.burst()
        time.sleep(run.random.uniform(1.0, 3.0))
        leader = next(op for op in (a, b) if f"_{op.process.pid}_" in str(first))
        standby = b if leader is a else a
        # Exactly one replica schedules, binds and groups: the standby wrote nothing.
        for mark in ("cycle ", "created reservation pod", "pod-grouper: pod in PodGroup", "bound"):
            assert mark not in standby.log, standby.log
        killed_at = time.monotonic()
        leader.kill9()
        run.wait_for(
            lambda: _lease_holder(run) not in (None, first), 20, "the other replica leading"
        )
        run.figures.failover_seconds = time.monotonic() - killed_at
        assert run.figures.failover_seconds < 15
        _assert_clean(run.finish(since=killed_at), run)


def test_two_replicas_and_the_leader_is_paused_for_20_s(tmp_path: Path) -> None:
    """SIGSTOP for 20 s, then SIGCONT: the paused leader's Lease runs out and the other
    replica leads; the resumed one must not get a single write accepted (its timers,
    in-flight binds and queued writes all fire at once when it resumes)."""
    with Run("two replicas, leader paused 20 s", tmp_path) as run:
        a, b = run.operator(*LEADER_ARGS), run.operator(*LEADER_ARGS)
        first = run.wait_for(lambda: _lease_holder(run), 20, "a leader")
        run.burst()
        # Paused mid-bind (a Fraction bind waits for its reservation pod): the worst
        # moment, with work in flight in every part.
        run.wait_for(lambda: _fraction_bind_pending(run), 30, "a Fraction bind under way")
        leader = next(op for op in (a, b) if f"_{op.process.pid}_" in str(first))
        paused_at = time.monotonic()
        os.kill(leader.process.pid, signal.SIGSTOP)
        try:
            run.wait_for(
                lambda: _lease_holder(run) not in (None, first), 20, "the other replica leading"
            )
            run.figures.failover_seconds = time.monotonic() - paused_at
            # Work for both: the paused leader's watches hold it when it resumes.
            run.burst(jobs=1, gang=0, halves=2, quarters=2, tag="-b")
            time.sleep(max(0.0, 20.0 - (time.monotonic() - paused_at)))
        finally:
            os.kill(leader.process.pid, signal.SIGCONT)
        _assert_clean(run.finish(since=time.monotonic()), run)
        assert run.figures.two_writers_seconds is not None, run.logs
        run.wait_for(lambda: "no longer leading" in leader.log, 10, "the paused leader's step-down")


def test_two_replicas_and_the_leader_is_partitioned_for_20_s(tmp_path: Path) -> None:
    """The leader's connections to the API server hold every byte for 20 s (a TCP
    proxy), from the moment one of its writes is under way, then let them through:
    what it sent before the deadline must not be accepted after the other replica
    took the Lease (the client must reset, not close, what it gave up)."""
    with Run("two replicas, leader partitioned 20 s", tmp_path) as run:
        proxy = PartitionProxy(run.cluster.cluster.url)
        try:
            kubeconfig = proxy.kubeconfig(run.cluster.kubeconfig_path, tmp_path / "kc-proxied")
            leader = run.operator(*LEADER_ARGS, kubeconfig=kubeconfig)
            first = run.wait_for(lambda: _lease_holder(run), 20, "a leader")
            run.operator(*LEADER_ARGS)
            run.burst()
            run.wait_for(lambda: _fraction_bind_pending(run), 30, "a Fraction bind under way")
            # An Event: the API server accepts one whenever it comes, so one delivered
            # late is seen (a late bind of a pod the other replica bound is refused).
            proxy.cut_at_next_write(b"/events")
            run.wait_for(lambda: proxy.held_write, 10, "a write held by the partition")
            cut_at = time.monotonic()
            try:
                run.wait_for(
                    lambda: _lease_holder(run) not in (None, first), 20, "the other leading"
                )
                run.figures.failover_seconds = time.monotonic() - cut_at
                run.burst(jobs=1, gang=0, halves=2, quarters=2, tag="-b")
                time.sleep(max(0.0, 20.0 - (time.monotonic() - cut_at)))
            finally:
                proxy.heal()
            run.wait_for(lambda: "no longer leading" in leader.log, 10, "the step-down")
            run.figures.notes.append(
                f"held at the cut: {proxy.held_write.decode()}; "
                f"connections reset during the cut: {proxy.dropped}"
            )
            _assert_clean(run.finish(since=time.monotonic()), run)
        finally:
            proxy.close()


def test_a_node_with_an_unreadable_allocatable_joins_mid_burst(tmp_path: Path) -> None:
    with Run("a Node with allocatable 'lots'", tmp_path) as run:
        run.operator()
        run.burst()
        time.sleep(run.random.uniform(0.5, 2.0))
        # A real API server refuses this quantity; the emulator's store keeps it. Before,
        # every cycle failed from here on ("cannot build a snapshot"): 0 binds.
        store = run.cluster.store
        node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "weird-572"}}
        run.call(store.create("nodes", node))
        status = {"status": {"allocatable": {keys.GPU_RESOURCE: "lots", "cpu": "8"}}}
        run.call(store.patch("nodes", None, "weird-572", status, subresource="status"))
        run.burst(jobs=1, gang=0, halves=2, quarters=0, tag="-b")  # decided while it is there
        _assert_clean(run.finish(since=time.monotonic()), run)
        events, _ = run.call(
            store.list("events", "default", field_selector="involvedObject.name=weird-572")
        )
        invalid = [e for e in events if e.get("reason") == "InvalidNode"]
        assert invalid and "'lots'" in invalid[0]["message"], events
        assert "cannot build a snapshot" not in run.logs


#: Seconds after the binder made a reservation pod that the scenario deletes it: before
#: it reports its card, while the (slowed) Binding is under way, around the end of the
#: Binding, and under a shared pod that runs.
RESERVATION_DELETE_AFTER = (0.0, 0.5, 1.5, 3.0)
#: Every Binding takes this long (the API server answers late), so a reservation pod can
#: go while one is under way.
SLOW_BINDING_SECONDS = 1.5


def test_reservation_pods_deleted_mid_bind(tmp_path: Path) -> None:
    with Run("reservation pod deleted mid-bind", tmp_path) as run:
        slow = run.cluster.cluster.faults.add(
            verb="create", resource="pods/binding", latency=SLOW_BINDING_SECONDS
        )
        run.operator()
        run.burst(jobs=2, gang=0)
        store = run.cluster.store
        first_seen: dict[str, float] = {}  # reservation pod uid -> when first seen
        delay_of: dict[str, float] = {}
        done: set[str] = set()
        deleted: dict[float, int] = dict.fromkeys(RESERVATION_DELETE_AFTER, 0)
        wanted = 3  # deletions per delay
        started = time.monotonic()
        deadline, more = started + 30, [10.0, 20.0]  # more shared pods, more cards made
        while min(deleted.values()) < wanted and time.monotonic() < deadline:
            if more and time.monotonic() - started > more[0]:
                run.burst(jobs=1, gang=0, halves=4, quarters=4, tag=f"-{more.pop(0):g}")
            pods, _ = run.call(store.list("pods", keys.RESERVATION_NAMESPACE))
            now = time.monotonic()
            for pod in pods:
                m = pod["metadata"]
                uid = m.get("uid")
                if (
                    not uid
                    or m.get("deletionTimestamp")
                    or not m["name"].startswith("gpu-reservation-")
                ):
                    continue
                if uid not in first_seen:
                    first_seen[uid] = now
                    # The delay with the fewest deletions so far, in turn.
                    delay_of[uid] = min(RESERVATION_DELETE_AFTER, key=lambda d: deleted[d])
                delay = delay_of[uid]
                if uid in done or now - first_seen[uid] < delay or deleted[delay] >= wanted:
                    continue
                try:
                    run.call(
                        store.delete(
                            "pods", keys.RESERVATION_NAMESPACE, m["name"], grace_period_seconds=0
                        )
                    )
                except ApiError:
                    continue  # gone already (the binder released it)
                deleted[delay] += 1
                done.add(uid)
            time.sleep(0.05)
        assert sum(deleted.values()) >= len(RESERVATION_DELETE_AFTER), deleted
        run.cluster.cluster.faults.remove(slow)
        run.figures.notes.append(
            "reservation pods deleted, by seconds after creation: "
            + ", ".join(f"{d:g} s: {n}" for d, n in deleted.items())
        )
        figures = run.finish(since=time.monotonic())
        log = "".join(op.log for op in run.operators)
        figures.notes.append(
            f"binds whose card went during the Binding, given the new card: "
            f"{log.count('went while it was being bound')}; reservation pods made again "
            f"under bound shared pods: {log.count('was gone while shared pods')} "
            f"(onto another card: {log.count('previous_card=')})"
        )
        _assert_clean(figures, run)


def _quota_queue(name: str, gpus: int) -> Json:
    resources: Json = {
        r: {"quota": -1, "limit": -1, "overQuotaWeight": 1} for r in ("cpu", "memory")
    }
    resources["gpu"] = {"quota": gpus, "limit": -1, "overQuotaWeight": 1}
    return {
        "apiVersion": "scheduling.run.ai/v2",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": {"parentQueue": "root", "resources": resources},
    }


def _two_gpu_job(name: str, pods: int, seconds: float, q: str, min_member: int | None) -> Json:
    job = gpu_job(name, pods, seconds, min_member=min_member, q=q)
    [container] = job["spec"]["template"]["spec"]["containers"]
    container["resources"]["limits"][keys.GPU_RESOURCE] = "2"
    return job


def test_one_eviction_of_a_reclaimed_gang_answered_500(tmp_path: Path) -> None:
    """A gang of 4 (2 GPUs each) in a queue over its quota of 6 GPUs is reclaimed;
    the first of its four evictions is answered 500. The member left running must
    not stay alone: otherwise it runs on to Succeeded (its 3 replacements do not
    fit beside the reclaimer) while its Job makes only those 3 new pods, and the
    PodGroup waits for a fourth that never comes."""
    with Run("one gang eviction answered 500", tmp_path) as run:
        store = run.cluster.store
        for q in (_quota_queue("qa", 6), _quota_queue("qb", 6)):
            run.call(store.create("queues", q))
        run.operator()
        run.call(store.create("jobs", _two_gpu_job("gang4", 4, 6, "qb", 4)))
        run.expected_jobs.append("gang4")

        def gang(phase: str) -> set[str]:
            pods, _ = run.call(store.list("pods", NS))
            return {
                p["metadata"]["uid"]
                for p in pods
                if (p["metadata"].get("labels") or {}).get("job-name") == "gang4"
                and (p.get("status") or {}).get("phase") == phase
            }

        first = run.wait_for(
            lambda: (found := gang("Running")) and len(found) == 4 and found,
            30,
            "the gang of 4 running",
        )
        fault = run.cluster.cluster.faults.add(
            verb="create", resource="pods/eviction", code=500, times=1
        )
        # 6 GPUs, its queue's quota: 4 are free, the rest is the gang's (qb, over its 6).
        run.call(store.create("jobs", _two_gpu_job("reclaimer", 3, 10, "qa", None)))
        run.expected_jobs.append("reclaimer")
        run.wait_for(lambda: fault.fired, 30, "an eviction answered 500")
        figures = run.finish(since=time.monotonic())
        _assert_clean(figures, run)
        # The reclaim took the whole gang: no member of the first run went on alone.
        assert not first & gang("Succeeded"), f"{figures}\n{run.logs}"


def test_a_pod_deleted_and_made_again_under_its_name_while_its_bind_is_in_flight(
    tmp_path: Path,
) -> None:
    """The bind of the old pod must not land on the new one (the Binding carries the
    old pod's uid), and the new pod is scheduled and bound as a pod of its own."""
    with Run("pod made again under its name mid-bind", tmp_path) as run:
        slow = run.cluster.cluster.faults.add(
            verb="create", resource="pods/binding", latency=SLOW_BINDING_SECONDS
        )
        run.operator()
        run.burst(jobs=1, gang=0, halves=6, quarters=4)
        store = run.cluster.store
        remade: set[str] = set()
        deadline = time.monotonic() + 30
        while len(remade) < 3 and time.monotonic() < deadline:
            brs, _ = run.call(store.list("bindrequests", NS))
            for br in brs:
                name = str((br.get("spec") or {}).get("podName") or "")
                phase = (br.get("status") or {}).get("phase")
                if name in remade or phase not in (None, "", "Pending"):
                    continue
                if not name.startswith(("half", "quarter")):
                    continue  # a Job's pod made again is the Job's to make
                try:
                    old = run.call(store.get("pods", NS, name))
                    run.call(store.delete("pods", NS, name, grace_period_seconds=0))
                except ApiError:
                    continue
                fraction = float(old["metadata"]["annotations"][keys.GPU_FRACTION_ANNOTATION])
                run.call(store.create("pods", shared_pod(name, fraction, seconds=3)))
                remade.add(name)
            time.sleep(0.05)
        assert remade, "no bind of a shared pod was seen under way"
        run.cluster.cluster.faults.remove(slow)
        run.figures.notes.append(f"pods made again under their name mid-bind: {sorted(remade)}")
        _assert_clean(run.finish(since=time.monotonic()), run)


def test_the_seed_is_printed() -> None:
    print(f"fault suite seed: {SEED}")
