"""The queue plugin: queue order by fair share and DRF, limits, non-preemptible quota."""

from __future__ import annotations

from collections.abc import Sequence

from kai_py.scheduler.framework import Framework
from kai_py.scheduler.model import Config, Job, Unit
from kai_py.scheduler.ordering import queue_key
from kai_py.scheduler.quota import check_limit, check_non_preemptible_quota
from kai_py.scheduler.session import Session


def preempt_within_limits(
    session: Session, preemptor: Job, units: Sequence[Unit], action: str
) -> bool:
    """Preempt swaps jobs inside one queue, and reclaim may take from a sibling under a
    limited parent, so the preemptor's queues' limits are checked on the outcome (with
    what the victims free counted)."""
    if action != "preempt" and action != "reclaim":
        return True
    return all(q.allocated.fits_in(q.limit) for q in session.ancestors(preemptor.queue))


def register(framework: Framework, config: Config) -> None:
    framework.queue_order = queue_key
    framework.capacity_checks.append(("limit", check_limit))
    framework.capacity_checks.append(("nonPreemptibleQuota", check_non_preemptible_quota))
    framework.validators.append(("queueLimits", preempt_within_limits))
