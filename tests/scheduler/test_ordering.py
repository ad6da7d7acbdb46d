"""Job order and queue order (docs/scheduling.md, "Allocate"): each rule, in order."""

from __future__ import annotations

from builders import job, node, queue, res, running, snapshot, task

from kai_py.scheduler.actions.common import demand
from kai_py.scheduler.cycle import open_session
from kai_py.scheduler.model import Job, Queue
from kai_py.scheduler.ordering import JobPicker, WeakerShare, elastic_state, job_key, queue_key


# ---------------------------------------------------------------- jobs
def order(*jobs: Job) -> list[str]:
    return [j.name for j in sorted(jobs, key=job_key)]


def elastic(name: str, placed: int, min_member: int, total: int, **kw) -> Job:  # type: ignore[no-untyped-def]
    tasks = [running("n", gpu=1) for _ in range(placed)] + [
        task(gpu=1) for _ in range(total - placed)
    ]
    return job(name, "a", tasks, min_member=min_member, **kw)


def test_higher_priority_job_first() -> None:
    lo = job("lo", "a", [task()], priority=50, created=0)
    hi = job("hi", "a", [task()], priority=100, created=9)
    assert order(lo, hi) == ["hi", "lo"]


def test_elastic_state_below_then_at_then_above_min_member() -> None:
    below = elastic("below", 1, 2, 4, created=9)
    at = elastic("at", 2, 2, 4, created=5)
    above = elastic("above", 3, 2, 4, created=0)
    assert [elastic_state(j) for j in (below, at, above)] == [0, 1, 2]
    assert order(above, at, below) == ["below", "at", "above"]


def test_priority_beats_elastic_state() -> None:
    above_hi = elastic("above-hi", 3, 2, 4, priority=100)
    below_lo = elastic("below-lo", 0, 2, 4, priority=50)
    assert order(below_lo, above_hi) == ["above-hi", "below-lo"]


def test_older_job_first_then_uid() -> None:
    new = job("new", "a", [task()], created=5)
    old = job("old", "a", [task()], created=1)
    assert order(new, old) == ["old", "new"]
    b = job("b", "a", [task()], created=1)
    a = job("a", "a", [task()], created=1)
    assert order(b, a) == ["a", "b"]  # uid job-a < job-b


def test_elastic_state_beats_age() -> None:
    old_at = elastic("old-at", 1, 1, 3, created=0)
    new_below = elastic("new-below", 0, 1, 3, created=9)
    assert order(old_at, new_below) == ["new-below", "old-at"]


# -------------------------------------------------------------- queues
def q(name: str, **kw) -> Queue:  # type: ignore[no-untyped-def]
    state = {k: kw.pop(k) for k in ("allocated", "fair_share", "deserved") if k in kw}
    out = queue(name, "root", **kw)
    for k, v in state.items():
        setattr(out, k, v)
    return out


G = res  # shorthand


def qorder(extra: float, *queues: Queue) -> list[str]:
    return [x.name for x in sorted(queues, key=lambda x: queue_key(x, G(gpu=extra)))]


def test_queue_not_over_fair_share_first() -> None:
    # "Over" means over in every resource: CPU and memory too.
    over = q(
        "over",
        allocated=G(gpu=3, cpu=3, memory=3),
        fair_share=G(gpu=2, cpu=1, memory=1),
        deserved=G(gpu=10),
        priority=200,
    )
    under = q("under", allocated=G(gpu=5), fair_share=G(gpu=6), deserved=G(gpu=0), priority=1)
    assert qorder(1, over, under) == ["under", "over"]


def test_over_fair_share_in_gpu_only_is_not_over() -> None:
    gpu_only = q(
        "gpu-only",
        allocated=G(gpu=3, cpu=1, memory=1),
        fair_share=G(gpu=2, cpu=4, memory=4),
        deserved=G(gpu=10),
        priority=200,
    )
    under = q("under", allocated=G(gpu=5), fair_share=G(gpu=6), deserved=G(gpu=0), priority=1)
    assert qorder(1, gpu_only, under) == ["gpu-only", "under"]  # priority decides


def test_a_queue_with_a_smaller_allocatable_share_is_weaker() -> None:
    big = q("a-big", allocated=G(gpu=1), fair_share=G(gpu=4), deserved=G(gpu=4))
    small = q("b-small", allocated=G(gpu=1), fair_share=G(gpu=2), deserved=G(gpu=2))
    big.limit = small.limit = G(gpu=100, cpu=100, memory=100)
    assert WeakerShare(small) < WeakerShare(big)
    assert not WeakerShare(big) < WeakerShare(small)
    assert WeakerShare(big) == WeakerShare(big)


def test_over_fair_share_counts_any_resource() -> None:
    cpu_over = q("cpu-over", allocated=G(cpu=2), fair_share=G(gpu=4, cpu=1))
    fine = q("fine", allocated=G(gpu=3), fair_share=G(gpu=4, cpu=1), created=9)
    assert qorder(0, cpu_over, fine) == ["fine", "cpu-over"]


