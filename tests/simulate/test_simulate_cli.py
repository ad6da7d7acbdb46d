"""`kai-py simulate` end to end through the CLI: the JSON contract, text output, bad input."""

from __future__ import annotations

import io
import json
import re
import textwrap
from pathlib import Path

import pytest
import yaml

from kai_py.cli import main

NODE = """
apiVersion: v1
kind: Node
metadata: {name: gpu-1, labels: {nvidia.com/gpu.memory: "81920"}}
status: {allocatable: {cpu: "8", memory: 32Gi, nvidia.com/gpu: "2"}}
"""
QUEUES = """
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: root}
spec:
  resources:
    gpu: {quota: -1, limit: -1}
    cpu: {quota: -1, limit: -1}
    memory: {quota: -1, limit: -1}
---
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: team}
spec:
  parentQueue: root
  resources:
    gpu: {quota: 2, limit: -1}
    cpu: {quota: -1, limit: -1}
    memory: {quota: -1, limit: -1}
"""


def pod(name: str, gpus: str = "1", annotations: str = "", queue: str = "team") -> str:
    limits = f', limits: {{nvidia.com/gpu: "{gpus}"}}' if gpus != "0" else ""
    return f"""
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: ml
  labels: {{kai.scheduler/queue: {queue}}}
  annotations: {{{annotations}}}
spec:
  schedulerName: kai-scheduler
  containers:
  - name: main
    image: busybox
    resources: {{requests: {{cpu: 500m, memory: 1Gi}}{limits}}}
"""


def write(tmp_path: Path, *docs: str, name: str = "input.yaml") -> Path:
    path = tmp_path / name
    path.write_text("\n---\n".join(textwrap.dedent(d) for d in docs), encoding="utf-8")
    return path


def run_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, object]:
    assert main(["simulate", *args, "--output", "json"]) == 0
    data: dict[str, object] = json.loads(capsys.readouterr().out)
    return data


def test_json_contract(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(
        tmp_path, NODE, QUEUES, pod("a"), pod("b", gpus="0", annotations="gpu-fraction: '0.5'")
    )
    data = run_json(capsys, str(path))
    assert set(data) >= {"cycles", "pods", "evictions", "events", "queues"}
    pods = data["pods"]
    assert isinstance(pods, dict)
    assert pods["ml/a"] == {
        "status": "Running",
        "node": "gpu-1",
        "gpus": {"count": 1, "portion": 1.0, "groups": []},
    }
    assert pods["ml/b"]["status"] == "Running"
    assert pods["ml/b"]["gpus"]["portion"] == 0.5
    assert len(pods["ml/b"]["gpus"]["groups"]) == 1
    queues = data["queues"]
    assert isinstance(queues, dict)
    # Units: GPUs in devices, CPU in millicores, memory in bytes.
    assert queues["team"]["allocated"] == {"gpu": 1.5, "cpu": 1000.0, "memory": 2 * 2.0**30}
    assert queues["team"]["deserved"]["gpu"] == 2.0
    assert data["evictions"] == []
    events = data["events"]
    assert isinstance(events, list)
    assert {
        "kind": "Pod",
        "object": "ml/a",
        "type": "Normal",
        "reason": "Scheduled",
        "message": "Successfully assigned pod ml/a to node gpu-1",
        "count": 1,
        "cycle": 1,
    } in events
    # Until nothing changes: the bind cycle, then one that changes nothing.
    assert data["cycles"] == 2


def test_cycles_runs_exactly_n(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, NODE, QUEUES, pod("a"))
    data = run_json(capsys, str(path), "--cycles", "3")
    assert data["cycles"] == 3
    one = run_json(capsys, str(path), "--cycles", "1")
    assert one["pods"]["ml/a"]["status"] == "Bound"  # type: ignore[index]


def test_text_output_has_tables(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, NODE, QUEUES, pod("a"), pod("big", gpus="4"))
    assert main(["simulate", str(path)]) == 0
    out = capsys.readouterr().out
    assert "POD" in out and "QUEUE" in out and "EVENTS" in out
    assert "ml/big" in out and "Insufficient nvidia.com/gpu" in out


def test_folder_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path, NODE, name="nodes.yaml")
    write(tmp_path, QUEUES, name="queues.yml")
    (tmp_path / "sub").mkdir()
    write(tmp_path / "sub", pod("a"), name="pods.yaml")
    data = run_json(capsys, str(tmp_path))
    assert data["pods"]["ml/a"]["node"] == "gpu-1"  # type: ignore[index]


