"""consolidation: move running jobs so that a fragmented pending job fits.

Only for a preemptible job (as KAI: a non-preemptible one is left to reclaim
and preempt), only when the cluster has enough free resources in total (the
job is blocked by fragmentation, not by capacity), and only when the job does
not fit as the cluster is (then no move is needed: placing it is allocate's
work, and a search would move its first victim for nothing). A move is
accepted only if every moved job finds a new place, and at most
``max_consolidation_victims`` pods move. Off under spread placement, whose
point is to keep jobs apart.
"""

from __future__ import annotations

from kai_py.scheduler.actions.common import demand, needed, place_tasks
from kai_py.scheduler.actions.evicting import preemptors, victim_cost
from kai_py.scheduler.actions.victims import (
    Fruitless,
    SearchBudget,
    VictimPool,
    VictimSearch,
    always,
    any_held,
)
from kai_py.scheduler.model import Job, Node
from kai_py.scheduler.placement import Placer
from kai_py.scheduler.resources import EPS
from kai_py.scheduler.session import Session


def _free_gpu(node: Node) -> float:
    """Whole free cards plus the unused parts of shared ones."""
    shared = sum(max(0.0, 1 - g.used + g.releasing - g.pipelined) for g in node.groups.values())
    return node.free_gpus_future() + shared


def _fits_as_is(session: Session, placer: Placer, job: Job) -> bool:
    """Whether the job's next step fits with no pod moved (tried, then undone)."""
    stmt = session.statement()
    fits = place_tasks(session, stmt, placer, job, needed(job)).ok
    stmt.rollback(0)
    return fits


def consolidation(session: Session, placer: Placer) -> None:
    if session.framework.placement == "spread" or session.config.max_consolidation_victims == 0:
        return
    if not any_held(session):
        # No pod could be moved, so no search could succeed, and consolidation explains
        # nothing to the jobs it passes over: walking them would change nothing.
        return
    pool: VictimPool | None = None
    free: tuple[float, float] | None = None
    budget = SearchBudget()
    fruitless = Fruitless(session)
    for job in preemptors(session):
        if not job.preemptible:
            # Left to reclaim and preempt, as KAI does (a drop-in moves pods for the
            # same jobs).
            continue
        if free is None:
            ready = [n for n in session.nodes.values() if n.ready]
            free = (
                sum(_free_gpu(n) for n in ready),
                sum(
                    n.allocatable.cpu - n.used.cpu + n.releasing.cpu - n.pipelined.cpu
                    for n in ready
                ),
            )
        want = demand(session, job, needed(job))
        if want.gpu > free[0] + EPS or want.cpu > free[1] + EPS:
            continue  # not fragmentation: the cluster lacks the resources
        if fruitless.known(job, None):
            continue  # its search placed nothing and nothing changed since
        if _fits_as_is(session, placer, job):
            # No move is needed for it. The search would not see that: its first
            # scenario moves the cheapest victim, works, and keeps that needless move.
            continue
        if pool is None:
            pool = VictimPool(
                session, "consolidation", session.jobs.values(), victim_cost, lambda t: True
            )
        search = VictimSearch(
            session,
            placer,
            "consolidation",
            always,
            replace_victims=True,
            max_victims=session.config.max_consolidation_victims,
            budget=budget,
        )
        units = pool.units(sorted(pool.queues), keep=lambda v, job=job: v is not job)  # type: ignore[misc]
        if search.run(job, units):
            pool.refresh([job])
            free = None
        elif not search.capped:
            fruitless.add(job)
