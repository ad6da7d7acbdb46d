"""Prometheus metrics: KAI's names and labels, plus kai-py's own.

KAI's scheduler (``pkg/scheduler/metrics``) and queue controller
(``pkg/queuecontroller/metrics``) export their metrics in namespace ``kai``;
the same names, labels, units and buckets are exported here so that
dashboards and alerts written for KAI work on kai-py. kai-py's own metrics
are prefixed ``kai_py_``.

The controllers call the ``record_*`` functions (one line each); this module
sits below the API client (``kai_py.apiclient.kube``), the binder and the
writes, which count their calls here too. Wall-clock timing happens here, never in
``kai_py.scheduler``.
"""

from __future__ import annotations

import collections
import contextlib
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Final, Protocol

from prometheus_client import REGISTRY, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from kai_py.api import keys
from kai_py.scheduler.framework import Framework
from kai_py.scheduler.model import Config, Snapshot
from kai_py.scheduler.resources import Res
from kai_py.scheduler.session import Decisions, Op, SearchCounts, Session

NAMESPACE: Final = "kai"
#: KAI's buckets for task latencies: ExponentialBuckets(5, 2, 10), in milliseconds.
TASK_BUCKETS: Final = tuple(5.0 * 2**i for i in range(10))
QUEUE_LABELS: Final = ("queue_name", "queue_metadata_name", "queue_display_name")
#: The pool of a scheduler serving unlabelled nodes; KAI's eviction counter names the
#: pool of the shard that evicted.
NODE_POOL: Final = "default"

# ---- KAI's scheduler metrics (pkg/scheduler/metrics) ------------------------------------
E2E_LATENCY: Final = Gauge(
    "e2e_scheduling_latency_milliseconds",
    "E2e scheduling latency in milliseconds (scheduling algorithm + binding), as a gauge",
    namespace=NAMESPACE,
)
OPEN_SESSION_LATENCY: Final = Gauge(
    "open_session_latency_milliseconds",
    "Open session latency in milliseconds, including all plugins, as a gauge",
    namespace=NAMESPACE,
)
CLOSE_SESSION_LATENCY: Final = Gauge(
    "close_session_latency_milliseconds",
    "Close session latency in milliseconds, including all plugins, as a gauge",
    namespace=NAMESPACE,
)
ACTION_LATENCY: Final = Gauge(
    "action_scheduling_latency_milliseconds",
    "Action scheduling latency in milliseconds, as a gauge",
    ["action"],
    namespace=NAMESPACE,
)
#: Time-based fair share's Prometheus queries (failed ones too), as KAI's histogram.
USAGE_QUERY_LATENCY: Final = Histogram(
    "usage_query_latency_milliseconds",
    "Usage database query latency histogram in milliseconds",
    namespace=NAMESPACE,
    buckets=TASK_BUCKETS,
)
TASK_SCHEDULING_LATENCY: Final = Histogram(
    "task_scheduling_latency_milliseconds",
    "Task scheduling latency in milliseconds",
    namespace=NAMESPACE,
    buckets=TASK_BUCKETS,
)
TASK_BIND_LATENCY: Final = Histogram(
    "task_bind_latency_milliseconds",
    "Task bind latency histogram in milliseconds",
    namespace=NAMESPACE,
    buckets=TASK_BUCKETS,
)
# KAI registers these counters without the ``_total`` suffix; prometheus_client
# would add one to a Counter, so they are exported as gauges that only grow
# (the samples are the same: name, labels, a rising value).
PODGROUPS_SCHEDULED: Final = Gauge(
    "podgroups_scheduled_by_action",
    "Count of podgroups scheduled per action",
    ["action"],
    namespace=NAMESPACE,
)
PODGROUPS_CONSIDERED: Final = Gauge(
    "podgroups_acted_on_by_action",
    "Count of podgroups tried per action",
    ["action"],
    namespace=NAMESPACE,
)
PREEMPTION_ATTEMPTS: Final = Gauge(
    "total_preemption_attempts",
    "Total preemption attempts in the cluster till now",
    namespace=NAMESPACE,
)
EVICTED_PODS: Final = Counter(
    "pod_group_evicted_pods",  # exported as kai_pod_group_evicted_pods_total
    "Total number of pods evicted per pod group",
    ["podgroup", "namespace", "uid", "nodepool", "action"],
    namespace=NAMESPACE,
)
QUEUE_FAIR_SHARE_CPU: Final = Gauge(
    "queue_fair_share_cpu_cores",
    "CPU Fair share of queue, as a gauge. Value is in Cores",
    QUEUE_LABELS,
    namespace=NAMESPACE,
)
QUEUE_FAIR_SHARE_MEMORY: Final = Gauge(
    "queue_fair_share_memory_gb",
    "Memory Fair share of queue, as a gauge. Value is in GB",
    QUEUE_LABELS,
    namespace=NAMESPACE,
)
QUEUE_FAIR_SHARE_GPU: Final = Gauge(
    "queue_fair_share_gpu",
    "GPU Fair share of queue, as a gauge. Values in GPU devices",
    QUEUE_LABELS,
    namespace=NAMESPACE,
)
QUEUE_CPU_USAGE: Final = Gauge(
    "queue_cpu_usage",
    "CPU usage of queue, as a gauge. kai-py has no usage database: the current allocation, in cores",
    QUEUE_LABELS,
    namespace=NAMESPACE,
)
QUEUE_MEMORY_USAGE: Final = Gauge(
    "queue_memory_usage",
    "Memory usage of queue, as a gauge. kai-py has no usage database: the current allocation, in GB",
    QUEUE_LABELS,
    namespace=NAMESPACE,
)
QUEUE_GPU_USAGE: Final = Gauge(
    "queue_gpu_usage",
    "GPU usage of queue, as a gauge. kai-py has no usage database: the current allocation, in GPUs",
    QUEUE_LABELS,
    namespace=NAMESPACE,
)