def test_within_deserved_with_the_job_first() -> None:
    # both within fair share; "small" stays within deserved with the job, "big" does not
    big = q("big", allocated=G(gpu=2), fair_share=G(gpu=8), deserved=G(gpu=2), priority=200)
    small = q("small", allocated=G(gpu=2), fair_share=G(gpu=8), deserved=G(gpu=4), priority=1)
    assert qorder(1, big, small) == ["small", "big"]
    # with a job of 3 both pass their deserved: priority decides
    assert qorder(3, big, small) == ["big", "small"]


def test_higher_queue_priority_next() -> None:
    lo = q("lo", allocated=G(gpu=0), fair_share=G(gpu=4), deserved=G(gpu=4), priority=50)
    hi = q("hi", allocated=G(gpu=3), fair_share=G(gpu=4), deserved=G(gpu=4), priority=150)
    assert qorder(1, lo, hi) == ["hi", "lo"]


def test_smaller_dominant_share_with_the_job_next() -> None:
    # same priority, both over deserved with the job, within fair share
    a = q("a", allocated=G(gpu=2), fair_share=G(gpu=8), deserved=G(gpu=0), created=0)
    b = q("b", allocated=G(gpu=1), fair_share=G(gpu=8), deserved=G(gpu=0), created=9)
    assert qorder(1, a, b) == ["b", "a"]


def test_dominant_share_with_the_job_beats_without() -> None:
    # with the job (2 GPUs): a 4/8 = .5, b 3/4 = .75 -> a first; without it they tie
    # (2/8 = 1/4) and b, the older, would win
    a = q("a", allocated=G(gpu=2), fair_share=G(gpu=8), created=9)
    b = q("b", allocated=G(gpu=1), fair_share=G(gpu=4), created=0)
    assert qorder(2, a, b) == ["a", "b"]


def test_smaller_dominant_share_without_the_job_breaks_a_tie() -> None:
    # with the job (4 GPUs) a 6/12 = b 5/10 = .5; without it a 2/12 > b 1/10 -> b first,
    # although a is older
    a = q("a", allocated=G(gpu=2), fair_share=G(gpu=12), created=0)
    b = q("b", allocated=G(gpu=1), fair_share=G(gpu=10), created=9)
    assert qorder(4, a, b) == ["b", "a"]


def test_older_queue_last_rule() -> None:
    a = q("a", allocated=G(gpu=1), fair_share=G(gpu=4), created=5)
    b = q("b", allocated=G(gpu=1), fair_share=G(gpu=4), created=1)
    assert qorder(1, a, b) == ["b", "a"]


# ----------------------------------------------------------- JobPicker
def picks(snap_jobs: list[Job], queues: list[Queue], gpus: int = 100) -> list[str]:
    s = open_session(snapshot([node("n", gpus=gpus)], queues, snap_jobs))
    picker = JobPicker(s, [j for j in s.jobs.values() if j.pending_tasks], lambda j: demand(s, j))
    out = []
    while (j := picker.pop()) is not None:
        out.append(j.name)
    return out


def test_picker_orders_jobs_inside_a_leaf_by_job_key() -> None:
    qs = [queue("root"), queue("a", "root")]
    jobs = [
        job("late", "a", [task(gpu=1)], created=5),
        job("early", "a", [task(gpu=1)], created=1),
        job("urgent", "a", [task(gpu=1)], priority=125, created=9),
    ]
    assert picks(jobs, qs) == ["urgent", "early", "late"]


def test_picker_prefers_the_queue_below_its_fair_share() -> None:
    qs = [queue("root"), queue("rich", "root", created=0), queue("poor", "root", created=1)]
    jobs = [
        job("r-run", "rich", [running("n", gpu=1) for _ in range(3)], min_member=1),
        job("r", "rich", [task(gpu=1)], created=0),
        job("p", "poor", [task(gpu=1)], created=9),
    ]
    assert picks(jobs, qs, gpus=4) == ["p", "r"]


def test_parent_queue_is_judged_by_its_best_child() -> None:
    # Both parents ask for 2 GPUs of a 100-GPU cluster, so their keys tie until age:
    # p2 is older and goes first. Inside p1, the priority-200 leaf beats the older one.
    qs = [
        queue("root"),
        queue("p1", "root", created=5),
        queue("p2", "root", created=1),
        queue("p1-lo", "p1", priority=50, created=0),
        queue("p1-hi", "p1", priority=200, created=9),
        queue("p2-x", "p2"),
    ]
    jobs = [
        job("lo", "p1-lo", [task(gpu=1)]),
        job("hi", "p1-hi", [task(gpu=1)]),
        job("x1", "p2-x", [task(gpu=1)], created=1),
        job("x2", "p2-x", [task(gpu=1)], created=2),
    ]
    assert picks(jobs, qs) == ["x1", "x2", "hi", "lo"]


def test_parent_with_smaller_dominant_share_goes_first() -> None:
    # p1 asks 2 (fair share 2, job of 1 -> 0.5), p2 asks 1 (fair share 1 -> 1.0): p1 first
    # although p2 is older.
    qs = [
        queue("root"),
        queue("p1", "root", created=5),
        queue("p2", "root", created=1),
        queue("p1-a", "p1"),
        queue("p2-x", "p2"),
    ]
    jobs = [
        job("a1", "p1-a", [task(gpu=1)], created=0),
        job("a2", "p1-a", [task(gpu=1)], created=1),
        job("x", "p2-x", [task(gpu=1)]),
    ]
    assert picks(jobs, qs) == ["a1", "a2", "x"]
