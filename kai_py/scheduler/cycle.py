"""One scheduling cycle: open a session, run the actions in order, close it."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from kai_py.scheduler import reasons
from kai_py.scheduler.actions.allocate import allocate
from kai_py.scheduler.actions.consolidation import consolidation
from kai_py.scheduler.actions.preempt import preempt
from kai_py.scheduler.actions.reclaim import reclaim
from kai_py.scheduler.actions.stalegang import stale_gang_eviction
from kai_py.scheduler.actions.victims import MOVED_SUFFIX
from kai_py.scheduler.admission.ungate import ungate
from kai_py.scheduler.framework import Framework
from kai_py.scheduler.gpumodels.drf import ModelShareOrder
from kai_py.scheduler.gpumodels.limits import model_usage
from kai_py.scheduler.model import (
    ALLOCATED,
    DEFAULT_ACTIONS,
    PENDING,
    PIPELINED,
    Config,
    Job,
    Snapshot,
    Task,
)
from kai_py.scheduler.ordering import queue_key
from kai_py.scheduler.placement import Placer
from kai_py.scheduler.plugins import default_framework
from kai_py.scheduler.reasons import Reason
from kai_py.scheduler.resources import format_quantity
from kai_py.scheduler.session import (
    Decisions,
    Event,
    Eviction,
    Op,
    QueueFigures,
    Record,
    Session,
)

Action = Callable[[Session, Placer], None]


#: Every action, by the name KAI's scheduler configuration gives it.
ACTIONS: dict[str, Action] = {
    "allocate": allocate,
    "consolidation": consolidation,
    "reclaim": reclaim,
    "preempt": preempt,
    "stalegangeviction": stale_gang_eviction,
}


def default_actions() -> list[tuple[str, Action]]:
    return [(name, ACTIONS[name]) for name in DEFAULT_ACTIONS]


def configured_actions(config: Config) -> list[tuple[str, Action]]:
    """The actions a configuration names, in its order."""
    return [(name, ACTIONS[name]) for name in config.actions]


def open_session(snapshot: Snapshot, framework: Framework | None = None) -> Session:
    """A session over ``snapshot`` with ``framework``, else the built-in plugins as the
    snapshot's config sets them up (KAI's ``OpenSession``)."""
    if framework is not None:
        return Session(snapshot, framework)  # a given framework is used as it is
    session = Session(snapshot, default_framework(snapshot.config))
    usage = model_usage(session)  # None unless a queue has spec.gpuModels
    if usage is not None and session.framework.queue_order is queue_key:
        # DRF over GPU models in the queue order (gpumodels/drf.py), this session only.
        session.framework.queue_order = ModelShareOrder(queue_key, usage)
    return session


def run_cycle(
    snapshot: Snapshot,
    actions: list[tuple[str, Action]] | None = None,
    framework: Framework | None = None,
) -> Decisions:
    """One cycle; the actions (and framework) are the given ones, else those of the
    snapshot's config."""
    session = open_session(snapshot, framework)
    placer = Placer(session)
    if actions is None:
        actions = configured_actions(snapshot.config)
    for _, action in actions:
        action(session, placer)
    # Not one of KAI's configurable actions: pods left at kai-py's queue-admission gate
    # must be let go even when the gating is turned off, whatever the action list says.
    ungate(session)
    return close(session)


