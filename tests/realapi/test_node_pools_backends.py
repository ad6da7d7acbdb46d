"""Node pools on both backends: two scheduler shards (``kai-py run --controllers scheduler
--node-pool ...``), one binder and one pod-grouper (docs/operator.md, "Node pools")."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from operator_helpers import (
    Operator,
    create_queues,
    gpu_job,
    queue,
    start_operator,
    stop_operator,
    wait_for,
)
from realapi_backends import BACKENDS, Backend, backend_cluster

from kai_py.api import keys

NS = "team-a"
POOL = keys.NODE_POOL_LABEL
POOLED_CLUSTER = {
    "nodes": [
        {
            "name": pool,
            "count": 1,
            "gpus": 4,
            "cpu": "32",
            "memory": "256Gi",
            "labels": {POOL: f"pool-{pool}"},
        }
        for pool in ("a", "b")
    ],
    "namespaces": [NS],
}


@pytest.fixture(params=BACKENDS)
def pooled(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    with backend_cluster(request.param, tmp_path, POOLED_CLUSTER) as running:
        yield running


def _job(name: str, pool: str, parallelism: int) -> dict[str, Any]:
    job = gpu_job(name, NS, parallelism=parallelism)
    job["metadata"]["labels"][POOL] = pool  # on the top owner only, not on its pods
    return job


def _nodes_of(core: k8s.CoreV1Api, job: str) -> list[str] | None:
    pods = core.list_namespaced_pod(NS, label_selector=f"job-name={job}").items
    if not pods or not all(p.status.phase == "Running" for p in pods):
        return None
    return sorted(p.spec.node_name for p in pods)


def test_each_shard_binds_only_into_its_pool_and_survives_the_others_death(
    pooled: Backend, tmp_path: Path
) -> None:
    api = k8s_config.new_client_from_config(config_file=pooled.kubeconfig_path)
    core, custom, batch = k8s.CoreV1Api(api), k8s.CustomObjectsApi(api), k8s.BatchV1Api(api)
    kubeconfig = pooled.kubeconfig_path

    def shard(pool: str) -> Operator:
        return start_operator(
            kubeconfig,
            tmp_path / f"shard-{pool}.log",
            "--controllers",
            "scheduler",
            "--node-pool",
            pool,
        )

    parts = {
        "binder-grouper": start_operator(
            kubeconfig, tmp_path / "binder-grouper.log", "--controllers", "binder,podgrouper"
        ),
        "pool-a": shard("pool-a"),
        "pool-b": shard("pool-b"),
    }

    def logs() -> str:
        return "\n".join(f"--- {name}\n{part.log}" for name, part in parts.items())

    try:
        create_queues(custom, queue("root"), queue("team-a", parent="root"))
        for pool in ("a", "b"):
            batch.create_namespaced_job(NS, _job(f"train-{pool}", f"pool-{pool}", 2))
        for pool in ("a", "b"):
            nodes = wait_for(
                lambda p=pool: _nodes_of(core, f"train-{p}"),
                timeout=60,
                what=f"train-{pool}\n{logs()}",
            )
            assert nodes == [f"{pool}-0", f"{pool}-0"]
        groups = custom.list_namespaced_custom_object(
            "scheduling.run.ai", "v2alpha2", NS, "podgroups"
        )
        assert sorted(g["metadata"]["labels"].get(POOL) for g in groups["items"]) == [
            "pool-a",
            "pool-b",
        ]
        requests = custom.list_namespaced_custom_object(
            "scheduling.run.ai", "v1alpha2", NS, "bindrequests"
        )
        assert sorted(r["metadata"]["labels"].get(POOL) for r in requests["items"]) == [
            "pool-a",
            "pool-a",
            "pool-b",
            "pool-b",
        ]
        # Shard pool-a dies: pool-b's pods still run; pool-a's wait for their shard.
        stop_operator(parts["pool-a"])
        batch.create_namespaced_job(NS, _job("late-a", "pool-a", 1))
        batch.create_namespaced_job(NS, _job("late-b", "pool-b", 1))
        assert wait_for(
            lambda: _nodes_of(core, "late-b"), timeout=60, what=f"late-b\n{logs()}"
        ) == ["b-0"]
        time.sleep(1.0)
        (waiting,) = core.list_namespaced_pod(NS, label_selector="job-name=late-a").items
        assert not waiting.spec.node_name  # shard pool-b never takes pool-a's pod
        parts["pool-a"] = shard("pool-a")
        assert wait_for(
            lambda: _nodes_of(core, "late-a"), timeout=60, what=f"late-a\n{logs()}"
        ) == ["a-0"]
    finally:
        for part in parts.values():
            stop_operator(part)
        if os.environ.get("KAI_PY_OPERATOR_LOG"):
            print(logs())
        api.close()
    assert "Traceback" not in logs(), logs()
