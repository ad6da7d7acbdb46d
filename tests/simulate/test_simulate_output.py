"""`kai-py simulate` output: the queue tree, units, reasons, cycles, BindRequests, closed pipes."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

from kai_py.simulate.simulation import simulate, to_json, write_text

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "simulate"

BIND_REQUEST = """\
apiVersion: scheduling.run.ai/v1alpha2
kind: BindRequest
metadata: {name: old, namespace: nlp}
spec: {podName: old, selectedNode: gpu-1}
"""


def _text(*paths: Path) -> str:
    out = io.StringIO()
    write_text(simulate(list(paths)), out)
    return out.getvalue()


def test_queues_are_a_tree_in_cores_and_gib() -> None:
    text = _text(EXAMPLE)
    lines = text.split("QUEUES", 1)[1].split("\n\n", 1)[0].splitlines()
    assert "CPU in cores, memory in GiB" in lines[0]
    names = [line.split("  ")[0] for line in lines[2:]]
    assert names == ["product", "└─ serving", "research", "├─ nlp", "└─ vision"]
    data = to_json(simulate([EXAMPLE]))
    nlp = next(line for line in lines if "nlp" in line).split()
    assert float(nlp[-2]) == data["queues"]["nlp"]["allocated"]["cpu"] / 1000
    assert float(nlp[-1]) == round(data["queues"]["nlp"]["allocated"]["memory"] / 2**30, 1)


def test_pending_pods_say_why_and_events_carry_their_cycle() -> None:
    text = _text(EXAMPLE)
    pending = [line for line in text.splitlines() if " Pending " in line]
    assert pending and all("OverLimit: Queue vision would use" in line for line in pending)
    running = [line for line in text.splitlines() if " Running " in line]
    assert all(line.rstrip().endswith("-") for line in running)
    events = to_json(simulate([EXAMPLE]))["events"]
    assert {e["cycle"] for e in events} == {1, 2}
    assert "    2  Warning  Unschedulable" in text


def test_a_bindrequest_in_a_snapshot_is_ignored_with_a_note(tmp_path: Path) -> None:
    extra = tmp_path / "br.yaml"
    extra.write_text(BIND_REQUEST)
    data = to_json(simulate([EXAMPLE, extra]))
    notes = [e for e in data["events"] if e["kind"] == "BindRequest"]
    assert len(notes) == 1
    assert notes[0]["reason"] == "Ignored" and notes[0]["cycle"] == 0
    assert "BindRequest nlp/old is ignored" in notes[0]["message"]
    assert data["pods"] == to_json(simulate([EXAMPLE]))["pods"]


def test_a_closed_pipe_is_no_traceback() -> None:
    reader = subprocess.Popen(
        [sys.executable, "-m", "kai_py.cli", "simulate", str(EXAMPLE), "--output", "json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert reader.stdout is not None and reader.stderr is not None
    reader.stdout.close()  # nothing read: the reader is gone before the output is written
    err = reader.stderr.read().decode()
    assert reader.wait(30) == 0
    assert err == ""


def test_a_pod_on_many_cards_shows_their_count_and_the_first_card_only(tmp_path: Path) -> None:
    # Every UUID of an 8-card pinned pod made the table over 300 columns wide.
    uuids = [f"GPU-{i:08x}-1111-2222-3333-444444444444" for i in range(8)]
    cards = ",".join(
        f'{{"index":{i},"uuid":"{u}","product":"A100","memoryMiB":81920,"health":"Healthy"}}'
        for i, u in enumerate(uuids)
    )
    inventory = f'{{"version":1,"source":"nvml","cards":[{cards}]}}'
    (tmp_path / "in.yaml").write_text(
        f"""\
{{apiVersion: v1, kind: Node, metadata: {{name: n1, annotations: {{kai.scheduler/gpu-inventory: '{inventory}'}}}}, status: {{allocatable: {{cpu: "64", memory: 256Gi, nvidia.com/gpu: "8"}}}}}}
---
{{apiVersion: scheduling.run.ai/v2, kind: Queue, metadata: {{name: ml}}, spec: {{resources: {{gpu: {{quota: -1, limit: -1}}, cpu: {{quota: -1, limit: -1}}, memory: {{quota: -1, limit: -1}}}}}}}}
---
{{apiVersion: v1, kind: Pod, metadata: {{name: wide, namespace: ml, labels: {{kai.scheduler/queue: ml}}, annotations: {{nvidia.com/use-gpuuuid: "{",".join(uuids)}"}}}}, spec: {{schedulerName: kai-scheduler, containers: [{{name: c, image: x, resources: {{limits: {{nvidia.com/gpu: "8"}}}}}}]}}}}
""",
        encoding="utf-8",
    )
    outcome = simulate([tmp_path / "in.yaml"])
    assert to_json(outcome)["pods"]["ml/wide"]["gpus"]["uuids"] == uuids  # all, for scripts
    out = io.StringIO()
    write_text(outcome, out)
    (row,) = [line for line in out.getvalue().splitlines() if line.startswith("ml/wide")]
    assert f"8 [{uuids[0]} +7 more]" in row, row
    assert uuids[1] not in row and len(row) < 120, row
