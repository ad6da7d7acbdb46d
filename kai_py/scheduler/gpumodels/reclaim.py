"""Reclaim per GPU model (docs/quota-per-model.md, "Reclaim").

A queue under its deserved quota of a model M may take GPUs of M back from queues
over theirs, even when by the GPU figures alone no queue is over its quota (a team
that holds its 12 GPUs of quota, 8 of them H100s against an H100 quota of 4). The
reclaim action asks this only after its own search found nothing, and only in
sessions where some queue has ``gpuModels``; its other rules (the reclaimer stays
within its GPU fair share, the victims' reclaimMinRuntime, the limits) still hold.

Queues are compared where the two branches part, as for GPUs, over the queues that
list M: on the reclaimer's side every one of them ends within its quota of M; on the
victim's side at least one lists M and every one that does is over its quota before
each victim goes (a queue within its quota of M keeps its pods of M). A queue without
an entry for M has no quota of M to be over: it is never a victim here. Victims are
whole units whose pods are all on nodes of M: evicting a pod of another model would
take what its queue may hold.
"""

from __future__ import annotations

from collections.abc import Sequence

from kai_py.scheduler.gpumodels.limits import ModelUsage
from kai_py.scheduler.model import Job, Queue, Unit
from kai_py.scheduler.resources import EPS, INF
from kai_py.scheduler.session import Session


def _quota(queue: Queue, model: str) -> float | None:
    bounds = queue.gpu_models
    if not bounds or model not in bounds:
        return None
    return bounds[model][0]


def _sides(session: Session, mine: str, theirs: str) -> tuple[list[Queue], list[Queue]]:
    """Each queue's chain below the lowest common ancestor (the root when none)."""
    up_mine = session.ancestors(mine)
    up_theirs = session.ancestors(theirs)
    common = {q.name for q in up_mine} & {q.name for q in up_theirs}
    return (
        [q for q in up_mine if q.name not in common],
        [q for q in up_theirs if q.name not in common],
    )


class ModelReclaim:
    """The per-model rules for one reclaimer asking for ``gpu`` GPUs of ``model``. What
    each queue holds of the model is taken when it is made, before any scenario."""

    def __init__(
        self, session: Session, usage: ModelUsage, job: Job, model: str, gpu: float
    ) -> None:
        self.session = session
        self.usage = usage
        self.job = job
        self.model = model
        self.gpu = gpu
        self._before = {
            name: usage.held(q)[0].get(model, 0.0)
            for name, q in session.queues.items()
            if q.gpu_models and model in q.gpu_models
        }

    def held(self, queue: str) -> float:
        """What ``queue`` held of the model when the rules were made (0 when it does not
        list the model: it is not counted then)."""
        return self._before.get(queue, 0.0)

    def under_quota(self) -> str | None:
        """Why the reclaimer may not take GPUs of the model (a queue of its chain that
        lists the model would end above its quota of it), or None when it may."""
        listed = False
        for queue in self.session.ancestors(self.job.queue):
            quota = _quota(queue, self.model)
            if quota is None:
                continue
            listed = True
            after = self._before[queue.name] + self.gpu
            if quota != INF and after > quota + EPS:
                return (
                    f"queue {queue.name} would hold {after:g} {self.model} GPUs, above its "
                    f"{self.model} quota of {quota:g}"
                )
        return None if listed else f"queue {self.job.queue} has no {self.model} quota"

    def may_be_victim(self, victim_queue: str) -> bool:
        if victim_queue == self.job.queue:
            return False
        _, theirs = _sides(self.session, self.job.queue, victim_queue)
        return self._over(theirs, self._before)

    def _over(self, side: Sequence[Queue], held: dict[str, float]) -> bool:
        listed = False
        for queue in side:
            quota = _quota(queue, self.model)
            if quota is None:
                continue
            listed = True
            if quota == INF or held[queue.name] <= quota + EPS:
                return False
        return listed

    def admit(self, unit: Unit) -> bool:
        """Only units whose pods are all on nodes of the model, of a queue that may lose."""
        models = self.usage.models
        return self.may_be_victim(unit.job.queue) and all(
            models.get(task.node_name or "") == self.model for task in unit.tasks
        )

    def validate(self, chosen: Sequence[Unit]) -> bool:
        """Each victim's side is still over its quota of the model before it goes."""
        left = dict(self._before)
        session = self.session
        for unit in chosen:
            _, theirs = _sides(session, self.job.queue, unit.job.queue)
            if not self._over(theirs, left):
                return False
            freed = sum(
                session.task_gpu(task, session.nodes.get(task.node_name or ""))
                for task in unit.tasks
            )
            for queue in session.ancestors(unit.job.queue):
                if queue.name in left:
                    left[queue.name] -= freed
        return True


def candidate_models(job: Job, session: Session) -> list[str]:
    """The models some queue of the job's chain has a quota of, in name order."""
    found: set[str] = set()
    for queue in session.ancestors(job.queue):
        if queue.gpu_models:
            found.update(m for m, (quota, _) in queue.gpu_models.items() if quota > EPS)
    return sorted(found)