def close(session: Session) -> Decisions:
    """Turn the committed operations into decisions, events and explanations."""
    d = session.decisions
    events = d.events
    d.events = []
    # Event(...) appended here without session.event's call: one per pod bound and per
    # pending pod, the bulk of what close does on a busy cycle. The same list.
    emit = d.events.append
    placed: dict[str, Task] = {}
    allocate, evict = Op.ALLOCATE, Op.EVICT  # looked up once: Enum class lookups are slow
    moved_to = {
        rec.task.uid.removesuffix(MOVED_SUFFIX): rec.task.node_name
        for rec in session.committed
        if rec.op is allocate and rec.task.shadow and rec.task.status.is_placed
    }
    taken_back: dict[str, Record] = {}
    for rec in session.committed:
        task = rec.task
        if rec.unplaced:
            taken_back[task.uid] = rec  # placed earlier in this cycle: nothing to evict
        elif rec.op is evict:
            job = session.jobs[task.job_uid]
            message = eviction_message(session, rec.action, task, rec.by)
            d.evictions.append(Eviction(task, rec.action, rec.by, message, moved_to.get(task.uid)))
            session.event("PodGroup", job.namespace, job.name, "Normal", "Evict", message)
        elif rec.op is allocate and not task.shadow:
            placed[task.uid] = task
    avoided = session.passed_over
    for task in placed.values():
        if task.status is ALLOCATED:
            d.binds.append(task)
            message = (
                f"Successfully assigned pod {task.namespace}/{task.name} to node {task.node_name}"
            )
            if avoided and task.uid in avoided:  # first a cheap check: this runs per bind
                message += f" ({avoided[task.uid]})"
            emit(Event("Pod", task.namespace, task.name, "Normal", "Scheduled", message))
        elif task.status is PIPELINED:
            d.pipelined.append(task)
            session.event(
                "Pod",
                task.namespace,
                task.name,
                "Normal",
                "Pipelined",
                f"Pod {task.key} will run on node {task.node_name} once resources being "
                f"released there are free",
            )
    if session.topology_domains:
        _domain_events(session, placed.values())
    for rec in taken_back.values():
        if rec.task.status is PENDING and rec.by is not None:
            session.explain(session.jobs[rec.task.job_uid], _taken_back(rec.action, rec.by))
    for job_uid, why in list(d.reasons.items()):
        job = session.jobs[job_uid]
        pending = [t for t in job.tasks if t.status is PENDING]
        if not pending and not job.gated:
            del d.reasons[job_uid]
            continue
        first = why[0]
        # The first reason is why it did not fit; later ones say why taking
        # resources back did not help either.
        message = reasons.sentences(r.message for r in why)
        if first.code == reasons.NOT_READY:  # KAI's type and reason: tools match on them
            session.event("PodGroup", job.namespace, job.name, "Normal", "NotReady", message)
            continue
        session.event("PodGroup", job.namespace, job.name, "Warning", "Unschedulable", message)
        if job.mark_unschedulable:
            pod_message = _pod_message(job, first.code, message)
            for task in pending:
                d.pending_reasons[f"{task.namespace}/{task.name}"] = message  # task.key
                emit(
                    Event("Pod", task.namespace, task.name, "Warning", "Unschedulable", pod_message)
                )
    for job in session.gated_at_start:
        for task in job.gated:
            emit(Event("Pod", task.namespace, task.name, "Normal", "SchedulingGated", _gated(task)))
    d.events.extend(events)
    usage = model_usage(session)  # None unless a queue has spec.gpuModels
    for q in session.queues.values():
        d.queues[q.name] = QueueFigures(
            q.deserved.copy(),
            q.fair_share.copy(),
            q.allocated.copy(),
            q.allocated_non_preemptible.copy(),
            q.request.copy(),
            dict(usage.held(q)[0]) if usage is not None and q.gpu_models else None,
        )
    return d


def _domain_events(session: Session, placed: Iterable[Task]) -> None:
    """One Normal Event per gang with a topology constraint placed this cycle: the
    domain it got (``kai-py simulate`` lists it with the other Events)."""
    told: set[str] = set()
    for task in placed:
        uid = task.job_uid
        where = session.topology_domains.get(uid)
        if where is None or uid in told:
            continue
        told.add(uid)
        job = session.jobs[uid]
        count = sum(1 for t in job.tasks if t.status.is_placed)
        session.event(
            "PodGroup",
            job.namespace,
            job.name,
            "Normal",
            "TopologyDomain",
            f"PodGroup {job.key}: {count} pods placed in {where}",
        )


def _taken_back(action: str, by: Job) -> Reason:
    return Reason(
        reasons.POD_SCHEDULING_ERRORS,
        f"Its place, found earlier in this cycle, was given to {by.key} ({action}) "
        f"before the pod was bound",
        {"by": by.key, "action": action},
    )


def _gated(task: Task) -> str:
    gates = ", ".join(task.gates)
    return (
        f"Pod {task.key} is not scheduled while spec.schedulingGates holds it: {gates}; "
        f"it is scheduled once they are removed"
    )


def _pod_message(job: Job, code: str, message: str) -> str:
    """What a pending pod's event says: the whole reason for a job of one pod; for a
    gang, or bad input (the pod or its PodGroup has a Warning of its own already), a
    short pointer to the PodGroup, which holds the whole reason once."""
    if len(job.tasks) == 1 and code != reasons.INVALID_WORKLOAD:
        return message
    return (
        f"Not scheduled ({code}) with PodGroup {job.key}; its events say why: "
        f"kubectl describe podgroup {job.name} -n {job.namespace}"
    )


def eviction_message(session: Session, action: str, task: Task, by: Job | None) -> str:
    victim = session.jobs[task.job_uid]
    pod = task.key
    if by is None:
        return (
            f"Pod {pod} was evicted: its gang is below minMember for longer than its grace period"
        )
    if action == "preempt":
        return (
            f"Pod {pod} was preempted by higher priority workload {by.key} "
            f"(priority {by.priority} over {victim.priority}) in queue {victim.queue}"
        )
    if action == "reclaim":
        mine, theirs = session.queues.get(by.queue), session.queues.get(victim.queue)
        if mine is None or theirs is None:
            return f"Pod {pod} was reclaimed by workload {by.key}"
        return (
            f"Pod {pod} was reclaimed by workload {by.key}: queue {mine.name} (fair share "
            f"{format_quantity('gpu', mine.fair_share.gpu)}, deserved "
            f"{format_quantity('gpu', mine.deserved.gpu)}) takes back resources from queue "
            f"{theirs.name} (fair share {format_quantity('gpu', theirs.fair_share.gpu)})"
        )
    return (
        f"Pod {pod} was evicted to be placed again elsewhere (consolidation), so that "
        f"workload {by.key} fits"
    )
