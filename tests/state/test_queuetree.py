"""Loops in a queue tree, named the same way by ``kai-py simulate`` and the operator."""

from __future__ import annotations

import time

from kai_py.state.queuetree import levels, loop_text, parent_loops


def test_each_loop_once_from_its_first_member_and_chains_are_not_loops() -> None:
    parents = {"x": "b", "c": "b", "a": "c", "b": "a", "self": "self", "d": None, "e": "gone"}
    # c comes before a and b: the loop starts there, in parent order.
    assert parent_loops(parents) == [["c", "b", "a"], ["self"]]
    assert loop_text(["c", "b", "a"]) == "c -> b -> a -> c"


def test_a_tree_has_no_loops() -> None:
    assert parent_loops({"root": None, "a": "root", "b": "a", "c": "root"}) == []


def test_levels_count_from_the_root_and_skip_loops_and_missing_parents() -> None:
    parents = {"leaf": "mid", "mid": "root", "root": None, "x": "y", "y": "x", "under": "x"}
    parents |= {"lost": "gone", "below-lost": "lost"}
    assert levels(parents) == {"leaf": 3, "mid": 2, "root": 1}


def test_levels_of_a_5000_deep_chain_given_leaf_first() -> None:
    parents: dict[str, str | None] = {f"q{i}": f"q{i - 1}" for i in range(4_999, 0, -1)}
    parents["q0"] = None
    found = levels(parents)
    assert found["q4999"] == 5_000 and found["q0"] == 1
    assert len(found) == 5_000


def test_levels_of_a_5000_deep_chain_under_a_missing_parent_take_linear_time() -> None:
    parents: dict[str, str | None] = {f"q{i}": f"q{i - 1}" for i in range(4_999, 0, -1)}
    parents["q0"] = "gone"
    started = time.perf_counter()
    assert levels(parents) == {}
    # Each queue walked to the top again would be 12.5 million steps (seconds).
    assert time.perf_counter() - started < 0.5
