"""The scheduler configuration file, in KAI's shape (``--config FILE``).

KAI reads ``actions`` and ``tiers`` from its scheduler ConfigMap and its
parameters (``maxNumberConsolidationPreemptees`` ...) from flags; kai-py
reads both from one YAML or JSON file::

    actions: "allocate, consolidation, reclaim, preempt, stalegangeviction"
    tiers:
    - plugins:
      - name: nodeplacement
        arguments: {gpu: binpack, cpu: binpack}
    maxNumberConsolidationPreemptees: 16     # 0 = no consolidation, -1 = no cap
    globalDefaultStalenessGracePeriod: 60s   # negative = never evict a stale gang

KAI settings that kai-py does not apply are named in a warning, never
silently dropped; unknown keys are errors.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from kai_py.api.durations import parse_duration
from kai_py.conf.kaiconfig import CARD_PLUGINS, KAI_PLUGINS
from kai_py.scheduler.admission.ungate import QUEUE_ADMISSION_MODES
from kai_py.scheduler.model import DEFAULT_ACTIONS, Config
from kai_py.scheduler.timeshare.settings import parse_k_value, parse_usage_db
from kai_py.state.documents import InputError

_KNOWN_ACTIONS = frozenset(DEFAULT_ACTIONS)

# KAI settings kai-py accepts but does not apply (with why, for the warning).
_IGNORED = {
    "queueDepthPerAction": "kai-py considers every job of every queue",
    "scenarioSearchBudgets": "kai-py's victim search has its own bounds",
    "schedulerName": "use kai-py run --scheduler-name",
    "partitionParams": "node pools are not implemented",
    "scheduleCSIStorage": "CSI storage scheduling is not implemented",
    "useSchedulingSignatures": "not needed: kai-py caches by shape",
    "fullHierarchyFairness": "kai-py always computes fair share over the whole hierarchy",
    "numOfStatusRecordingWorkers": "not applicable",
    "schedulePeriod": "use kai-py run --schedule-period",
    "stuckInReleasingThreshold": "not configurable",
    "detailedFitErrors": "kai-py always explains why a job waits",
    "updatePodEvictionCondition": "not configurable",
    "queueLabelKey": "kai-py reads the kai.scheduler/queue label",
}
_MAX_PREEMPTEES = ("maxNumberConsolidationPreemptees", "maxConsolidationPreemptees")


@dataclass(slots=True)
class SchedulerConfig:
    config: Config
    warnings: list[str] = field(default_factory=list)


def parse_actions(text: str, where: str = "--actions") -> tuple[str, ...]:
    """``"allocate, reclaim"`` -> the action names, in that order."""
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    unknown = [n for n in names if n not in _KNOWN_ACTIONS]
    if unknown or not names:
        raise InputError(
            [
                f"{where}: expected a comma-separated list of "
                f"{', '.join(DEFAULT_ACTIONS)}, got {text!r}"
            ]
        )
    if len(set(names)) != len(names):
        raise InputError([f"{where}: an action is listed twice in {text!r}"])
    return names


def load_config(path: Path, base: Config | None = None) -> SchedulerConfig:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise InputError([f"{path}: cannot read the scheduler configuration: {exc}"]) from None
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise InputError([f"{path}: the scheduler configuration must be a mapping"])
    return parse_config(data, str(path), base)


def parse_config(
    data: Mapping[str, Any], where: str, base: Config | None = None
) -> SchedulerConfig:
    config = base if base is not None else Config()
    warnings: list[str] = []
    problems: list[str] = []
    for key, value in data.items():
        try:
            if key == "actions":
                if not isinstance(value, str):
                    raise ValueError(
                        f"expected a string such as 'allocate, reclaim', got {value!r}"
                    )
                config.actions = parse_actions(value, f"{where}: actions")
            elif key == "tiers":
                _tiers(value, config, warnings, where)
            elif key in _MAX_PREEMPTEES:
                if not isinstance(value, int) or isinstance(value, bool) or value < -1:
                    raise ValueError(f"expected a whole number, -1 for no cap, got {value!r}")
                config.max_consolidation_victims = None if value == -1 else value
            elif key == "allowConsolidatingReclaim":
                if not isinstance(value, bool):
                    raise ValueError(f"expected true or false, got {value!r}")
                config.allow_consolidating_reclaim = value
            elif key == "restrictSchedulingNodes":
                if not isinstance(value, bool):
                    raise ValueError(f"expected true or false, got {value!r}")
                config.restrict_node_scheduling = value
            elif key == "queueAdmissionGating":
                # kai-py's own key (the operator's --queue-admission-gating sets it too):
                # KAI proposes it as a switch of its Config object.
                if value not in QUEUE_ADMISSION_MODES:
                    raise ValueError(
                        f"expected one of {', '.join(QUEUE_ADMISSION_MODES)}, got {value!r}"
                    )
                config.queue_admission_gating = value
            elif key == "queueAdmissionReservation":
                seconds = parse_duration(str(value))
                if seconds < 0:
                    raise ValueError(f"expected a duration >= 0, got {value!r}")
                config.admission_reservation = seconds
            elif key == "globalDefaultStalenessGracePeriod":
                seconds = parse_duration(str(value))
                config.staleness_grace = None if seconds < 0 else seconds
            elif key == "usageDBConfig":
                try:
                    config.usage_db = parse_usage_db(value, "usageDBConfig")
                except ValueError as exc:
                    raise InputError([f"{where}: {exc}"]) from None
            elif key in _IGNORED:
                warnings.append(f"{where}: {key} is not applied by kai-py: {_IGNORED[key]}")
            else:
                raise ValueError("not a KAI scheduler setting kai-py knows")
        except InputError as exc:
            problems.extend(exc.problems)
        except ValueError as exc:
            problems.append(f"{where}: {key}: {exc}")
    if problems:
        raise InputError(problems)
    return SchedulerConfig(config, warnings)


def _tiers(value: Any, config: Config, warnings: list[str], where: str) -> None:
    if not isinstance(value, list):
        raise ValueError(f"expected a list of tiers, got {value!r}")
    for i, tier in enumerate(value):
        plugins = tier.get("plugins") if isinstance(tier, Mapping) else None
        if not isinstance(plugins, list):
            raise ValueError(f"[{i}].plugins: expected a list of plugins")
        for j, plugin in enumerate(plugins):
            at = f"tiers[{i}].plugins[{j}]"
            if not isinstance(plugin, Mapping) or not isinstance(plugin.get("name"), str):
                raise InputError([f"{where}: {at}: expected a mapping with a name"])
            name = plugin["name"]
            args = plugin.get("arguments") or {}
            if not isinstance(args, Mapping):
                raise InputError([f"{where}: {at}.arguments: expected a mapping"])
            if name == "nodeplacement":
                gpu = args.get("gpu", "binpack")
                if gpu not in ("binpack", "spread"):
                    raise InputError(
                        [f"{where}: {at}.arguments.gpu: expected binpack or spread, got {gpu!r}"]
                    )
                config.placement = gpu
                cpu = args.get("cpu", "binpack")
                if cpu != gpu:
                    warnings.append(
                        f"{where}: {at}.arguments.cpu: kai-py places CPU jobs with the GPU "
                        f"strategy ({gpu}); {cpu!r} is not applied"
                    )
                continue
            if name in CARD_PLUGINS:
                # KAI's card order for shared pods: gpupack fills cards, gpuspread empties.
                card = CARD_PLUGINS[name]
                if config.card_placement and config.card_placement != card:
                    raise InputError(
                        [f"{where}: {at}: gpupack and gpuspread together; list one of them"]
                    )
                config.card_placement = card
            if name == "proportion" and "kValue" in args:
                config.k_value = parse_k_value(args["kValue"], f"{at}.arguments.kValue")
                args = {k: v for k, v in args.items() if k != "kValue"}
            if name not in KAI_PLUGINS:
                # A typo, another scheduler's plugin, or one of KAI's kai-py lacks (numa).
                warnings.append(
                    f"{where}: {at}: plugin {name!r}: kai-py has no plugin of this name; "
                    "not applied"
                )
                continue
            extra = sorted(k for k in plugin if k != "name" and (k != "arguments" or args))
            if extra:
                warnings.append(
                    f"{where}: {at} ({name}): {', '.join(extra)} not applied by kai-py "
                    f"(its plugins are always on, with their defaults)"
                )
