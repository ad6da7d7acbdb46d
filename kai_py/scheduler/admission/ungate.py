"""The ``ungate`` step: lift kai-py's queue-admission gate from the pods whose job fits.

A pod of a gated queue is created with the scheduling gate ``kai.scheduler/queue-admission``
(the pod webhook adds it). A gated pod is never marked Unschedulable, so a cluster
autoscaler does not buy nodes for it. Once its job fits within its queue's quota and
limit, this step names it in ``Decisions.ungated``; the writer removes the gate (and
only that gate). "Fits" mirrors the allocation-time capacity checks (``quota.py``), up
the queue tree, with the pods admitted earlier that are still pending counted as
reserved: otherwise every cycle would admit another job against the same free quota
while the first one waits for a node.

- any job: allocated + reserved + asked <= limit;
- a non-preemptible job also: non-preemptible allocated + reserved + asked <= deserved.

The gate is only a cache of that verdict: allocation still checks quota and limit, so
a pod ungated by other means (by hand, a webhook that was down) is no quota breach.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kai_py.api import keys
from kai_py.scheduler import reasons
from kai_py.scheduler.gpumodels.limits import ModelUsage, model_usage
from kai_py.scheduler.model import PENDING, Job, Queue, Task
from kai_py.scheduler.reasons import Reason
from kai_py.scheduler.resources import EPS, RESOURCE_NAMES, Res, format_quantity
from kai_py.scheduler.session import Session

GATE = keys.QUEUE_ADMISSION_GATE
#: The operator's --queue-admission-gating (and the scheduler configuration's
#: queueAdmissionGating): off, queues that opt in, every queue that does not opt out.
QUEUE_ADMISSION_MODES = ("off", "queues", "all")


def gated_queue(mode: str, queue: Queue) -> bool:
    """Whether ``queue``'s pods wait at the gate under the operator's ``mode``."""
    if mode == "all":
        return queue.admission_gating is not False
    if mode == "queues":
        return queue.admission_gating is True
    return False


@dataclass(slots=True)
class _Held:
    """What pods admitted but not yet placed hold of each queue (subtree totals)."""

    all: dict[str, Res] = field(default_factory=dict)
    non_preemptible: dict[str, Res] = field(default_factory=dict)
    # (queue, GPU model) -> GPUs, for pods that select a model (docs/quota-per-model.md)
    models: dict[tuple[str, str], float] = field(default_factory=dict)

    def hold(self, session: Session, job: Job, asked: Res, model: str | None) -> None:
        for q in session.ancestors(job.queue):
            self.of(q.name).add(asked)
            if not job.preemptible:
                self.of(q.name, True).add(asked)
            if model is not None:
                self.models[q.name, model] = self.models.get((q.name, model), 0.0) + asked.gpu

    def of(self, name: str, non_preemptible: bool = False) -> Res:
        table = self.non_preemptible if non_preemptible else self.all
        found = table.get(name)
        if found is None:
            found = table[name] = Res()
        return found


def ungate(session: Session) -> None:
    """Fill ``session.decisions.ungated`` (and explain the jobs left at the gate)."""
    waiting = [job for job in session.gated_at_start if any(_ours(t) for t in job.gated)]
    if not waiting:  # the common cycle: nothing of ours is gated
        return
    mode = session.config.queue_admission_gating
    held = _reserved(session, mode)
    usage = model_usage(session)
    budget = session.config.max_admissions_per_cycle
    # A job with pods already let go first (a gang half ungated when the operator
    # stopped), then by priority and age, as jobs are tried in allocate.
    waiting.sort(key=lambda j: (not _started(j), -j.priority, j.created, j.uid))
    out = session.decisions.ungated
    for job in waiting:
        queue = session.queues.get(job.queue)
        if queue is None:
            continue  # no queue, no quota to check: the pods could not run anyway
        mine = [t for t in job.gated if _ours(t)]
        gating = gated_queue(mode, queue)
        if gating and len(job.tasks) + len(job.gated) + job.succeeded < job.min_member:
            continue  # the gang is not all created yet: it is let go whole, later
        if not gating:
            # Gating is off for this queue (or altogether): let its pods go at once, so
            # turning the feature off needs no clean-up by hand.
            units = [mine]
        else:
            # The gang's missing members go together, the pods beyond minMember one by
            # one (each then takes quota of its own).
            need = max(0, job.min_member - len(job.tasks) - job.succeeded)
            units = ([mine[:need]] if need else []) + [[t] for t in mine[need:]]
        let_go = 0
        for unit in units:
            if not unit:
                continue
            if len(unit) > budget and out:
                budget = 0  # the rest next cycle: writes per cycle are bounded
                break
            if gating:
                asked = Res()
                for task in unit:
                    asked.add(session.task_res(task, None))
                why = _refusal(session, job, asked, held) or _model_refusal(
                    session, usage, job, unit, asked, held
                )
                if why is not None:
                    session.explain(job, why)
                    break
                held.hold(session, job, asked, selected_model(unit))
            out.extend(unit)
            budget -= len(unit)
            let_go += len(unit)
        if let_go:
            session.event(
                "PodGroup",
                job.namespace,
                job.name,
                "Normal",
                "Admitted",
                f"Queue admission: {let_go} pods of job {job.key} let go from the scheduling "
                f"gate {GATE}: "
                + (
                    f"they fit within queue {queue.name}'s quota and limit"
                    if gating
                    else f"queue {queue.name} is not gated"
                ),
            )
        if budget <= 0:
            return


def _ours(task: Task) -> bool:
    """Held by kai-py's gate alone: a pod with another gate too belongs to that gate's
    owner until it lifts its own, and is left alone."""
    return task.gates == (GATE,)


def _started(job: Job) -> bool:
    return any(t.admitted_at is not None and t.status is PENDING for t in job.tasks)


def _reserved(session: Session, mode: str) -> _Held:
    """What admitted pods that are still pending hold, for ``admission_reservation``
    seconds after their admission: long enough for an autoscaler to bring a node, short
    enough that a pod that cannot run for another reason (affinity, a volume) does not
    hold its queue's quota for good."""
    held = _Held()
    horizon = session.now - session.config.admission_reservation
    for job in session.jobs.values():
        queue = session.queues.get(job.queue)
        if queue is None or not gated_queue(mode, queue):
            continue
        for task in job.tasks:
            if task.status is PENDING and task.admitted_at is not None:
                if task.admitted_at < horizon:
                    continue
                held.hold(session, job, session.task_res(task, None), selected_model([task]))
    return held


