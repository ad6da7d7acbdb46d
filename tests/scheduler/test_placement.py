"""Placement: binpack / spread node choice, shared-card choice, predicates, explain()."""

from __future__ import annotations

import pytest
from builders import default_queues, job, node, running, snapshot, task

from kai_py.scheduler.cycle import open_session, run_cycle
from kai_py.scheduler.model import (
    Config,
    Node,
    SelectorRequirement,
    Taint,
    Task,
    Toleration,
    new_group_id,
)
from kai_py.scheduler.placement import Placer
from kai_py.scheduler.plugins import default_framework


def placer_for(nodes, jobs, placement: str = "binpack") -> Placer:  # type: ignore[no-untyped-def]
    return Placer(open_session(snapshot(nodes, default_queues("a"), jobs, placement=placement)))


def one(t: Task, nodes, placement: str = "binpack", others=()):  # type: ignore[no-untyped-def]
    """Where the placer puts ``t`` on ``nodes`` (which may run ``others``)."""
    p = placer_for(nodes, [job("p", "a", [t]), *others], placement)
    return p.find(t)


def busy_nodes() -> tuple[list, list]:  # type: ignore[type-arg]
    """n-empty: 8 free; n-half: 4 of 8 used; n-full: 7 of 8 used."""
    nodes = [node("n-empty", gpus=8), node("n-half", gpus=8), node("n-full", gpus=8)]
    others = [
        job("h", "a", [running("n-half", gpu=4)]),
        job("f", "a", [running("n-full", gpu=7)]),
    ]
    return nodes, others


# ----------------------------------------------------------- whole GPUs
def test_binpack_whole_gpu_picks_the_fullest_node_that_fits() -> None:
    nodes, others = busy_nodes()
    assert one(task(gpu=1), nodes, others=others).node.name == "n-full"
    assert one(task(gpu=2), nodes, others=others).node.name == "n-half"
    assert one(task(gpu=5), nodes, others=others).node.name == "n-empty"
    assert one(task(gpu=9), nodes, others=others) is None


def test_spread_whole_gpu_picks_the_emptiest_node() -> None:
    nodes, others = busy_nodes()
    assert one(task(gpu=1), nodes, "spread", others).node.name == "n-empty"


def test_cpu_only_binpack_and_spread_follow_idle_cpu() -> None:
    nodes = [node("c1", cpu=8000), node("c2", cpu=8000), node("c3", cpu=8000)]
    others = [job("o1", "a", [running("c1", cpu=6000)]), job("o2", "a", [running("c2", cpu=2000)])]
    assert one(task(cpu=1000), nodes, others=others).node.name == "c1"
    assert one(task(cpu=3000), nodes, others=others).node.name == "c2"
    assert one(task(cpu=1000), nodes, "spread", others).node.name == "c3"


def test_ties_break_by_node_name() -> None:
    nodes = [node("b", gpus=2), node("a", gpus=2), node("c", gpus=2)]
    assert one(task(gpu=1), nodes).node.name == "a"
    assert one(task(gpu=1), nodes, "spread").node.name == "a"


def test_cpu_and_memory_must_fit_too() -> None:
    nodes = [node("small", gpus=8, cpu=2000), node("big", gpus=8, cpu=64_000)]
    others = [job("o", "a", [running("small", gpu=1, cpu=0)])]
    assert one(task(gpu=1, cpu=4000), nodes, others=others).node.name == "big"
    assert one(task(gpu=1, memory=1e15), nodes, others=others) is None


def test_whole_gpu_pipelines_onto_releasing_gpus_only_when_nothing_is_idle() -> None:
    nodes = [node("n1", gpus=2)]
    victim = job("v", "a", [running("n1", gpu=2)])
    p = placer_for(nodes, [victim, job("p", "a", [task(gpu=2)])])
    s = p.session
    t = s.jobs["job-p"].tasks[0]
    assert p.find(t) is None
    stmt = s.statement()
    stmt.evict(victim.tasks[0], "reclaim", None)
    where = p.find(t)
    assert where is not None and where.pipelined and where.node.name == "n1"


# ----------------------------------------------------- fractional GPUs
def shared_node(used: dict[str, float], gpus: int = 4, **kw):  # type: ignore[no-untyped-def]
    """One node whose cards ``used`` (group id -> portion) are already shared."""
    n = node("n1", gpus=gpus, **kw)
    others = [
        job(f"s{gid}", "a", [running("n1", fraction=portion, groups=(gid,))])
        for gid, portion in used.items()
    ]
    return [n], others


def test_binpack_fraction_goes_to_the_fullest_card_that_fits() -> None:
    nodes, others = shared_node({"0": 0.25, "1": 0.5, "2": 0.75})
    assert one(task(fraction=0.25), nodes, others=others).groups == ("2",)
    assert one(task(fraction=0.5), nodes, others=others).groups == ("1",)
    assert one(task(fraction=0.75), nodes, others=others).groups == ("0",)


