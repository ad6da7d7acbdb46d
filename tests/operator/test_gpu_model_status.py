"""A Queue with spec.gpuModels shows what it holds of each model in its status
(``status.allocatedByGpuModel``), written only when it changes and removed when the
queue no longer has gpuModels; other Queues' status is as KAI's."""

from __future__ import annotations

from kai_py.api import keys
from kai_py.scheduler.cycle import run_cycle
from kai_py.scheduler.resources import Res
from kai_py.scheduler.session import QueueFigures
from kai_py.writes.writer import queue_status_patch
from tests.scheduler.builders import job, node, queue, running, snapshot

H100 = "NVIDIA-H100-80GB-HBM3"


def figures(models: dict[str, float] | None) -> QueueFigures:
    return QueueFigures(Res(), Res(), Res(), Res(), Res(), models)


def test_the_cycle_counts_each_model_for_queues_with_gpu_models_only() -> None:
    label = {keys.GPU_PRODUCT_NODE_LABEL: H100}
    q = queue("q", "root")
    q.gpu_models = {H100: (4.0, 8.0)}
    jobs = [job("a", "q", [running("h", gpu=3)]), job("b", "other", [running("h", gpu=1)])]
    snap = snapshot(
        [node("h", gpus=8, labels=label)], [queue("root"), q, queue("other", "root")], jobs
    )
    d = run_cycle(snap)
    assert d.queues["q"].gpu_models == {H100: 3.0}
    assert d.queues["other"].gpu_models is None and d.queues["root"].gpu_models is None


def test_the_status_is_written_when_it_changes_and_removed_with_gpu_models() -> None:
    body = {"metadata": {"name": "q", "uid": "u"}, "status": {}}
    patch = queue_status_patch(body, figures({H100: 3.0}))
    assert patch is not None and patch["status"]["allocatedByGpuModel"] == {H100: 3.0}
    body["status"] = {**patch["status"]}
    assert queue_status_patch(body, figures({H100: 3.0})) is None
    gone = queue_status_patch(body, figures(None))
    assert gone is not None and gone["status"] == {"allocatedByGpuModel": None}
    plain = queue_status_patch({"metadata": {"name": "p"}, "status": {}}, figures(None))
    assert plain is not None and "allocatedByGpuModel" not in plain["status"]
