"""``kai-py dev`` as users run it, and the real kubectl against the emulated cluster."""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kai_py.emulator.dev_cluster import ThreadedDevCluster

KUBECTL = shutil.which("kubectl")
needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed on PATH")
REPO = Path(__file__).resolve().parents[2]
DEV = [sys.executable, "-m", "kai_py.cli", "dev"]


def kubectl(kubeconfig: str, *args: str, stdin: str | None = None, check: bool = True) -> str:
    assert KUBECTL is not None
    done = subprocess.run(
        [KUBECTL, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "KUBECONFIG": kubeconfig},
    )
    if check and done.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed: {done.stderr}")
    return done.stdout + (done.stderr if not check else "")


def read_until(process: subprocess.Popen[bytes], marker: str, timeout: float = 20.0) -> list[str]:
    """Lines of stdout up to and including the first that contains ``marker``.

    Reads the pipe's file descriptor directly: a buffered reader would hide
    lines it has already read from select().
    """
    assert process.stdout is not None
    fd = process.stdout.fileno()
    buffer = b""
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if not ready:
            if process.poll() is not None:
                break
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        buffer += chunk
        while b"\n" in buffer:
            raw, buffer = buffer.split(b"\n", 1)
            lines.append(raw.decode())
            if marker in lines[-1]:
                return lines
    raise AssertionError(f"no line with {marker!r} in time; got {lines}")


@pytest.fixture
def dev_process(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    kubeconfig = tmp_path / "kubeconfig"
    process = subprocess.Popen(
        [*DEV, "--no-operator", "--kubeconfig", str(kubeconfig)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=REPO,
    )
    try:
        yield process, kubeconfig
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(5)


@pytest.mark.e2e
@needs_kubectl
def test_dev_prints_export_line_serves_kubectl_and_stops_on_sigterm(
    dev_process: tuple[subprocess.Popen[bytes], Path],
) -> None:
    process, kubeconfig = dev_process
    lines = read_until(process, "export KUBECONFIG=")
    assert lines[-1] == f"export KUBECONFIG={kubeconfig.resolve()}"
    nodes = json.loads(kubectl(str(kubeconfig), "get", "nodes", "-o", "json"))["items"]
    assert len(nodes) == 6
    gpu_nodes = [n for n in nodes if "nvidia.com/gpu.count" in n["metadata"]["labels"]]
    assert len(gpu_nodes) == 4
    assert all(n["status"]["allocatable"]["nvidia.com/gpu"] == "8" for n in gpu_nodes)
    crds = kubectl(str(kubeconfig), "get", "crd", "-o", "name")
    assert "queues.scheduling.run.ai" in crds
    started = time.monotonic()
    process.send_signal(signal.SIGTERM)
    assert process.wait(10) == 0
    assert time.monotonic() - started < 5


def test_dev_without_operator_flag_starts_the_operator_which_runs_a_pod(tmp_path: Path) -> None:
    from kubernetes import client as k8s
    from kubernetes import config as k8s_config

    kubeconfig = tmp_path / "kc"
    process = subprocess.Popen(
        [*DEV, "--kubeconfig", str(kubeconfig)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=REPO,
    )
    try:
        lines = read_until(process, "starting the operator")
        assert lines[-1] == (
            f"kai-py dev: starting the operator: {sys.executable} -m kai_py.controllers.operator"
            " --controllers scheduler,binder,podgrouper,webhooks"
        )
        # The export line comes once the operator's webhooks answer, after its start.
        assert not any(line.startswith("export KUBECONFIG=") for line in lines)
        read_until(process, "export KUBECONFIG=", timeout=60)
        api = k8s_config.new_client_from_config(config_file=str(kubeconfig))
        core, custom = k8s.CoreV1Api(api), k8s.CustomObjectsApi(api)
        # A bare pod, as a user would apply it: the pod-grouper gives it a PodGroup,
        # the scheduler a BindRequest, the binder a node; the kubelet runs it.
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "hello"},
            "spec": {
                "schedulerName": "kai-scheduler",
                "containers": [
                    {
                        "name": "main",
                        "image": "busybox",
                        "resources": {"limits": {"nvidia.com/gpu": "1"}},
                    }
                ],
            },
        }
        core.create_namespaced_pod("default", pod)  # type: ignore[arg-type]
        deadline = time.monotonic() + 30
        running = None
        while time.monotonic() < deadline and running is None:
            current = core.read_namespaced_pod("hello", "default")
            if current.status.phase == "Running":
                running = current
            time.sleep(0.1)
        assert running is not None, "the pod did not get to Running"
        assert running.spec.node_name.startswith("gpu-node-")
        [br] = custom.list_namespaced_custom_object(
            "scheduling.run.ai", "v1alpha2", "default", "bindrequests"
        )["items"]
        assert br["spec"]["podName"] == "hello"
        assert br["spec"]["selectedNode"] == running.spec.node_name
        annotations = running.metadata.annotations or {}
        assert annotations.get("pod-group-name"), "the pod-grouper did not group the pod"
        api.close()
        process.send_signal(signal.SIGINT)
        assert process.wait(15) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(5)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("nodes:\n  - name: gpu\n    gpus: lots\n", "field nodes[0].gpus"),
        (
            "nodes:\n  - name: gpu\n    gpuz: 8\n",
            "field nodes[0].gpuz: Extra inputs are not permitted",
        ),
        ("nodes: [unclosed\n", "not valid YAML"),
        ("- just a list\n", "expected a mapping"),
    ],
)
def test_bad_cluster_file_exits_2_naming_file_and_field(
    tmp_path: Path, content: str, expected: str
) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(content)
    done = subprocess.run(
        [*DEV, "--no-operator", "--cluster", str(path)],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=REPO,
    )
    assert done.returncode == 2
    assert str(path) in done.stderr
    assert expected in done.stderr
    assert "export KUBECONFIG" not in done.stdout