# ---- KAI's scheduler internals (its scheduler-internals dashboard) ------------------------
PLUGIN_LATENCY: Final = Gauge(
    "plugin_scheduling_latency_milliseconds",
    "Plugin scheduling latency in milliseconds, as a gauge",
    ["plugin", "OnSession"],
    namespace=NAMESPACE,
)
# Counters in KAI without ``_total`` (see PODGROUPS_SCHEDULED): gauges that only grow.
SCENARIOS_SIMULATED: Final = Gauge(
    "scenarios_simulation_by_action",
    "Count of scenarios simulated per action",
    ["action"],
    namespace=NAMESPACE,
)
SCENARIOS_FILTERED: Final = Gauge(
    "scenarios_filtered_by_action",
    "Count of scenarios filtered per action",
    ["action"],
    namespace=NAMESPACE,
)
SEARCH_JOBS: Final = Counter(
    "scenario_search_jobs",  # exported as kai_scenario_search_jobs_total
    "Count of jobs considered by bounded scenario search.",
    ["action", "result", "reduced_budget"],
    namespace=NAMESPACE,
)
SEARCH_SCENARIOS: Final = Counter(
    "scenario_search_scenarios",  # exported as kai_scenario_search_scenarios_total
    "Count of bounded-search scenarios by state.",
    ["action", "generator", "state"],
    namespace=NAMESPACE,
)
SEARCH_BUDGET_EXHAUSTED: Final = Counter(
    "scenario_search_action_budget_exhausted",
    "Count of action-level scenario search budget exhaustion events.",
    ["action"],
    namespace=NAMESPACE,
)
#: KAI's buckets for a search's duration: ExponentialBuckets(0.001, 2, 16), in seconds.
SEARCH_DURATION: Final = Histogram(
    "scenario_search_duration_seconds",
    "Elapsed generator-search duration in seconds. kai-py's scheduler has no clock: "
    "no observations",
    ["action", "generator", "result"],
    namespace=NAMESPACE,
    buckets=tuple(0.001 * 2**i for i in range(16)),
)
#: The name of kai-py's one scenario generator (victims added in growing steps).
GENERATOR: Final = "steps"


class _Declared(Collector):
    """Families kai-py declares without a series: KAI's search budgets in seconds, where
    kai-py's budget is a count of simulated evictions (a 0 would read as no limit)."""

    FAMILIES: Final = (
        (
            "scenario_search_action_budget_configured_seconds",
            "Configured action scenario "
            "search budget in seconds. kai-py's budget is not in seconds: no series",
        ),
        (
            "scenario_search_generator_budget_configured_seconds",
            "Configured generator "
            "scenario search budget in seconds. kai-py's budget is not in seconds: no series",
        ),
        (
            "scenario_search_job_budget_configured_seconds",
            "Configured per-job scenario "
            "search budget in seconds. kai-py's budget is not in seconds: no series",
        ),
    )

    def collect(self) -> Iterator[Metric]:
        for name, text in self.FAMILIES:
            yield GaugeMetricFamily(f"{NAMESPACE}_{name}", text)


