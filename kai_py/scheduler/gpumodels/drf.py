"""DRF over GPU models in the queue order (docs/quota-per-model.md, "DRF over models").

Each model a queue has a quota of is a resource of its own beside GPU, CPU and memory:
the queue's dominant share is the largest of its usual ones and of what it holds of
each such model ÷ its quota of it. So a team that holds all its H100s goes after one
that holds none of its own, even when both hold as many GPUs. Installed (in place of
the built-in order, which it then calls) only when some queue has ``gpuModels``.

A model's share is measured against the quota of it: over-quota GPUs of a model are not
divided into a fair share of their own. A model entry with no quota (or 0, or -1)
adds nothing to the share: such a queue is ordered by its GPU figures for that model.
A job's model is known only once it is placed, so the model share is what the queue
holds, with or without the job.
"""

from __future__ import annotations

from kai_py.scheduler.framework import QueueOrder
from kai_py.scheduler.gpumodels.limits import ModelUsage
from kai_py.scheduler.model import Queue
from kai_py.scheduler.ordering import DOMINANT_WITH_JOB, DOMINANT_WITHOUT_JOB
from kai_py.scheduler.resources import EPS, INF, Res


class ModelShareOrder:
    """``base`` (the built-in queue order) with each model's share in its DRF terms."""

    __slots__ = ("base", "usage")

    def __init__(self, base: QueueOrder, usage: ModelUsage) -> None:
        self.base = base
        self.usage = usage

    def share(self, queue: Queue) -> float:
        """The largest held ÷ quota over the models the queue has a quota of."""
        bounds = queue.gpu_models
        if not bounds:
            return 0.0
        held = self.usage.held(queue)[0]
        best = 0.0
        for model, (quota, _) in bounds.items():
            if quota <= EPS or quota == INF:
                continue
            fraction = held.get(model, 0.0) / quota
            if fraction > best:
                best = fraction
        return best

    def __call__(self, queue: Queue, extra: Res) -> tuple[object, ...]:
        key = self.base(queue, extra)
        share = self.share(queue)
        if share <= EPS:
            return key
        parts = list(key)
        for at in (DOMINANT_WITH_JOB, DOMINANT_WITHOUT_JOB):
            value = parts[at]
            assert isinstance(value, float)
            if share > value:
                parts[at] = share
        return tuple(parts)
