"""The order sub-groups are served in (``subgroups.tree.order_key``), against the outcomes
KAI's subgrouporder plugin tests state (pkg/scheduler/plugins/subgrouporder/
subgroup_order_test.go in KAI's repository): each case compares a left and a right
sub-group, given as a leaf (minMember, pods placed) or as a sub-group with children
(minSubGroup or None for all, its children)."""

from __future__ import annotations

from typing import Any

import pytest

from kai_py.scheduler.model import SubGroup, SubGroups
from kai_py.scheduler.subgroups.tree import Counts, order_key

Leaf = tuple[int, int]  # (minMember, pods placed)


def _set(min_sub_group: int | None, *members: Any) -> dict[str, Any]:
    return {"min": min_sub_group, "members": members}


L, R, EQ = "left", "right", "equal"
CASES: list[tuple[str, Any, Any, str]] = [
    ("both below threshold (nil minSubGroup, no members satisfied)",
     _set(None, (3, 1), (3, 0)), _set(None, (3, 2), (3, 1)), EQ),
    ("left below threshold, right above",
     _set(None, (3, 0), (3, 0)), _set(None, (3, 5), (3, 4)), L),
    ("right below threshold, left above",
     _set(None, (3, 5), (3, 4)), _set(None, (3, 0), (3, 0)), R),
    ("both satisfied, left has lower satisfaction ratio",
     _set(2, (3, 5), (3, 4), (3, 0)), _set(2, (3, 5), (3, 4), (3, 3)), L),
    ("both satisfied, equal satisfaction ratio",
     _set(2, *[(1, 1)] * 4), _set(4, *[(1, 1)] * 8), EQ),
    ("left optional (minSubGroup=0), right required and satisfied",
     _set(0), _set(2, (3, 5), (3, 4)), R),
    ("left non-leaf optional (minSubGroup=0 with children), right required and satisfied",
     _set(0, (2, 0), (2, 0)), _set(2, (3, 5), (3, 4)), R),
    ("both non-leaf optional (minSubGroup=0), neither has allocated members",
     _set(0, (2, 0)), _set(0, (3, 0)), EQ),
    ("both non-leaf optional (minSubGroup=0), left has fewer allocated members",
     _set(0, (1, 0)), _set(0, (1, 1)), L),
    ("nested SubGroupSets: left's member not satisfied, right's member satisfied",
     _set(1, _set(None, (2, 3), (2, 0))), _set(1, _set(None, (2, 3), (2, 4))), L),
    ("both below minAvailable, should be equal (PodSet)", (3, 1), (4, 2), EQ),
    ("left below, right above minAvailable (PodSet)", (3, 1), (3, 5), L),
    ("right below, left above minAvailable (PodSet)", (3, 5), (3, 1), R),
    ("both above minAvailable, left lower allocation ratio (PodSet)", (2, 4), (4, 9), L),
    ("both above minAvailable, right lower allocation ratio (PodSet)", (2, 10), (4, 9), R),
    ("both above minAvailable, equal allocation ratio (PodSet)", (2, 4), (4, 8), EQ),
]  # fmt: skip


def _add(
    name: str, spec: Any, parent: str | None, groups: dict[str, SubGroup], counts: Counts
) -> None:
    if isinstance(spec, tuple):
        groups[name] = SubGroup(name, parent, min_member=spec[0])
        counts[name] = spec[1]
        return
    kids = tuple(f"{name}-{i}" for i in range(len(spec["members"])))
    groups[name] = SubGroup(name, parent, min_sub_group=spec["min"], children=kids)
    for kid, member in zip(kids, spec["members"], strict=True):
        _add(kid, member, name, groups, counts)


@pytest.mark.parametrize(("name", "left", "right", "first"), CASES, ids=[c[0] for c in CASES])
def test_subgroup_order_as_kai_states_it(name: str, left: Any, right: Any, first: str) -> None:
    groups: dict[str, SubGroup] = {}
    counts: Counts = {}
    _add("l", left, None, groups, counts)
    _add("r", right, None, groups, counts)
    tree = SubGroups(groups, ("l", "r"))
    lkey, rkey = order_key(tree, "l", counts), order_key(tree, "r", counts)
    assert {L: lkey < rkey, R: rkey < lkey, EQ: lkey == rkey}[first], (lkey, rkey)