REGISTRY.register(_Declared())

# ---- KAI's queue controller metrics (pkg/queuecontroller/metrics) ------------------------
QUEUE_INFO: Final = Gauge("queue_info", "Queues info", QUEUE_LABELS, namespace=NAMESPACE)
QUEUE_DESERVED_GPUS: Final = Gauge(
    "queue_deserved_gpus", "Queue deserved GPUs", QUEUE_LABELS, namespace=NAMESPACE
)
QUEUE_QUOTA_CPU: Final = Gauge(
    "queue_quota_cpu_cores", "Queue quota CPU", QUEUE_LABELS, namespace=NAMESPACE
)
QUEUE_QUOTA_MEMORY: Final = Gauge(
    "queue_quota_memory_bytes", "Queue quota memory", QUEUE_LABELS, namespace=NAMESPACE
)
QUEUE_ALLOCATED_GPUS: Final = Gauge(
    "queue_allocated_gpus", "Queue allocated GPUs", QUEUE_LABELS, namespace=NAMESPACE
)
QUEUE_ALLOCATED_CPU: Final = Gauge(
    "queue_allocated_cpu_cores", "Queue allocated CPUs", QUEUE_LABELS, namespace=NAMESPACE
)
QUEUE_ALLOCATED_MEMORY: Final = Gauge(
    "queue_allocated_memory_bytes", "Queue allocated memory", QUEUE_LABELS, namespace=NAMESPACE
)

# ---- kai-py's own ------------------------------------------------------------------------
BINDER_REQUESTS: Final = Counter(
    "kai_py_binder_requests",
    "BindRequests the binder handled, by result (succeeded, retry, failed)",
    ["result"],
)
API_ERRORS: Final = Counter(
    "kai_py_api_errors",
    "API requests that failed, by HTTP verb and status code (0: no answer)",
    ["verb", "code"],
)
CACHE_OBJECTS: Final = Gauge(
    "kai_py_cache_objects", "Objects in the scheduler's watch cache, by kind", ["kind"]
)
CYCLES: Final = Counter("kai_py_scheduling_cycles", "Scheduling cycles, by result", ["result"])
GATED_PODS: Final = Gauge(
    "kai_py_queue_admission_gated_pods",
    "Pods held by kai-py's queue-admission gate at the start of the last cycle, by queue",
    ["queue"],
)
ADMITTED_PODS: Final = Counter(
    "kai_py_queue_admission_admitted_pods",
    "Pods whose queue-admission gate kai-py decided to lift, by queue",
    ["queue"],
)
OBJECTS_LEFT_OUT: Final = Gauge(
    "kai_py_objects_left_out",
    "Objects the last cycle left out of its snapshot because they cannot be read, by kind "
    "(each has a Warning Event saying why)",
    ["kind"],
)
#: The kinds an operator's cycle leaves out when one cannot be read (pods and PodGroups
#: stay in, as workloads that are not scheduled, each with its own Warning Event).
LEFT_OUT_KINDS: Final = ("Node", "PriorityClass", "Queue")

_PER_QUEUE: Final = (
    QUEUE_FAIR_SHARE_CPU,
    QUEUE_FAIR_SHARE_MEMORY,
    QUEUE_FAIR_SHARE_GPU,
    QUEUE_CPU_USAGE,
    QUEUE_MEMORY_USAGE,
    QUEUE_GPU_USAGE,
    QUEUE_INFO,
    QUEUE_DESERVED_GPUS,
    QUEUE_QUOTA_CPU,
    QUEUE_QUOTA_MEMORY,
    QUEUE_ALLOCATED_GPUS,
    QUEUE_ALLOCATED_CPU,
    QUEUE_ALLOCATED_MEMORY,
)

# ---- per card (computed when scraped, from ``kai_py.gpu.cards``) ----------------------------
#: The labels of every per-card family: one series per card, whatever runs on it.
CARD_LABELS: Final = ("node", "card", "uuid")
#: The per-pod family's: a series per pod on a card (only with ``card_pods``).
CARD_POD_LABELS: Final = (*CARD_LABELS, "namespace", "pod")


class CardHolder(Protocol):
    @property
    def namespace(self) -> str: ...
    @property
    def pod(self) -> str: ...
    @property
    def share(self) -> float: ...


