"""The sub-group tree of one job: counts per leaf, the gang rule at every level, the
pods to place next and the pods a victim search takes together.

A leaf is satisfied with ``min_member`` of its pods, a mid-level sub-group (and the
PodGroup, the root, named ``None`` here) with ``min_sub_group`` of its direct children
satisfied (all of them when unset). Only jobs with sub-groups come here: the common
job's gang stays ``Job.min_member`` pods, with no cost of its own.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable

from kai_py.api import keys
from kai_py.scheduler.model import (
    ALLOCATED,
    PENDING,
    PIPELINED,
    RELEASING,
    RUNNING,
    Job,
    SubGroups,
    Task,
)

Counts = dict[str, int]  # leaf name -> pods counted (placed, alive...)
_ORDER = operator.attrgetter("order")  # the order a job's pods are placed in


def leaf_name(groups: SubGroups, task: Task) -> str | None:
    """The leaf sub-group ``task`` belongs to (its ``kai.scheduler/subgroup-name`` label,
    ``default`` without one), or None when that names no leaf of the tree."""
    name = task.labels.get(keys.SUBGROUP_LABEL, keys.DEFAULT_SUBGROUP)
    group = groups.groups.get(name)
    return name if group is not None and not group.children else None


def children(groups: SubGroups, name: str | None) -> tuple[str, ...]:
    return groups.top if name is None else groups.groups[name].children


def needs(groups: SubGroups, name: str | None) -> int:
    """Members ``name`` needs satisfied: pods for a leaf, direct children otherwise."""
    if name is None:
        return len(groups.top) if groups.min_sub_group is None else groups.min_sub_group
    group = groups.groups[name]
    if not group.children:
        return group.min_member
    return len(group.children) if group.min_sub_group is None else group.min_sub_group


def members(groups: SubGroups, name: str | None, counts: Counts) -> int:
    """Members of ``name`` that count: its counted pods (a leaf) or satisfied children."""
    if name is not None and not groups.groups[name].children:
        return counts.get(name, 0)
    return sum(1 for child in children(groups, name) if satisfied(groups, child, counts))


def satisfied(groups: SubGroups, name: str | None, counts: Counts) -> bool:
    return members(groups, name, counts) >= needs(groups, name)


def min_pods(groups: SubGroups, name: str | None = None) -> int:
    """The fewest pods that satisfy ``name``: its cheapest children's, as many as it needs."""
    if name is not None and not groups.groups[name].children:
        return groups.groups[name].min_member
    cheapest = sorted(min_pods(groups, child) for child in children(groups, name))
    return sum(cheapest[: needs(groups, name)])


def count(job: Job, statuses: Callable[[Task], bool]) -> Counts:
    assert job.subgroups is not None
    counts: Counts = {}
    for task in job.tasks:
        if statuses(task):
            leaf = leaf_name(job.subgroups, task)
            if leaf is not None:
                counts[leaf] = counts.get(leaf, 0) + 1
    return counts


def is_placed(task: Task) -> bool:
    status = task.status
    return status is RUNNING or status is ALLOCATED or status is PIPELINED


def is_active(task: Task) -> bool:
    """Placed, or still holding what it was placed on (a pod being deleted is still
    the gang's, as the stale gang rule counts it)."""
    return is_placed(task) or task.status is RELEASING


def is_alive(task: Task) -> bool:
    return task.status is not RELEASING


def order_key(groups: SubGroups, name: str, counts: Counts) -> tuple[int, int, float]:
    """The order sub-groups are served in, as KAI's subgrouporder plugin: those below
    their minimum first; then required ones (a minimum above 0) before optional ones;
    optional ones with fewer members first, required ones with the lower share of
    their minimum first. Ties keep the order of the spec (the sort is stable)."""
    have, need = members(groups, name, counts), needs(groups, name)
    if have < need:
        return (0, 0, 0.0)
    if need == 0:
        return (1, 1, float(have))
    return (1, 0, have / need)


def ordered(groups: SubGroups, name: str | None, counts: Counts) -> list[str]:
    """The direct children of ``name`` in the order they are served (``order_key``)."""
    return sorted(children(groups, name), key=lambda child: order_key(groups, child, counts))


_ordered = ordered


