"""Quota per GPU model (``kai_py.scheduler.gpumodels``): the node's model, the limit
and the non-preemptible quota per model up the queue tree, and nothing installed for
queues without ``gpuModels``."""

from __future__ import annotations

from kai_py.api import keys
from kai_py.controllers.webhooks.validation import validate_queue
from kai_py.scheduler.cycle import open_session, run_cycle
from kai_py.scheduler.gpumodels.drf import ModelShareOrder
from kai_py.scheduler.gpumodels.limits import model_usage, node_model
from kai_py.scheduler.model import Card, Job, Queue
from kai_py.scheduler.ordering import DOMINANT_WITH_JOB, DOMINANT_WITHOUT_JOB, queue_key
from kai_py.scheduler.placement import Placer
from kai_py.scheduler.resources import INF, Res
from tests.scheduler.builders import job, node, queue, running, session, snapshot, task

H100, A100 = "NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB"


def nodes() -> list:  # type: ignore[type-arg]
    return [
        node("h", gpus=8, labels={keys.GPU_PRODUCT_NODE_LABEL: H100}),
        node("a", gpus=8, labels={keys.GPU_PRODUCT_NODE_LABEL: A100}),
    ]


def with_models(q: Queue, **models: tuple[float, float]) -> Queue:
    q.gpu_models = {name.replace("_", "-"): bounds for name, bounds in models.items()}
    return q


def placed_on(jobs: list[Job], queues: list[Queue]) -> dict[str, str | None]:
    d = run_cycle(snapshot(nodes(), queues, jobs))
    return {t.name: t.node_name for t in d.binds}


def test_the_model_is_the_label_else_the_inventory_product() -> None:
    assert node_model(nodes()[0]) == H100
    bare = node("x", gpus=1)
    assert node_model(bare) is None
    bare.cards = (Card(0, "GPU-1", product="NVIDIA H100 80GB HBM3"),)
    assert node_model(bare) == H100


def test_no_gpu_models_installs_nothing() -> None:
    s = session(snapshot(nodes(), [queue("root"), queue("q", "root")]))
    assert model_usage(s) is None
    assert type(Placer(s).predicates).__name__ != "GpuModelCache"
    # The built-in queue order, as is: its keys are memoised by the queues' totals.
    assert open_session(snapshot(nodes(), [queue("q")])).framework.queue_order is queue_key


def test_gpu_models_put_the_model_shares_in_the_queue_order() -> None:
    shares = with_models(
        queue("a", gpu=8, cpu=-1, memory=-1), **{H100: (4.0, INF), A100: (0.0, 2.0)}
    )
    unlimited = with_models(queue("b", gpu=8, cpu=-1, memory=-1), **{H100: (INF, INF)})
    jobs = [job("ha", "a", [running("h", gpu=2)]), job("hb", "b", [running("h", gpu=4)])]
    s = open_session(snapshot(nodes(), [shares, unlimited], jobs))
    order = s.framework.queue_order
    assert isinstance(order, ModelShareOrder)
    # 2 of its 4 H100s; the A100 entry has no quota and adds nothing.
    assert order.share(s.queues["a"]) == 0.5
    assert order.share(s.queues["b"]) == 0.0  # an unlimited quota is never a share
    key = order(s.queues["a"], Res())
    # Its GPU share is 2 of 8 (CPU and memory unlimited): the H100 share is the dominant one.
    assert key[DOMINANT_WITH_JOB] == key[DOMINANT_WITHOUT_JOB] == 0.5


def test_a_parent_model_limit_holds_for_its_children_and_other_models_stay_open() -> None:
    root = with_models(queue("root"), **{H100: (INF, 2.0)})
    held = job("held", "q", [running("h", gpu=2)])
    # Binpack prefers the fuller H100 node; the parent's H100 limit sends it to A100.
    new = job("new", "q", [task("new-0", gpu=1)], created=1.0)
    assert placed_on([held, new], [root, queue("q", "root")]) == {"new-0": "a"}


def test_non_preemptible_work_stays_within_the_model_quota() -> None:
    plenty = {"gpu": 8, "cpu": -1, "memory": -1}
    root = queue("root", **plenty)  # type: ignore[arg-type]
    q = with_models(queue("q", "root", **plenty), **{H100: (1.0, INF)})  # type: ignore[arg-type]
    pinned = {keys.GPU_PRODUCT_NODE_LABEL: H100}
    train = job("train", "q", [task("t-0", gpu=2, node_selector=pinned)], priority=100)
    d = run_cycle(snapshot(nodes(), [root, q], [train]))
    assert d.binds == []
    message = d.reasons[train.uid][0].message
    assert f"queue q deserves 1 {H100} GPUs for non-preemptible work; 0 in use" in message
    spare = job("spare", "q", [task("s-0", gpu=2, node_selector=pinned)], priority=50)
    assert placed_on([spare], [root, q]) == {"s-0": "h"}