@pytest.mark.parametrize(
    ("docs", "expected"),
    [
        (("kind: Node\nmetadata: {name: [unclosed",), ["input.yaml", "not valid YAML", "line"]),
        (
            ("apiVersion: v1\nkind: Service\nmetadata: {name: web}",),
            ["input.yaml", "Service web", "unknown kind"],
        ),
        (
            (QUEUES.replace("parentQueue: root", "parentQueue: nowhere"),),
            ["Queue team", "spec.parentQueue", "'nowhere' does not exist"],
        ),
        (
            (
                "apiVersion: scheduling.run.ai/v2\nkind: Queue\nmetadata: {name: a}\nspec: {parentQueue: b}\n---\n"
                "apiVersion: scheduling.run.ai/v2\nkind: Queue\nmetadata: {name: b}\nspec: {parentQueue: a}",
            ),
            ["spec.parentQueue", "cycle"],
        ),
        (
            (QUEUES.replace("gpu: {quota: 2,", "gpu: {quota: -2,"),),
            ["team", "spec.resources.gpu.quota"],
        ),
        (("apiVersion: v1\nkind: Pod\nmetadata: {namespace: x}",), ["metadata.name", "required"]),
    ],
    ids=["yaml", "unknown-kind", "missing-parent", "parent-cycle", "negative-quota", "no-name"],
)
def test_bad_input_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], docs: tuple[str, ...], expected: list[str]
) -> None:
    path = write(tmp_path, NODE, *docs)
    assert main(["simulate", str(path)]) == 2
    err = capsys.readouterr().err
    for text in expected:
        assert text in err, err


def test_missing_file_and_bad_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", str(tmp_path / "nope.yaml")]) == 2
    assert "no such file" in capsys.readouterr().err
    path = write(tmp_path, NODE)
    assert main(["simulate", str(path), "--now", "yesterday"]) == 2
    assert "--now" in capsys.readouterr().err
    assert main(["simulate", str(path), "--cycles", "0"]) == 2


@pytest.mark.parametrize(
    ("annotations", "gpus", "field"),
    [
        ("gpu-fraction: '1.5'", "0", "gpu-fraction"),
        ("gpu-fraction: 'half'", "0", "gpu-fraction"),
        ("gpu-fraction: '0.5'", "1", "gpu-fraction"),
        ("gpu-memory: '-3'", "0", "gpu-memory"),
        ("gpu-memory: '2.5'", "0", "gpu-memory"),
    ],
)
def test_bad_workload_stays_pending_others_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], annotations: str, gpus: str, field: str
) -> None:
    bad = pod("bad", gpus=gpus, annotations=annotations)
    path = write(tmp_path, NODE, QUEUES, pod("good"), bad)
    data = run_json(capsys, str(path))
    pods = data["pods"]
    assert pods["ml/good"]["status"] == "Running"  # type: ignore[index]
    assert pods["ml/bad"]["status"] == "Pending"  # type: ignore[index]
    warnings = [e for e in data["events"] if e["type"] == "Warning" and e["object"] == "ml/bad"]  # type: ignore[index, union-attr]
    assert any(
        f"metadata.annotations[{field}]" in e["message"] and "input.yaml" in e["message"]
        for e in warnings
    ), warnings


