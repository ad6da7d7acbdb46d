"""Time-based fair share (docs/fairshare.md): usage lowers the over-quota share.

Cases after KAI's ``calcShareWeights`` (proportion plugin, resource division):
``max(0, w + k * (w - u))`` per queue still asking, ``w`` its normalised
overQuotaWeight and ``u`` its normalised usage; in-quota shares do not move.
"""

from __future__ import annotations

from builders import queue

from kai_py.scheduler.fairshare import compute_fair_shares
from kai_py.scheduler.model import Queue
from kai_py.scheduler.resources import Res
from kai_py.scheduler.timeshare import over_quota_weights


def split(total_gpu: float, *queues: Queue, k: float = 1.0) -> dict[str, float]:
    by_name = {q.name: q for q in queues}
    compute_fair_shares(by_name, [q.name for q in queues], Res(gpu=total_gpu), k)
    return {q.name: q.fair_share.gpu for q in queues}


def used(gpu: float) -> Res:
    return Res(gpu=gpu)


def test_no_usage_keeps_the_weights() -> None:
    assert over_quota_weights([1.0, 3.0], [None, None], "gpu", 1.0) is None


def test_weights_follow_kais_formula() -> None:
    # w = 0.5 each; a used 0.75 of the cluster, b 0.25: a 0.5+(0.5-0.75)=0.25, b 0.75.
    got = over_quota_weights([1.0, 1.0], [used(0.75), used(0.25)], "gpu", 1.0)
    assert got == [0.25, 0.75]
    # kValue 2 weighs usage twice as much; a negative weight is floored at 0.
    assert over_quota_weights([1.0, 1.0], [used(0.75), used(0.25)], "gpu", 2.0) == [0.0, 1.0]
    # kValue 0: usage has no effect (the normalised weights).
    assert over_quota_weights([1.0, 3.0], [used(0.9), None], "gpu", 0.0) == [0.25, 0.75]


def test_the_queue_that_used_more_gets_less_over_quota() -> None:
    a = queue("a", request=used(16))
    b = queue("b", request=used(16))
    assert split(16, a, b) == {"a": 8, "b": 8}
    a.usage, b.usage = used(0.75), used(0.25)
    assert split(16, a, b) == {"a": 4, "b": 12}


def test_a_queue_that_held_everything_gets_nothing_over_quota() -> None:
    a = queue("a", request=used(16))
    b = queue("b", request=used(16))
    a.usage, b.usage = used(1.0), used(0.0)
    assert split(16, a, b) == {"a": 0, "b": 16}


def test_in_quota_share_is_unchanged_by_usage() -> None:
    a = queue("a", gpu=6, request=used(16))
    b = queue("b", gpu=2, request=used(16))
    a.usage, b.usage = used(1.0), used(0.0)
    got = split(16, a, b)
    # a keeps its deserved 6; only the 8 over quota follow usage (all to b).
    assert got == {"a": 6, "b": 10}
    assert a.deserved.gpu == 6


def test_what_one_queue_does_not_need_goes_to_the_others() -> None:
    a = queue("a", request=used(16))
    b = queue("b", request=used(2))
    a.usage, b.usage = used(0.9), used(0.0)
    assert split(16, a, b) == {"a": 14, "b": 2}
