"""KAI's SchedulingShard and Config -> the scheduler's configuration
(kai_py.conf.kaiconfig): what is applied, and each field named when it is not."""

from __future__ import annotations

from typing import Any

import pytest

from kai_py.api.common import ManifestError
from kai_py.api.kaiconfig import KaiConfig, SchedulingShard
from kai_py.conf.kaiconfig import global_settings, shard_settings
from kai_py.scheduler.actions.evicting import inherited
from kai_py.scheduler.model import DEFAULT_ACTIONS, Config
from tests.scheduler.builders import default_queues, session, snapshot


def _shard(spec: dict[str, Any]) -> SchedulingShard:
    return SchedulingShard.from_manifest(
        {
            "apiVersion": "kai.scheduler/v1",
            "kind": "SchedulingShard",
            "metadata": {"name": "default"},
            "spec": spec,
        }
    )


def _texts(spec: dict[str, Any], node_pool: str = "") -> list[str]:
    return [n.text() for n in shard_settings(_shard(spec).spec, Config(), node_pool).not_applied]


def test_an_empty_shard_keeps_the_command_lines_settings() -> None:
    base = Config(placement="spread", max_consolidation_victims=3)
    got = shard_settings(_shard({}).spec, base, "")
    assert got.config == base and got.config is not base
    assert got.not_applied == []


def test_placement_min_runtime_args_and_actions_are_applied() -> None:
    spec = {
        "placementStrategy": {"gpu": "spread", "cpu": "spread"},
        "minRuntime": {"preemptMinRuntime": "5m", "reclaimMinRuntime": "90s"},
        "args": {"max-consolidation-preemptees": "4", "default-staleness-grace-period": "-1s"},
        "actions": {"preempt": {"priority": 600}, "consolidation": {"enabled": False}},
    }
    got = shard_settings(_shard(spec).spec, Config(), "")
    assert got.not_applied == []
    config = got.config
    assert config.placement == "spread"
    assert (config.preempt_min_runtime, config.reclaim_min_runtime) == (300.0, 90.0)
    assert config.max_consolidation_victims == 4
    assert config.staleness_grace is None
    assert config.actions == ("preempt", "allocate", "reclaim", "stalegangeviction")


def test_what_is_not_applied_is_named_with_its_value() -> None:
    texts = _texts(
        {
            "placementStrategy": {"gpu": "binpack", "cpu": "spread"},
            "partitionLabelValue": "pool-b",
            "kValue": -1,
            "args": {"qps": "50"},
            "plugins": {"topology": {"enabled": False}, "my-plugin": {"priority": 5}},
            "actions": {"drain": {"enabled": True}},
        }
    )
    assert texts == [
        "spec.placementStrategy.cpu=spread: kai-py places CPU-only jobs with the GPU "
        "strategy (binpack)",
        "spec.partitionLabelValue=pool-b: this scheduler serves the pool (no label) given at "
        "its start (--node-pool); a shard's pool changes with a restart",
        "spec.kValue=-1.0: invalid: spec.kValue: must be 0 or more, got -1.0",
        "spec.args.qps=50: not a scheduler flag kai-py applies",
        'spec.plugins.my-plugin={"priority": 5}: kai-py has no plugin of this name',
        "spec.plugins.topology.enabled=false: kai-py's plugins are always on",
        'spec.actions.drain={"enabled": true}: kai-py has no action of this name (it has '
        + ", ".join(DEFAULT_ACTIONS)
        + ")",
    ]


def test_kvalue_and_usage_db_config_are_applied() -> None:
    spec = {
        "kValue": 0.5,
        "usageDBConfig": {
            "clientType": "prometheus",
            "connectionString": "http://prometheus:9090",
            "usageParams": {"windowSize": "1d", "halfLifePeriod": "10m"},
        },
        "plugins": {"proportion": {"arguments": {"kValue": "2"}}},
    }
    got = shard_settings(_shard(spec).spec, Config(), "")
    assert got.not_applied == []
    # The plugin's argument is read after spec.kValue, as KAI's shard renders it.
    assert got.config.k_value == 2.0
    usage = got.config.usage_db
    assert usage is not None
    assert (usage.client_type, usage.connection_string) == ("prometheus", "http://prometheus:9090")
    assert (usage.window, usage.half_life) == (86400.0, 600.0)


