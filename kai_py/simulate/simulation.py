"""``kai-py simulate``: run scheduling cycles offline on manifests.

Between cycles the outcome is written back as a cluster would change: a
bound pod runs on its node, a pipelined pod goes back to pending (its node
forgotten) to be decided again, an evicted pod is gone (or, with
``recreate_evicted``, comes back as a new pending pod of the same name, as
its controller would recreate it). Pods being deleted in the input are
Releasing: they hold their resources and never come back.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from kai_py.api import keys
from kai_py.api.objects import meta, parse_time
from kai_py.conf.schedconfig import load_config, parse_actions
from kai_py.scheduler.cycle import run_cycle
from kai_py.scheduler.model import Config, Job, Task, TaskStatus
from kai_py.scheduler.session import Decisions, Event, Eviction
from kai_py.simulate.inputs import load_documents
from kai_py.simulate.pools import of_pool
from kai_py.state.builder import Built, build
from kai_py.state.documents import Document, InputError
from kai_py.state.partition import Partition

MAX_CYCLES = 10


@dataclass(slots=True)
class EvictionRecord:
    pod: str
    action: str
    by: str | None
    cycle: int
    message: str


@dataclass(slots=True)
class Outcome:
    cycles: int
    built: Built
    statuses: dict[str, str]  # task uid -> status word in the output
    evicted: dict[str, Task]  # pods evicted and gone, by key
    moved: dict[str, str] = field(default_factory=dict)  # task uid -> its new node (last cycle)
    evictions: list[EvictionRecord] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    last: Decisions | None = None
    #: The cycle of each of ``events`` (0: found while reading the input).
    event_cycles: list[int] = field(default_factory=list)


def latest_time(docs: Sequence[Document]) -> float:
    """The default clock: the latest timestamp in the input, so runs are repeatable."""
    latest = 0.0
    for doc in docs:
        m = meta(doc.body)
        status = doc.body.get("status") or {}
        for value in (
            m.get("creationTimestamp"),
            status.get("startTime") if isinstance(status, dict) else None,
        ):
            try:
                t = parse_time(value)
            except ValueError:
                continue
            if t is not None:
                latest = max(latest, t)
    return latest


class Simulation:
    def __init__(
        self,
        docs: list[Document],
        *,
        now: float | None = None,
        placement: str = "binpack",
        recreate_evicted: bool = False,
        config: Config | None = None,
    ) -> None:
        self.now = latest_time(docs) if now is None else now
        self.recreate_evicted = recreate_evicted
        self.built = build(docs, self.now, config or Config(placement=placement))
        self.jobs = {j.uid: j for j in self.built.snapshot.jobs}
        self.outcome = Outcome(0, self.built, {}, {}, events=list(self.built.events))
        self.outcome.event_cycles = [0] * len(self.built.events)
        self._recreated = 0
        self._last_pipelined: set[tuple[str, str | None]] = set()

    def run(self, cycles: int | None = None) -> Outcome:
        """Exactly ``cycles`` cycles, or until a cycle changes nothing (at most 10)."""
        limit = cycles if cycles is not None else MAX_CYCLES
        for _ in range(limit):
            changed = self.step()
            if cycles is None and not changed:
                break
        return self.outcome

    def step(self) -> bool:
        """One cycle; True when it decided anything new."""
        out = self.outcome
        out.cycles += 1
        self._settle()
        decisions = run_cycle(self.built.snapshot)
        out.last = decisions
        out.moved = {}
        for task in decisions.binds:
            out.statuses[task.uid] = "Bound"
        for task in decisions.pipelined:
            out.statuses[task.uid] = "Pipelined"
        for ev in decisions.evictions:
            if ev.task.job_uid in self.jobs:
                self.jobs[ev.task.job_uid].last_evicted = self.now
            out.statuses[ev.task.uid] = "Moved" if ev.moved_to else "Evicted"
            if ev.moved_to:
                out.moved[ev.task.uid] = ev.moved_to
            out.evictions.append(self._record(ev, out.cycles))
        out.events.extend(decisions.events)
        out.event_cycles.extend([out.cycles] * len(decisions.events))
        changed = bool(decisions.binds or decisions.evictions or decisions.ungated)
        if decisions.pipelined and not self._same_pipelining(decisions):
            changed = True
        self._last_pipelined = {(t.uid, t.node_name) for t in decisions.pipelined}
        return changed

    def _same_pipelining(self, decisions: Decisions) -> bool:
        return {(t.uid, t.node_name) for t in decisions.pipelined} == self._last_pipelined

    @staticmethod
    def _record(ev: Eviction, cycle: int) -> EvictionRecord:
        return EvictionRecord(
            ev.task.key, ev.action, ev.by.key if ev.by else None, cycle, ev.message
        )

    def _settle(self) -> None:
        """Write the previous cycle back as the cluster would have changed."""
        if self.outcome.last is not None:
            for uid, since in self.outcome.last.stale_since.items():
                if uid in self.jobs:
                    self.jobs[uid].stale_since = since
            self._lift_gates(self.outcome.last.ungated)
        for job in self.jobs.values():
            kept: list[Task] = []
            for task in job.tasks:
                if task.status is TaskStatus.ALLOCATED:
                    task.nominated_node = None
                    task.status = TaskStatus.RUNNING
                    task.start_time = self.now
                    self.outcome.statuses.pop(task.uid, None)
                elif task.status is TaskStatus.PIPELINED:
                    # Back to Pending, as KAI does; a pod that waited for resources being
                    # freed is nominated to that node (as kube-scheduler's
                    # status.nominatedNodeName) so that it gets first claim on them.
                    task.nominated_node = None if task.claim_now else task.node_name
                    task.status, task.node_name, task.gpu_groups = TaskStatus.PENDING, None, ()
                    task.gpu_uuids = ()
                    self.outcome.statuses.pop(task.uid, None)
                elif task.status is TaskStatus.EVICTED:
                    self.outcome.evicted[task.key] = task
                    if self.recreate_evicted:
                        kept.append(self._recreate(task))
                    continue
                kept.append(task)
            job.tasks = kept

    def _lift_gates(self, ungated: list[Task]) -> None:
        """The writer's gate removal: kai-py's gate goes (only it), the admission time is
        noted, and a pod with no gate left joins its job's pods."""
        for task in ungated:
            job = self.jobs.get(task.job_uid)
            if job is None:
                continue
            task.gates = tuple(g for g in task.gates if g != keys.QUEUE_ADMISSION_GATE)
            task.admitted_at = self.now
            if not task.gates and any(t is task for t in job.gated):
                job.gated = [t for t in job.gated if t is not task]
                job.tasks.append(task)

    def _recreate(self, task: Task) -> Task:
        self._recreated += 1
        self.outcome.evicted.pop(task.key, None)
        return Task(
            uid=f"{task.uid}~{self._recreated}",
            namespace=task.namespace,
            name=task.name,
            job_uid=task.job_uid,
            request=task.request.copy(),
            extended=task.extended,
            gpu_fraction=task.gpu_fraction,
            gpu_memory_mib=task.gpu_memory_mib,
            gpu_devices=task.gpu_devices,
            node_selector=task.node_selector,
            affinity=task.affinity,
            tolerations=task.tolerations,
            created=self.now,
            role=task.role,
            task_priority=task.task_priority,
            pin=task.pin,
        )


