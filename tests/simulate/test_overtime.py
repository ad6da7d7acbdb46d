"""`kai-py simulate --over-time`: cycles over simulated time (docs/simulate.md, docs/fairshare.md).

The scenario of KAI's time-based fair share docs: one node of 16 GPUs, two
queues with no quota and an overQuotaWeight of 1, each with a 16-GPU job. With
a usage window the two take turns; without one the first keeps the node.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from kai_py.cli import main
from kai_py.simulate.inputs import load_documents
from kai_py.simulate.overtime import run_over_time
from kai_py.simulate.simulation import scheduler_config
from kai_py.state.documents import InputError

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "simulate-over-time"
CLUSTER = EXAMPLE / "cluster.yaml"
CONFIG = EXAMPLE / "scheduler-config.yaml"


def turns(rows: list[tuple[float, list[float]]]) -> list[int]:
    """The index of the queue holding all 16 GPUs, each time the holder changes."""
    out: list[int] = []
    for _, gpus in rows:
        holder = [i for i, g in enumerate(gpus) if g == 16]
        if holder and (not out or out[-1] != holder[0]):
            out.append(holder[0])
    return out


def test_two_queues_take_turns_with_time_based_fair_share() -> None:
    config = scheduler_config(config_file=CONFIG)
    timeline = run_over_time(load_documents([CLUSTER]), duration=1200.0, step=5.0, config=config)
    assert timeline.queues == ["team-a", "team-b"]
    # Never more than the node: one job at a time, all or nothing.
    assert all(sum(g) <= 16 and set(g) <= {0, 16} for _, g in timeline.rows)
    order = turns(timeline.rows)
    assert len(order) >= 4, order  # a, b, a, b... over 20 minutes of a 4-minute window
    assert order == [i % 2 for i in range(len(order))]  # a first (created first), then turns
    # Each queue holds the node for about the same time.
    held = [sum(1 for _, g in timeline.rows if g[i] == 16) for i in (0, 1)]
    assert abs(held[0] - held[1]) <= len(timeline.rows) * 0.25, held


def test_without_a_usage_window_the_first_job_keeps_the_node() -> None:
    timeline = run_over_time(load_documents([CLUSTER]), duration=1200.0, step=5.0)
    assert turns(timeline.rows) == [0]


def test_a_larger_kvalue_makes_the_turns_shorter(tmp_path: Path) -> None:
    def switches(k: str) -> int:
        config = tmp_path / f"k{k}.yaml"
        config.write_text(
            CONFIG.read_text().replace('kValue: "1"', f'kValue: "{k}"'), encoding="utf-8"
        )
        timeline = run_over_time(
            load_documents([CLUSTER]),
            duration=1200.0,
            step=5.0,
            config=scheduler_config(config_file=config),
        )
        return len(turns(timeline.rows))

    assert switches("4") > switches("0.5")


def test_pods_with_a_duration_finish_and_free_their_gpus(tmp_path: Path) -> None:
    text = CLUSTER.read_text().replace(
        "  labels: {kai.scheduler/queue: team-a}",
        "  labels: {kai.scheduler/queue: team-a}\n  annotations: {kai-py.dev/duration: 1m}",
    )
    path = tmp_path / "c.yaml"
    path.write_text(text, encoding="utf-8")
    timeline = run_over_time(load_documents([path]), duration=300.0, step=10.0)
    at = {t: g for t, g in timeline.rows}
    assert at[50.0] == [16, 0]
    # Done after its minute: the GPUs are free for b's job in the same cycle.
    assert at[60.0] == [0, 16]
    assert at[300.0] == [0, 16]


def test_a_bad_duration_is_named(tmp_path: Path) -> None:
    text = CLUSTER.read_text().replace(
        "  labels: {kai.scheduler/queue: team-a}",
        "  labels: {kai.scheduler/queue: team-a}\n  annotations: {kai-py.dev/duration: soon}",
    )
    path = tmp_path / "c.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputError) as info:
        run_over_time(load_documents([path]), duration=60.0)
    assert "Pod default/train-a: metadata.annotations[kai-py.dev/duration]: invalid" in str(
        info.value.problems
    )


def test_cli_prints_the_table_and_writes_the_picture(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plot = tmp_path / "gpus.svg"
    argv = ["simulate", str(CLUSTER), "--config", str(CONFIG), "--over-time", "10m"]
    assert main([*argv, "--step", "5s", "--plot", str(plot)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].split() == ["TIME", "team-a", "team-b"]
    assert lines[1].split() == ["0s", "16", "0"]
    assert any(line.split()[1:] == ["0", "16"] for line in lines)
    svg = ET.parse(plot).getroot()
    ns = "{http://www.w3.org/2000/svg}"
    lines_drawn = svg.findall(f"{ns}polyline")
    assert [p.find(f"{ns}title").text for p in lines_drawn] == ["team-a", "team-b"]  # type: ignore[union-attr]


def test_cli_refuses_plot_without_over_time(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", str(CLUSTER), "--plot", "x.svg"]) == 2
    assert "--step and --plot go with --over-time" in capsys.readouterr().err
    assert main(["simulate", str(CLUSTER), "--over-time", "soon"]) == 2
    assert "--over-time: invalid duration 'soon'" in capsys.readouterr().err


def _queue(name: str) -> str:
    return f"""
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {{name: {name}}}
spec:
  parentQueue: dept
  resources:
    gpu: {{quota: 0, limit: -1, overQuotaWeight: 1}}
    cpu: {{quota: -1, limit: -1}}
    memory: {{quota: -1, limit: -1}}
