"""Restrict node scheduling (KAI's restrict-node-scheduling): GPU pods only on GPU
worker nodes, CPU-only pods only on CPU worker nodes, nodes with neither take none."""

from __future__ import annotations

from builders import default_queues, job, node, snapshot, task

from kai_py.scheduler.cycle import run_cycle
from kai_py.scheduler.model import Snapshot

GPU_ROLE = {"node-role.kubernetes.io/gpu-worker": ""}
CPU_ROLE = {"node-role.kubernetes.io/cpu-worker": ""}


def _cluster(restrict: bool) -> Snapshot:
    # Binpack prefers the fuller node, so without the rule each pod would go to the
    # smallest one that fits: "none" (fewest GPUs, least CPU).
    nodes = [
        node("gpu-w", gpus=8, gpu_memory_mib=81920, labels=GPU_ROLE),
        node("cpu-w", gpus=2, gpu_memory_mib=81920, labels=CPU_ROLE),
        node("none", gpus=1, cpu=4000, gpu_memory_mib=81920),
    ]
    # Plain GPU and CPU pods share one predicate shape: the role must still differ.
    pods = [
        task("whole", gpu=1),
        task("half", fraction=0.5),
        task("mem", gpu_memory_mib=1024),
        task("mig", extended={"nvidia.com/mig-1g.10gb": 1}),
        task("cpu"),
    ]
    snap = snapshot(nodes, default_queues("a"), [job(t.name, "a", [t]) for t in pods])
    snap.config.restrict_node_scheduling = restrict
    return snap


def test_each_kind_of_pod_goes_to_its_role() -> None:
    snap = _cluster(True)
    snap.nodes[0].extended = {"nvidia.com/mig-1g.10gb": 7}
    placed = {t.name: t.node_name for t in run_cycle(snap).binds}
    assert placed == {
        "whole": "gpu-w",
        "half": "gpu-w",
        "mem": "gpu-w",
        "mig": "gpu-w",
        "cpu": "cpu-w",
    }


def test_off_the_roles_mean_nothing() -> None:
    snap = _cluster(False)
    snap.nodes[2].extended = {"nvidia.com/mig-1g.10gb": 7}
    placed = {t.name: t.node_name for t in run_cycle(snap).binds}
    assert placed["cpu"] == "none" and placed["mig"] == "none", placed
    assert "gpu-w" not in placed.values(), placed
