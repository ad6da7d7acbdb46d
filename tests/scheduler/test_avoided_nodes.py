"""A node where a bind timed out recently (``Node.avoided``) is tried after every other
node, never refused: a pod that fits only there still goes there. The Scheduled Event
says so in both cases."""

from __future__ import annotations

import pytest
from builders import default_queues, job, node, running, snapshot, task

from kai_py.scheduler.cycle import run_cycle
from kai_py.scheduler.model import Node, Task

WHY = "node n-bad is avoided until 00:05:00 UTC: a bind there timed out"


def _bad(n: Node) -> Node:
    n.avoided = WHY
    return n


KINDS = {
    "whole GPU": lambda: task("p", gpu=1),
    "shared GPU": lambda: task("p", fraction=0.5),
    "CPU only": lambda: task("p", cpu=1000),
}


def _scheduled(nodes: list[Node], t: Task, placement: str = "binpack", others=()):  # type: ignore[no-untyped-def]
    decisions = run_cycle(
        snapshot(nodes, default_queues("a"), [job("p", "a", [t]), *others], placement=placement)
    )
    (bound,) = decisions.binds
    (event,) = [e for e in decisions.events if e.reason == "Scheduled"]
    return bound.node_name, event.message


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("placement", ["binpack", "spread"])
def test_an_avoided_node_is_passed_over_when_another_fits(kind: str, placement: str) -> None:
    # n-bad sorts first by name and is the fullest (binpack) and the emptiest (spread)
    # once n-good runs a pod: without the avoidance it would be chosen either way.
    nodes = [_bad(node("n-bad", gpus=8, cpu=64000)), node("n-good", gpus=8, cpu=64000)]
    others = [job("o", "a", [running("n-good", gpu=1, cpu=1000)])] if placement == "spread" else []
    where, message = _scheduled(nodes, KINDS[kind](), placement, others)
    assert where == "n-good"
    assert message == f"Successfully assigned pod ns/p to node n-good ({WHY})"


@pytest.mark.parametrize("kind", KINDS)
def test_an_avoided_node_is_used_when_it_is_the_only_one_that_fits(kind: str) -> None:
    nodes = [_bad(node("n-bad", gpus=8)), node("n-full", gpus=8, cpu=64000)]
    others = [job("o", "a", [running("n-full", gpu=8, cpu=64000)])]
    where, message = _scheduled(nodes, KINDS[kind](), others=others)
    assert where == "n-bad"
    assert message == (
        f"Successfully assigned pod ns/p to node n-bad ({WHY}; no other node fits)"
    )


def test_a_pod_that_would_not_fit_the_avoided_node_says_nothing_of_it() -> None:
    nodes = [_bad(node("n-bad", gpus=1)), node("n-good", gpus=8)]
    where, message = _scheduled(nodes, task("p", gpu=4))
    assert (where, message) == ("n-good", "Successfully assigned pod ns/p to node n-good")