# ----------------------------------------------------------------- output
def pod_entries(outcome: Outcome) -> dict[str, dict[str, Any]]:
    pods: dict[str, dict[str, Any]] = {}
    for job in outcome.built.snapshot.jobs:
        for task in job.tasks:
            pods[task.key] = _pod_entry(task, outcome.statuses.get(task.uid))
            if task.uid in outcome.moved:
                pods[task.key]["node"] = outcome.moved[task.uid]
        for task in job.gated:  # pending until their gates are removed
            pods[task.key] = _pod_entry(task, None)
    for key, task in outcome.evicted.items():
        if key not in pods:
            entry = _pod_entry(task, "Evicted")
            entry["node"] = None
            pods[key] = entry
    return dict(sorted(pods.items()))


def _pod_entry(task: Task, override: str | None) -> dict[str, Any]:
    status = override or _STATUS_WORD[task.status]
    placed = task.node_name is not None and status != "Pending"
    gpus: dict[str, Any] = {"count": 0, "portion": 0.0, "groups": []}
    if task.is_shared:
        gpus = {
            "count": task.gpu_devices,
            "portion": task.gpu_fraction if task.gpu_fraction else None,
            "groups": list(task.gpu_groups) if placed else [],
        }
        if task.gpu_memory_mib:
            gpus["memory"] = task.gpu_memory_mib
    elif task.request.gpu:
        gpus = {"count": task.request.gpu, "portion": 1.0, "groups": []}
    if placed and task.gpu_uuids:
        gpus["uuids"] = list(task.gpu_uuids)  # the cards, where known (pinned pods)
    return {"status": status, "node": task.node_name if placed else None, "gpus": gpus}