def test_spread_fraction_goes_to_the_emptiest_card_and_a_fresh_one_is_emptiest() -> None:
    nodes, others = shared_node({"0": 0.25, "1": 0.5, "2": 0.75})
    # card 3 is free: spread takes it
    assert one(task(fraction=0.25), nodes, "spread", others).groups == ("3",)
    nodes, others = shared_node({"0": 0.25, "1": 0.5}, gpus=2)
    assert one(task(fraction=0.25), nodes, "spread", others).groups == ("0",)


def test_fraction_opens_a_fresh_card_when_no_shared_card_has_room() -> None:
    nodes, others = shared_node({"0": 0.75})
    where = one(task(fraction=0.5), nodes, others=others)
    assert where.groups == ("1",)


def test_fraction_does_not_fit_when_all_cards_are_full_or_whole() -> None:
    nodes, others = shared_node({"0": 0.75}, gpus=2)
    others.append(job("w", "a", [running("n1", gpu=1)]))
    assert one(task(fraction=0.5), nodes, others=others) is None
    assert one(task(fraction=0.25), nodes, others=others).groups == ("0",)


def test_binpack_fraction_prefers_the_node_with_the_fuller_card() -> None:
    nodes = [node("a", gpus=1), node("b", gpus=1)]
    others = [
        job("sa", "a", [running("a", fraction=0.25, groups=("0",))]),
        job("sb", "a", [running("b", fraction=0.5, groups=("0",))]),
    ]
    assert one(task(fraction=0.5), nodes, others=others).node.name == "b"
    assert one(task(fraction=0.5), nodes, "spread", others).node.name == "a"


def test_fraction_on_several_devices_takes_that_many_cards() -> None:
    nodes, others = shared_node({"0": 0.5, "1": 0.75})
    where = one(task(fraction=0.25, devices=2), nodes, others=others)
    assert where.groups == ("1", "0")


def test_a_fresh_card_gets_a_group_name_no_other_card_of_the_cluster_has() -> None:
    """The ``runai-gpu-group`` value names one card cluster-wide (KAI's tools select the
    pods of a card by it alone): two nodes' first shared cards, and two cards of one
    pod, get different UUIDs; a card already shared keeps its name (old ones too)."""
    nodes = [node("a", gpus=1), node("b", gpus=1), node("c", gpus=3)]
    pods = [task("p0", fraction=0.6), task("p1", fraction=0.6), task("p2", fraction=0.6)]
    two = task("two", fraction=0.3, devices=2)
    old = job("old", "a", [running("c", fraction=0.25, groups=("3",))])
    jobs = [*(job(t.name, "a", [t]) for t in pods), job("two", "a", [two]), old]
    decisions = run_cycle(snapshot(nodes, default_queues("a"), jobs, placement="spread"))
    placed = {t.name: (t.node_name, t.gpu_groups) for t in decisions.binds}
    assert len(placed) == 4, placed
    fresh = [g for _, groups in placed.values() for g in groups if g != "3"]
    assert all(len(g) == 36 and g.count("-") == 4 for g in fresh), placed
    by_card = {(n, g) for n, groups in placed.values() for g in groups}
    assert len({g for _, g in by_card}) == len(by_card), placed  # one name, one card
    assert {placed[p][0] for p in ("p0", "p1", "p2")} >= {"a", "b"}
    assert len(set(placed["two"][1])) == 2
    assert placed["two"] == ("c", (placed["two"][1][0], "3"))  # joined the old card as "3"
    # The same decision names the same group: a retried or pipelined pod keeps it.
    assert new_group_id("a", "uid-x", 0) == new_group_id("a", "uid-x", 0)
    assert new_group_id("a", "uid-x", 0, {new_group_id("a", "uid-x", 0)}) != new_group_id(
        "a", "uid-x", 0
    )


def test_gpu_memory_needs_the_node_label() -> None:
    nodes = [node("plain", gpus=4), node("labelled", gpus=1, gpu_memory_mib=40_000)]
    where = one(task(gpu_memory_mib=20_000), nodes)
    assert where.node.name == "labelled"
    assert one(task(gpu_memory_mib=20_000), [node("plain", gpus=4)]) is None
    t = task(gpu_memory_mib=20_000)
    assert builtin_check(t, node("plain", gpus=4)) == (
        "node(s) had no nvidia.com/gpu.memory label, needed to share a GPU by memory"
    )


def test_gpu_memory_portion_is_relative_to_the_card() -> None:
    n = node("m", gpus=1, gpu_memory_mib=40_000)
    others = [job("s", "a", [running("m", gpu_memory_mib=30_000, groups=("0",))])]
    assert one(task(gpu_memory_mib=10_000), [n], others=others).groups == ("0",)
    n = node("m", gpus=1, gpu_memory_mib=40_000)
    others = [job("s", "a", [running("m", gpu_memory_mib=30_000, groups=("0",))])]
    assert one(task(gpu_memory_mib=20_000), [n], others=others) is None


