"""The chart after day one: kai-py's own pods kept apart, budgeted and prioritised,
and the scheduler configuration file from a value."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from chart_helpers import RELEASE, by_kind, render

from kai_py.conf.schedconfig import load_config

Json = dict[str, Any]

COMPONENTS = {
    "kai-py-scheduler": "scheduler",
    "kai-py-binder": "binder",
    "kai-py-podgrouper": "podgrouper",
    "kai-py-webhooks": "webhooks",
}


def _pod(objects: list[Json], kind: str, name: str) -> Json:
    spec: Json = by_kind(objects, kind)[name]["spec"]["template"]["spec"]
    return spec


def test_defaults_spread_replicas_and_give_kai_py_its_own_priority() -> None:
    objects = render()
    own = by_kind(objects, "PriorityClass")["kai-py-critical"]
    assert own["value"] == 1_000_000_000 and "annotations" not in own["metadata"]
    assert _pod(objects, "DaemonSet", "kai-py-node-agent")["priorityClassName"] == "kai-py-critical"
    for name, component in COMPONENTS.items():
        pod = _pod(objects, "Deployment", name)
        assert pod["priorityClassName"] == "kai-py-critical"
        assert pod["affinity"] == {
            "podAntiAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 100,
                        "podAffinityTerm": {
                            "topologyKey": "kubernetes.io/hostname",
                            "labelSelector": {
                                "matchLabels": {
                                    "app.kubernetes.io/instance": RELEASE,
                                    "app.kubernetes.io/component": component,
                                }
                            },
                        },
                    }
                ]
            }
        }
    # One replica each: a budget would block every drain.
    assert by_kind(objects, "PodDisruptionBudget") == {}


def test_roles_of_several_replicas_get_a_budget_and_required_spreading() -> None:
    objects = render(
        {
            "scheduler": {"replicas": 2, "resources": {}},
            "webhooks": {"replicas": 3},
            "replicaAntiAffinity": "required",
            "priorityClassName": "system-cluster-critical",
            "affinity": {"nodeAffinity": {"x": 1}},
        }
    )
    budgets = by_kind(objects, "PodDisruptionBudget")
    assert set(budgets) == {"kai-py-scheduler", "kai-py-webhooks"}
    deployments = by_kind(objects, "Deployment")
    for name, budget in budgets.items():
        assert budget["spec"]["maxUnavailable"] == 1
        assert budget["spec"]["selector"] == deployments[name]["spec"]["selector"]
    assert "kai-py-critical" not in by_kind(objects, "PriorityClass")
    pod = _pod(objects, "Deployment", "kai-py-scheduler")
    assert pod["priorityClassName"] == "system-cluster-critical"
    assert pod["affinity"]["nodeAffinity"] == {"x": 1}
    [term] = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["labelSelector"]["matchLabels"]["app.kubernetes.io/component"] == "scheduler"

    # A podAntiAffinity of the user's own is used as given; none switches it off.
    theirs = {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}}
    pod = _pod(render({"affinity": theirs}), "Deployment", "kai-py-binder")
    assert pod["affinity"] == theirs
    assert "affinity" not in _pod(
        render({"replicaAntiAffinity": "none"}), "Deployment", "kai-py-binder"
    )


def test_scheduler_config_value_becomes_the_config_file_of_every_scheduler(
    tmp_path: Path,
) -> None:
    config = {
        "actions": "allocate, reclaim",
        "tiers": [
            {
                "plugins": [
                    {"name": "nodeplacement", "arguments": {"gpu": "spread", "cpu": "spread"}}
                ]
            }
        ],
        "maxNumberConsolidationPreemptees": 4,
    }
    shards = [
        {"name": "default", "partitionLabelValue": "", "settings": {}},
        {"name": "a100", "partitionLabelValue": "a100", "settings": {}},
    ]
    objects = render({"schedulerConfig": config, "shards": shards})
    data = by_kind(objects, "ConfigMap")["kai-py-scheduler-config"]["data"]["config.yaml"]
    assert yaml.safe_load(data) == config
    # The file is one kai-py reads, all of it applied.
    (tmp_path / "config.yaml").write_text(data)
    parsed = load_config(tmp_path / "config.yaml")
    assert parsed.config.actions == ("allocate", "reclaim") and parsed.warnings == []
    for name, deployment in by_kind(objects, "Deployment").items():
        pod = deployment["spec"]["template"]["spec"]
        args = pod["containers"][0]["args"]
        mounts = {m["name"]: m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
        volumes = {v["name"]: v for v in pod["volumes"]}
        if name in ("kai-py-scheduler", "kai-py-scheduler-a100"):
            assert "--config=/etc/kai-py/scheduler/config.yaml" in args
            assert mounts["scheduler-config"] == "/etc/kai-py/scheduler"
            assert volumes["scheduler-config"]["configMap"]["name"] == "kai-py-scheduler-config"
            # A changed value rolls the schedulers: the file is read at start.
            annotations = deployment["spec"]["template"]["metadata"]["annotations"]
            assert "kai-py.dev/scheduler-config-sha256" in annotations
        else:
            assert (
                not any(a.startswith("--config") for a in args) and "scheduler-config" not in mounts
            )
    changed = render({"schedulerConfig": {**config, "actions": "allocate"}, "shards": shards})
    digest = "kai-py.dev/scheduler-config-sha256"

    def annotation(objs: list[Json]) -> str:
        meta = by_kind(objs, "Deployment")["kai-py-scheduler"]["spec"]["template"]["metadata"]
        return str(meta["annotations"][digest])

    assert annotation(changed) != annotation(objects)
    # Without the value: no ConfigMap, no --config (the built-in defaults).
    default = render()
    assert "kai-py-scheduler-config" not in by_kind(default, "ConfigMap")
    args = by_kind(default, "Deployment")["kai-py-scheduler"]["spec"]["template"]["spec"]
    assert not any(a.startswith("--config") for a in args["containers"][0]["args"])