def test_the_webhook_names_a_bad_entry() -> None:
    manifest = {
        "apiVersion": "scheduling.run.ai/v2",
        "kind": "Queue",
        "metadata": {"name": "team-a"},
        "spec": {"gpuModels": [{"model": H100, "limit": 8}, {"model": H100, "quota": -2}]},
    }
    errors = validate_queue(manifest, None).errors
    assert errors == ['Queue "team-a": spec.gpuModels[1].quota: must be -1 or >= 0, got -2']
    manifest["spec"]["gpuModels"][1]["quota"] = 1  # type: ignore[index]
    assert validate_queue(manifest, None).errors == [
        f"Queue \"team-a\": spec.gpuModels: model '{H100}' is listed twice"
    ]


def _reclaimed(victim_queue: Queue) -> list[str]:
    """team-a (H100 quota 4, holding none) wants 4 H100s; ``victim_queue`` runs 8 pods
    of 1 H100 in two gangs, at its GPU quota of 8, and the A100s are taken."""
    plenty = {"gpu": 8.0, "cpu": -1.0, "memory": -1.0}
    mine = with_models(queue("team-a", **plenty), **{H100: (4.0, INF)})  # type: ignore[arg-type]
    h100 = {keys.GPU_PRODUCT_NODE_LABEL: H100}
    jobs = [
        job(
            f"old-{g}",
            victim_queue.name,
            [running("h", gpu=1, name=f"old-{g}-{i}") for i in range(4)],
            created=float(g),
            min_member=4,
        )
        for g in range(2)
    ]
    jobs.append(job("fill", "other", [running("a", gpu=8, name="fill-0")]))
    jobs.append(
        job(
            "want",
            "team-a",
            [task(f"want-{i}", gpu=1, node_selector=h100) for i in range(4)],
            created=5.0,
            min_member=4,
        )
    )
    queues = [mine, victim_queue, queue("other", gpu=8, cpu=-1, memory=-1)]
    d = run_cycle(snapshot(nodes(), queues, jobs))
    return sorted(e.task.name for e in d.evictions)


def test_a_queue_over_its_model_quota_loses_that_model_to_one_under_it() -> None:
    over = with_models(queue("team-b", gpu=8, cpu=-1, memory=-1), **{H100: (4.0, INF)})
    assert _reclaimed(over) == [f"old-1-{i}" for i in range(4)]


def test_a_queue_without_gpu_models_is_never_a_victim_by_model() -> None:
    # The same figures, but team-b has no quota of H100 to be over: KAI's rules alone,
    # and by them team-b (at its GPU quota) keeps its pods.
    assert _reclaimed(queue("team-b", gpu=8, cpu=-1, memory=-1)) == []


def test_below_the_compared_level_a_queue_within_its_model_quota_keeps_its_pods() -> None:
    # dept (H100 quota 6) holds 8 H100s: 4 of b1 (quota 4: within) and 4 of b2 (quota 2:
    # over, but not preemptible). dept is over its H100 quota, yet b1 keeps its pods:
    # team-a, beside dept, finds no victim.
    plenty = {"cpu": -1.0, "memory": -1.0}
    queues = [
        with_models(queue("team-a", gpu=8, **plenty), **{H100: (4.0, INF)}),  # type: ignore[arg-type]
        with_models(queue("dept", gpu=8, **plenty), **{H100: (6.0, INF)}),  # type: ignore[arg-type]
        with_models(queue("b1", "dept", gpu=4, **plenty), **{H100: (4.0, INF)}),  # type: ignore[arg-type]
        with_models(queue("b2", "dept", gpu=4, **plenty), **{H100: (2.0, INF)}),  # type: ignore[arg-type]
        queue("other", gpu=8, cpu=-1, memory=-1),
    ]
    h100 = {keys.GPU_PRODUCT_NODE_LABEL: H100}
    jobs = [
        job(
            q,
            q,
            [running("h", gpu=1, name=f"{q}-{i}") for i in range(4)],
            min_member=4,
            preemptible=q == "b1",
        )
        for q in ("b1", "b2")
    ]
    jobs.append(job("fill", "other", [running("a", gpu=8, name="fill-0")]))
    want = [task(f"want-{i}", gpu=1, node_selector=h100) for i in range(4)]
    jobs.append(job("want", "team-a", want, created=5.0, min_member=4))
    d = run_cycle(snapshot(nodes(), queues, jobs))
    assert d.evictions == []
