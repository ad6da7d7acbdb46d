"""Fair share (docs/scheduling.md, "Fair share") on hand-computed cases.

``compute_fair_shares`` is called directly on queues whose ``request`` is
preset, so each case states exactly what every queue asks for.
"""

from __future__ import annotations

import pytest
from builders import node as mknode
from builders import queue, res, session, snapshot

from kai_py.scheduler.fairshare import allocatable_share, compute_fair_shares, dominant_share
from kai_py.scheduler.model import Queue
from kai_py.scheduler.resources import INF, Res


def split(total_gpu: float, *queues: Queue, total: Res | None = None) -> dict[str, float]:
    by_name = {q.name: q for q in queues}
    for q in queues:
        if q.parent is not None:
            by_name[q.parent].children.append(q.name)
    roots = [q.name for q in queues if q.parent is None]
    compute_fair_shares(by_name, roots, total or res(gpu=total_gpu))
    return {q.name: q.fair_share.gpu for q in queues}


def g(amount: float) -> Res:
    return res(gpu=amount)


def test_deserved_then_leftover_to_the_one_still_asking() -> None:
    a = queue("a", gpu=3, request=g(5))
    b = queue("b", gpu=4, request=g(2))
    assert split(10, a, b) == {"a": 5, "b": 2}
    assert a.deserved.gpu == 3 and b.deserved.gpu == 4


def test_phase_one_gives_min_of_deserved_and_request() -> None:
    a = queue("a", gpu=3, request=g(1), gpu_weight=0)
    b = queue("b", gpu=3, request=g(6), gpu_weight=0)
    # weight 0: nothing over quota, so only phase 1 counts
    assert split(10, a, b) == {"a": 1, "b": 3}


def test_requestable_is_capped_by_limit() -> None:
    a = queue("a", gpu=3, gpu_limit=4, request=g(8))
    b = queue("b", gpu=0, request=g(1))
    assert split(10, a, b) == {"a": 4, "b": 1}


def test_limit_below_deserved_caps_phase_one() -> None:
    a = queue("a", gpu=6, gpu_limit=2, request=g(8))
    assert split(10, a) == {"a": 2}
    assert a.deserved.gpu == 6


def test_over_quota_in_proportion_to_weight_whole_units() -> None:
    a = queue("a", gpu_weight=1, request=g(20))
    b = queue("b", gpu_weight=3, request=g(20))
    # offers 2, 6 of 8: whole units, nothing left over
    assert split(8, a, b) == {"a": 2, "b": 6}


def test_leftover_chunk_goes_to_largest_remainder() -> None:
    a = queue("a", gpu_weight=2, request=g(20), created=5)
    b = queue("b", gpu_weight=1, request=g(20), created=1)
    # offers 4.67 and 2.33: whole 4 and 2, the last unit to a (remainder .67 > .33)
    assert split(7, a, b) == {"a": 5, "b": 2}


@pytest.mark.parametrize(("a_created", "b_created", "expected"), [(1, 2, (3, 7)), (2, 1, (2, 8))])
def test_equal_remainders_go_to_the_older_queue(
    a_created: float, b_created: float, expected: tuple[float, float]
) -> None:
    a = queue("a", gpu_weight=1, request=g(20), created=a_created)
    b = queue("b", gpu_weight=3, request=g(20), created=b_created)
    # offers 2.5 and 7.5: whole 2 and 7, one unit left with equal remainders
    assert split(10, a, b) == {"a": expected[0], "b": expected[1]}


def test_three_equal_queues_share_ten_gpus_4_3_3_oldest_first() -> None:
    qs = [queue(n, request=g(20), created=c) for n, c in (("x", 3), ("y", 1), ("z", 2))]
    assert split(10, *qs) == {"x": 3, "y": 4, "z": 3}


def test_fractional_leftover_chunk_is_at_most_what_remains() -> None:
    a = queue("a", request=g(20), created=0)
    b = queue("b", request=g(20), created=1)
    # offers 1.25 each: whole 1 each, the last 0.5 to the older queue
    assert split(2.5, a, b) == {"a": 1.5, "b": 1}