#: Recent jobs with sub-groups, by identity (a session's jobs are its own copies; the
#: job is held, so its id is not reused): their pods by leaf in placing order (fixed once
#: the job is built), and their last step with the version it was found at (a job's
#: version is bumped on every change of one of its pods in a session). A step is asked
#: for several times a turn (its size, its demand, its pods), over every pod of the job.
_BY_LEAF: dict[int, tuple[Job, int, list[tuple[str, Task]]]] = {}
_STEPS: dict[int, tuple[Job, int, tuple[list[Task], int]]] = {}
_KEPT = 512  # jobs remembered before both are emptied


def forget() -> None:
    """Drop what earlier sessions found: a job given to a new session may have had its
    pods changed in between without a change of version."""
    _BY_LEAF.clear()
    _STEPS.clear()


def _by_leaf(job: Job, groups: SubGroups) -> list[tuple[str, Task]]:
    """The job's pods that belong to a leaf, with it, in placing order."""
    known = _BY_LEAF.get(id(job))
    if known is not None and known[0] is job and known[1] == len(job.tasks):
        return known[2]
    found = []
    for task in sorted(job.tasks, key=_ORDER):
        leaf = leaf_name(groups, task)
        if leaf is not None:
            found.append((leaf, task))
    if len(_BY_LEAF) >= _KEPT:
        _BY_LEAF.clear()
    _BY_LEAF[id(job)] = (job, len(job.tasks), found)
    return found


def next_step(job: Job) -> tuple[list[Task], int]:
    """The pods to place together now and how many must be: every unsatisfied level takes
    the first children it needs (in sub-group order) to their minimums; once the whole
    tree is satisfied, one more pod of the first sub-group with a pending one (an elastic
    extra). The list is shorter than the count when a leaf has too few pending pods.
    Callers must not change the list."""
    groups = job.subgroups
    assert groups is not None
    known = _STEPS.get(id(job))
    if known is not None and known[0] is job and known[1] == job.version:
        return known[2]
    counts: Counts = {}
    pending: dict[str, list[Task]] = {}
    for leaf, task in _by_leaf(job, groups):
        status = task.status
        if status is PENDING:
            pending.setdefault(leaf, []).append(task)
        elif status is RUNNING or status is ALLOCATED or status is PIPELINED:
            counts[leaf] = counts.get(leaf, 0) + 1
    chosen: list[Task] = []
    required = _collect(groups, None, counts, pending, chosen)
    if len(_STEPS) >= _KEPT:
        _STEPS.clear()
    _STEPS[id(job)] = (job, job.version, (chosen, required))
    return chosen, required


def _collect(
    groups: SubGroups,
    name: str | None,
    counts: Counts,
    pending: dict[str, list[Task]],
    chosen: list[Task],
) -> int:
    """Add to ``chosen`` what ``name`` places next; returns how many pods that must be."""
    if name is not None and not groups.groups[name].children:
        have, need = counts.get(name, 0), groups.groups[name].min_member
        waiting = pending.get(name, [])
        if have >= need:  # elastic: one more, if there is one
            chosen.extend(waiting[:1])
            return min(1, len(waiting))
        chosen.extend(waiting[: need - have])
        return need - have
    ordered = _ordered(groups, name, counts)
    if not satisfied(groups, name, counts):
        required = 0
        for child in ordered[: needs(groups, name)]:
            if not satisfied(groups, child, counts):
                required += _collect(groups, child, counts, pending, chosen)
        return required
    for child in ordered:  # satisfied: the first child with a pod to place
        before = len(chosen)
        required = _collect(groups, child, counts, pending, chosen)
        if len(chosen) > before:
            return required
    return 0


def shortfall(job: Job, counts: Counts) -> str:
    """The first sub-group below its minimum, with numbers: ``subgroup decode needs 4
    pods, 2 fit`` (a leaf) or ``subgroup prefill needs 2 of its 3 sub-groups, 1 fit``."""
    groups = job.subgroups
    assert groups is not None
    return _shortfall(groups, None, counts) or "every sub-group is at its minimum"


def _shortfall(groups: SubGroups, name: str | None, counts: Counts) -> str | None:
    if satisfied(groups, name, counts):
        return None
    for child in _ordered(groups, name, counts):
        found = _shortfall(groups, child, counts)
        if found is not None:
            return found
    have, need = members(groups, name, counts), needs(groups, name)
    if name is not None and not groups.groups[name].children:
        return f"subgroup {name} needs {need} pods, {have} fit"
    what = "PodGroup" if name is None else f"subgroup {name}"
    kids = len(children(groups, name))
    return f"{what} needs {need} of its {kids} sub-groups, {have} fit"