def selected_model(tasks: list[Task]) -> str | None:
    """The GPU model the pods select with a nodeSelector on the product label, if any
    (a pod that selects none may land on any model: admission cannot tell which)."""
    for task in tasks:
        model = task.node_selector.get(keys.GPU_PRODUCT_NODE_LABEL)
        if model:
            return model
    return None


def _model_refusal(
    session: Session,
    usage: ModelUsage | None,
    job: Job,
    unit: list[Task],
    asked: Res,
    held: _Held,
) -> Reason | None:
    """OverLimit when the pods select a GPU model whose limit a queue up the tree has
    reached, counting what is admitted but not yet running."""
    model = selected_model(unit) if usage is not None else None
    if usage is None or model is None or asked.gpu <= EPS:
        return None
    for queue in session.ancestors(job.queue):
        bounds = queue.gpu_models
        if not bounds or model not in bounds:
            continue
        limit = bounds[model][1]
        used = usage.held(queue)[0].get(model, 0.0)
        kept = held.models.get((queue.name, model), 0.0)
        if used + kept + asked.gpu > limit + EPS:
            return _reason(
                reasons.OVER_LIMIT,
                job,
                queue,
                "gpu",
                f"limit for {model}",
                limit,
                used,
                kept,
                asked.gpu,
            )
    return None


def _refusal(session: Session, job: Job, asked: Res, held: _Held) -> Reason | None:
    """Why ``asked`` does not fit up ``job``'s queue tree, with the numbers; None if it does."""
    for queue in session.ancestors(job.queue):
        reserved = held.of(queue.name)
        for res in RESOURCE_NAMES:
            want = asked.get(res)
            if want <= EPS:
                continue
            used, kept, limit = queue.allocated.get(res), reserved.get(res), queue.limit.get(res)
            if used + kept + want > limit + EPS:
                return _reason(
                    reasons.OVER_LIMIT, job, queue, res, "limit", limit, used, kept, want
                )
            if not job.preemptible:
                used = queue.allocated_non_preemptible.get(res)
                kept = held.of(queue.name, True).get(res)
                deserved = queue.deserved.get(res)
                if used + kept + want > deserved + EPS:
                    return _reason(
                        reasons.NON_PREEMPTIBLE_OVER_QUOTA,
                        job,
                        queue,
                        res,
                        "deserved quota for non-preemptible work",
                        deserved,
                        used,
                        kept,
                        want,
                    )
    return None


def _reason(
    code: str,
    job: Job,
    queue: Queue,
    res: str,
    what: str,
    bound: float,
    used: float,
    kept: float,
    want: float,
) -> Reason:
    def show(amount: float) -> str:
        return format_quantity(res, amount)

    return Reason(
        code,
        f"Queue admission: job {job.key} waits at the scheduling gate {GATE}: queue "
        f"{queue.name} may use {show(bound)} ({what}); {show(used)} in use and "
        f"{show(kept)} reserved for admitted pods not yet running, and the job asks for "
        f"{show(want)}",
        {"resource": res, "queue": queue.name, "gate": GATE},
    )