_STATUS_WORD = {
    TaskStatus.PENDING: "Pending",
    TaskStatus.RUNNING: "Running",
    TaskStatus.RELEASING: "Releasing",
    TaskStatus.ALLOCATED: "Bound",
    TaskStatus.PIPELINED: "Pipelined",
    TaskStatus.EVICTED: "Evicted",
}


def queue_entries(outcome: Outcome) -> dict[str, dict[str, dict[str, float]]]:
    """Queue figures at the end of the last cycle."""
    figures = outcome.last.queues if outcome.last is not None else {}
    return {
        name: {
            "deserved": _finite(f.deserved.as_dict()),
            "fairShare": _finite(f.fair_share.as_dict()),
            "allocated": _finite(f.allocated.as_dict()),
        }
        for name, f in sorted(figures.items())
    }


def podgroup_entries(outcome: Outcome) -> dict[str, dict[str, Any]]:
    """Each job's queue, gang size, pods by status and why it waits (last cycle)."""
    why = outcome.last.reasons if outcome.last is not None else {}
    entries: dict[str, dict[str, Any]] = {}
    for job in sorted(outcome.built.snapshot.jobs, key=lambda j: j.key):
        pods = pod_entries_of(outcome, job)
        entries[job.key] = {
            "queue": job.queue,
            "minMember": job.min_member,
            "priority": job.priority,
            "preemptible": job.preemptible,
            "pods": {s: sum(1 for p in pods if p == s) for s in sorted(set(pods))},
            "reasonCodes": [r.code for r in why.get(job.uid, [])],
            "reasons": [r.as_dict() for r in why.get(job.uid, [])],
        }
    return entries


def pod_entries_of(outcome: Outcome, job: Job) -> list[str]:
    placed = [outcome.statuses.get(t.uid) or _STATUS_WORD[t.status] for t in job.tasks]
    return placed + ["Pending"] * len(job.gated)


def _finite(values: dict[str, float]) -> dict[str, float]:
    return {k: (-1.0 if v == float("inf") else round(v, 6)) for k, v in values.items()}


def to_json(outcome: Outcome) -> dict[str, Any]:
    return {
        "cycles": outcome.cycles,
        "pods": pod_entries(outcome),
        "evictions": [
            {"pod": e.pod, "action": e.action, "by": e.by, "cycle": e.cycle, "message": e.message}
            for e in outcome.evictions
        ],
        "events": _events(outcome.events, outcome.event_cycles),
        "queues": queue_entries(outcome),
        "podgroups": podgroup_entries(outcome),
    }


def _events(events: list[Event], cycles: Sequence[int] = ()) -> list[dict[str, Any]]:
    """Events as `kubectl get events` shows them: the same event repeated is one, with a count.

    ``cycle`` is the first cycle that made it (0: found while reading the input).
    """
    merged: dict[tuple[str, str, str, str, str], dict[str, Any]] = {}
    for i, e in enumerate(events):
        key = (e.kind, e.object, e.type, e.reason, e.message)
        if key in merged:
            merged[key]["count"] += 1
        else:
            merged[key] = {
                "kind": e.kind,
                "object": e.object,
                "type": e.type,
                "reason": e.reason,
                "message": e.message,
                "count": 1,
                "cycle": cycles[i] if i < len(cycles) else 0,
            }
    return list(merged.values())


