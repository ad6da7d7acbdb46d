"""A queue tree thousands of levels deep: no step of a cycle recurses on its depth.

A 1,000-level chain (each level accepted by a webhook without a depth limit) once made
every cycle fail with RecursionError in fair share, and no pod in any queue was bound.
"""

from __future__ import annotations

import pytest
from builders import job, node, queue, running, snapshot, task

from kai_py.scheduler.cycle import run_cycle


@pytest.mark.parametrize("depth", [1_000, 5_000])
def test_a_cycle_over_a_very_deep_chain_of_queues_binds_and_reclaims(depth: int) -> None:
    chain = [queue("level-0", gpu=-1)]
    chain += [queue(f"level-{i}", f"level-{i - 1}", gpu=-1) for i in range(1, depth)]
    leaf = chain[-1].name
    # A shallow queue beside the chain holds the cluster over its quota of 0: the deep
    # leaf, within its quota, takes one card back (reclaim walks up both trees).
    other = queue("other", "level-0")
    snap = snapshot(
        [node("n1", gpus=2)],
        [*chain, other],
        [
            job(
                "greedy",
                "other",
                [running("n1", gpu=1), running("n1", gpu=1)],
                priority=50,
                min_member=1,
            ),
            job("deep", leaf, [task("deep-0", gpu=1)], priority=50),
        ],
    )
    decisions = run_cycle(snap)
    placed = {t.name for t in decisions.binds} | {t.name for t in decisions.pipelined}
    assert "deep-0" in placed
    assert len(decisions.evictions) == 1