"""


def _pods(queue: str, gpus: int, count: int) -> list[str]:
    return [
        f"""
apiVersion: v1
kind: Pod
metadata:
  name: {queue}-{i}
  namespace: default
  creationTimestamp: '2026-01-01T09:00:{i % 60:02d}Z'
  labels: {{kai.scheduler/queue: {queue}}}
spec:
  schedulerName: kai-scheduler
  containers:
  - {{name: main, image: x, resources: {{limits: {{nvidia.com/gpu: '{gpus}', cpu: '1', memory: 1Gi}}}}}}
"""
        for i in range(count)
    ]


def _cluster(tmp_path: Path, queues: dict[str, tuple[int, int]], config: str) -> tuple[Path, Path]:
    """One 16-GPU node, a department, its queues (name -> (GPUs a pod, pods)); as KAI's
    time-aware fairness environment tests set them up."""
    docs = [
        CLUSTER.read_text().split("---")[0],
        _queue("dept").replace("  parentQueue: dept\n", ""),
    ]
    for name, (gpus, count) in queues.items():
        docs += [_queue(name), *_pods(name, gpus, count)]
    path = tmp_path / "cluster.yaml"
    path.write_text("---".join(docs), encoding="utf-8")
    conf = tmp_path / "config.yaml"
    conf.write_text(config, encoding="utf-8")
    return path, conf


def test_three_queues_of_whole_cluster_jobs_do_not_rotate(tmp_path: Path) -> None:
    # KAI's time_aware_fairness_test.go, "3-Way oscillation between queues" (three queues
    # of 16-GPU jobs on 16 GPUs, a window of 256 s, kValue 10; KAI's case asserts nothing
    # on the outcome). With the rule, the two queues that have not run have the same usage
    # and split the over-quota share evenly, 8 GPUs each: neither may reclaim the whole
    # node, so the first keeps it (docs/fairshare.md says so).
    path, conf = _cluster(
        tmp_path,
        {"q1": (16, 1), "q2": (16, 1), "q3": (16, 1)},
        "usageDBConfig: {usageParams: {windowSize: 256s}}\n"
        'tiers: [{plugins: [{name: proportion, arguments: {kValue: "10"}}]}]\n',
    )
    timeline = run_over_time(
        load_documents([path]), duration=512.0, step=8.0, config=scheduler_config(config_file=conf)
    )
    assert turns(timeline.rows) == [0]


def test_a_burst_queue_gets_its_turn(tmp_path: Path) -> None:
    # KAI's "Should allow burst use cases": two queues of 1-GPU jobs and one of 12-GPU
    # jobs on 16 GPUs. By weight alone each queue's share is 5 or 6 GPUs and the 12-GPU
    # job never runs; with usage the queue that used nothing gets to run it. KAI's case
    # uses kValue 1 and asserts nothing; at 1 the burst queue's share grows to 10 or 11
    # GPUs, short of its job, so this case takes kValue 3.
    queues = {"q1": (1, 16), "q2": (1, 16), "burst": (12, 2)}
    config = (
        "usageDBConfig: {usageParams: {windowSize: 256s}}\n"
        'tiers: [{plugins: [{name: proportion, arguments: {kValue: "3"}}]}]\n'
    )
    path, conf = _cluster(tmp_path, queues, config)
    with_usage = run_over_time(
        load_documents([path]), duration=1024.0, step=4.0, config=scheduler_config(config_file=conf)
    )
    assert with_usage.queues == ["q1", "q2", "burst"]
    assert any(g[2] == 12 for _, g in with_usage.rows)
    without = run_over_time(load_documents([path]), duration=1024.0, step=4.0)
    assert all(g[2] == 0 for _, g in without.rows)