def test_leftover_chunks_are_at_most_one_unit() -> None:
    qs = [queue(f"q{i}", request=g(20), created=i) for i in range(4)]
    # offers 0.75 each: no whole units; chunks of min(1, remaining) to the oldest
    shares = split(3, *qs)
    assert shares == {"q0": 1, "q1": 1, "q2": 1, "q3": 0}


def test_leftover_chunk_never_exceeds_a_queues_unmet_request() -> None:
    a = queue("a", request=g(2.6), created=0)
    b = queue("b", request=g(10), created=1)
    c = queue("c", request=g(10), created=2)
    # round 1 offers 2 each: nobody satisfied (a needs 2.6); whole 2 each
    assert split(6, a, b, c) == {"a": 2, "b": 2, "c": 2}
    a = queue("a", request=g(2.6), created=0)
    b = queue("b", request=g(10), created=1)
    # offers 3.5 each: a satisfied at 2.6, b gets the remaining 4.4 (whole 4, then 0.4)
    assert split(7, a, b) == pytest.approx({"a": 2.6, "b": 4.4})


def test_satisfied_children_return_their_leftovers() -> None:
    a = queue("a", request=g(2), created=0)
    b = queue("b", request=g(10), created=1)
    c = queue("c", request=g(10), created=2)
    # offers 3.33: a takes its 2; 8 left for b and c, 4 each
    assert split(10, a, b, c) == {"a": 2, "b": 4, "c": 4}


def test_everyone_satisfied_leaves_the_rest_unassigned() -> None:
    a = queue("a", request=g(2))
    b = queue("b", request=g(3))
    assert split(10, a, b) == {"a": 2, "b": 3}


def test_priority_bucket_served_first_regardless_of_weight() -> None:
    hi = queue("hi", priority=200, gpu_weight=1, request=g(6))
    lo = queue("lo", priority=100, gpu_weight=10, request=g(10))
    assert split(10, hi, lo) == {"hi": 6, "lo": 4}


def test_higher_bucket_can_take_everything_over_quota() -> None:
    hi = queue("hi", priority=200, request=g(20))
    lo = queue("lo", priority=100, gpu=2, request=g(20))
    # lo keeps its deserved 2 (phase 1); the 8 over quota all go to the higher bucket
    assert split(10, hi, lo) == {"hi": 8, "lo": 2}


def test_weight_zero_gets_no_over_quota_share() -> None:
    a = queue("a", gpu=1, gpu_weight=0, request=g(5))
    b = queue("b", gpu_weight=1, request=g(10))
    assert split(10, a, b) == {"a": 1, "b": 9}


def test_weight_zero_alone_leaves_resources_unassigned() -> None:
    a = queue("a", gpu=1, gpu_weight=0, request=g(5))
    assert split(10, a) == {"a": 1}


def test_unlimited_quota_deserves_the_parents_total() -> None:
    a = queue("a", gpu=-1, request=g(4))
    b = queue("b", gpu=0, request=g(10))
    assert split(10, a, b) == {"a": 4, "b": 6}
    assert a.deserved.gpu == 10
    assert b.deserved.gpu == 0


def test_unlimited_quota_under_a_parent_deserves_the_parents_share() -> None:
    p = queue("p", gpu=3, gpu_weight=0, request=g(8))
    c = queue("c", "p", gpu=-1, request=g(8))
    assert split(10, p, c) == {"p": 3, "c": 3}
    assert c.deserved.gpu == 3


def test_three_level_tree() -> None:
    p1 = queue("p1", gpu=4, request=g(8), created=0)
    p2 = queue("p2", gpu=2, request=g(10), created=1)
    l1a = queue("l1a", "p1", gpu=1, request=g(3), created=2)
    l1b = queue("l1b", "p1", gpu=1, request=g(5), created=3)
    l2 = queue("l2", "p2", gpu=0, request=g(10), created=4)
    deep = queue("deep", "l1b", gpu=0, request=g(5), created=5)
    shares = split(10, p1, p2, l1a, l1b, l2, deep)
    # root: phase 1 p1=4, p2=2; 4 left, offers 2/2, neither satisfied: p1=6, p2=4.
    # p1's 6: phase 1 1/1; 4 left, offers 2/2: l1a satisfied at 3, l1b gets the other 2 -> 3.
    # l1b's 3 all to its only child; p2's 4 all to l2.
    assert shares == {"p1": 6, "p2": 4, "l1a": 3, "l1b": 3, "l2": 4, "deep": 3}


