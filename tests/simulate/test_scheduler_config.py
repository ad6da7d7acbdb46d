"""The scheduler configuration: `kai-py simulate --actions / --config`, `kai-py run --config`."""

from __future__ import annotations

import argparse
import json
import logging
import textwrap
from pathlib import Path

import pytest

from kai_py.cli import main
from kai_py.conf.schedconfig import load_config, parse_actions, parse_config
from kai_py.controllers.settings import OperatorSettings
from kai_py.scheduler.model import DEFAULT_ACTIONS
from kai_py.state.documents import InputError

NODE = """
apiVersion: v1
kind: Node
metadata: {name: gpu-1}
status: {allocatable: {cpu: "8", memory: 32Gi, nvidia.com/gpu: "1"}}
"""
QUEUES = """
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: q}
spec:
  resources:
    gpu: {quota: -1, limit: -1}
    cpu: {quota: -1, limit: -1}
    memory: {quota: -1, limit: -1}
"""
# A low-priority job holds the only GPU; a high-priority job of the same queue waits.
JOBS = """
apiVersion: scheduling.run.ai/v2alpha2
kind: PodGroup
metadata: {name: low, namespace: ml}
spec: {minMember: 1, queue: q, priorityClassName: train}
---
apiVersion: scheduling.run.ai/v2alpha2
kind: PodGroup
metadata: {name: high, namespace: ml}
spec: {minMember: 1, queue: q, priorityClassName: inference}
---
apiVersion: v1
kind: Pod
metadata: {name: low-0, namespace: ml, annotations: {pod-group-name: low}}
spec:
  schedulerName: kai-scheduler
  nodeName: gpu-1
  containers: [{name: c, image: x, resources: {limits: {nvidia.com/gpu: "1"}}}]
status: {phase: Running}
---
apiVersion: v1
kind: Pod
metadata: {name: high-0, namespace: ml, annotations: {pod-group-name: high}}
spec:
  schedulerName: kai-scheduler
  containers: [{name: c, image: x, resources: {limits: {nvidia.com/gpu: "1"}}}]
"""


def cluster(tmp_path: Path) -> Path:
    path = tmp_path / "in.yaml"
    path.write_text("\n---\n".join(textwrap.dedent(d) for d in (NODE, QUEUES, JOBS)))
    return path


def statuses(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, str]:
    assert main(["simulate", *args, "--cycles", "1", "--output", "json"]) == 0
    pods = json.loads(capsys.readouterr().out)["pods"]
    return {k: v["status"] for k, v in pods.items()}