class CardFigures(Protocol):
    """One card's row (``kai_py.gpu.cards.CardRow``)."""

    @property
    def node(self) -> str: ...
    @property
    def index(self) -> int | None: ...
    @property
    def uuid(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def memory_mib(self) -> float: ...
    @property
    def reservation(self) -> str: ...
    @property
    def holders(self) -> Iterable[CardHolder]: ...
    @property
    def allocated(self) -> float: ...
    @property
    def pinned(self) -> bool: ...


class _Cards:
    """A collector whose figures are computed on each scrape (nothing per cycle)."""

    def __init__(self) -> None:
        self.source: Callable[[], Iterable[CardFigures]] | None = None
        self.card_pods = False

    def describe(self) -> list[Any]:
        return []  # figures come and go with the cards: no fixed description

    def collect(self) -> Iterable[GaugeMetricFamily]:
        # The families are there (empty) before any card is: a dashboard's queries name
        # metrics that exist.
        source = self.source
        info = GaugeMetricFamily(
            "kai_py_gpu_card_info",
            "A GPU card: 1, with its model and the reservation pod holding it (if any)",
            labels=[*CARD_LABELS, "model", "reservation_pod"],
        )
        memory = GaugeMetricFamily(
            "kai_py_gpu_card_memory_bytes", "A GPU card's memory", labels=CARD_LABELS
        )
        allocated = GaugeMetricFamily(
            "kai_py_gpu_card_allocated_share",
            "Share of the card its pods hold (1 = the whole card)",
            labels=CARD_LABELS,
        )
        pods = GaugeMetricFamily(
            "kai_py_gpu_card_pods", "Pods holding (a share of) the card", labels=CARD_LABELS
        )
        pinned = GaugeMetricFamily(
            "kai_py_gpu_card_pinned",
            "1 when a pod pinned to cards holds the card",
            labels=CARD_LABELS,
        )
        families = [info, memory, allocated, pods, pinned]
        per_pod = None
        if self.card_pods:
            per_pod = GaugeMetricFamily(
                "kai_py_gpu_card_pod_share",
                "Share of the card one pod holds (a series per pod: KAI_PY_METRICS_CARD_PODS)",
                labels=CARD_POD_LABELS,
            )
            families.append(per_pod)
        for row in source() if source is not None else ():
            card = (row.node, "" if row.index is None else str(row.index), row.uuid)
            info.add_metric([*card, row.model, row.reservation], 1.0)
            memory.add_metric(card, row.memory_mib * 1024 * 1024)
            allocated.add_metric(card, row.allocated)
            holders = list(row.holders)
            pods.add_metric(card, float(len(holders)))
            pinned.add_metric(card, 1.0 if row.pinned else 0.0)
            if per_pod is not None:
                for holder in holders:
                    per_pod.add_metric([*card, holder.namespace, holder.pod], holder.share)
        return families


_cards = _Cards()
REGISTRY.register(_cards)


def watch_cards(
    source: Callable[[], Iterable[CardFigures]] | None, card_pods: bool = False
) -> None:
    """Export the per-card figures ``source`` gives, computed at each scrape; with
    ``card_pods`` also a series per pod on a card (unbounded: one per pod)."""
    _cards.source = source
    _cards.card_pods = card_pods


_served: set[int] = set()


def serve(port: int | None) -> None:
    """Serve /metrics on ``port`` (once per port per process); None serves nothing."""
    if port is None or port in _served:
        return
    start_http_server(port)
    _served.add(port)


def _ms(seconds: float) -> float:
    return round(seconds * 1000.0, 3)


# ---- the scheduling cycle -----------------------------------------------------------------
Action = Callable[[Session, Any], None]


def timed_actions(actions: Iterable[tuple[str, Action]]) -> list[tuple[str, Action]]:
    """Wrap each action so that its duration and the pod groups it placed are recorded."""
    return [(name, _timed(name, action)) for name, action in actions]


def _timed(name: str, action: Action) -> Action:
    def run(session: Session, placer: Any) -> None:
        before = len(session.committed)
        started = time.perf_counter()
        try:
            action(session, placer)
        finally:
            ACTION_LATENCY.labels(name).set(_ms(time.perf_counter() - started))
            placed = {
                rec.task.job_uid
                for rec in session.committed[before:]
                if rec.op is Op.ALLOCATE and not rec.task.shadow
            }
            if placed:
                PODGROUPS_SCHEDULED.labels(name).inc(len(placed))
                if name == "preempt":
                    PREEMPTION_ATTEMPTS.inc(len(placed))

    return run


def record_open_session(seconds: float) -> None:
    """The snapshot: the cache turned into the scheduler's input."""
    OPEN_SESSION_LATENCY.set(_ms(seconds))


def record_close_session(seconds: float) -> None:
    """Planning the writes from the decisions."""
    CLOSE_SESSION_LATENCY.set(_ms(seconds))


def record_decisions(
    decisions: Decisions,
    snapshot: Snapshot,
    queues: Iterable[Mapping[str, Any]],
    node_pool: str = NODE_POOL,
) -> None:
    """What one cycle decided: task latencies, evictions, and every per-queue metric.

    ``queues`` are the Queue objects (for quotas and display names).
    """
    now = snapshot.now
    podgroup_of = {job.uid: (job.namespace, job.name) for job in snapshot.jobs}
    for task in decisions.binds:
        if task.created > 0:
            TASK_SCHEDULING_LATENCY.observe(max(0.0, _ms(now - task.created)))
    for ev in decisions.evictions:
        namespace, name = podgroup_of.get(ev.task.job_uid, (ev.task.namespace, ""))
        EVICTED_PODS.labels(name, namespace, ev.task.job_uid, node_pool, ev.action).inc()
    _record_admission(decisions, snapshot)
    specs = {str((q.get("metadata") or {}).get("name") or ""): q.get("spec") or {} for q in queues}
    seen: set[tuple[str, str, str]] = set()
    for qname, figures in decisions.queues.items():
        spec = specs.get(qname) or {}
        labels = (qname, qname, str(spec.get("displayName") or ""))
        seen.add(labels)
        # Scheduler units: CPU in millicores, memory in bytes, GPUs in devices.
        fair, allocated = figures.fair_share, figures.allocated
        QUEUE_FAIR_SHARE_CPU.labels(*labels).set(fair.cpu / 1000.0)
        QUEUE_FAIR_SHARE_MEMORY.labels(*labels).set(fair.memory / 1e9)
        QUEUE_FAIR_SHARE_GPU.labels(*labels).set(fair.gpu)
        QUEUE_CPU_USAGE.labels(*labels).set(allocated.cpu / 1000.0)
        QUEUE_MEMORY_USAGE.labels(*labels).set(allocated.memory / 1e9)
        QUEUE_GPU_USAGE.labels(*labels).set(allocated.gpu)
        resources = spec.get("resources") or {}
        cpu_quota = _number((resources.get("cpu") or {}).get("quota"))
        mem_quota = _number((resources.get("memory") or {}).get("quota"))
        QUEUE_INFO.labels(*labels).set(1)
        QUEUE_DESERVED_GPUS.labels(*labels).set(_number((resources.get("gpu") or {}).get("quota")))
        # The Queue's own units: CPU quota in millicores, memory quota in MB; -1 unlimited.
        QUEUE_QUOTA_CPU.labels(*labels).set(-1.0 if cpu_quota == -1 else cpu_quota / 1000.0)
        QUEUE_QUOTA_MEMORY.labels(*labels).set(-1.0 if mem_quota == -1 else mem_quota * 1e6)
        QUEUE_ALLOCATED_GPUS.labels(*labels).set(round(allocated.gpu, 4))
        QUEUE_ALLOCATED_CPU.labels(*labels).set(round(allocated.cpu / 1000.0, 4))
        QUEUE_ALLOCATED_MEMORY.labels(*labels).set(round(allocated.memory, 4))
    global _queue_labels
    for gone in _queue_labels - seen:  # a deleted (or renamed) queue leaves no stale series
        for metric in _PER_QUEUE:
            with contextlib.suppress(KeyError):
                metric.remove(*gone)
    _queue_labels = seen


_queue_labels: set[tuple[str, str, str]] = set()
_gated_queues: set[str] = set()


def _record_admission(decisions: Decisions, snapshot: Snapshot) -> None:
    """Queue-admission gating (docs/autoscaling.md): pods waiting at the gate, pods let go."""
    global _gated_queues
    gated: dict[str, int] = {}
    for job in snapshot.jobs:
        if job.gated:  # most jobs: none
            held = sum(1 for t in job.gated if keys.QUEUE_ADMISSION_GATE in t.gates)
            if held:
                gated[job.queue] = gated.get(job.queue, 0) + held
    queue_of = {job.uid: job.queue for job in snapshot.jobs} if decisions.ungated else {}
    for task in decisions.ungated:
        ADMITTED_PODS.labels(queue_of.get(task.job_uid, "")).inc()
    for name in _gated_queues - gated.keys():
        GATED_PODS.labels(name).set(0)  # a queue whose pods all went reads 0, not its last count
    for name, count in gated.items():
        GATED_PODS.labels(name).set(count)
    _gated_queues = set(gated)


def _number(value: object) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return 0.0


CLUSTER_CAPACITY: Final = Gauge(
    "kai_py_cluster_capacity",
    "What the ready nodes of this scheduler's pool can give, by resource (GPUs in "
    "devices, CPU in cores, memory in bytes; resource names as kube-state-metrics "
    "writes them): the capacity time-based fair share divides usage by when no "
    "kube-state-metrics is scraped",
    ["resource"],
)


def record_capacity(total: Res) -> None:
    CLUSTER_CAPACITY.labels("nvidia_com_gpu").set(total.gpu)
    CLUSTER_CAPACITY.labels("cpu").set(total.cpu / 1000.0)
    CLUSTER_CAPACITY.labels("memory").set(total.memory)


def record_cycle(seconds: float, ok: bool) -> None:
    E2E_LATENCY.set(_ms(seconds))
    CYCLES.labels("ok" if ok else "failed").inc()


def timed_framework(
    config: Config, plugins: Mapping[str, Callable[[Framework, Config], None]]
) -> Framework:
    """The cycle's framework, each plugin's set-up timed (KAI's OnSessionOpen per plugin;
    kai-py's plugins have no step at session close)."""
    framework = Framework()
    for name, register in plugins.items():
        started = time.perf_counter()
        register(framework, config)
        PLUGIN_LATENCY.labels(name, "OnSessionOpen").set(_ms(time.perf_counter() - started))
    return framework


def record_searches(counts: SearchCounts) -> None:
    """What one cycle's victim searches did (the scheduler counts, this exports)."""
    for action, n in counts.acted_on.items():
        PODGROUPS_CONSIDERED.labels(action).inc(n)
    for action, n in counts.simulated.items():
        SCENARIOS_SIMULATED.labels(action).inc(n)
        # Every scenario kai-py's generator makes is simulated (none is a duplicate).
        SEARCH_SCENARIOS.labels(action, GENERATOR, "emitted").inc(n)
        SEARCH_SCENARIOS.labels(action, GENERATOR, "simulated").inc(n)
    for action, n in counts.filtered.items():
        SCENARIOS_FILTERED.labels(action).inc(n)
    for action, n in counts.rejected.items():
        SEARCH_SCENARIOS.labels(action, GENERATOR, "validator_rejected").inc(n)
    for (action, result, reduced), n in counts.jobs.items():
        SEARCH_JOBS.labels(action, result, "true" if reduced else "false").inc(n)
    for action, n in counts.exhausted.items():
        SEARCH_BUDGET_EXHAUSTED.labels(action).inc(n)


def record_usage_query(seconds: float) -> None:
    """One query of the usage database (time-based fair share)."""
    USAGE_QUERY_LATENCY.observe(_ms(seconds))


def record_bind_write(seconds: float) -> None:
    """One BindRequest created (KAI times the same step: creating the request)."""
    TASK_BIND_LATENCY.observe(_ms(seconds))


def record_cache(sizes: Mapping[str, int]) -> None:
    for kind, count in sizes.items():
        CACHE_OBJECTS.labels(kind).set(count)


# ---- the binder and the API client --------------------------------------------------------
def record_binder(phase: str, retry_in: float | None) -> None:
    result = "succeeded" if phase == "Succeeded" else "retry" if retry_in is not None else "failed"
    BINDER_REQUESTS.labels(result).inc()


def record_api_error(verb: str, code: int) -> None:
    API_ERRORS.labels(verb.upper(), str(code)).inc()


def record_left_out(kinds: Iterable[str]) -> None:
    """The kind of each object the last cycle left out (``OBJECTS_LEFT_OUT``); every
    kind that can be left out is set, 0 included, so an alert on > 0 clears by itself."""
    counts = collections.Counter(kinds)
    for kind in {*LEFT_OUT_KINDS, *counts}:
        OBJECTS_LEFT_OUT.labels(kind).set(counts[kind])
