"""``kai-py simulate --over-time DURATION``: cycles over simulated time, GPUs per queue.

docs/simulate.md, "Over time". The clock moves by ``step`` between cycles. A
pod annotated ``kai-py.dev/duration`` (a Go duration: ``30m``) succeeds that
long after it started and leaves the cluster; a pod without it runs until
the end. Evicted pods come back pending (as their controllers would recreate
them). When the configuration turns time-based fair share on
(``usageDBConfig``), the queues' usage is kept by the embedded source
(``state.usage``) over the simulated clock, as the operator keeps it over the
real one. The result is a timeline of the GPUs each queue holds, drawn as a
table and, with ``--plot``, as an SVG picture written by the small code below.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, TextIO
from xml.sax.saxutils import escape

from kai_py.api.durations import format_duration, parse_duration
from kai_py.api.objects import meta
from kai_py.scheduler.model import RUNNING, Config, Job, Queue, Snapshot
from kai_py.scheduler.resources import Res
from kai_py.simulate.inputs import load_documents
from kai_py.simulate.simulation import Simulation, parse_now, scheduler_config, to_stdout
from kai_py.state.documents import Document, InputError
from kai_py.state.usage import UsageHistory, capacity_of

DURATION_ANNOTATION: Final = "kai-py.dev/duration"
#: Steps when --step is not given: the run is cut into this many.
DEFAULT_STEPS: Final = 500
#: A picture's colours, one per queue in turn.
_COLOURS: Final = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b")


@dataclass(slots=True)
class Timeline:
    start: float
    step: float
    queues: list[str]  # the leaf queues, in the snapshot's order
    capacity: float  # GPUs of the cluster (the picture's height)
    #: One row per cycle: (seconds since the start, GPUs each queue of ``queues`` holds).
    rows: list[tuple[float, list[float]]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def durations(docs: Sequence[Document]) -> dict[tuple[str, str], float]:
    """(namespace, pod name) -> seconds it runs, from the pods' annotation."""
    out: dict[tuple[str, str], float] = {}
    problems: list[str] = []
    for doc in docs:
        if doc.body.get("kind") != "Pod":
            continue
        m = meta(doc.body)
        value = (m.get("annotations") or {}).get(DURATION_ANNOTATION)
        if value is None:
            continue
        where = f"Pod {m.get('namespace', 'default')}/{m.get('name')}"
        try:
            seconds = parse_duration(str(value))
        except ValueError as exc:
            problems.append(f"{where}: metadata.annotations[{DURATION_ANNOTATION}]: {exc}")
            continue
        if seconds <= 0:
            problems.append(
                f"{where}: metadata.annotations[{DURATION_ANNOTATION}]: must be positive, "
                f"got {value!r}"
            )
            continue
        out[(m.get("namespace") or "default", str(m.get("name")))] = seconds
    if problems:
        raise InputError(problems)
    return out


def held_by_queue(snapshot: Snapshot) -> dict[str, Res]:
    """What each queue holds now (running pods), with its parents' totals."""
    nodes = {n.name: n for n in snapshot.nodes}
    parents = {q.name: q.parent for q in snapshot.queues}
    held: dict[str, Res] = {q.name: Res() for q in snapshot.queues}
    for job in snapshot.jobs:
        for task in job.tasks:
            if task.status is not RUNNING:
                continue
            amount = Res(
                task.request.cpu, task.request.memory, task.gpu_on(nodes.get(task.node_name or ""))
            )
            name: str | None = job.queue
            while name is not None and name in held:
                held[name].add(amount)
                name = parents.get(name)
    return held



def run_over_time(
    docs: list[Document],
    *,
    duration: float,
    step: float | None = None,
    now: float | None = None,
    config: Config | None = None,
) -> Timeline:
    config = config or Config()
    step = step if step is not None else max(1.0, duration / DEFAULT_STEPS)
    if step <= 0 or duration <= 0:
        raise InputError([f"--over-time and --step must be positive, got {duration}, {step}"])
    runs = durations(docs)
    sim = Simulation(docs, now=now, recreate_evicted=True, config=config)
    snapshot = sim.built.snapshot
    warnings: list[str] = []
    history: UsageHistory | None = None
    if config.usage_db is not None:
        if config.usage_db.client_type != "embedded":
            warnings.append(
                f"usageDBConfig.clientType {config.usage_db.client_type}: simulated time has "
                "no Prometheus; the usage is kept by the embedded source instead"
            )
        history = UsageHistory(config.usage_db)
    leaves = [q.name for q in snapshot.queues if not _has_children(q, snapshot.queues)]
    timeline = Timeline(sim.now, step, leaves, capacity_of(snapshot).gpu, warnings=warnings)
    start = sim.now
    t = start
    while t <= start + duration + 1e-9:
        sim.now = snapshot.now = t
        _finish(snapshot, runs, t)
        if history is not None:
            usage = history.usage(t)
            for queue in snapshot.queues:
                queue.usage = usage.get(queue.name, Res())
        sim.step()
        sim._settle()  # what was bound starts now, not at the next step
        held = held_by_queue(snapshot)
        if history is not None:
            history.record(t, held, capacity_of(snapshot))
        timeline.rows.append((t - start, [held[name].gpu for name in leaves]))
        t += step
    return timeline