def test_missing_cluster_file_exits_2(tmp_path: Path) -> None:
    done = subprocess.run(
        [*DEV, "--cluster", str(tmp_path / "nope.yaml")],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=REPO,
    )
    assert done.returncode == 2
    assert "nope.yaml: cannot read" in done.stderr


@pytest.fixture(scope="module")
def cluster() -> Iterator[ThreadedDevCluster]:
    with ThreadedDevCluster(job_failure_backoff=0.0) as running:
        yield running


JOB = textwrap.dedent(
    """\
    apiVersion: batch/v1
    kind: Job
    metadata:
      name: hello
    spec:
      parallelism: 2
      completions: 2
      template:
        metadata:
          annotations:
            kai-py.dev/run-seconds: "0.3"
        spec:
          restartPolicy: Never
          containers:
            - name: main
              image: busybox:1.36
              resources:
                limits:
                  nvidia.com/gpu: 1
    """
)


@pytest.mark.e2e
@needs_kubectl
def test_kubectl_apply_of_a_job_makes_pods_that_complete(cluster: ThreadedDevCluster) -> None:
    kc = cluster.kubeconfig_path
    out = kubectl(kc, "apply", "-f", "-", stdin=JOB)
    assert "job.batch/hello created" in out
    kubectl(kc, "wait", "--for=condition=complete", "job/hello", "--timeout=20s")
    pods = json.loads(kubectl(kc, "get", "pods", "-l", "job-name=hello", "-o", "json"))["items"]
    assert len(pods) == 2
    assert {p["status"]["phase"] for p in pods} == {"Succeeded"}
    devices = {p["metadata"]["annotations"]["kai-py.dev/visible-devices"] for p in pods}
    assert len(devices) == 2 and all(d.startswith("GPU-") for d in devices)
    # Applying the same manifest again changes nothing.
    assert "job.batch/hello unchanged" in kubectl(kc, "apply", "-f", "-", stdin=JOB)
    described = kubectl(kc, "describe", "pod", pods[0]["metadata"]["name"])
    assert "Started container main" in described


DEPLOYMENT = textwrap.dedent(
    """\
    apiVersion: apps/v1
    kind: Deployment
    metadata:
      name: web
    spec:
      replicas: 2
      selector:
        matchLabels: {app: web}
      template:
        metadata:
          labels: {app: web}
        spec:
          containers:
            - name: web
              image: nginx:1.27
              resources:
                requests: {cpu: 100m}
    """
)


@pytest.mark.e2e
@needs_kubectl
def test_kubectl_deployment_rollout_and_scale_up_and_down(cluster: ThreadedDevCluster) -> None:
    kc = cluster.kubeconfig_path

    def running() -> int:
        pods = json.loads(kubectl(kc, "get", "pods", "-l", "app=web", "-o", "json"))["items"]
        return sum(
            1
            for p in pods
            if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
        )

    def wait_running(count: int) -> None:
        deadline = time.monotonic() + 15
        while running() != count:
            assert time.monotonic() < deadline, f"never {count} running pods"
            time.sleep(0.1)

    kubectl(kc, "apply", "-f", "-", stdin=DEPLOYMENT)
    kubectl(kc, "rollout", "status", "deployment/web", "--timeout=20s")
    wait_running(2)
    kubectl(kc, "scale", "deployment/web", "--replicas=4")
    wait_running(4)
    kubectl(kc, "scale", "deployment/web", "--replicas=1")
    wait_running(1)


def test_taken_port_exits_1_and_bad_port_exits_2() -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [*DEV, "--no-operator", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=30,
            cwd=REPO,
        )
    assert done.returncode == 1
    assert f"cannot start the API server on port {port}" in done.stderr
    done = subprocess.run(
        [*DEV, "--no-operator", "--port", "70000"],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=REPO,
    )
    assert done.returncode == 2
    assert "--port 70000 is not a TCP port" in done.stderr


