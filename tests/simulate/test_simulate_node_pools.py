"""`kai-py simulate --node-pool`: one scheduler shard's cycle, over its pool's nodes and
pods only (a `kai-py dev` cluster description puts node groups in pools by labels)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kai_py.cli import main
from tests.simulate.test_simulate_cli import QUEUES, run_json, write

CLUSTER = """
apiVersion: kai-py.dev/v1
kind: DevCluster
nodes:
- {name: a, count: 1, gpus: 2, labels: {kai.scheduler/node-pool: pool-a}}
- {name: b, count: 1, gpus: 2, labels: {kai.scheduler/node-pool: pool-b}}
- {name: plain, count: 1, gpus: 2}
"""


def job(name: str, pool: str | None) -> str:
    labels = f"{{kai.scheduler/node-pool: {pool}}}" if pool else "{}"
    return f"""
apiVersion: batch/v1
kind: Job
metadata: {{name: {name}, namespace: ml, labels: {labels}}}
spec:
  parallelism: 2
  template:
    metadata: {{labels: {{kai.scheduler/queue: team}}}}
    spec:
      schedulerName: kai-scheduler
      restartPolicy: Never
      containers:
      - name: main
        image: busybox
        resources: {{limits: {{nvidia.com/gpu: "1"}}}}
"""


LONE = """
apiVersion: v1
kind: Pod
metadata:
  name: lone-b
  namespace: ml
  labels: {kai.scheduler/queue: team, kai.scheduler/node-pool: pool-b}
spec:
  schedulerName: kai-scheduler
  containers:
  - {name: main, image: busybox, resources: {limits: {nvidia.com/gpu: "1"}}}
"""


@pytest.mark.parametrize(
    ("pool", "node", "pods"),
    [
        ("pool-a", "a-0", {"train-a-0", "train-a-1"}),
        ("pool-b", "b-0", {"train-b-0", "train-b-1", "lone-b"}),
        ("", "plain-0", {"train-0", "train-1"}),
    ],
)
def test_one_cycle_of_one_pool(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], pool: str, node: str, pods: set[str]
) -> None:
    path = write(
        tmp_path,
        CLUSTER,
        QUEUES,
        job("train-a", "pool-a"),
        job("train-b", "pool-b"),
        job("train", None),
        LONE,
    )
    data = run_json(capsys, str(path), "--node-pool", pool, "--cycles", "1")
    placed = data["pods"]
    assert isinstance(placed, dict)
    assert {name.split("/")[1] for name in placed} == pods
    # Every pod of the pool on the pool's node (2 GPUs each): lone-b waits there.
    assert {p["node"] for p in placed.values() if p["status"] != "Pending"} == {node}


def test_the_left_out_objects_are_said(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, CLUSTER, QUEUES, LONE)
    assert main(["simulate", str(path), "--node-pool", "pool-a", "--output", "json"]) == 0
    err = capsys.readouterr().err
    assert (
        "--node-pool 'pool-a' (kai.scheduler/node-pool=pool-a): left out 3 objects of other pools"
        in err
    )
    assert "Pod lone-b" in err and "Node b-0" in err
