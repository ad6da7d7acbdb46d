"""Extension points, in the spirit of the kube-scheduler framework.

Plugins (``kai_py.scheduler.plugins``) contribute functions to named
extension points; actions call the extension points and never a plugin by
name. ``kai_py.scheduler.plugins.default_framework`` registers the built-in
plugins in order, and a caller may add its own (for example a predicate for a custom device).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kai_py.scheduler.model import Job, Node, Queue, Task, Unit
from kai_py.scheduler.reasons import Reason
from kai_py.scheduler.resources import Res

if TYPE_CHECKING:
    from kai_py.scheduler.session import Session

# (task, node) -> None when the task may run there, else a kube-scheduler style phrase.
Predicate = Callable[[Task, Node], "str | None"]
# Sort keys: smaller first.
JobOrder = Callable[[Job], tuple[object, ...]]
QueueOrder = Callable[[Queue, Res], tuple[object, ...]]
# (session, job, what its next step asks for, whether limits apply) -> why not, or None.
CapacityCheck = Callable[["Session", Job, Res, bool], "Reason | None"]
# (session, victim job, action) -> may this job be a victim of this action at all?
VictimFilter = Callable[["Session", Job, str], bool]
# (session, preemptor, the victims of a scenario, action) -> is the scenario acceptable?
ScenarioValidator = Callable[["Session", Job, Sequence[Unit], str], bool]


def _no_order(_: object, *__: object) -> tuple[object, ...]:
    return ()


@dataclass(slots=True)
class Framework:
    placement: str = "binpack"
    card_placement: str = "binpack"  # cards of shared pods (KAI's gpupack / gpuspread)
    predicates: list[tuple[str, Predicate]] = field(default_factory=list)
    job_order: JobOrder = _no_order
    queue_order: QueueOrder = _no_order
    capacity_checks: list[tuple[str, CapacityCheck]] = field(default_factory=list)
    victim_filters: list[tuple[str, VictimFilter]] = field(default_factory=list)
    validators: list[tuple[str, ScenarioValidator]] = field(default_factory=list)

    # ------------------------------------------------------------ calls
    def check_node(self, task: Task, node: Node) -> str | None:
        for _, predicate in self.predicates:
            why = predicate(task, node)
            if why is not None:
                return why
        return None

    def check_capacity(
        self, session: Session, job: Job, demand: Res, check_limit: bool = True
    ) -> Reason | None:
        for _, check in self.capacity_checks:
            why = check(session, job, demand, check_limit)
            if why is not None:
                return why
        return None

    def may_be_victim(self, session: Session, job: Job, action: str) -> bool:
        return all(f(session, job, action) for _, f in self.victim_filters)

    def validate(
        self, session: Session, preemptor: Job, units: Sequence[Unit], action: str
    ) -> bool:
        return all(v(session, preemptor, units, action) for _, v in self.validators)