def test_dev_runs_a_scheduler_for_each_node_pool_of_the_cluster_description(
    tmp_path: Path,
) -> None:
    from kubernetes import client as k8s
    from kubernetes import config as k8s_config

    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(
        textwrap.dedent(
            """\
            nodes:
            - {name: plain, count: 1, gpus: 2}
            - {name: train, count: 1, gpus: 2, labels: {kai.scheduler/node-pool: train}}
            """
        )
    )
    kubeconfig = tmp_path / "kc"
    process = subprocess.Popen(
        [*DEV, "--cluster", str(cluster), "--kubeconfig", str(kubeconfig)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=REPO,
    )
    try:
        lines = read_until(process, "starting a node pool's scheduler", timeout=60)
        assert any("node pools train, each with its own scheduler" in line for line in lines)
        assert lines[-1].endswith("--controllers scheduler --node-pool train")
        api = k8s_config.new_client_from_config(config_file=str(kubeconfig))
        core = k8s.CoreV1Api(api)
        for name, labels in (("in-train", {"kai.scheduler/node-pool": "train"}), ("plain", {})):
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "labels": labels},
                "spec": {
                    "schedulerName": "kai-scheduler",
                    "containers": [
                        {
                            "name": "main",
                            "image": "busybox",
                            "resources": {"limits": {"nvidia.com/gpu": "1"}},
                        }
                    ],
                },
            }
            core.create_namespaced_pod("default", pod)  # type: ignore[arg-type]
        deadline = time.monotonic() + 40
        nodes: dict[str, str] = {}
        while time.monotonic() < deadline and len(nodes) < 2:
            for name in ("in-train", "plain"):
                current = core.read_namespaced_pod(name, "default")
                if current.status.phase == "Running":
                    nodes[name] = current.spec.node_name
            time.sleep(0.1)
        assert nodes == {"in-train": "train-0", "plain": "plain-0"}
        api.close()
        process.send_signal(signal.SIGINT)
        assert process.wait(20) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(5)


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _connects(port: int) -> bool:
    import socket

    with socket.socket() as sock:
        sock.settimeout(1.0)
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.e2e
def test_export_line_comes_once_webhooks_and_metrics_answer_and_sigterm_stops_all(
    tmp_path: Path,
) -> None:
    """What a user pastes after the export line is admitted by the operator's webhooks
    (they answer by then), ``--metrics-port`` serves the operator's /metrics, and
    SIGTERM stops ``kai-py dev`` and its operator as Ctrl-C does (exit 0)."""
    import urllib.request

    from kubernetes import client as k8s
    from kubernetes import config as k8s_config

    kubeconfig, metrics_port = tmp_path / "kc", _free_port()
    process = subprocess.Popen(
        [*DEV, "--kubeconfig", str(kubeconfig), "--metrics-port", str(metrics_port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=REPO,
    )
    try:
        lines = read_until(process, "export KUBECONFIG=", timeout=60)
        assert any("admission webhooks served by the operator" in line for line in lines[:-1])
        api = k8s_config.new_client_from_config(config_file=str(kubeconfig))
        admission = k8s.AdmissionregistrationV1Api(api)
        configs = [
            *admission.list_mutating_webhook_configuration().items,
            *admission.list_validating_webhook_configuration().items,
        ]
        api.close()
        urls = [w.client_config.url for c in configs for w in c.webhooks or []]
        assert urls, "no webhooks when the export line was printed"
        for url in urls:
            port = int(url.split("://", 1)[1].split("/", 1)[0].rsplit(":", 1)[1])
            assert _connects(port), f"webhook {url} does not answer"
        with urllib.request.urlopen(
            f"http://127.0.0.1:{metrics_port}/metrics", timeout=5
        ) as answer:
            assert b"kai_e2e_scheduling_latency_milliseconds" in answer.read()
        started = time.monotonic()
        process.send_signal(signal.SIGTERM)
        assert process.wait(20) == 0
        assert time.monotonic() - started < 15
        assert not _connects(metrics_port), "the operator outlived kai-py dev"
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(5)


def test_sigterm_while_starting_stops_before_the_export_line(tmp_path: Path) -> None:
    process = subprocess.Popen(
        [*DEV, "--kubeconfig", str(tmp_path / "kc")],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=REPO,
    )
    try:
        read_until(process, "starting the operator", timeout=30)
        process.send_signal(signal.SIGTERM)
        assert process.wait(15) == 0
        assert process.stdout is not None
        rest = process.stdout.read().decode()
        assert "export KUBECONFIG=" not in rest
        assert "kai-py dev: stopping" in rest
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(5)


def test_a_bad_metrics_port_exits_2() -> None:
    done = subprocess.run(
        [*DEV, "--metrics-port", "70000"], capture_output=True, text=True, timeout=60, cwd=REPO
    )
    assert done.returncode == 2
    assert "--metrics-port 70000 is not a TCP port" in done.stderr
    done = subprocess.run(
        [*DEV, "--no-operator", "--metrics-port", "9090"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert done.returncode == 2
    assert "--metrics-port 9090 with --no-operator: no operator runs" in done.stderr
