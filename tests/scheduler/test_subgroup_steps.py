"""A job with sub-groups has its next step found once per change of its pods (the step is
kept by the job's identity and version); a job given to a new session is read afresh,
even when its pods were changed in between without a change of version."""

from __future__ import annotations

from builders import default_queues, job, node, session, snapshot, task

from kai_py.scheduler.actions.common import needed, next_tasks
from kai_py.scheduler.model import SubGroup, SubGroups, TaskStatus


def _labelled(subgroup: str) -> object:
    t = task(gpu=1)
    t.labels = {"kai.scheduler/subgroup-name": subgroup}
    return t


def test_a_new_session_reads_a_reused_job_afresh() -> None:
    pods = [_labelled("a"), _labelled("a")]
    for t in pods:
        t.status, t.node_name = TaskStatus.RUNNING, "n"
    j = job("j", "q", pods)  # type: ignore[arg-type]
    j.subgroups = SubGroups({"a": SubGroup("a", None, min_member=2)}, ("a",))
    snap = snapshot([node("n", gpus=4)], default_queues("q"), [j])
    session(snap)
    assert needed(j) == 0 and next_tasks(j, 2) == []
    for t in j.tasks:  # back to pending outside any session: the version stays
        t.status, t.node_name = TaskStatus.PENDING, None
    session(snap)
    assert needed(j) == 2 and next_tasks(j, 2) == pods
