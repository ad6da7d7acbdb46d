"""Job order inside a queue, and which jobs may be victims at all."""

from __future__ import annotations

from kai_py.scheduler.framework import Framework
from kai_py.scheduler.model import Config, Job
from kai_py.scheduler.ordering import job_key
from kai_py.scheduler.session import Session


def preemptible_only(session: Session, job: Job, action: str) -> bool:
    """A non-preemptible job is never a victim of reclaim, preempt or consolidation."""
    return job.preemptible


def register(framework: Framework, config: Config) -> None:
    framework.job_order = job_key
    framework.victim_filters.append(("preemptible", preemptible_only))
