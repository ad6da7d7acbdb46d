"""The per-model limit and quota, checked where a pod is placed.

A queue's use of a model is the GPUs its pods (and its children's) hold on nodes of
that model. The check is a node predicate that depends on the session's state, so it
wraps the cached predicates (``GpuModelCache``) and is only installed when some queue
has ``gpuModels``: sessions without it (every KAI Queue) pay nothing for it.
"""

from __future__ import annotations

from kai_py.api import keys
from kai_py.scheduler.model import RELEASING, Job, Node, Queue, Task
from kai_py.scheduler.predicates import PredicateCache
from kai_py.scheduler.resources import EPS, INF
from kai_py.scheduler.session import Session

#: What a queue holds of each model: (all its pods, its non-preemptible pods).
Held = tuple[dict[str, float], dict[str, float]]


def node_model(node: Node) -> str | None:
    """The node's GPU model: its label ``nvidia.com/gpu.product``, else the product of
    its first card in kai-py's inventory written as the label writes it (spaces as
    ``-``); None when neither says."""
    label = node.labels.get(keys.GPU_PRODUCT_NODE_LABEL)
    if label:
        return label
    if node.cards and node.cards[0].product:
        return "-".join(node.cards[0].product.split())
    return None


def _show(amount: float) -> str:
    return "unlimited" if amount == INF else f"{amount:g}"


class ModelUsage:
    """What each queue holds of each model, computed when a queue's totals changed."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.models = {name: node_model(node) for name, node in session.nodes.items()}
        self._jobs: dict[str, list[Job]] = {}
        for job in session.jobs.values():
            self._jobs.setdefault(job.queue, []).append(job)
        # queue -> (its version when counted, what it held then)
        self._memo: dict[str, tuple[int, Held]] = {}

    def held(self, queue: Queue) -> Held:
        found = self._memo.get(queue.name)
        if found is not None and found[0] == queue.version:
            return found[1]
        held: Held = ({}, {})
        pending = [queue.name]
        while pending:  # the queue and every queue below it
            name = pending.pop()
            below = self.session.queues.get(name)
            if below is not None:
                pending.extend(below.children)
            for job in self._jobs.get(name, ()):
                for task in job.tasks:
                    self._count(job, task, held)
        self._memo[queue.name] = (queue.version, held)
        return held

    def _count(self, job: Job, task: Task, held: Held) -> None:
        if not (task.status.is_placed or task.status is RELEASING) or task.shadow:
            return
        model = self.models.get(task.node_name or "")
        if model is None:
            return
        gpu = self.session.task_gpu(task, self.session.nodes.get(task.node_name or ""))
        if gpu <= EPS:
            return
        held[0][model] = held[0].get(model, 0.0) + gpu
        if not job.preemptible:
            held[1][model] = held[1].get(model, 0.0) + gpu

    def refusal(self, task: Task, node: Node) -> str | None:
        """Why placing ``task`` on ``node`` would take a queue up its tree past its limit
        (or non-preemptible work past its quota) of the node's model; None if not."""
        model = self.models.get(node.name)
        if model is None:
            return None
        session = self.session
        job = session.jobs.get(task.job_uid)
        if job is None:
            return None
        gpu = session.task_gpu(task, node)
        if gpu <= EPS:
            return None
        for queue in session.ancestors(job.queue):
            bounds = queue.gpu_models
            if not bounds or model not in bounds:
                continue
            quota, limit = bounds[model]
            every, non_preemptible = self.held(queue)
            has = every.get(model, 0.0)
            if has + gpu > limit + EPS:
                # Counted per node by the placer's reasons: "3 node(s) of GPU model ...".
                return (
                    f"node(s) of GPU model {model} (queue {queue.name} may use "
                    f"{_show(limit)} {model} GPUs; {has:g} in use, the pod asks for {gpu:g})"
                )
            if not job.preemptible:
                has = non_preemptible.get(model, 0.0)
                if has + gpu > quota + EPS:
                    return (
                        f"node(s) of GPU model {model} (queue {queue.name} deserves "
                        f"{_show(quota)} {model} GPUs for non-preemptible work; {has:g} "
                        f"in use, the pod asks for {gpu:g})"
                    )
        return None


def model_usage(session: Session) -> ModelUsage | None:
    """The per-model check for this session, or None when no queue has ``gpuModels``."""
    if not any(q.gpu_models for q in session.queues.values()):
        return None
    return ModelUsage(session)


class GpuModelCache(PredicateCache):
    """The placer's predicates, then the per-model check. It holds the predicates it
    wraps rather than being one of them: the per-model answer changes as pods are
    placed, so it must not go into their cache."""

    def __init__(self, inner: PredicateCache, usage: ModelUsage) -> None:
        # No PredicateCache.__init__: every check goes to ``inner``, which has the state.
        self._inner = inner
        self._usage = usage

    def check(self, task: Task, node: Node) -> str | None:
        result = self._inner.check(task, node)
        if result is None:
            result = self._usage.refusal(task, node)
        return result
