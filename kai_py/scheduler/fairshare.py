"""Fair share: divide what the cluster has among the queue tree, per resource.

docs/scheduling.md, "Fair share". For each parent (the root holds the cluster total),
its fair share is split among its children in two phases: first each child
gets its deserved quota up to what it can use, then what remains goes out
over quota by queue priority, in rounds, in proportion to overQuotaWeight.
Whole units are handed out first and the fractional leftovers go in chunks
of at most one unit to the largest remainders, so a queue is not promised
two thirds of a GPU that no whole-GPU job can use.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from kai_py.scheduler.model import Queue
from kai_py.scheduler.resources import EPS, INF, RESOURCE_NAMES, Res
from kai_py.scheduler.timeshare import over_quota_weights


def compute_fair_shares(
    queues: Mapping[str, Queue], roots: Sequence[str], total: Res, k_value: float = 1.0
) -> None:
    """Set ``deserved`` and ``fair_share`` on every queue (``request`` must be set).

    Level by level with a list of parents still to divide, not by recursion: a queue
    tree is user data, and a chain of 1,000 Queues made every cycle fail with
    RecursionError. Each parent's share is divided among its own children only, so
    the order the parents are taken in does not change the result."""
    for name in RESOURCE_NAMES:
        todo: list[tuple[Sequence[str], float]] = [(roots, total.get(name))]
        while todo:
            names, amount = todo.pop()
            for child in _divide(queues, names, amount, name, k_value):
                todo.append((child.children, child.fair_share.get(name)))


def _divide(
    queues: Mapping[str, Queue], names: Sequence[str], amount: float, res: str, k_value: float
) -> list[Queue]:
    """Divide ``amount`` among the queues ``names`` (siblings); returns them."""
    children = [queues[n] for n in names]
    if not children:
        return children
    shares: dict[str, float] = {}
    for child in children:
        quota = child.quota.get(res)
        deserved = amount if quota == INF else quota
        setattr(child.deserved, res, deserved)
        shares[child.name] = min(deserved, _requestable(child, res))
    remaining = amount - sum(shares.values())
    for priority in sorted({c.priority for c in children}, reverse=True):
        if remaining <= EPS:
            break
        bucket = [c for c in children if c.priority == priority]
        remaining = _over_quota(bucket, shares, remaining, res, k_value)
    for child in children:
        setattr(child.fair_share, res, shares[child.name])
    return children


def _requestable(queue: Queue, res: str) -> float:
    return min(queue.request.get(res), queue.limit.get(res))


def _over_quota(
    bucket: list[Queue], shares: dict[str, float], remaining: float, res: str, k_value: float
) -> float:
    def unmet(q: Queue) -> float:
        return _requestable(q, res) - shares[q.name]

    active = [q for q in bucket if q.weight.get(res) > 0 and unmet(q) > EPS]
    while remaining > EPS and active:
        # Past usage (time-based fair share) reweighs the queues still asking, each round.
        weights = [q.weight.get(res) for q in active]
        weights = over_quota_weights(weights, [q.usage for q in active], res, k_value) or weights
        total_weight = sum(weights)
        if total_weight <= EPS:
            break  # every queue asking has used up its weight's worth: nothing over quota
        offers = {
            q.name: remaining * w / total_weight for q, w in zip(active, weights, strict=True)
        }
        satisfied = [q for q in active if unmet(q) <= offers[q.name] + EPS]
        if satisfied:
            for q in satisfied:
                remaining -= unmet(q)
                shares[q.name] = _requestable(q, res)
            active = [q for q in active if q not in satisfied]
            continue
        # Nobody is satisfied: hand out whole units, then the leftover in chunks.
        remainders: list[tuple[float, float, str, Queue]] = []
        for q in active:
            whole = math.floor(offers[q.name] + EPS)
            shares[q.name] += whole
            remaining -= whole
            remainders.append((-(offers[q.name] - whole), q.created, q.name, q))
        for _, _, _, q in sorted(remainders, key=lambda r: (r[0], r[1], r[2])):
            if remaining <= EPS:
                break
            chunk = min(1.0, remaining, unmet(q))
            shares[q.name] += chunk
            remaining -= chunk
        break
    return max(0.0, remaining)


def allocatable_share(queue: Queue, res: str) -> float:
    return min(max(queue.deserved.get(res), queue.fair_share.get(res)), queue.limit.get(res))


def dominant_share(queue: Queue, extra: Res | None = None) -> float:
    """DRF: the largest fraction of its allocatable share the queue holds (with ``extra``)."""
    best = 0.0
    for res in RESOURCE_NAMES:
        used = queue.allocated.get(res) + (extra.get(res) if extra is not None else 0.0)
        if used <= EPS:
            continue
        share = allocatable_share(queue, res)
        best = max(best, used / share if share > EPS else INF)
    return best
