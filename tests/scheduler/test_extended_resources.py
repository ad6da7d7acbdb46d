"""Resources beyond CPU, memory and GPUs (rdma/ib, ephemeral-storage, hugepages-*, MIG
profiles, any vendor's): a pod is placed only where the node's allocatable holds them,
counted like CPU (held, released, promised), as kube-scheduler's NodeResourcesFit and the
kubelet's admission count them."""

from __future__ import annotations

import pytest
from builders import default_queues, job, node, running, snapshot, task

from kai_py.scheduler.cycle import open_session, run_cycle
from kai_py.scheduler.placement import Placer
from kai_py.scheduler.reasons import OVER_LIMIT, POD_SCHEDULING_ERRORS

GI = 2.0**30
# One of each kind: a device plugin's, node-local storage, huge pages, a MIG profile.
KINDS = {
    "rdma/ib": 1.0,
    "ephemeral-storage": 10 * GI,
    "hugepages-2Mi": 1 * GI,
    "nvidia.com/mig-1g.10gb": 1.0,
}


def _why(decisions: object, job_uid: str) -> str:
    reasons = decisions.reasons[job_uid]  # type: ignore[attr-defined]
    (why,) = [r.message for r in reasons if r.code == POD_SCHEDULING_ERRORS]
    return str(why)


@pytest.mark.parametrize("name", sorted(KINDS))
def test_a_pod_asking_for_what_no_node_has_stays_pending_with_the_numbers(name: str) -> None:
    amount = KINDS[name]
    new = task("new", extended={name: amount})
    decisions = run_cycle(snapshot([node("n1")], default_queues("a"), [job("new", "a", [new])]))
    assert decisions.binds == []
    assert _why(decisions, "job-new").endswith(
        f"0/1 nodes are available: 1 Insufficient {name} (requested {int(amount)}, free 0 of 0)."
    )


@pytest.mark.parametrize("name", sorted(KINDS))
def test_it_lands_on_the_node_that_offers_it(name: str) -> None:
    amount = KINDS[name]
    # Binpack prefers n1 (fuller); only n2 has the resource.
    n1, n2 = node("n1", cpu=8000), node("n2", cpu=64_000, extended={name: 4 * amount})
    new = task("new", extended={name: amount})
    decisions = run_cycle(snapshot([n1, n2], default_queues("a"), [job("new", "a", [new])]))
    assert [(t.name, t.node_name) for t in decisions.binds] == [("new", "n2")]


def test_held_amounts_count_against_the_node() -> None:
    # rdma/ib: 3 on the node, one held by a running pod: two more pods fit, not three.
    n1 = node("n1", extended={"rdma/ib": 3})
    held = running("n1", name="held", extended={"rdma/ib": 1})
    jobs = [job("run", "a", [held])]
    jobs += [job(f"j{i}", "a", [task(f"p{i}", extended={"rdma/ib": 1})]) for i in range(3)]
    decisions = run_cycle(snapshot([n1], default_queues("a"), jobs))
    assert len(decisions.binds) == 2
    (why,) = [_why(decisions, f"job-j{i}") for i in range(3) if f"job-j{i}" in decisions.reasons]
    assert why.endswith("1 Insufficient rdma/ib (requested 1, free 0 of 3).")


def test_the_usual_pod_is_not_kept_off_a_node_whose_extended_resources_are_taken() -> None:
    n1 = node("n1", extended={"rdma/ib": 1})
    held = running("n1", name="held", extended={"rdma/ib": 1})
    plain = task("plain")
    jobs = [job("run", "a", [held]), job("plain", "a", [plain])]
    decisions = run_cycle(snapshot([n1], default_queues("a"), jobs))
    assert [(t.name, t.node_name) for t in decisions.binds] == [("plain", "n1")]


def test_an_evicted_pods_amount_goes_to_a_pipelined_task_and_rollback_takes_it_back() -> None:
    n1 = node("n1", extended={"rdma/ib": 1})
    held = running("n1", name="held", extended={"rdma/ib": 1})
    new = task("new", extended={"rdma/ib": 1})
    session = open_session(
        snapshot([n1], default_queues("a"), [job("run", "a", [held]), job("new", "a", [new])])
    )
    n1 = session.nodes["n1"]
    assert Placer(session).find(new) is None

    stmt = session.statement()
    stmt.evict(held, "reclaim", None)
    where = Placer(session).find(new)
    assert where is not None and where.node is n1 and where.pipelined  # not before it is gone
    stmt.allocate(new, n1, (), pipelined=True)
    assert n1.extended_shortfall({"rdma/ib": 1}, True) == ("rdma/ib", 1, 0, 1)  # promised

    stmt.rollback()
    assert n1.extended_used == {"rdma/ib": 1}
    assert n1.extended_releasing == {"rdma/ib": 0} and n1.extended_pipelined == {"rdma/ib": 0}
    assert Placer(session).find(new) is None


def test_a_node_clone_owns_its_extended_amounts() -> None:
    session = open_session(
        snapshot(
            [node("n1", extended={"rdma/ib": 2})],
            default_queues("a"),
            [job("run", "a", [running("n1", name="held", extended={"rdma/ib": 1})])],
        )
    )
    original = session.nodes["n1"]
    copy = original.clone()
    assert copy.extended_used == {"rdma/ib": 1}
    copy.change_extended({"rdma/ib": 1}, 1.0, True, False)
    assert original.extended_used == {"rdma/ib": 1}


@pytest.mark.parametrize(("name", "gpus"), [("nvidia.com/mig-3g.40gb", 3), ("amd.com/gpu", 1)])
def test_mig_instances_and_amd_gpus_count_as_gpus_in_the_queue_as_kai_counts_them(
    name: str, gpus: int
) -> None:
    # Two of them: 6 GPUs of 3g MIG slices, or 2 AMD GPUs; the queue may use one less.
    n1 = node("n1", extended={name: 8})
    new = task("new", extended={name: 2})
    over = default_queues("a", gpu_limit=2 * gpus - 1)
    decisions = run_cycle(snapshot([n1], over, [job("new", "a", [new])]))
    assert decisions.binds == []
    assert decisions.reasons["job-new"][0].code == OVER_LIMIT

    within = default_queues("a", gpu_limit=2 * gpus)
    decisions = run_cycle(snapshot([n1], within, [job("new", "a", [new])]))
    assert [(t.name, t.node_name) for t in decisions.binds] == [("new", "n1")]
    assert decisions.queues["a"].allocated.gpu == 2 * gpus


def test_preempt_takes_the_victim_whose_node_has_the_resource() -> None:
    # Both nodes full of low-priority pods; only n2 has rdma/ib, held by one of them.
    n1 = node("n1", cpu=4000)
    n2 = node("n2", cpu=4000, extended={"rdma/ib": 1})
    low = [
        running("n1", name="low-n1", cpu=4000),
        running("n2", name="low-n2", cpu=4000, extended={"rdma/ib": 1}),
    ]
    jobs = [job(t.name, "a", [t], priority=50) for t in low]
    jobs.append(job("high", "a", [task("high", cpu=1000, extended={"rdma/ib": 1})], priority=80))
    decisions = run_cycle(snapshot([n1, n2], default_queues("a"), jobs))
    assert [(e.task.name, e.action) for e in decisions.evictions] == [("low-n2", "preempt")]
    assert [(t.name, t.node_name) for t in decisions.pipelined] == [("high", "n2")]