def test_a_bad_usage_db_config_is_named_and_not_applied() -> None:
    spec = {"usageDBConfig": {"usageParams": {"windowType": "daily"}}}
    got = shard_settings(_shard(spec).spec, Config(), "")
    assert got.config.usage_db is None
    assert [n.text() for n in got.not_applied] == [
        'spec.usageDBConfig={"usageParams": {"windowType": "daily"}}: invalid: '
        "spec.usageDBConfig.usageParams.windowType: expected sliding or tumbling, got 'daily'"
    ]


def test_restrict_node_scheduling_and_its_label_keys_are_applied() -> None:
    spec = {
        "args": {
            "restrict-node-scheduling": "true",
            "gpu-worker-node-label-key": "example.com/gpu-worker",
            "cpu-worker-node-label-key": "example.com/cpu-worker",
        }
    }
    got = shard_settings(_shard(spec).spec, Config(), "")
    assert got.not_applied == []
    assert got.config.restrict_node_scheduling
    assert got.config.gpu_worker_label == "example.com/gpu-worker"
    assert got.config.cpu_worker_label == "example.com/cpu-worker"
    off = shard_settings(_shard({"args": {"restrict-node-scheduling": "false"}}).spec, Config(), "")
    assert not off.config.restrict_node_scheduling and off.not_applied == []


def test_a_bad_arg_value_is_named() -> None:
    assert _texts({"args": {"max-consolidation-preemptees": "many"}}) == [
        "spec.args.max-consolidation-preemptees=many: invalid: invalid literal for int() "
        "with base 10: 'many'"
    ]


def test_a_bad_placement_is_refused_naming_the_object_field_and_value() -> None:
    with pytest.raises(ManifestError) as exc:
        _shard({"placementStrategy": {"gpu": "pack"}})
    assert 'SchedulingShard "default": spec.placementStrategy.gpu' in str(exc.value)
    assert "'pack'" in str(exc.value)


def test_the_shards_min_runtime_is_the_default_of_queues_that_set_none() -> None:
    snap = snapshot([], default_queues("a"))
    snap.config.preempt_min_runtime = 600.0
    s = session(snap)
    assert inherited(s, "a", "preempt_min_runtime") == 600.0
    assert inherited(s, "a", "reclaim_min_runtime") == 0.0


def test_the_config_gives_the_node_pool_label_and_names_kais_deployment_settings() -> None:
    config = KaiConfig.from_manifest(
        {
            "apiVersion": "kai.scheduler/v1",
            "kind": "Config",
            "metadata": {"name": "kai-config"},
            "spec": {
                "namespace": "kai-scheduler",
                "global": {"nodePoolLabelKey": "example.com/pool", "imagesPullSecret": "regcred"},
                "scheduler": {"replicas": 2},
            },
        }
    )
    got = global_settings(config.spec, "kai-scheduler", "kai-scheduler")
    assert got.node_pool_label == "example.com/pool"
    assert [n.text() for n in got.not_applied] == [
        "spec.global.imagesPullSecret=regcred: set kai-py's Deployments in its chart",
        "spec.scheduler={\"replicas\": 2}: configures KAI's own Deployment; kai-py's are set "
        "in its chart",
    ]


def test_the_configs_scheduler_service_switch_is_applied() -> None:
    def scheduling(section: dict[str, Any]) -> tuple[bool, list[str]]:
        config = KaiConfig.from_manifest(
            {
                "apiVersion": "kai.scheduler/v1",
                "kind": "Config",
                "metadata": {"name": "kai-config"},
                "spec": {"scheduler": section},
            }
        )
        got = global_settings(config.spec, "kai-scheduler", "kai-scheduler")
        return got.scheduling, [n.text() for n in got.not_applied]

    assert scheduling({"service": {"enabled": False}}) == (False, [])
    assert scheduling({"service": {"enabled": True}}) == (True, [])
    assert scheduling({"service": {"enabled": True, "port": 80}, "replicas": 2}) == (
        True,
        [
            'spec.scheduler={"replicas": 2, "service": {"port": 80}}: configures KAI\'s own '
            "Deployment; kai-py's are set in its chart"
        ],
    )


def test_gpupack_and_gpuspread_set_the_card_placement_of_shared_pods() -> None:
    def card(plugins: dict[str, Any]) -> str:
        return shard_settings(_shard({"plugins": plugins}).spec, Config(), "").config.card_placement

    assert card({"gpuspread": {"enabled": True}}) == "spread"
    assert card({"gpupack": {}}) == "binpack"
    assert card({}) == ""  # as the node placement
    assert card({"gpuspread": {"enabled": False}}) == ""
    assert _texts({"plugins": {"gpuspread": {"enabled": False}}}) == [
        "spec.plugins.gpuspread.enabled=false: kai-py's plugins are always on"
    ]
