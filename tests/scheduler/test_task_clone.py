"""Task.clone: the operator clones every parsed pod each cycle, so it is written out
field by field; this checks that no field is left out and that the copy is separate."""

from __future__ import annotations

from kai_py.scheduler.model import Task, TaskStatus
from kai_py.scheduler.resources import Res


def test_clone_copies_every_field_and_owns_its_request() -> None:
    task = Task(uid="u", namespace="ns", name="p", job_uid="j", request=Res(1, 2, 3))
    for i, name in enumerate(Task.__slots__):
        if name != "request":
            object.__setattr__(task, name, ("sentinel", i))  # a value no default has
    clone = task.clone()
    for name in Task.__slots__:
        if name != "request":
            assert getattr(clone, name) == getattr(task, name), name
    assert clone.request == task.request and clone.request is not task.request
    clone.request.add(Res(1, 1, 1))
    clone.status = TaskStatus.ALLOCATED
    assert task.request == Res(1, 2, 3) and task.status == (
        "sentinel",
        Task.__slots__.index("status"),
    )