def _table(rows: list[list[str]], out: TextIO) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        out.write(
            "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() + "\n"
        )


def _gpu_text(gpus: dict[str, Any]) -> str:
    text = _share_text(gpus)
    uuids = gpus.get("uuids")
    if uuids:
        # The pinned cards: the first, and how many more (every UUID made the table
        # hundreds of columns wide; --output json lists them all).
        more = f" +{len(uuids) - 1} more" if len(uuids) > 1 else ""
        text += f" [{uuids[0]}{more}]"
    return text


def _share_text(gpus: dict[str, Any]) -> str:
    if gpus.get("memory"):
        return f"{gpus['memory']:g} MiB x{gpus['count']}" + (
            f" on {','.join(gpus['groups'])}" if gpus["groups"] else ""
        )
    if gpus.get("portion") not in (None, 1.0, 0.0):
        return f"{gpus['portion']:g} x{gpus['count']}" + (
            f" on {','.join(gpus['groups'])}" if gpus["groups"] else ""
        )
    return f"{gpus['count']:g}" if gpus["count"] else "-"


def _queue_tree(outcome: Outcome, names: Sequence[str]) -> list[tuple[str, str]]:
    """(queue, the name drawn with its place in the tree), parents before children."""
    parent = {q.name: q.parent for q in outcome.built.snapshot.queues}
    children: dict[str | None, list[str]] = {}
    for name in names:
        above = parent.get(name)
        children.setdefault(above if above in names else None, []).append(name)
    drawn: list[tuple[str, str]] = []

    def walk(name: str, prefix: str, last: bool, top: bool) -> None:
        drawn.append((name, name if top else f"{prefix}{'└─ ' if last else '├─ '}{name}"))
        below = sorted(children.get(name, []))
        for i, child in enumerate(below):
            walk(
                child,
                "" if top else prefix + ("   " if last else "│  "),
                i == len(below) - 1,
                False,
            )

    for root in sorted(children.get(None, [])):
        walk(root, "", True, True)
    return drawn


def _pending_reasons(data: dict[str, Any], outcome: Outcome) -> dict[str, str]:
    """Pod key -> why its group waits (the first reason of the last cycle)."""
    reasons: dict[str, str] = {}
    groups = data["podgroups"]
    for job in outcome.built.snapshot.jobs:
        first = (groups.get(job.key) or {}).get("reasons") or []
        if first:
            text = f"{first[0].get('reason')}: {first[0].get('message')}"
            for task in [*job.tasks, *job.gated]:
                reasons[task.key] = text
    return reasons


def write_text(outcome: Outcome, out: TextIO) -> None:
    data = to_json(outcome)
    out.write(f"Cycles run: {data['cycles']}\n\nPODS\n")
    why = _pending_reasons(data, outcome)
    rows = [["POD", "STATUS", "NODE", "GPUS", "REASON"]]
    for key, p in data["pods"].items():
        reason = why.get(key, "") if p["status"] == "Pending" else ""
        rows.append([key, p["status"], p["node"] or "-", _gpu_text(p["gpus"]), reason or "-"])
    _table(rows, out)
    out.write(
        "\nQUEUES (GPUs in devices, CPU in cores, memory in GiB; fair share and allocated "
        "of the last cycle; -1 = unlimited)\n"
    )
    qrows = [["QUEUE", "GPU DESERVED", "GPU FAIR SHARE", "GPU ALLOC", "CPU ALLOC", "MEM ALLOC"]]
    queues = data["queues"]
    for name, drawn in _queue_tree(outcome, list(queues)):
        q = queues[name]
        qrows.append(
            [
                drawn,
                f"{q['deserved']['gpu']:g}",
                f"{q['fairShare']['gpu']:g}",
                f"{q['allocated']['gpu']:g}",
                f"{q['allocated']['cpu'] / 1000:g}",
                f"{q['allocated']['memory'] / 2**30:.3g}",
            ]
        )
    _table(qrows, out)
    if data["evictions"]:
        out.write("\nEVICTIONS\n")
        erows = [["CYCLE", "POD", "ACTION", "BY"]]
        for e in data["evictions"]:
            erows.append([str(e["cycle"]), e["pod"], e["action"], e["by"] or "-"])
        _table(erows, out)
    out.write("\nEVENTS (cycle 0: found while reading the input)\n")
    if not data["events"]:
        out.write("(none)\n")
    for e in data["events"]:
        times = f" (x{e['count']})" if e["count"] > 1 else ""
        named = f"{e['kind']} {e['object']}"
        # A message that names its object already (input problems do) is not prefixed again.
        text = e["message"] if f"{named}: " in e["message"] else f"{named}: {e['message']}"
        out.write(f"{e['cycle']:>5}  {e['type']:<8} {e['reason']:<18} {text}{times}\n")