def test_gpu_memory_larger_than_the_card_does_not_fit() -> None:
    assert one(task(gpu_memory_mib=50_000), [node("m", gpus=1, gpu_memory_mib=40_000)]) is None


# ----------------------------------------------------------- predicates
_BUILTIN = default_framework(Config())


def builtin_check(t: Task, n: Node) -> str | None:
    """The built-in predicates alone."""
    return _BUILTIN.check_node(t, n)


def chk(t: Task, **node_kw) -> str | None:  # type: ignore[no-untyped-def]
    return builtin_check(t, node("n", gpus=1, **node_kw))


def test_not_ready_and_unschedulable_nodes_are_refused() -> None:
    assert chk(task(), ready=False) == "node(s) were not ready"
    assert chk(task(), unschedulable=True) == "node(s) were unschedulable"


@pytest.mark.parametrize(
    ("taint", "tolerations", "ok"),
    [
        (Taint("gpu", "yes", "NoSchedule"), [], False),
        (Taint("gpu", "yes", "NoExecute"), [], False),
        (Taint("gpu", "yes", "PreferNoSchedule"), [], True),
        (Taint("gpu", "yes"), [Toleration("gpu", "Equal", "yes")], True),
        (Taint("gpu", "yes"), [Toleration("gpu", "Equal", "no")], False),
        (Taint("gpu", "yes"), [Toleration("other", "Exists")], False),
        (Taint("gpu", "yes"), [Toleration("gpu", "Exists")], True),
        (Taint("gpu", "yes"), [Toleration("", "Exists")], True),  # tolerates everything
        (Taint("gpu", "yes"), [Toleration("gpu", "Exists", effect="NoSchedule")], True),
        (Taint("gpu", "yes"), [Toleration("gpu", "Exists", effect="NoExecute")], False),
        (Taint("gpu", "", "NoExecute"), [Toleration("gpu", "Equal", "", "NoExecute")], True),
    ],
)
def test_taints_and_tolerations(taint: Taint, tolerations: list[Toleration], ok: bool) -> None:
    result = chk(task(tolerations=tolerations), taints=[taint])
    assert (result is None) is ok
    if not ok:
        assert result is not None and "untolerated taint" in result and taint.key in result


def test_every_blocking_taint_must_be_tolerated() -> None:
    taints = [Taint("a", "1"), Taint("b", "2")]
    assert chk(task(tolerations=[Toleration("a", "Equal", "1")]), taints=taints) is not None
    both = [Toleration("a", "Equal", "1"), Toleration("b", "Exists")]
    assert chk(task(tolerations=both), taints=taints) is None


def test_node_selector_needs_every_label() -> None:
    labels = {"zone": "a", "type": "h100"}
    assert chk(task(node_selector={"zone": "a"}), labels=labels) is None
    assert chk(task(node_selector={"zone": "a", "type": "h100"}), labels=labels) is None
    assert chk(task(node_selector={"zone": "b"}), labels=labels) is not None
    assert chk(task(node_selector={"missing": "x"}), labels=labels) is not None


R = SelectorRequirement


@pytest.mark.parametrize(
    ("req", "ok"),
    [
        (R("zone", "In", ("a", "b")), True),
        (R("zone", "In", ("c",)), False),
        (R("nope", "In", ("a",)), False),
        (R("zone", "NotIn", ("c",)), True),
        (R("zone", "NotIn", ("a",)), False),
        (R("nope", "NotIn", ("a",)), True),
        (R("zone", "Exists"), True),
        (R("nope", "Exists"), False),
        (R("nope", "DoesNotExist"), True),
        (R("zone", "DoesNotExist"), False),
        (R("mem", "Gt", ("40",)), True),
        (R("mem", "Gt", ("80",)), False),
        (R("mem", "Lt", ("81",)), True),
        (R("mem", "Lt", ("80",)), False),
        (R("zone", "Gt", ("1",)), False),  # not a number
        (R("nope", "Gt", ("1",)), False),
    ],
)
def test_affinity_operators(req: SelectorRequirement, ok: bool) -> None:
    labels = {"zone": "a", "mem": "80"}
    assert (chk(task(affinity=[[req]]), labels=labels) is None) is ok


def test_affinity_terms_are_or_of_ands() -> None:
    labels = {"zone": "a", "type": "h100"}
    both = [R("zone", "In", ("a",)), R("type", "In", ("a100",))]
    assert chk(task(affinity=[both]), labels=labels) is not None
    either = [[R("zone", "In", ("a",)), R("type", "In", ("a100",))], [R("type", "Exists")]]
    assert chk(task(affinity=either), labels=labels) is None