def test_missing_queue_and_podgroup(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pg = """
apiVersion: scheduling.run.ai/v2alpha2
kind: PodGroup
metadata: {name: lost, namespace: ml}
spec: {minMember: 1, queue: no-such-queue}
"""
    lost = pod("lost-0", annotations="pod-group-name: lost")
    orphan = pod("orphan", annotations="pod-group-name: ghost")
    path = write(tmp_path, NODE, QUEUES, pod("good"), pg, lost, orphan)
    data = run_json(capsys, str(path))
    pods = data["pods"]
    assert pods["ml/good"]["status"] == "Running"  # type: ignore[index]
    assert pods["ml/lost-0"]["status"] == "Pending"  # type: ignore[index]
    assert pods["ml/orphan"]["status"] == "Pending"  # type: ignore[index]
    messages = " ".join(e["message"] for e in data["events"])  # type: ignore[union-attr]
    assert "'no-such-queue'" in messages and "does not exist" in messages
    assert "PodGroup 'ghost' does not exist" in messages


def test_dev_cluster_description_gives_nodes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = """
apiVersion: kai-py.dev/v1
kind: DevCluster
nodes:
  - {name: h100, count: 2, gpus: 8, gpuMemory: 80Gi, cpu: "64", memory: 512Gi}
"""
    path = write(
        tmp_path, cluster, QUEUES, pod("a", gpus="8"), pod("b", gpus="8"), pod("c", gpus="8")
    )
    data = run_json(capsys, str(path))
    pods = data["pods"]
    assert {pods["ml/a"]["node"], pods["ml/b"]["node"]} == {"h100-0", "h100-1"}  # type: ignore[index]
    assert pods["ml/c"]["status"] == "Pending"  # type: ignore[index]
    bad = write(
        tmp_path,
        "apiVersion: kai-py.dev/v1\nkind: DevCluster\nnodes: [{name: x, gpus: lots}]",
        name="bad.yaml",
    )
    assert main(["simulate", str(bad)]) == 2
    assert "bad.yaml" in capsys.readouterr().err


WORKLOADS = """
apiVersion: batch/v1
kind: Job
metadata: {name: train, namespace: ml, labels: {kai.scheduler/queue: team}, annotations: {kai.scheduler/batch-min-member: "2"}}
spec:
  parallelism: 2
  template:
    spec:
      schedulerName: kai-scheduler
      containers: [{name: m, image: x, resources: {limits: {nvidia.com/gpu: "1"}}}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: serve, namespace: ml, labels: {kai.scheduler/queue: team}}
spec:
  replicas: 2
  template:
    metadata: {annotations: {gpu-fraction: "0.25"}}
    spec:
      schedulerName: kai-scheduler
      containers: [{name: m, image: x}]
---
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: big, namespace: ml, labels: {kai.scheduler/queue: team}}
spec:
  pytorchReplicaSpecs:
    Master: {replicas: 1, template: {spec: {schedulerName: kai-scheduler, containers: [{name: m, image: x, resources: {limits: {nvidia.com/gpu: "1"}}}]}}}
    Worker: {replicas: 3, template: {spec: {schedulerName: kai-scheduler, containers: [{name: m, image: x, resources: {limits: {nvidia.com/gpu: "1"}}}]}}}
"""


def test_workloads_without_pods_get_their_controllers_pods(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(
        tmp_path,
        NODE.replace('nvidia.com/gpu: "2"', 'nvidia.com/gpu: "4"'),
        QUEUES.replace("quota: 2,", "quota: 8,"),
        WORKLOADS,
    )
    data = run_json(capsys, str(path))
    pods = data["pods"]
    assert isinstance(pods, dict)
    assert {k for k in pods if k.startswith("ml/train-")} == {"ml/train-0", "ml/train-1"}
    assert pods["ml/train-0"]["status"] == pods["ml/train-1"]["status"] == "Running"
    serve = [k for k in pods if k.startswith("ml/serve-")]
    assert len(serve) == 2 and all(pods[k]["gpus"]["portion"] == 0.25 for k in serve)
    # The PyTorchJob is one gang of 4 one-GPU pods; only 2 GPUs are left after the Job,
    # so it waits as a whole.
    big = [k for k in pods if k.startswith("ml/big-")]
    assert len(big) == 4 and all(pods[k]["status"] == "Pending" for k in big)
    assert any("required for gang scheduling" in e["message"] for e in data["events"])  # type: ignore[union-attr]


def test_a_running_pod_on_several_cards_lists_its_groups_in_an_annotation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    running = pod(
        "multi",
        gpus="0",
        annotations="gpu-fraction: '0.5', gpu-fraction-num-devices: '2', kai.scheduler/gpu-groups: 'g1,g2'",
    ).replace("spec:\n", "spec:\n  nodeName: gpu-1\n", 1)
    path = write(tmp_path, NODE, QUEUES, running, pod("whole", gpus="1"))
    data = run_json(capsys, str(path))
    pods = data["pods"]
    assert pods["ml/multi"]["gpus"]["groups"] == ["g1", "g2"]  # type: ignore[index]
    # Both cards are half used, so a whole-GPU pod has no card left on the 2-GPU node.
    assert pods["ml/whole"]["status"] == "Pending"  # type: ignore[index]


def test_dash_reads_the_manifests_from_stdin(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A live-cluster what-if: `kubectl get nodes,queues,pods -A -o yaml | kai-py simulate -
    # new.yaml` (kubectl prints one List), with a file of what to try next to it.
    items = [d for text in (NODE, QUEUES) for d in yaml.safe_load_all(text)]
    listing = yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items})
    monkeypatch.setattr("sys.stdin", io.StringIO(listing))
    data = run_json(capsys, "-", str(write(tmp_path, pod("a"))))
    assert data["pods"]["ml/a"]["node"] == "gpu-1"  # type: ignore[index]


def test_the_commands_in_the_examples_comments_work(capsys: pytest.CaptureFixture[str]) -> None:
    root = Path(__file__).resolve().parents[2]
    # Quoted (`kai-py simulate ...`) or on a comment line of its own, indented.
    command = re.compile(r"`(kai-py simulate [^`]*)`|^#\s{2,}(kai-py simulate .*)$")
    commands = {
        found.group(1) or found.group(2)
        for path in sorted((root / "examples").rglob("*.yaml"))
        for line in path.read_text(encoding="utf-8").splitlines()
        if (found := command.search(line))
    }
    assert commands
    for command in sorted(commands):
        args = command.split()[1:]
        assert args[0] == "simulate", command
        # Files of the repository by their path from its root; other values (--over-time
        # 20m) as written.
        paths = [str(root / a) if (root / a).exists() else a for a in args[1:]]
        assert main(["simulate", *paths]) == 0, (command, capsys.readouterr().err)
        capsys.readouterr()
