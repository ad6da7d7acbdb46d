"""Time-based fair share: past usage lowers a queue's over-quota weight.

docs/fairshare.md. Each queue may carry its usage over the configured window,
already normalised to what the cluster could have given over that window
(``Queue.usage``: 0.25 GPUs means a quarter of the cluster's GPU-time). When
the over-quota part of a parent's share is divided, a queue's weight becomes
``max(0, w + k * (w - u))`` with ``w`` its weight normalised among the queues
still asking and ``u`` its usage, ``k`` the proportion plugin's ``kValue``: a
queue that used less than its weight's part gets more, one that used more gets
less, down to nothing. With no usage known (``None`` everywhere) the weights
are left as they are, so the common cycle pays nothing for the feature;
in-quota (deserved) shares never change.
"""

from __future__ import annotations

from collections.abc import Sequence

from kai_py.scheduler.resources import Res


def over_quota_weights(
    weights: Sequence[float], usages: Sequence[Res | None], res: str, k_value: float
) -> list[float] | None:
    """The weights to divide ``res`` over quota with, one per queue still asking (given
    their overQuotaWeights and usages), or None when none of them has a usage (the
    overQuotaWeights apply as they are)."""
    if all(u is None for u in usages):
        return None
    total = sum(weights)
    if total <= 0:
        return list(weights)
    k = max(0.0, k_value)
    out: list[float] = []
    for weight, usage in zip(weights, usages, strict=True):
        normalised = weight / total
        used = usage.get(res) if usage is not None else 0.0
        out.append(max(0.0, normalised + k * (normalised - used)))
    return out
