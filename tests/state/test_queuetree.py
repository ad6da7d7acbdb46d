"""Loops in a queue tree, named the same way by ``kai-py simulate`` and the operator."""

from __future__ import annotations

from kai_py.state.queuetree import loop_text, parent_loops


def test_each_loop_once_from_its_first_member_and_chains_are_not_loops() -> None:
    parents = {"x": "b", "c": "b", "a": "c", "b": "a", "self": "self", "d": None, "e": "gone"}
    # c comes before a and b: the loop starts there, in parent order.
    assert parent_loops(parents) == [["c", "b", "a"], ["self"]]
    assert loop_text(["c", "b", "a"]) == "c -> b -> a -> c"


def test_a_tree_has_no_loops() -> None:
    assert parent_loops({"root": None, "a": "root", "b": "a", "c": "root"}) == []
