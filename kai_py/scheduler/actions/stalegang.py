"""stale gang eviction: a running gang below minMember (or below the minimum of one of its
sub-groups) for too long loses all its pods."""

from __future__ import annotations

from kai_py.scheduler.model import ALLOCATED, PIPELINED, RELEASING, RUNNING, Task
from kai_py.scheduler.placement import Placer
from kai_py.scheduler.session import Session
from kai_py.scheduler.subgroups import tree


def stale_gang_eviction(session: Session, placer: Placer) -> None:
    stale_since = session.decisions.stale_since
    for job in session.jobs.values():
        # One plain loop over the tasks, with the statuses as module names (an Enum class
        # lookup is slow; see model.PENDING): this runs for every job of the cycle.
        # Pods placed in this very cycle count: the gang is about to be whole again.
        # As KAI counts a gang: its placed pods and those still releasing (a pod being
        # deleted still belongs to it); finished pods do not count, but a gang with a
        # Succeeded pod is winding down, not broken.
        running: list[Task] = []
        active = 0
        for task in job.tasks:
            status = task.status
            if status is RUNNING:
                running.append(task)
                active += 1
            elif status is ALLOCATED or status is PIPELINED or status is RELEASING:
                active += 1
        if not running:
            stale_since[job.uid] = None  # a gang with nothing running is not stale
            continue
        if job.subgroups is not None:  # below the minimum of any level of its tree
            why = tree.stale(job) if not job.succeeded else None
            stale = why is not None
        else:
            why = None
            stale = active < job.min_member and not job.succeeded
        if not stale:
            session.decisions.stale_since[job.uid] = None
            continue
        since = job.stale_since if job.stale_since is not None else session.now
        session.decisions.stale_since[job.uid] = since
        grace = session.config.staleness_grace if job.staleness_default else job.staleness_grace
        if grace is None or session.now - since < grace:
            continue
        stmt = session.statement()
        for task in running:
            stmt.evict(task, "stalegangeviction", None)
        stmt.commit()
        below = (
            f"run {len(running)} of its minMember {job.min_member} pods"
            if why is None
            else f"been below a sub-group's minimum ({why})"
        )
        session.event(
            "PodGroup",
            job.namespace,
            job.name,
            "Warning",
            "StaleJob",
            f"Job {job.key} has {below} for "
            f"{session.now - since:g}s, longer than its stalenessGracePeriod of {grace:g}s; "
            f"all its pods are evicted so that the gang can start again as a whole",
        )
