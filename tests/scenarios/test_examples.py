"""The README's first run: `kai-py simulate examples/simulate/` (cluster.yaml and
workloads.yaml) exits 0 and shows the outcomes the example files promise."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kai_py.cli import main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "simulate"


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    code = main(["simulate", str(EXAMPLES), "--output", "json", *args])
    out = capsys.readouterr().out
    return code, json.loads(out) if code == 0 else {}


def test_examples_exist() -> None:
    assert (EXAMPLES / "cluster.yaml").is_file()
    assert (EXAMPLES / "workloads.yaml").is_file()


def test_first_run(capsys: pytest.CaptureFixture[str]) -> None:
    code, data = run(capsys)
    assert code == 0
    pods, queues = data["pods"], data["queues"]
    running = {"Running", "Bound"}

    # 1. the gang of 2 x 8 GPUs starts as a whole, one whole node each
    gang = [pods["nlp/llm-pretrain-0"], pods["nlp/llm-pretrain-1"]]
    assert all(p["status"] in running for p in gang)
    assert gang[0]["node"] != gang[1]["node"]
    assert all(p["gpus"]["count"] == 8 for p in gang)

    # 2. the fractional inference pod holds half a card, in a GPU group
    emb = pods["serving/embedder-0"]
    assert emb["status"] in running
    assert emb["gpus"]["portion"] == 0.5 and len(emb["gpus"]["groups"]) == 1

    # 3. the Deployment's replicas are separate inference groups sharing cards by memory
    for name in ("serving/chat-api-5c7d-x1", "serving/chat-api-5c7d-x2"):
        assert pods[name]["status"] in running
        assert pods[name]["gpus"]["memory"] == 40960
    scheduled = {e["object"] for e in data["events"] if e["reason"] == "Scheduled"}
    assert {"serving/chat-api-5c7d-x1", "serving/chat-api-5c7d-x2"} <= scheduled

    # 4. the elastic Job (minMember 2 from the annotation) grows to all 4 pods
    assert all(pods[f"vision/hpo-sweep-{i}"]["status"] in running for i in range(4))

    # 5. the gang over vision's limit waits, and the event says why with numbers
    assert pods["vision/detector-train-0"]["status"] == "Pending"
    assert pods["vision/detector-train-1"]["status"] == "Pending"
    assert any(
        e["kind"] == "PodGroup"
        and e["object"] == "vision/detector-train"
        and e["type"] == "Warning"
        and "above its limit of 8 GPUs" in e["message"]
        for e in data["events"]
    )

    # 6. the CPU-only pod runs without a GPU
    assert pods["nlp/tokenize-0"]["status"] in running
    assert pods["nlp/tokenize-0"]["gpus"]["count"] == 0

    # queues: what each team and department holds (GPUs in devices)
    allocated = {name: q["allocated"]["gpu"] for name, q in queues.items()}
    assert allocated["nlp"] == pytest.approx(16)
    assert allocated["vision"] == pytest.approx(4)
    assert allocated["research"] == pytest.approx(20)
    assert allocated["serving"] == pytest.approx(1.5)
    assert allocated["product"] == pytest.approx(1.5)
    assert queues["nlp"]["deserved"]["gpu"] == pytest.approx(8)
    assert queues["vision"]["fairShare"]["gpu"] == pytest.approx(8)  # capped by its limit
    assert data["evictions"] == []


def test_first_run_as_text(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", str(EXAMPLES)]) == 0
    text = capsys.readouterr().out
    assert "PODS" in text and "QUEUES" in text and "EVENTS" in text
    assert "vision/detector-train" in text
