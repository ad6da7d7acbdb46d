"""Task, Job and Node clones: the operator copies every parsed pod, PodGroup and node
each cycle from what it parsed before, so each clone is written out field by field;
these check that no field is left out and that what a session changes is the copy's own."""

from __future__ import annotations

import pytest

from kai_py.scheduler.model import GpuGroup, Job, Node, Task, TaskStatus
from kai_py.scheduler.resources import Res

# Every field is set to a sentinel of another type, which compiled classes refuse.
pytestmark = pytest.mark.interpreted


def _sentinels(obj: object, slots: tuple[str, ...], skip: set[str]) -> None:
    for i, name in enumerate(slots):
        if name not in skip:
            object.__setattr__(obj, name, ("sentinel", i))  # a value no default has


def _same(clone: object, original: object, slots: tuple[str, ...], skip: set[str]) -> None:
    for name in slots:
        if name not in skip:
            assert getattr(clone, name) == getattr(original, name), name


def test_task_clone_copies_every_field_and_owns_its_request() -> None:
    task = Task(uid="u", namespace="ns", name="p", job_uid="j", request=Res(1, 2, 3))
    _sentinels(task, Task.__slots__, {"request"})
    clone = task.clone()
    _same(clone, task, Task.__slots__, {"request"})
    assert clone.request == task.request and clone.request is not task.request
    clone.request.add(Res(1, 1, 1))
    clone.status = TaskStatus.ALLOCATED
    assert task.request == Res(1, 2, 3) and task.status == (
        "sentinel",
        Task.__slots__.index("status"),
    )


def test_job_clone_copies_every_field_and_owns_its_lists() -> None:
    task = Task(uid="u", namespace="ns", name="p", job_uid="j", request=Res(1, 0, 0))
    gated = Task(uid="g", namespace="ns", name="q", job_uid="j", request=Res(), gates=("x",))
    job = Job("j", "ns", "pg", "q", 1, True, 1, 0.0, tasks=[task], errors=["bad"], gated=[gated])
    lists = {"tasks", "errors", "gated"}
    _sentinels(job, Job.__slots__, lists)
    clone = job.clone()
    _same(clone, job, Job.__slots__, set())
    clone.tasks.append(task)
    clone.errors.append("worse")
    clone.gated.append(task)
    assert job.tasks == [task] and job.errors == ["bad"] and job.gated == [gated]
    assert clone.tasks[0] is task  # the tasks themselves are shared


def test_node_clone_copies_every_field_and_owns_its_session_state() -> None:
    extended = {"extended_used", "extended_releasing", "extended_pipelined"}
    owned = {"allocatable", "used", "releasing", "pipelined", "groups", "tasks", *extended}
    node = Node("n", Res(8, 8, 8))
    _sentinels(node, Node.__slots__, owned)
    for name in extended:
        setattr(node, name, {"rdma/ib": 1.0})
    node.used.add(Res(1, 1, 1))
    node.groups["g"] = GpuGroup("g", used=0.5)
    node.tasks["t"] = Task(uid="t", namespace="ns", name="p", job_uid="j", request=Res())
    clone = node.clone()
    _same(clone, node, Node.__slots__, set())
    clone.allocatable.sub(Res(1, 1, 1))
    clone.used.add(Res(1, 1, 1))
    clone.groups["g"].used = 1.0
    clone.groups["h"] = GpuGroup("h")
    del clone.tasks["t"]
    clone.change_extended({"rdma/ib": 1.0}, 1.0, True, True)
    clone.change_extended({"rdma/ib": 1.0}, 1.0, False, False)
    assert all(getattr(node, name) == {"rdma/ib": 1.0} for name in extended)
    assert node.allocatable == Res(8, 8, 8) and node.used == Res(1, 1, 1)
    assert node.groups == {"g": GpuGroup("g", used=0.5)} and "t" in node.tasks
