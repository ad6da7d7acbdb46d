"""What a victim search costs: how many scenarios it simulates, and when it stops.

A scenario simulation places the preemptor and every victim chosen so far
again, so the number of scenarios a search tries is what a busy cycle pays.
These tests pin the bounds (docs/scheduling.md, "Taking resources back") on
small clusters whose outcome is also checked: the bounds never change it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence

import pytest
from builders import job, node, queue, running, snapshot, task

from kai_py.scheduler.actions import victims
from kai_py.scheduler.cycle import run_cycle
from kai_py.scheduler.model import Job, Node, Snapshot
from kai_py.scheduler.session import Statement

# The searches are counted by patching the search's method (tests/test_compiled_scheduler.py).
pytestmark = pytest.mark.interpreted


@pytest.fixture
def simulated(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[str]]:
    """Scenarios simulated, by preemptor name."""
    counts: Counter[str] = Counter()
    original = victims.VictimSearch._simulate

    def counting(
        self: victims.VictimSearch,
        stmt: Statement,
        preemptor: Job,
        units: Sequence[victims.Unit],
    ) -> bool:
        counts[preemptor.name] += 1
        return original(self, stmt, preemptor, units)

    monkeypatch.setattr(victims.VictimSearch, "_simulate", counting)
    yield counts


def _full_nodes(count: int, gpus: int = 2) -> tuple[list[Node], list[Job]]:
    """``count`` nodes whose cards all run one-GPU low-priority pods of queue a; the
    cheapest victim (the newest) of each round is on the next node."""
    nodes = [node(f"n{i}", gpus=gpus) for i in range(count)]
    jobs = []
    start = 10_000.0
    for slot in range(gpus):
        for i in range(count):
            name = f"v-n{i}-{slot}"
            jobs.append(
                job(name, "a", [running(f"n{i}", gpu=1, name=name, start_time=start)], priority=10)
            )
            start -= 1
    return nodes, jobs


def _preempt_snapshot(count: int, *preemptors: Job) -> Snapshot:
    nodes, jobs = _full_nodes(count)
    snap: Snapshot = snapshot(nodes, [queue("a", gpu=2 * count)], [*jobs, *preemptors], now=20_000)
    return snap


def test_a_two_gpu_pod_takes_one_nodes_worth_not_the_cheapest_victims_everywhere(
    simulated: Counter[str],
) -> None:
    # The four cheapest victims are on four different nodes; only the fifth frees a
    # second card on a node. The pod evicts the two pods of that node only, and the
    # scenarios where no node could hold it are never simulated.
    big = job("big", "a", [task(gpu=2, name="big-0")], priority=90)
    d = run_cycle(_preempt_snapshot(4, big))
    assert {t.name: t.node_name for t in d.pipelined} == {"big-0": "n0"}
    assert {e.task.name for e in d.evictions} == {"v-n0-0", "v-n0-1"}
    # The first scenario (before the per-node check), the one that works, and the
    # pruning: by node, then the one unit left to try, then the scenario applied.
    assert simulated["big"] <= 6


def test_a_fruitless_search_simulates_a_logarithm_of_its_victims(
    simulated: Counter[str],
) -> None:
    # No node has the label the pod asks for: every scenario fails. One at a time,
    # that was one scenario per victim (100 here), each placing every victim again.
    lost = job(
        "lost", "a", [task(gpu=1, name="lost-0", node_selector={"pool": "none"})], priority=90
    )
    d = run_cycle(_preempt_snapshot(50, lost))
    assert d.evictions == [] and d.pipelined == []
    assert "cannot preempt" in d.reasons[lost.uid][-1].message
    assert 10 <= simulated["lost"] <= victims.LINEAR_STEPS + 8


def _nowhere(name: str, created: float = 0.0, gpu: int = 1, pool: str = "x") -> Job:
    """A high-priority job of queue a whose pod no node can hold (no node has its label)."""
    pod = task(gpu=gpu, name=f"{name}-0", node_selector={"pool": pool})
    return job(name, "a", [pod], priority=90, created=created)


def test_a_preemptor_like_one_that_just_failed_is_not_searched_again(
    simulated: Counter[str],
) -> None:
    first, second = _nowhere("first"), _nowhere("second", created=1.0)
    d = run_cycle(_preempt_snapshot(3, first, second))
    assert simulated["first"] > 0 and simulated["second"] == 0
    # It is told the same as the one searched.
    assert d.reasons[second.uid][-1].message.replace("second", "first") == (
        d.reasons[first.uid][-1].message
    )


def test_a_different_job_waiting_between_them_makes_it_search_again(
    simulated: Counter[str],
) -> None:
    # The job between them in line decides when their queue's turn comes in the
    # simulation of the second one, so its search may end differently.
    first = _nowhere("first")
    between = _nowhere("between", created=1.0, gpu=2)
    second = _nowhere("second", created=2.0)
    run_cycle(_preempt_snapshot(3, first, between, second))
    assert simulated["first"] > 0 and simulated["second"] > 0


def test_a_search_is_repeated_once_something_was_committed(simulated: Counter[str]) -> None:
    # "first" fails; "taker" preempts; "second", like "first", is searched again since
    # the cluster changed.
    first = _nowhere("first")
    taker = job("taker", "a", [task(gpu=1, name="t-0")], priority=90, created=1.0)
    second = _nowhere("second", created=2.0)
    # Placed, "taker" no longer waits between them: only the commit tells them apart.
    d = run_cycle(_preempt_snapshot(3, first, taker, second))
    assert {t.name for t in d.pipelined} == {"t-0"}
    assert simulated["first"] > 0 and simulated["second"] > 0


def test_an_action_stops_searching_past_its_budget_and_says_so(
    monkeypatch: pytest.MonkeyPatch, simulated: Counter[str]
) -> None:
    monkeypatch.setattr(victims, "ACTION_BUDGET", 1)  # one victim pod simulated
    one, two = _nowhere("one"), _nowhere("two", gpu=2, pool="y")
    d = run_cycle(_preempt_snapshot(3, one, two))
    assert simulated["one"] == 1 and simulated["two"] == 0
    assert "victim search stopped after 1 scenario(s)" in d.reasons[one.uid][-1].message
    assert "victim search stopped after 0 scenario(s)" in d.reasons[two.uid][-1].message
    assert "later cycles search again" in d.reasons[two.uid][-1].message


def test_one_preemptor_spends_at_most_a_tenth_of_the_budget(
    monkeypatch: pytest.MonkeyPatch, simulated: Counter[str]
) -> None:
    # A share of 4 victim pods: "one" stops after scenarios of 1, 2 and 3 victims (6
    # pods); "two" is searched in full and fails on its own.
    monkeypatch.setattr(victims, "ACTION_BUDGET", 40)
    one, two = _nowhere("one"), _nowhere("two", gpu=2, pool="y")
    d = run_cycle(_preempt_snapshot(3, one, two))
    assert simulated["one"] == 3
    assert "victim search stopped after 3 scenario(s)" in d.reasons[one.uid][-1].message
    assert simulated["two"] > 0


def test_growing_steps_then_halves_find_the_victims_one_at_a_time_finds(
    simulated: Counter[str],
) -> None:
    # Only n24 has the label the pod asks for; its victim is the 25th cheapest. One
    # unit at a time, the search tried 25 scenarios and pruned 24 units one by one.
    # Now: 8 single steps, growing steps up to 39 units, halves back to 25, then the
    # units off n24 go back together: the same single victim.
    nodes = [node(f"n{i}", gpus=2, labels={"pool": "x"} if i == 24 else None) for i in range(30)]
    _, jobs = _full_nodes(30)
    picky = job("picky", "a", [task(gpu=1, name="p-0", node_selector={"pool": "x"})], priority=90)
    d = run_cycle(snapshot(nodes, [queue("a", gpu=60)], [*jobs, picky], now=20_000))
    assert {t.name: t.node_name for t in d.pipelined} == {"p-0": "n24"}
    assert [e.task.name for e in d.evictions] == ["v-n24-0"]
    assert simulated["picky"] <= 20


def test_the_cycle_counts_its_searches_for_kais_metrics(simulated: Counter[str]) -> None:
    """``Decisions.searches``: what KAI's scenario search metrics count, per action."""
    big = job("big", "a", [task(gpu=2, name="big-0")], priority=90)
    too_big = job("too-big", "a", [task(gpu=4, name="too-big-0")], priority=80)
    counts = run_cycle(_preempt_snapshot(4, big, too_big)).searches
    assert counts.acted_on == Counter({"preempt": 2})
    assert counts.simulated == Counter({"preempt": simulated["big"] + simulated["too-big"]})
    assert simulated["big"] > 0
    # Four cards on 2-card nodes: after its first scenario failed, every later one of
    # too-big is ruled out by the per-node check, without a simulation.
    assert simulated["too-big"] == 1
    assert counts.filtered["preempt"] >= 6
    assert counts.jobs == Counter(
        {("preempt", "solved", False): 1, ("preempt", "generators_exhausted", False): 1}
    )
    assert not counts.rejected and not counts.exhausted