def parse_now(text: str) -> float:
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise InputError(
            [f"--now: not an RFC 3339 time: {text!r} (e.g. 2026-01-01T00:01:00Z)"]
        ) from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.timestamp()


def scheduler_config(
    *,
    placement: str | None = None,
    actions: str | None = None,
    config_file: Path | None = None,
    warn: TextIO | None = None,
) -> Config:
    """The configuration from ``--config``, then ``--placement`` and ``--actions`` over it."""
    config = Config()
    if config_file is not None:
        loaded = load_config(config_file)
        config = loaded.config
        for warning in loaded.warnings:
            print(f"Warning: {warning}", file=warn or sys.stderr)
    if placement is not None:
        config.placement = placement
    if actions is not None:
        config.actions = parse_actions(actions)
    return config


def simulate(
    paths: Sequence[Path],
    *,
    cycles: int | None = None,
    placement: str | None = None,
    now: str | None = None,
    recreate_evicted: bool = False,
    actions: str | None = None,
    config_file: Path | None = None,
    node_pool: Partition | None = None,
    warn: TextIO | None = None,
) -> Outcome:
    config = scheduler_config(placement=placement, actions=actions, config_file=config_file)
    docs = load_documents(paths)
    if node_pool is not None:
        docs, left_out = of_pool(docs, node_pool)
        if left_out:
            # Asked for: one shard's view. Said, so that nothing is left out unseen.
            print(
                f"--node-pool {node_pool.value!r} ({node_pool.selector()}): left out "
                f"{len(left_out)} objects of other pools: {', '.join(left_out[:10])}"
                + (", ..." if len(left_out) > 10 else ""),
                file=warn or sys.stderr,
            )
    sim = Simulation(
        docs,
        now=parse_now(now) if now else None,
        recreate_evicted=recreate_evicted,
        config=config,
    )
    return sim.run(cycles)


def run_cli(
    *,
    paths: Sequence[Path],
    cycles: int | None,
    output: str,
    placement: str | None,
    now: str | None,
    recreate_evicted: bool,
    actions: str | None = None,
    config_file: Path | None = None,
    node_pool: str | None = None,
    node_pool_label: str = keys.NODE_POOL_LABEL,
) -> int:
    if cycles is not None and cycles < 1:
        print("kai-py simulate: --cycles: must be at least 1", file=sys.stderr)
        return 2
    try:
        outcome = simulate(
            paths,
            cycles=cycles,
            placement=placement,
            now=now,
            recreate_evicted=recreate_evicted,
            actions=actions,
            config_file=config_file,
            node_pool=Partition(node_pool_label, node_pool) if node_pool is not None else None,
        )
    except InputError as exc:
        for problem in exc.problems:
            print(f"error: {problem}", file=sys.stderr)
        return 2
    if output == "json":
        to_stdout(lambda out: out.write(json.dumps(to_json(outcome), indent=2) + "\n"))
    else:
        to_stdout(lambda out: write_text(outcome, out))
    return 0


def to_stdout(write: Callable[[TextIO], object]) -> None:
    """``write(sys.stdout)``, then flush. When the reader goes away (`kai-py simulate
    ... | head`): no traceback, and no second error when Python flushes stdout at exit."""
    try:
        write(sys.stdout)
        sys.stdout.flush()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