def not_ready(job: Job) -> str | None:
    """Why the job cannot start yet for want of pods, or None: a leaf is ready with
    ``min_member`` pods that exist (pods held by scheduling gates are not placed, so do
    not count), a level with as many ready children as it needs."""
    groups = job.subgroups
    assert groups is not None
    counts = count(job, is_alive)
    if satisfied(groups, None, counts):
        return None
    found = _shortfall(groups, None, counts) or ""
    return found.replace(" fit", " exist")


def unready_leaves(job: Job) -> list[tuple[str, int, int, int]]:
    """Leaves with fewer pods than their minimum, in the order of the spec: (name,
    minMember, pods that exist, of which held by scheduling gates)."""
    groups = job.subgroups
    assert groups is not None
    alive = count(job, is_alive)
    gated: Counts = {}
    for task in job.gated:
        leaf = leaf_name(groups, task)
        if leaf is not None:
            gated[leaf] = gated.get(leaf, 0) + 1
    found = []
    for name, group in groups.groups.items():
        if not group.children and alive.get(name, 0) < group.min_member:
            have = alive.get(name, 0) + gated.get(name, 0)
            found.append((name, group.min_member, have, gated.get(name, 0)))
    return found


def stale(job: Job) -> str | None:
    """Why a running job counts as stale (its placed and releasing pods no longer
    satisfy the tree), or None."""
    groups = job.subgroups
    assert groups is not None
    counts = count(job, is_active)
    if satisfied(groups, None, counts):
        return None
    return (_shortfall(groups, None, counts) or "").replace(" fit", " run")


def eviction_steps(job: Job, held: Iterable[Task]) -> list[list[Task]]:
    """The pods a victim search may take from ``job`` one step at a time, cheapest first,
    before it takes the whole job: one elastic extra of a leaf above its minimum, or a
    whole child sub-group its parent can do without (the least needed first, the last
    placed pod first). A step never leaves a sub-group below its minimum."""
    groups = job.subgroups
    assert groups is not None
    by_leaf: dict[str, list[Task]] = {}
    for task in held:
        leaf = leaf_name(groups, task)
        if leaf is not None:
            by_leaf.setdefault(leaf, []).append(task)
    for tasks in by_leaf.values():
        tasks.sort(key=_ORDER, reverse=True)
    steps: list[list[Task]] = []
    while True:
        counts = {leaf: len(tasks) for leaf, tasks in by_leaf.items()}
        step = _elastic_eviction(groups, None, counts, by_leaf)
        if not step:
            return steps
        taken = {t.uid for t in step}
        for leaf, tasks in by_leaf.items():
            by_leaf[leaf] = [t for t in tasks if t.uid not in taken]
        steps.append(step)


def _elastic_eviction(
    groups: SubGroups, name: str | None, counts: Counts, by_leaf: dict[str, list[Task]]
) -> list[Task]:
    if name is not None and not groups.groups[name].children:
        if counts.get(name, 0) > groups.groups[name].min_member:
            return by_leaf[name][:1]
        return []
    have = members(groups, name, counts)
    if have == 0:
        return []
    ordered = _ordered(groups, name, counts)
    ordered.reverse()  # the least needed first
    if _has_surplus(groups, name, counts):
        for child in ordered:
            step = _elastic_eviction(groups, child, counts, by_leaf)
            if step:
                return step
    if needs(groups, name) < have:
        for child in ordered:
            step = _all_of(groups, child, by_leaf)
            if step:
                return step
    return []


def _has_surplus(groups: SubGroups, name: str | None, counts: Counts) -> bool:
    if name is not None and not groups.groups[name].children:
        return counts.get(name, 0) > groups.groups[name].min_member
    if members(groups, name, counts) > needs(groups, name):
        return True
    return any(_has_surplus(groups, child, counts) for child in children(groups, name))


def _all_of(groups: SubGroups, name: str, by_leaf: dict[str, list[Task]]) -> list[Task]:
    if not groups.groups[name].children:
        return list(by_leaf.get(name, ()))
    found: list[Task] = []
    for child in groups.groups[name].children:
        found.extend(_all_of(groups, child, by_leaf))
    return found