def test_actions_runs_only_those(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(cluster(tmp_path))
    assert statuses(capsys, path)["ml/low-0"] == "Evicted"  # preempt is among the defaults
    only = statuses(capsys, path, "--actions", "allocate,reclaim")
    assert only == {"ml/high-0": "Pending", "ml/low-0": "Running"}


def test_config_file_actions(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "kai.yaml"
    config.write_text('actions: "allocate, consolidation"\n')
    path = str(cluster(tmp_path))
    assert statuses(capsys, path, "--config", str(config))["ml/low-0"] == "Running"
    # --actions wins over the file.
    assert (
        statuses(capsys, path, "--config", str(config), "--actions", "preempt")["ml/low-0"]
        == "Evicted"
    )


def test_bad_actions_and_config_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(cluster(tmp_path))
    assert main(["simulate", path, "--actions", "allocate,shuffle"]) == 2
    assert "'allocate,shuffle'" in capsys.readouterr().err
    bad = tmp_path / "bad.yaml"
    bad.write_text("maxNumberConsolidationPreemptees: many\nactionz: allocate\n")
    assert main(["simulate", path, "--config", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "maxNumberConsolidationPreemptees" in err and "'many'" in err
    assert "actionz" in err


def test_parse_config_reads_kai_shape() -> None:
    loaded = parse_config(
        {
            "actions": "allocate, reclaim",
            "tiers": [
                {
                    "plugins": [
                        {"name": "proportion"},
                        {"name": "nodeplacement", "arguments": {"gpu": "spread", "cpu": "spread"}},
                    ]
                }
            ],
            "maxNumberConsolidationPreemptees": -1,
            "allowConsolidatingReclaim": False,
            "globalDefaultStalenessGracePeriod": "-1s",
            "queueDepthPerAction": {"allocate": 10},
        },
        "kai.yaml",
    )
    config = loaded.config
    assert config.actions == ("allocate", "reclaim")
    assert config.placement == "spread"
    assert config.max_consolidation_victims is None  # -1: no cap
    assert config.allow_consolidating_reclaim is False
    assert config.staleness_grace is None  # negative: never
    # A KAI setting kai-py does not apply is named, not dropped silently.
    (warning,) = loaded.warnings
    assert "queueDepthPerAction" in warning
    defaults = parse_config({}, "empty").config
    assert defaults.actions == DEFAULT_ACTIONS
    assert defaults.max_consolidation_victims == 16
    assert (
        parse_config({"maxNumberConsolidationPreemptees": 0}, "x").config.max_consolidation_victims
        == 0
    )


def test_parse_config_applies_usage_db_config_and_kvalue() -> None:
    loaded = parse_config(
        {
            "usageDBConfig": {"usageParams": {"windowSize": "2h", "windowType": "sliding"}},
            "tiers": [{"plugins": [{"name": "proportion", "arguments": {"kValue": "0.5"}}]}],
        },
        "kai.yaml",
    )
    assert loaded.warnings == []
    assert loaded.config.k_value == 0.5
    assert loaded.config.usage_db is not None and loaded.config.usage_db.window == 7200.0
    with pytest.raises(InputError) as info:
        parse_config({"usageDBConfig": {"usageParams": {"windowSize": "soon"}}}, "kai.yaml")
    assert info.value.problems[0].startswith(
        "kai.yaml: usageDBConfig.usageParams.windowSize: invalid duration 'soon'"
    )
    with pytest.raises(InputError, match=r"tiers\[0\].plugins\[0\].arguments.kValue: expected a"):
        parse_config(
            {"tiers": [{"plugins": [{"name": "proportion", "arguments": {"kValue": "x"}}]}]}, "k"
        )


def test_parse_actions_refuses_repeats() -> None:
    with pytest.raises(InputError, match="twice"):
        parse_actions("allocate,allocate")


def test_run_config(tmp_path: Path) -> None:
    config = tmp_path / "kai.yaml"
    config.write_text(
        "tiers:\n- plugins:\n  - name: nodeplacement\n    arguments: {gpu: spread}\n"
        "maxNumberConsolidationPreemptees: 4\n"
    )
    parser = argparse.ArgumentParser()
    OperatorSettings.add_arguments(parser)
    settings = OperatorSettings.from_args(parser.parse_args(["--config", str(config)]))
    assert settings.placement == "spread"
    assert settings.scheduler.max_consolidation_victims == 4
    over = OperatorSettings.from_args(
        parser.parse_args(["--config", str(config), "--placement", "binpack"])
    )
    assert over.placement == "binpack"
    with pytest.raises(SystemExit, match="--config"):
        OperatorSettings.from_args(parser.parse_args(["--config", str(tmp_path / "nope.yaml")]))
    assert load_config(config).config.max_consolidation_victims == 4


def test_an_unknown_plugin_is_a_warning_line_at_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A plugin name KAI does not have (a typo, another scheduler's) was dropped silently.
    config = tmp_path / "kai.yaml"
    config.write_text("tiers:\n- plugins:\n  - name: proportion\n  - name: gang\n")
    parser = argparse.ArgumentParser()
    OperatorSettings.add_arguments(parser)
    with caplog.at_level(logging.WARNING):
        OperatorSettings.from_args(parser.parse_args(["--config", str(config)]))
    assert [r.getMessage() for r in caplog.records] == [
        f"{config}: tiers[0].plugins[1]: plugin 'gang': kai-py has no plugin of this name; "
        "not applied"
    ]
