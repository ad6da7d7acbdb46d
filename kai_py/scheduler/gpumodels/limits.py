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
    """What each queue holds of each model. A queue's figures are recounted when its
    totals changed (``Queue.version``), from each job's own figures, which are
    recounted only when one of its pods changed (``Job.version``)."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.models = {name: node_model(node) for name, node in session.nodes.items()}
        own: dict[str, list[Job]] = {}
        for job in session.jobs.values():
            own.setdefault(job.queue, []).append(job)
        # The jobs of each queue with bounds and of the queues below it, listed once.
        self._jobs: dict[str, list[Job]] = {}
        for queue in session.queues.values():
            if queue.gpu_models:
                jobs: list[Job] = []
                pending = [queue.name]
                while pending:
                    name = pending.pop()
                    below = session.queues.get(name)
                    if below is not None:
                        pending.extend(below.children)
                    jobs.extend(own.get(name, ()))
                self._jobs[queue.name] = jobs
        # queue -> (its version when counted, what it held then); job uid -> the same
        self._memo: dict[str, tuple[int, Held]] = {}
        self._of_job: dict[str, tuple[int, dict[str, float]]] = {}
        # (queue, model, GPUs asked, preemptible) -> (versions up the tree, answer)
        self._verdicts: dict[tuple[str, str, float, bool], tuple[tuple[int, ...], str | None]] = {}

    def held(self, queue: Queue) -> Held:
        found = self._memo.get(queue.name)
        if found is not None and found[0] == queue.version:
            return found[1]
        held: Held = ({}, {})
        every, non_preemptible = held
        for job in self._jobs.get(queue.name, ()):
            for model, gpu in self._job_held(job).items():
                every[model] = every.get(model, 0.0) + gpu
                if not job.preemptible:
                    non_preemptible[model] = non_preemptible.get(model, 0.0) + gpu
        self._memo[queue.name] = (queue.version, held)
        return held

    def _job_held(self, job: Job) -> dict[str, float]:
        found = self._of_job.get(job.uid)
        if found is not None and found[0] == job.version:
            return found[1]
        held: dict[str, float] = {}
        session = self.session
        for task in job.tasks:
            if not (task.status.is_placed or task.status is RELEASING) or task.shadow:
                continue
            model = self.models.get(task.node_name or "")
            if model is None:
                continue
            gpu = session.task_gpu(task, session.nodes.get(task.node_name or ""))
            if gpu > EPS:
                held[model] = held.get(model, 0.0) + gpu
        self._of_job[job.uid] = (job.version, held)
        return held

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
        # The same answer for every node of the model until a queue up the tree changes:
        # the placer asks it of each node it tries.
        chain = session.ancestors(job.queue)
        stamp = tuple(q.version for q in chain)
        key = (job.queue, model, gpu, job.preemptible)
        found = self._verdicts.get(key)
        if found is not None and found[0] == stamp:
            return found[1]
        verdict = self._verdict(chain, job, model, gpu)
        self._verdicts[key] = (stamp, verdict)
        return verdict

    def _verdict(self, chain: list[Queue], job: Job, model: str, gpu: float) -> str | None:
        for queue in chain:
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
    # One per session: the placer, the queue order, reclaim and the figures share its
    # counts (each kept with the versions it was counted at).
    found = session.memo.get(ModelUsage)
    if isinstance(found, ModelUsage):
        return found
    usage = session.memo[ModelUsage] = ModelUsage(session)
    return usage


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