def _has_children(queue: Queue, queues: Sequence[Queue]) -> bool:
    return any(q.parent == queue.name for q in queues)


def _finish(snapshot: Snapshot, runs: dict[tuple[str, str], float], now: float) -> None:
    """Pods whose duration is over succeed and leave; so do jobs left with no pod."""
    if not runs:
        return
    kept: list[Job] = []
    for job in snapshot.jobs:
        before = len(job.tasks)
        job.tasks = [
            task
            for task in job.tasks
            if not (
                task.status is RUNNING
                and task.start_time is not None
                and (task.namespace, task.name) in runs
                and task.start_time + runs[(task.namespace, task.name)] <= now + 1e-9
            )
        ]
        if job.tasks or before == 0:
            kept.append(job)
    snapshot.jobs[:] = kept


# ----------------------------------------------------------------- output
def write_table(timeline: Timeline, out: TextIO) -> None:
    """A row whenever what the queues hold changes (and the first and the last)."""
    for warning in timeline.warnings:
        out.write(f"Warning: {warning}\n")
    width = max([4, *(len(q) for q in timeline.queues)])
    out.write("TIME".ljust(12) + "".join(q.rjust(width + 2) for q in timeline.queues) + "\n")
    previous: list[float] | None = None
    for i, (at, gpus) in enumerate(timeline.rows):
        if gpus == previous and i != len(timeline.rows) - 1:
            continue
        previous = gpus
        cells = "".join(f"{g:g}".rjust(width + 2) for g in gpus)
        out.write(f"{format_duration(at):<12}{cells}\n")


def write_svg(timeline: Timeline, out: TextIO, title: str = "GPUs per queue over time") -> None:
    """Each leaf queue's GPUs as a step line over time, with axes and a legend."""
    w, h, left, right, top, bottom = 800, 320, 60, 150, 30, 40
    span = timeline.rows[-1][0] if timeline.rows and timeline.rows[-1][0] > 0 else 1.0
    peak = max([timeline.capacity, 1.0, *(g for _, row in timeline.rows for g in row)])

    def x(at: float) -> float:
        return left + (w - left - right) * at / span

    def y(gpus: float) -> float:
        return top + (h - top - bottom) * (1 - gpus / peak)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
        f'viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">',
        '<rect width="100%" height="100%" fill="white"/>',
        f'<text x="{left}" y="18">{escape(title)}</text>',
        f'<line x1="{left}" y1="{y(0)}" x2="{w - right}" y2="{y(0)}" stroke="black"/>',
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{y(0)}" stroke="black"/>',
        f'<text x="{left - 8}" y="{y(peak) + 4}" text-anchor="end">{peak:g}</text>',
        f'<text x="{left - 8}" y="{y(0) + 4}" text-anchor="end">0</text>',
        f'<text x="{left}" y="{h - 12}">0</text>',
        f'<text x="{w - right}" y="{h - 12}" text-anchor="end">{format_duration(span)}</text>',
    ]
    for i, name in enumerate(timeline.queues):
        colour = _COLOURS[i % len(_COLOURS)]
        points: list[str] = []
        for j, (at, row) in enumerate(timeline.rows):
            if j:
                points.append(f"{x(at):.1f},{y(timeline.rows[j - 1][1][i]):.1f}")
            points.append(f"{x(at):.1f},{y(row[i]):.1f}")
        parts.append(
            f'<polyline fill="none" stroke="{colour}" stroke-width="2" '
            f'points="{" ".join(points)}"><title>{escape(name)}</title></polyline>'
        )
        ly = top + 16 * i + 10
        parts.append(
            f'<line x1="{w - right + 10}" y1="{ly}" x2="{w - right + 30}" y2="{ly}" '
            f'stroke="{colour}" stroke-width="2"/>'
        )
        parts.append(f'<text x="{w - right + 35}" y="{ly + 4}">{escape(name)}</text>')
    parts.append("</svg>")
    out.write("\n".join(parts) + "\n")


def run_cli(
    *,
    paths: Sequence[Path],
    over_time: str,
    step: str | None,
    plot: Path | None,
    now: str | None,
    placement: str | None,
    actions: str | None,
    config_file: Path | None,
) -> int:
    """``kai-py simulate --over-time``: the table on standard output, the picture in ``plot``."""
    try:
        duration = _positive(over_time, "--over-time")
        config = scheduler_config(placement=placement, actions=actions, config_file=config_file)
        timeline = run_over_time(
            load_documents(paths),
            duration=duration,
            step=_positive(step, "--step") if step is not None else None,
            now=parse_now(now) if now else None,
            config=config,
        )
    except InputError as exc:
        for problem in exc.problems:
            print(f"error: {problem}", file=sys.stderr)
        return 2
    to_stdout(lambda out: write_table(timeline, out))
    if plot is not None:
        with plot.open("w", encoding="utf-8") as out:
            write_svg(timeline, out)
        print(f"wrote {plot}", file=sys.stderr)
    return 0


def _positive(text: str, flag: str) -> float:
    try:
        seconds = parse_duration(text)
    except ValueError as exc:
        raise InputError([f"{flag}: {exc}"]) from None
    if seconds <= 0:
        raise InputError([f"{flag}: must be positive, got {text!r}"])
    return seconds