def test_predicates_steer_placement() -> None:
    nodes = [
        node("tainted", gpus=8, taints=[Taint("dedicated", "x")]),
        node("other", gpus=8, labels={"zone": "b"}),
        node("mine", gpus=8, labels={"zone": "a"}),
    ]
    assert one(task(gpu=1, node_selector={"zone": "a"}), nodes).node.name == "mine"
    tol = [Toleration("dedicated", "Equal", "x")]
    assert one(task(gpu=1, tolerations=tol), nodes).node.name in {"tainted", "mine", "other"}
    assert one(task(gpu=1, affinity=[[R("zone", "NotIn", ("a", "b"))]]), nodes) is None


# --------------------------------------------------------------- explain
def test_explain_counts_causes_per_node() -> None:
    nodes = [
        node("down", gpus=8, ready=False),
        node("t1", gpus=8, taints=[Taint("k", "v")]),
        node("t2", gpus=8, taints=[Taint("k", "v")]),
        node("small", gpus=1),
        node("cpu", gpus=8, cpu=500),
    ]
    t = task(gpu=2, cpu=1000)
    p = placer_for(nodes, [job("p", "a", [t])])
    assert p.find(t) is None
    text = p.explain(t)
    assert text.startswith("0/5 nodes are available: ")
    assert "1 node(s) were not ready" in text
    assert "2 node(s) had untolerated taint {k=v: NoSchedule}" in text
    assert "1 Insufficient nvidia.com/gpu" in text
    assert "1 Insufficient cpu" in text
    assert text.endswith(".")


def test_explain_names_shared_card_and_memory_causes() -> None:
    nodes = [
        node("full", gpus=1),
        node("tiny", gpus=1, gpu_memory_mib=8000),
        node("nolabel", gpus=1),
    ]
    others = [job("s", "a", [running("full", fraction=0.9, groups=("0",))])]
    t = task(gpu_memory_mib=10_000)
    p = placer_for(nodes, [job("p", "a", [t]), *others])
    assert p.find(t) is None
    text = p.explain(t)
    assert "0/3 nodes are available" in text
    assert "2 node(s) had no nvidia.com/gpu.memory label" in text
    assert "1 node(s) had GPUs of 8000 MiB, less than the 10000 MiB requested" in text


def test_explain_reaches_the_pod_group_event() -> None:
    nodes = [node("n1", gpus=1)]
    d = run_cycle(snapshot(nodes, default_queues("a"), [job("big", "a", [task(gpu=2)])]))
    assert not d.binds
    messages = [e.message for e in d.events if e.reason == "Unschedulable" and e.kind == "PodGroup"]
    assert messages and "0/1 nodes are available: 1 Insufficient nvidia.com/gpu." in messages[0]


def test_explain_names_no_room_on_shared_cards() -> None:
    nodes = [node("full", gpus=1), node("nolabel", gpus=1)]
    others = [
        job("s", "a", [running("full", fraction=0.75, groups=("0",))]),
        job("w", "a", [running("nolabel", gpu=1)]),
    ]
    t = task(fraction=0.5)
    p = placer_for(nodes, [job("p", "a", [t]), *others])
    assert p.find(t) is None
    assert p.explain(t) == "0/2 nodes are available: 2 node(s) had no GPU with 0.5 free to share."


def test_a_pod_larger_than_every_node_says_so_first() -> None:
    # 16 GPUs where the largest node has 8: reclaim and preempt sentences alone
    # suggested that waiting would help.
    nodes = [node("n1", gpus=8), node("n2", gpus=4)]
    others = job("small", "b", [running("n1", gpu=8)], priority=10)
    d = run_cycle(
        snapshot(nodes, default_queues("a", "b"), [job("big", "a", [task(gpu=16)]), others])
    )
    (message,) = [
        e.message for e in d.events if e.reason == "Unschedulable" and e.kind == "PodGroup"
    ]
    first, rest = message.split(". ", 1)
    assert first.endswith(
        "cannot be scheduled: no node can ever hold it: it requests 16 GPUs, "
        "the largest node has 8"
    ), message
    assert "0/2 nodes are available: 2 Insufficient nvidia.com/gpu." in rest
    assert "cannot reclaim" in rest or "cannot preempt" in rest, message


def test_a_pod_that_fits_an_empty_node_is_not_said_to_never_fit() -> None:
    nodes = [node("n1", gpus=8)]
    others = job("small", "b", [running("n1", gpu=8)])
    d = run_cycle(
        snapshot(nodes, default_queues("a", "b"), [job("big", "a", [task(gpu=8)]), others])
    )
    messages = [e.message for e in d.events if e.reason == "Unschedulable"]
    assert messages and not any("never" in m for m in messages), messages
