"""KAI's scheduler-internals Grafana dashboard against a running kai-py operator.

The names are committed here (``INTERNALS``); when KAI's source tree is on the
machine (``KAI_SOURCE``, default the cache the e2e runs use), the names are also
read from KAI's own dashboard at test time, so a new panel in KAI shows up in the
tests. KAI's JSON is not part of this repository.
"""

from __future__ import annotations

import json
import os
import re
import socket
import urllib.request
from pathlib import Path
from typing import Any

from kubernetes import client as k8s
from operator_helpers import (
    Operator,
    bindrequests,
    create_pod,
    create_podgroup,
    create_queues,
    events_of,
    pod,
    podgroup,
    queue,
    wait_for,
)

NS = "team-a"
KAI_SOURCE = Path(os.environ.get("KAI_SOURCE", "/root/.cache/kai-e2e/kai"))
KAI_DASHBOARD = KAI_SOURCE / "docs/metrics/grafana/kai-scheduler-internals.json"

#: Every metric KAI's scheduler-internals dashboard queries, as it names them.
INTERNALS = (
    "kai_action_scheduling_latency_milliseconds",
    "kai_close_session_latency_milliseconds",
    "kai_e2e_scheduling_latency_milliseconds",
    "kai_open_session_latency_milliseconds",
    "kai_plugin_scheduling_latency_milliseconds",
    "kai_pod_group_evicted_pods_total",
    "kai_podgroups_acted_on_by_action",
    "kai_podgroups_scheduled_by_action",
    "kai_scenario_search_action_budget_configured_seconds",
    "kai_scenario_search_action_budget_exhausted_total",
    "kai_scenario_search_duration_seconds_bucket",
    "kai_scenario_search_duration_seconds_count",
    "kai_scenario_search_generator_budget_configured_seconds",
    "kai_scenario_search_job_budget_configured_seconds",
    "kai_scenario_search_jobs_total",
    "kai_scenario_search_scenarios_total",
    "kai_scenarios_filtered_by_action",
    "kai_scenarios_simulation_by_action",
    "kai_task_bind_latency_milliseconds_bucket",
    "kai_task_scheduling_latency_milliseconds_bucket",
    "kai_total_preemption_attempts",
)
#: Exported though no panel of that dashboard plots it (KAI's scheduler has it).
ALSO = ("kai_usage_query_latency_milliseconds_count",)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def kai_dashboard_names() -> set[str]:
    """The metric names in the expressions of KAI's dashboard (panels and variables)."""
    exprs: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("expr", "query", "definition") and isinstance(value, str):
                    exprs.append(value)
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(json.loads(KAI_DASHBOARD.read_text()))
    return {name for e in exprs for name in re.findall(r"\bkai_[a-z0-9_]+", e)}


def exported_names(text: str) -> set[str]:
    """Every series name a scrape offers, and the names of families declared in it
    (with their histogram and counter suffixes), with or without samples."""
    names: set[str] = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            names.add(name)
            if kind == "histogram":
                names.update(f"{name}_{s}" for s in ("bucket", "count", "sum"))
            elif kind == "counter":
                names.add(f"{name}_total")
        elif line and not line.startswith("#"):
            names.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    return names


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        return str(answer.read().decode())


def sample(text: str, name: str, **labels: str) -> float | None:
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return None


def check_after_a_preemption(
    port: int, operator: Operator, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi
) -> None:
    """Every name of the dashboard is in a scrape of the operator on ``port``, after a
    preemption, with the searches' series measured, not only declared."""
    # A preemption, so that the searches' series have samples, not only a declaration.
    create_queues(custom, queue("root"), queue("team-a", parent="root"))
    create_podgroup(custom, podgroup("low", NS, "team-a", min_member=1))
    for i in range(2):
        create_pod(core, pod(f"low-{i}", NS, "low", gpus=4))
    wait_for(lambda: len(bindrequests(custom, NS)) == 2, timeout=15, what="low bound")
    create_podgroup(custom, podgroup("high", NS, "team-a", priority_class="inference"))
    create_pod(core, pod("high-0", NS, "high", gpus=4))
    wait_for(
        lambda: [e for e in events_of(core, NS, "low") if e.reason == "Evict"],
        timeout=15,
        what=f"an Evict event\n{operator.log}",
    )
    text = wait_for(
        lambda: (lambda t: t if sample(t, "kai_scenarios_simulation_by_action") else None)(
            scrape(port)
        ),
        timeout=10,
        what="the preemption's search counted",
    )
    names = exported_names(text)
    wanted = {*INTERNALS, *ALSO} | (kai_dashboard_names() if KAI_DASHBOARD.exists() else set())
    assert sorted(wanted - names) == []
    # Measured, not only declared: the preemption's search and the plugins' set-up.
    assert (sample(text, "kai_podgroups_acted_on_by_action", action="preempt") or 0) >= 1
    assert (sample(text, "kai_scenarios_simulation_by_action", action="preempt") or 0) >= 1
    solved = sample(text, "kai_scenario_search_jobs_total", action="preempt", result="solved")
    assert solved is not None and solved >= 1
    assert (
        sample(
            text,
            "kai_scenario_search_scenarios_total",
            action="preempt",
            generator="steps",
            state="simulated",
        )
        or 0
    ) >= 1
    for plugin in ("predicates", "proportion", "nodeorder"):
        assert (
            sample(
                text,
                "kai_plugin_scheduling_latency_milliseconds",
                plugin=plugin,
                OnSession="OnSessionOpen",
            )
            is not None
        ), plugin
    # Until time-based fair share queries a usage database, nothing is observed.
    assert sample(text, "kai_usage_query_latency_milliseconds_count") == 0