def test_each_resource_is_divided_independently() -> None:
    a = queue("a", gpu=0, cpu=0, request=res(gpu=8, cpu=1000), cpu_weight=1)
    b = queue("b", gpu=0, cpu=0, request=res(gpu=2, cpu=9000), cpu_weight=1)
    c = queue("c", gpu=0, cpu=2000, request=res(gpu=10, cpu=10_000), gpu_weight=0, cpu_weight=3)
    by_name = {q.name: q for q in (a, b, c)}
    compute_fair_shares(by_name, ["a", "b", "c"], res(gpu=10, cpu=10_000))
    # GPU: c has weight 0 and no quota -> 0; a and b get offers of 5 each:
    # b is satisfied at 2 and a gets the remaining 8.
    assert (a.fair_share.gpu, b.fair_share.gpu, c.fair_share.gpu) == (8, 2, 0)
    # CPU: phase 1 c=2000; 8000 left, offers 1600/1600/4800 (weights 1:1:3):
    # a satisfied at 1000, 7000 left; offers 1750/5250: b unmet 9000, c unmet 8000, none
    # satisfied: whole units 1750 and 5250.
    assert a.fair_share.cpu == 1000
    assert b.fair_share.cpu == pytest.approx(1750)
    assert c.fair_share.cpu == pytest.approx(2000 + 5250)
    assert a.fair_share.memory == b.fair_share.memory == c.fair_share.memory == 0


def test_session_total_counts_only_ready_nodes_and_requests_come_from_jobs() -> None:
    from builders import job, task

    nodes = [mknode("n1", gpus=4), mknode("n2", gpus=4, ready=False)]
    qs = [queue("root"), queue("a", "root"), queue("b", "root")]
    jobs = [
        job("ja", "a", [task(gpu=1) for _ in range(3)]),
        job("jb", "b", [task(gpu=1) for _ in range(3)]),
    ]
    s = session(snapshot(nodes, qs, jobs))
    assert s.total.gpu == 4
    assert s.queues["a"].request.gpu == 3 and s.queues["root"].request.gpu == 6
    assert s.queues["a"].fair_share.gpu + s.queues["b"].fair_share.gpu == 4
    assert s.queues["root"].fair_share.gpu == 4


# ------------------------------------------------------------ dominant share
def test_allocatable_share_is_max_of_deserved_and_fair_share_capped_by_limit() -> None:
    q = queue("q", gpu=4, gpu_limit=5)
    q.deserved, q.fair_share = res(gpu=4), res(gpu=8)
    assert allocatable_share(q, "gpu") == 5
    q.fair_share = res(gpu=2)
    assert allocatable_share(q, "gpu") == 4
    q.limit = res(gpu=INF)
    q.fair_share = res(gpu=8)
    assert allocatable_share(q, "gpu") == 8


def test_dominant_share_is_the_largest_resource_fraction() -> None:
    q = queue("q")
    q.deserved = res(gpu=4, cpu=0)
    q.fair_share = res(gpu=2, cpu=8000)
    q.allocated = res(gpu=2, cpu=6000)
    # gpu 2/4 = 0.5, cpu 6000/8000 = 0.75
    assert dominant_share(q) == pytest.approx(0.75)
    assert dominant_share(q, res(gpu=2)) == pytest.approx(1.0)
    assert dominant_share(q, res(cpu=2000)) == pytest.approx(1.0)


def test_dominant_share_of_nothing_allocated_is_zero_and_of_no_share_infinite() -> None:
    q = queue("q")
    assert dominant_share(q) == 0
    q.allocated = res(memory=1)
    assert dominant_share(q) == INF
