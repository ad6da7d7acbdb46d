"""reclaim: take resources back from queues over their share.

A job may reclaim when its queue stays within its fair share (or its deserved
quota) after the job; non-preemptible jobs also keep their queue's
non-preemptible work within its deserved quota. Who may be a victim and
whether a scenario is acceptable follow KAI's rules (``reclaimable``); the
victims must be old enough for their queue's reclaimMinRuntime. Victims that
fit elsewhere after the reclaimer is placed are moved rather than evicted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from kai_py.scheduler import reasons
from kai_py.scheduler.actions.allocate import pending_jobs
from kai_py.scheduler.actions.common import demand, needed
from kai_py.scheduler.actions.evicting import (
    contested,
    old_enough,
    preemptors,
    protected_note,
    unordered_preemptors,
    victim_cost,
)
from kai_py.scheduler.actions.reclaimable import Reclaimable
from kai_py.scheduler.actions.victims import (
    Fruitless,
    SearchBudget,
    VictimPool,
    VictimSearch,
    any_held,
    capped_note,
    stopped_note,
)
from kai_py.scheduler.gpumodels.limits import ModelUsage
from kai_py.scheduler.gpumodels.reclaim import ModelReclaim, candidate_models
from kai_py.scheduler.model import Job, Queue, Unit
from kai_py.scheduler.ordering import PendingLine
from kai_py.scheduler.placement import Placer
from kai_py.scheduler.quota import limit_reclaim_may_free
from kai_py.scheduler.reasons import Reason
from kai_py.scheduler.resources import EPS, Res, format_quantity
from kai_py.scheduler.session import Session


def split_paths(session: Session, a: str, b: str) -> tuple[list[Queue], list[Queue]]:
    """The queues of ``a``'s and ``b``'s branches below their lowest common ancestor."""
    key = ("split", a, b)
    cached = session.memo.get(key)
    if cached is not None:
        return cached  # type: ignore[return-value]
    result = _split_paths(session, a, b)
    session.memo[key] = result
    return result


def _split_paths(session: Session, a: str, b: str) -> tuple[list[Queue], list[Queue]]:
    up_a = session.ancestors(a)
    up_b = session.ancestors(b)
    names_b = {q.name for q in up_b}
    lca = next((q.name for q in up_a if q.name in names_b), None)
    side_a = [q for q in up_a[: [q.name for q in up_a].index(lca)]] if lca else up_a
    side_b = [q for q in up_b[: [q.name for q in up_b].index(lca)]] if lca else up_b
    return side_a, side_b


def within_share(
    session: Session, job: Job, queues: Sequence[Queue], amount: Res, bound_by: str = "fair_share"
) -> Reason | None:
    """The reclaimer's queues must stay within ``bound_by`` (fair share or deserved quota).

    ``amount`` is already counted in ``allocated`` when this is called.
    """
    for queue in queues:
        for res in contested(amount):
            after = queue.allocated.get(res)
            bound = getattr(queue, bound_by).get(res)
            if after > bound + EPS:
                what = "fair share" if bound_by == "fair_share" else "deserved quota"
                return Reason(
                    reasons.NO_RECLAIM,
                    f"Job {job.key} cannot reclaim resources: queue {queue.name} would have "
                    f"{format_quantity(res, after)}, above its {what} of "
                    f"{format_quantity(res, bound)}",
                    {"queue": queue.name, "resource": res, "after": after, "bound": bound},
                )
    return None


class _Reclaim:
    """KAI's reclaim rules (``reclaimable``) as the victim search's admit and validate."""

    def __init__(self, session: Session, job: Job, amount: Res) -> None:
        self.session = session
        self.rules = Reclaimable(session, job, amount)

    def admit(self, unit: Unit) -> bool:
        return self.rules.may_be_victim(unit.job.queue)

    def validate(self, chosen: Sequence[Unit]) -> bool:
        victims: list[tuple[Job, Res]] = []
        for unit in chosen:
            freed = Res()
            for task in unit.tasks:
                node = self.session.nodes.get(task.node_name or "")
                freed.add(self.session.task_res(task, node))
            victims.append((unit.job, freed))
        return self.rules.acceptable(victims)


def reclaim(session: Session, placer: Placer) -> None:
    pool: VictimPool | None = None
    line: PendingLine | None = None
    budget = SearchBudget()
    fruitless = Fruitless(session)
    # No pod holds resources a search could take: every search would find no victim
    # (its pool is empty, and stays so without a commit), so each job that may reclaim
    # gets what such a search ends with: nothing to reclaim, with no note (the budget
    # is only spent by simulating victims). The pool and the line are not built.
    searchable = any_held(session)
    jobs = None if searchable else _unordered(session)
    # A job over a limit of a queue above its own still tries when evicting the other
    # queues below that limit could make room (``limit_reclaim_may_free``); the limits
    # are then checked on each scenario's outcome (the framework's validators).
    for job in preemptors(session, check_limit=not searchable) if jobs is None else jobs:
        amount = demand(session, job, needed(job))
        scope: Queue | None = None
        if searchable and session.framework.check_capacity(session, job, amount) is not None:
            scope = limit_reclaim_may_free(session, job, amount)
            if scope is None:
                continue  # allocate said which limit refuses it; no victim frees room there
        leaf = session.queues[job.queue]
        leaf.allocated.add(amount)
        # A non-preemptible job's own quota was checked before (NonPreemptibleOverQuota);
        # here both kinds of job compare their queue's whole allocation. The deserved
        # quota is only asked when the fair share refuses (a refusal is said only when
        # both refuse; within_share changes nothing).
        refusal = within_share(session, job, [leaf], amount, "fair_share")
        if refusal is not None and within_share(session, job, [leaf], amount, "deserved") is None:
            refusal = None
        leaf.allocated.sub(amount)
        if refusal is not None:
            session.explain(job, refusal)
            continue
        if not searchable:
            session.explain(job, _nothing_to_reclaim(session, job))
            continue
        if pool is None:
            pool = VictimPool(
                session,
                "reclaim",
                session.jobs.values(),
                victim_cost,
                lambda t: old_enough(
                    session, t, session.jobs[t.job_uid].queue, "reclaim_min_runtime"
                ),
            )
            line = PendingLine(session, pending_jobs(session))
        if fruitless.known(job, line):
            session.explain(job, _nothing_to_reclaim(session, job, scope=scope))
            continue
        if budget.exhausted:  # not worth weighing its victims: it will not search
            session.explain(job, _nothing_to_reclaim(session, job, stopped_note(0), scope))
            continue
        done, note = _reclaim(session, placer, pool, line, budget, job, amount, scope)
        capped = bool(note)
        if not done and placer.model_usage is not None:
            # Only when a queue has spec.gpuModels: a queue under its quota of a model
            # may take that model back from queues over theirs (gpumodels/reclaim.py).
            done, said, cut = _reclaim_by_model(
                session, placer, pool, line, budget, job, amount, scope, placer.model_usage
            )
            note += said
            capped = capped or cut
        if done:
            pool.refresh([job])
        else:
            if not capped:
                fruitless.add(job)
            session.explain(job, _nothing_to_reclaim(session, job, note, scope))


def _unordered(session: Session) -> list[Job] | None:
    """``unordered_preemptors``, when reclaim's walk changes nothing: its only change,
    adding a job's step to its queue's total for the share check and taking it off
    again, must give back the very same floats (it does unless rounding moves them,
    which would then differ with the order of the jobs)."""
    jobs = unordered_preemptors(session)
    if jobs is None:
        return None
    queues = session.queues
    for job in jobs:
        amount = demand(session, job, needed(job))
        held = queues[job.queue].allocated
        if (
            held.cpu + amount.cpu - amount.cpu != held.cpu
            or held.memory + amount.memory - amount.memory != held.memory
            or held.gpu + amount.gpu - amount.gpu != held.gpu
        ):
            return None
    return jobs


def _reclaim(
    session: Session,
    placer: Placer,
    pool: VictimPool,
    line: PendingLine | None,
    budget: SearchBudget,
    job: Job,
    amount: Res,
    scope: Queue | None = None,
) -> tuple[bool, str]:
    """Whether ``job`` reclaimed, and a note when its search was cut short. With
    ``scope`` (a queue whose limit the job would pass), only victims below it: no other
    eviction makes room under that limit."""
    others = [q for q in pool.queues if q != job.queue and _below(session, q, scope)]
    if not others:
        return False, ""  # before the rules copy every queue's totals: none to ask about
    plan = _Reclaim(session, job, amount)
    queues = [q for q in others if plan.rules.may_be_victim(q)]
    if not queues:
        return False, ""
    search = _search(session, placer, plan, line, budget)
    done = search.run(job, pool.units_in_queue_order(session, queues))
    return done, capped_note(search)


def _reclaim_by_model(
    session: Session,
    placer: Placer,
    pool: VictimPool,
    line: PendingLine | None,
    budget: SearchBudget,
    job: Job,
    amount: Res,
    scope: Queue | None,
    usage: ModelUsage,
) -> tuple[bool, str, bool]:
    """Whether ``job`` reclaimed GPUs of a model its queue is under its quota of, what
    the per-model rules said when it did not (with the numbers), and whether a search
    was cut short. The models are tried in name order; the first that works is kept."""
    if amount.gpu <= EPS:
        return False, "", False
    said: list[str] = []
    cut = False
    for model in candidate_models(job, session):
        plan = ModelReclaim(session, usage, job, model, amount.gpu)
        refusal = plan.under_quota()
        if refusal is not None:
            said.append(refusal)
            continue
        queues = [
            q
            for q in pool.queues
            if q != job.queue and _below(session, q, scope) and plan.may_be_victim(q)
        ]
        if not queues:
            said.append(
                f"no other queue is over its {model} quota with preemptible pods (queue "
                f"{job.queue} holds {plan.held(job.queue):g} of them)"
            )
            continue
        search = _search(session, placer, plan, line, budget)
        if search.run(job, pool.units_in_queue_order(session, queues)):
            return True, "", False
        note = capped_note(search)
        cut = cut or bool(note)
        said.append(
            f"evicting pods on {model} nodes of queues over their {model} quota "
            f"({', '.join(sorted(queues))}) does not make room for it{note}"
        )
    return False, ("; by GPU model: " + "; ".join(said)) if said else "", cut


def _below(session: Session, name: str, scope: Queue | None) -> bool:
    return scope is None or any(q is scope for q in session.ancestors(name))


def _nothing_to_reclaim(
    session: Session, job: Job, capped: str = "", scope: Queue | None = None
) -> Reason:
    queue = session.queues[job.queue]
    others = (q for q in session.queues if q != job.queue and _below(session, q, scope))
    note = protected_note(session, others, "reclaim_min_runtime")
    where = "" if scope is None else f" below queue {scope.name} (whose limit binds)"
    return Reason(
        reasons.NO_RECLAIM,
        f"Job {job.key} cannot reclaim resources: no other queue{where} is above its fair "
        f"share (or its deserved quota) by enough preemptible work (queue {queue.name} has "
        f"{format_quantity('gpu', queue.allocated.gpu)} with a fair share of "
        f"{format_quantity('gpu', queue.fair_share.gpu)}){note}{capped}",
        {"queue": queue.name},
    )


class _Plan(Protocol):
    """What a reclaim search asks of its plan (the queue-level one, or a model's)."""

    def admit(self, unit: Unit) -> bool: ...

    def validate(self, chosen: Sequence[Unit]) -> bool: ...


def _search(
    session: Session, placer: Placer, plan: _Plan, line: PendingLine | None, budget: SearchBudget
) -> VictimSearch:
    return VictimSearch(
        session,
        placer,
        "reclaim",
        plan.validate,
        admit=plan.admit,
        moved_give_nothing=session.config.allow_consolidating_reclaim,
        line=line,
        budget=budget,
    )
