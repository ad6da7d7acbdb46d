"""The ``ungate`` step (``kai_py.scheduler.admission``): which pods held by kai-py's
queue-admission gate are let go, a gang's together, within quota and limit up the
queue tree, and no more than the cycle's bound."""

from __future__ import annotations

from dataclasses import replace

from kai_py.api import keys
from kai_py.scheduler.cycle import run_cycle
from kai_py.scheduler.model import Job, Queue, Snapshot, Task
from kai_py.scheduler.session import Decisions
from tests.scheduler.builders import job, node, queue, running, snapshot, task

GATE = keys.QUEUE_ADMISSION_GATE


def gated_job(name: str, q: str, pods: int, gpu: float, **kw: object) -> Job:
    held = [task(f"{name}-{i}", gpu=gpu) for i in range(pods)]
    j = job(name, q, [], **kw)  # type: ignore[arg-type]
    if "min_member" not in kw:
        j.min_member = pods
    for t in held:
        t.gates = (GATE,)
        t.job_uid = j.uid
    j.gated = held
    return j


def cycle(queues: list[Queue], jobs: list[Job], mode: str = "all", **config: object) -> Decisions:
    snap: Snapshot = snapshot([node("n1", gpus=16)], queues, jobs)
    snap.config = replace(snap.config, queue_admission_gating=mode, **config)  # type: ignore[arg-type]
    return run_cycle(snap)


def names(tasks: list[Task]) -> list[str]:
    return sorted(t.name for t in tasks)


def test_a_gang_goes_whole_within_the_limit_and_the_next_waits_with_numbers() -> None:
    a, b = gated_job("a", "q", 2, 2, created=1.0), gated_job("b", "q", 2, 2, created=2.0)
    d = cycle([queue("root"), queue("q", "root", gpu=4, gpu_limit=4)], [a, b])
    assert names(d.ungated) == ["a-0", "a-1"]
    [why] = [r for r in d.reasons[b.uid] if r.code == "OverLimit"]
    # a, let go in this very cycle, counts as reserved
    assert "queue q may use 4 GPUs (limit); 0 GPUs in use and 4 GPUs reserved" in why.message
    assert "the job asks for 4 GPUs" in why.message


def test_a_parent_queue_limit_holds_too() -> None:
    a = gated_job("a", "q", 1, 3)
    d = cycle([queue("root", gpu_limit=2), queue("q", "root", gpu_limit=-1)], [a])
    assert d.ungated == []
    assert "queue root may use 2 GPUs (limit)" in d.reasons[a.uid][-1].message


def test_non_preemptible_work_is_let_go_only_within_deserved_quota() -> None:
    queues = [queue("root"), queue("q", "root", gpu=2)]
    train = gated_job("train", "q", 1, 3, priority=100)  # non-preemptible
    d = cycle(queues, [train])
    assert d.ungated == [] and d.reasons[train.uid][-1].code == "NonPreemptibleOverQuota"
    assert "deserved quota for non-preemptible work" in d.reasons[train.uid][-1].message
    spare = gated_job("spare", "q", 1, 3, priority=50)  # preemptible: over quota is fine
    assert names(cycle(queues, [spare]).ungated) == ["spare-0"]


def test_a_gang_not_all_created_waits_and_pods_beyond_min_member_go_one_by_one() -> None:
    queues = [queue("root"), queue("q", "root", gpu_limit=6)]
    partial = gated_job("partial", "q", 2, 1, min_member=3)
    assert cycle(queues, [partial]).ungated == []
    # Elastic: one pod runs (minMember 1, 2 GPUs in use); each gated pod asks 2 more.
    el = gated_job("el", "q", 3, 2, min_member=1)
    el.tasks = [running("n1", gpu=2)]
    el.tasks[0].job_uid = el.uid
    assert len(cycle(queues, [el]).ungated) == 2


def test_only_kai_py_gate_alone_is_lifted_and_gating_off_lets_everything_go() -> None:
    queues = [queue("root"), queue("q", "root", gpu_limit=0)]
    other = gated_job("other", "q", 1, 1)
    other.gated[0].gates = ("example.com/approval", GATE)
    mine = gated_job("mine", "q", 1, 1)
    assert cycle(queues, [other, mine]).ungated == []  # limit 0: nothing fits
    # Gating off (or the queue opted out): ours go without a check, the other stays.
    assert names(cycle(queues, [other, mine], mode="off").ungated) == ["mine-0"]
    queues[1].admission_gating = False
    assert names(cycle(queues, [other, mine], mode="all").ungated) == ["mine-0"]
    queues[1].admission_gating = None
    assert names(cycle(queues, [other, mine], mode="queues").ungated) == ["mine-0"]


def test_writes_per_cycle_are_bounded_but_a_gang_is_never_split() -> None:
    queues = [queue("root"), queue("q", "root")]
    singles = [gated_job(f"s{i}", "q", 1, 1, created=float(i)) for i in range(5)]
    assert len(cycle(queues, singles, max_admissions_per_cycle=3).ungated) == 3
    big = gated_job("big", "q", 4, 1)
    assert len(cycle(queues, [big], max_admissions_per_cycle=3).ungated) == 4


def test_a_job_that_selects_a_gpu_model_waits_while_its_model_limit_is_reached() -> None:
    h100 = "NVIDIA-H100-80GB-HBM3"
    label = {keys.GPU_PRODUCT_NODE_LABEL: h100}
    q = queue("q", "root")
    q.gpu_models = {h100: (0.0, 4.0)}
    held = job("held", "q", [running("h", gpu=4)])
    picky = gated_job("picky", "q", 1, 1, created=1.0)
    picky.gated[0].node_selector = label
    anywhere = gated_job("anywhere", "q", 1, 1, created=2.0)
    snap = snapshot([node("h", gpus=8, labels=label)], [queue("root"), q], [held, picky, anywhere])
    snap.config = replace(snap.config, queue_admission_gating="all")
    d = run_cycle(snap)
    assert names(d.ungated) == ["anywhere-0"]
    [why] = [r for r in d.reasons[picky.uid] if r.code == "OverLimit"]
    assert f"queue q may use 4 GPUs (limit for {h100}); 4 GPUs in use" in why.message


def test_pods_at_kai_py_gate_ask_for_their_share_as_pending_pods_do() -> None:
    queues = [queue("root"), queue("q", "root", gpu_limit=0)]
    mine = gated_job("mine", "q", 2, 3)
    other = gated_job("other", "q", 1, 5)
    other.gated[0].gates = ("example.com/approval",)  # not ours: asks for nothing, as in KAI
    d = cycle(queues, [mine, other])
    assert d.ungated == []  # limit 0: nothing is let go
    assert d.queues["q"].requested.gpu == 6 and d.queues["root"].requested.gpu == 6
