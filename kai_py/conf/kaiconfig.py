"""KAI's ``Config`` and ``SchedulingShard`` objects -> the scheduler's ``Config``.

What kai-py applies from each field, and why it leaves the others, is listed for
users in docs/configuration.md. Every field given that kai-py does not apply comes
back as a ``NotApplied`` entry (field, value, why) for the object's status: nothing
is dropped silently. The functions are pure; the operator
(``kai_py.controllers.kaiconfig``) calls them on each change of the objects.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any, Final

from kai_py.api import keys
from kai_py.api.durations import parse_duration
from kai_py.api.kaiconfig import ConfigSpec, SchedulingShardSpec
from kai_py.scheduler.model import DEFAULT_ACTIONS, Config
from kai_py.scheduler.timeshare.settings import parse_k_value, parse_usage_db

#: KAI's action priorities (higher runs first); a shard's ``actions`` reorders by them.
ACTION_PRIORITIES: Final = {name: 500 - 100 * i for i, name in enumerate(DEFAULT_ACTIONS)}

#: KAI's plugins by name: kai-py has each one's rule built in, always on, in KAI's order.
KAI_PLUGINS: Final = frozenset(
    {
        "predicates",
        "proportion",
        "priority",
        "nodeavailability",
        "resourcetype",
        "podaffinity",
        "elastic",
        "kubeflow",
        "ray",
        "subgrouporder",
        "taskorder",
        "nominatednode",
        "dynamicresources",
        "minruntime",
        "topology",
        "snapshot",
        "sg-nodelocalgreedy",
        "sg-multinodegang",
        "gpupack",
        "gpuspread",
        "nodeplacement",
        "gpusharingorder",
    }
)

_STRATEGIES: Final = ("binpack", "spread")
#: KAI's plugins that order the cards of shared pods: card placement they stand for.
CARD_PLUGINS: Final = {"gpupack": "binpack", "gpuspread": "spread"}
_NOT_GO: Final = "kai-py is a Python process: there is no Go memory limit to set"


@dataclass(frozen=True, slots=True)
class NotApplied:
    """One field given on a KAI object that kai-py does not apply."""

    field: str
    value: str
    why: str

    def text(self) -> str:
        return f"{self.field}={self.value}: {self.why}"


@dataclass(slots=True)
class ShardSettings:
    config: Config
    not_applied: list[NotApplied] = field(default_factory=list)


@dataclass(slots=True)
class GlobalSettings:
    node_pool_label: str = keys.NODE_POOL_LABEL
    #: spec.scheduler.service.enabled: false switches KAI's schedulers off; kai-py's
    #: schedulers then run no cycle (nothing is bound or evicted) until it is true again.
    scheduling: bool = True
    not_applied: list[NotApplied] = field(default_factory=list)


def _show(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def shard_settings(spec: SchedulingShardSpec, base: Config, node_pool: str) -> ShardSettings:
    """The scheduler's configuration for one shard: ``base`` (the command line's) with
    what the shard sets applied over it. ``node_pool``: the pool this process serves."""
    config = replace(base)
    out = ShardSettings(config)
    skip = out.not_applied.append
    if spec.placement_strategy is not None:
        _placement(
            spec.placement_strategy.gpu, spec.placement_strategy.cpu, "spec.placementStrategy", out
        )
    if (spec.partition_label_value or "") != node_pool:
        skip(
            NotApplied(
                "spec.partitionLabelValue",
                spec.partition_label_value or '""',
                f"this scheduler serves the pool {node_pool or '(no label)'!s} given at its "
                "start (--node-pool); a shard's pool changes with a restart",
            )
        )
    for action, depth in sorted((spec.queue_depth_per_action or {}).items()):
        skip(
            NotApplied(
                f"spec.queueDepthPerAction.{action}",
                str(depth),
                "kai-py considers every job of every queue in each action",
            )
        )
    if spec.min_runtime is not None:
        for attr, name in (
            ("preempt_min_runtime", "preemptMinRuntime"),
            ("reclaim_min_runtime", "reclaimMinRuntime"),
        ):
            value = getattr(spec.min_runtime, attr)
            if value is not None:
                _min_runtime(value, attr, f"spec.minRuntime.{name}", out)
    if spec.k_value is not None:
        _k_value(spec.k_value, "spec.kValue", out)
    for name, value in (
        ("goMemLimitRatio", spec.go_mem_limit_ratio),
        ("goMemLimit", spec.go_mem_limit),
    ):
        if value is not None:
            skip(NotApplied(f"spec.{name}", _show(value), _NOT_GO))
    if spec.usage_db_config is not None:
        try:
            config.usage_db = parse_usage_db(spec.usage_db_config, "spec.usageDBConfig")
        except ValueError as exc:
            skip(NotApplied("spec.usageDBConfig", _show(spec.usage_db_config), f"invalid: {exc}"))
    if spec.scenario_search_budgets is not None:
        skip(
            NotApplied(
                "spec.scenarioSearchBudgets",
                _show(spec.scenario_search_budgets),
                "kai-py's victim search has its own bounds",
            )
        )
    for flag, value in sorted((spec.args or {}).items()):
        _arg(flag, value, out)
    for name, plugin in sorted((spec.plugins or {}).items()):
        _plugin(name, plugin.enabled, plugin.priority, plugin.arguments, out)
    if spec.actions:
        _actions(spec, out)
    return out


def _placement(gpu: str | None, cpu: str | None, where: str, out: ShardSettings) -> None:
    if gpu is not None:
        out.config.placement = gpu
    # kai-py places a job with one strategy: the GPU one, for CPU-only jobs too.
    if cpu is not None and cpu != out.config.placement:
        out.not_applied.append(
            NotApplied(
                f"{where}.cpu",
                cpu,
                f"kai-py places CPU-only jobs with the GPU strategy ({out.config.placement})",
            )
        )


def _min_runtime(value: str, attr: str, where: str, out: ShardSettings) -> None:
    try:
        seconds = parse_duration(value)
    except ValueError as exc:
        out.not_applied.append(NotApplied(where, value, str(exc)))
        return
    if seconds < 0:
        out.not_applied.append(NotApplied(where, value, "must not be negative"))
        return
    setattr(out.config, attr, seconds)


def _arg(flag: str, value: str, out: ShardSettings) -> None:
    where = f"spec.args.{flag}"
    try:
        if flag == "max-consolidation-preemptees":
            number = int(value)
            if number < -1:
                raise ValueError("expected a whole number, -1 for no cap")
            out.config.max_consolidation_victims = None if number == -1 else number
        elif flag == "allow-consolidating-reclaim":
            out.config.allow_consolidating_reclaim = _bool(value)
        elif flag == "default-staleness-grace-period":
            seconds = parse_duration(value)
            out.config.staleness_grace = None if seconds < 0 else seconds
        elif flag == "restrict-node-scheduling":
            out.config.restrict_node_scheduling = _bool(value)
        elif flag in ("gpu-worker-node-label-key", "cpu-worker-node-label-key"):
            if not value:
                raise ValueError("expected a label key")
            attr = "gpu_worker_label" if flag.startswith("gpu") else "cpu_worker_label"
            setattr(out.config, attr, value)
        else:
            raise LookupError("not a scheduler flag kai-py applies")
    except ValueError as exc:
        out.not_applied.append(NotApplied(where, value, f"invalid: {exc}"))
    except LookupError as exc:
        out.not_applied.append(NotApplied(where, value, str(exc.args[0])))


def _k_value(value: object, where: str, out: ShardSettings) -> None:
    try:
        out.config.k_value = parse_k_value(value, where)
    except ValueError as exc:
        out.not_applied.append(NotApplied(where, _show(value), f"invalid: {exc}"))


def _bool(value: str) -> bool:
    # Go's strconv.ParseBool, which KAI's flags use.
    if value in ("1", "t", "T", "true", "TRUE", "True"):
        return True
    if value in ("0", "f", "F", "false", "FALSE", "False"):
        return False
    raise ValueError(f"expected true or false, got {value!r}")


def _plugin(
    name: str,
    enabled: bool | None,
    priority: int | None,
    arguments: dict[str, str] | None,
    out: ShardSettings,
) -> None:
    where = f"spec.plugins.{name}"
    skip = out.not_applied.append
    if name not in KAI_PLUGINS:
        given = {"enabled": enabled, "priority": priority, "arguments": arguments}
        shown = {k: v for k, v in given.items() if v is not None}
        skip(NotApplied(where, _show(shown), "kai-py has no plugin of this name"))
        return
    if enabled is False:
        skip(NotApplied(f"{where}.enabled", "false", "kai-py's plugins are always on"))
    if priority is not None:
        skip(
            NotApplied(f"{where}.priority", str(priority), "kai-py runs its plugins in KAI's order")
        )
    args = dict(arguments or {})
    if name == "nodeplacement":
        gpu, cpu = args.pop("gpu", None), args.pop("cpu", None)
        for key, value in (("gpu", gpu), ("cpu", cpu)):
            if value is not None and value not in _STRATEGIES:
                skip(NotApplied(f"{where}.arguments.{key}", value, "expected binpack or spread"))
        _placement(
            gpu if gpu in _STRATEGIES else None,
            cpu if cpu in _STRATEGIES else None,
            f"{where}.arguments",
            out,
        )
    elif name in CARD_PLUGINS and enabled is not False:
        # KAI's card order for shared pods; a pod's own HAMi policy still comes first.
        out.config.card_placement = CARD_PLUGINS[name]
    elif name == "proportion" and "kValue" in args:
        _k_value(args.pop("kValue"), f"{where}.arguments.kValue", out)
    elif name == "minruntime":
        for key, attr in (
            ("defaultPreemptMinRuntime", "preempt_min_runtime"),
            ("defaultReclaimMinRuntime", "reclaim_min_runtime"),
        ):
            if key in args:
                _min_runtime(args.pop(key), attr, f"{where}.arguments.{key}", out)
    for key, value in sorted(args.items()):
        skip(
            NotApplied(
                f"{where}.arguments.{key}", value, "kai-py applies no such argument of this plugin"
            )
        )


def _actions(spec: SchedulingShardSpec, out: ShardSettings) -> None:
    on = set(out.config.actions)
    for name, action in sorted((spec.actions or {}).items()):
        if name not in ACTION_PRIORITIES:
            out.not_applied.append(
                NotApplied(
                    f"spec.actions.{name}",
                    _show(action.model_dump(exclude_none=True)),
                    f"kai-py has no action of this name (it has {', '.join(DEFAULT_ACTIONS)})",
                )
            )
        elif action.enabled is not None:
            (on.add if action.enabled else on.discard)(name)
    priority = dict(ACTION_PRIORITIES)
    for name, action in (spec.actions or {}).items():
        if name in priority and action.priority is not None:
            priority[name] = action.priority
    # Higher priority runs first, as in KAI; ties keep KAI's default order.
    out.config.actions = tuple(
        sorted((a for a in DEFAULT_ACTIONS if a in on), key=lambda a: -priority[a])
    )


def global_settings(spec: ConfigSpec, scheduler_name: str, namespace: str) -> GlobalSettings:
    """What kai-py takes from the cluster-wide Config: the node-pool label key. The
    settings of KAI's own Deployments come back as not applied."""
    out = GlobalSettings()
    skip = out.not_applied.append
    if spec.namespace is not None and spec.namespace != namespace:
        skip(
            NotApplied(
                "spec.namespace",
                spec.namespace,
                f"kai-py's parts run where its chart installs them ({namespace})",
            )
        )
    g = spec.global_
    if g is not None:
        if g.node_pool_label_key:
            out.node_pool_label = g.node_pool_label_key
        if g.scheduler_name is not None and g.scheduler_name != scheduler_name:
            skip(
                NotApplied(
                    "spec.global.schedulerName",
                    g.scheduler_name,
                    f"kai-py schedules the pods of --scheduler-name ({scheduler_name})",
                )
            )
        if g.queue_label_key is not None and g.queue_label_key != keys.QUEUE_LABEL:
            skip(
                NotApplied(
                    "spec.global.queueLabelKey",
                    g.queue_label_key,
                    f"kai-py reads the queue from the {keys.QUEUE_LABEL} label",
                )
            )
        for key, value in sorted((g.model_extra or {}).items()):
            skip(
                NotApplied(
                    f"spec.global.{key}", _show(value), "set kai-py's Deployments in its chart"
                )
            )
    for section in (
        "pod_grouper",
        "binder",
        "admission",
        "scheduler",
        "queue_controller",
        "pod_group_controller",
        "node_scale_adjuster",
        "prometheus",
        "numa_placement_exporter",
    ):
        value = getattr(spec, section)
        if section == "scheduler" and value:
            value = _scheduler_section(value, out)
        if value:
            name = ConfigSpec.model_fields[section].alias or section
            skip(
                NotApplied(
                    f"spec.{name}",
                    _show(value),
                    "configures KAI's own Deployment; kai-py's are set in its chart",
                )
            )
    return out


def _scheduler_section(section: dict[str, Any], out: GlobalSettings) -> dict[str, Any]:
    """Applies ``service.enabled``; returns the rest of the section (not applied)."""
    rest = dict(section)
    service = rest.get("service")
    if isinstance(service, dict) and "enabled" in service:
        enabled = service["enabled"]
        if isinstance(enabled, bool):
            out.scheduling = enabled
            service = {k: v for k, v in service.items() if k != "enabled"}
            if service:
                rest["service"] = service
            else:
                del rest["service"]
    return rest
