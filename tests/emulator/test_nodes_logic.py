"""Pure logic of the simulated nodes: quantities, admission, device plugin, node objects."""

from __future__ import annotations

import ipaddress
import re
from fractions import Fraction
from pathlib import Path

import pytest

from kai_py.api import keys
from kai_py.emulator.cluster_spec import (
    ClusterSpecError,
    default_cluster,
    gpu_uuid,
    load_cluster,
    node_manifest,
    node_subnet,
    parse_cluster,
)
from kai_py.emulator.nodes.devices import DeviceAllocationError, DevicePlugin
from kai_py.emulator.nodes.pod_status import qos_class
from kai_py.emulator.nodes.resources import check_fit, container_gpu_requests, pod_requests
from kai_py.emulator.quantity import QuantityError, parse_quantity, to_int_units

UUID_RE = re.compile(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1", Fraction(1)),
        ("500m", Fraction(1, 2)),
        ("0.1", Fraction(1, 10)),
        ("80Gi", Fraction(80 * 2**30)),
        ("1e3", Fraction(1000)),
        ("2k", Fraction(2000)),
        (3, Fraction(3)),
    ],
)
def test_parse_quantity(text: str, value: Fraction) -> None:
    assert parse_quantity(text) == value


def test_bad_quantity_is_an_error() -> None:
    with pytest.raises(QuantityError):
        parse_quantity("lots")


def test_cpu_rounds_up_to_millicores() -> None:
    assert to_int_units("cpu", parse_quantity("0.1") + parse_quantity("0.2")) == 300
    assert to_int_units("cpu", parse_quantity("0.5m")) == 1


def _pod(
    *containers: dict[str, object], init: list[dict[str, object]] | None = None
) -> dict[str, object]:
    spec: dict[str, object] = {"containers": list(containers)}
    if init:
        spec["initContainers"] = init
    return {"metadata": {"uid": "u1"}, "spec": spec}


def _c(name: str, **requests: str) -> dict[str, object]:
    return {"name": name, "image": "busybox", "resources": {"requests": dict(requests)}}


def test_pod_requests_sum_containers_and_take_init_peak() -> None:
    pod = _pod(
        _c("a", cpu="1", memory="1Gi"),
        _c("b", cpu="500m"),
        init=[_c("init", cpu="4")],
    )
    assert pod_requests(pod) == {"cpu": 4000, "memory": 2**30}


def test_limits_stand_in_for_missing_requests() -> None:
    pod = _pod({"name": "a", "resources": {"limits": {keys.GPU_RESOURCE: "2"}}})
    assert pod_requests(pod) == {keys.GPU_RESOURCE: 2}
    assert container_gpu_requests(pod, keys.GPU_RESOURCE) == [("a", 2)]


def test_fit_rejection_is_worded_like_the_kubelet() -> None:
    rejection = check_fit(
        {keys.GPU_RESOURCE: 1, "cpu": 100},
        {keys.GPU_RESOURCE: 8, "cpu": 100},
        {keys.GPU_RESOURCE: 8, "cpu": 64000, "pods": 110},
        pods_used=8,
    )
    assert rejection is not None
    assert rejection.reason == "OutOfnvidia.com/gpu"
    assert rejection.message == (
        "Pod was rejected: Node didn't have enough resource: nvidia.com/gpu, "
        "requested: 1, used: 8, capacity: 8"
    )


def test_fit_checks_cpu_before_extended_resources() -> None:
    rejection = check_fit({"cpu": 2000, keys.GPU_RESOURCE: 9}, {}, {"cpu": 1000}, pods_used=0)
    assert rejection is not None and rejection.reason == "OutOfcpu"


def test_fit_counts_pods() -> None:
    rejection = check_fit({}, {}, {"pods": 2}, pods_used=2)
    assert rejection is not None and rejection.reason == "OutOfpods"
    assert check_fit({"cpu": 1000}, {"cpu": 1000}, {"cpu": 2000, "pods": 3}, pods_used=2) is None


def test_qos_class() -> None:
    assert qos_class(_pod({"name": "a"})) == "BestEffort"
    assert qos_class(_pod(_c("a", cpu="1"))) == "Burstable"
    guaranteed = {
        "name": "a",
        "resources": {
            "requests": {"cpu": "1", "memory": "1Gi"},
            "limits": {"cpu": "1", "memory": "1Gi"},
        },
    }
    assert qos_class(_pod(guaranteed)) == "Guaranteed"


def test_gpu_uuids_are_stable_distinct_and_nvidia_shaped() -> None:
    first = [gpu_uuid("gpu-node-0", i) for i in range(8)]
    assert first == [gpu_uuid("gpu-node-0", i) for i in range(8)]
    assert len(set(first) | {gpu_uuid("gpu-node-1", i) for i in range(8)}) == 16
    assert all(UUID_RE.match(uuid) for uuid in first)


def test_device_plugin_hands_out_lowest_free_cards_and_never_twice() -> None:
    plugin = DevicePlugin("n", 4)
    a = plugin.allocate("pod-a", "main", 2)
    b = plugin.allocate("pod-b", "main", 1)
    assert a == [plugin.uuid(0), plugin.uuid(1)]
    assert b == [plugin.uuid(2)]
    assert plugin.allocate("pod-a", "main", 2) == a  # asking again is idempotent
    with pytest.raises(DeviceAllocationError, match="Requested: 2, Available: 1"):
        plugin.allocate("pod-c", "main", 2)
    assert plugin.release("pod-a") == a
    assert plugin.allocate("pod-c", "main", 2) == [plugin.uuid(0), plugin.uuid(1)]


def test_device_plugin_restore_refuses_cards_held_by_another_pod() -> None:
    plugin = DevicePlugin("n", 2)
    plugin.allocate("pod-a", "main", 1)
    assert plugin.restore("pod-b", "main", [plugin.uuid(0), plugin.uuid(1)]) == [plugin.uuid(0)]
    assert plugin.allocated_to("pod-b") == [1]


def test_default_cluster_nodes_carry_gpu_feature_discovery_labels() -> None:
    spec = default_cluster()
    groups = spec.node_groups()
    assert len(groups) == 6
    gpu_nodes = [n for n, g in groups.items() if g.gpus]
    assert len(gpu_nodes) == 4
    node = node_manifest(gpu_nodes[0], groups[gpu_nodes[0]], 0, "2026-01-01T00:00:00Z")
    labels = node["metadata"]["labels"]
    assert labels[keys.GPU_COUNT_NODE_LABEL] == "8"
    assert labels[keys.GPU_MEMORY_NODE_LABEL] == "81920"
    assert "A100" in labels[keys.GPU_PRODUCT_NODE_LABEL]
    assert node["status"]["allocatable"][keys.GPU_RESOURCE] == "8"
    assert {c["type"]: c["status"] for c in node["status"]["conditions"]}["Ready"] == "True"
    cpu_name = next(n for n, g in groups.items() if not g.gpus)
    cpu_node = node_manifest(cpu_name, groups[cpu_name], 4, "2026-01-01T00:00:00Z")
    assert keys.GPU_RESOURCE not in cpu_node["status"]["capacity"]
    assert keys.GPU_COUNT_NODE_LABEL not in cpu_node["metadata"]["labels"]


def test_system_reserved_lowers_allocatable() -> None:
    spec = parse_cluster({"nodes": [{"name": "n", "cpu": "8", "systemReserved": {"cpu": "500m"}}]})
    node = node_manifest("n-0", spec.nodes[0], 0, "2026-01-01T00:00:00Z")
    assert node["status"]["capacity"]["cpu"] == "8"
    assert node["status"]["allocatable"]["cpu"] == "7500m"


def test_extended_resources_are_advertised_and_checked() -> None:
    group = {"name": "n", "extendedResources": {"rdma/ib": 4, "hugepages-2Mi": "1Gi"}}
    spec = parse_cluster({"nodes": [group]})
    node = node_manifest("n-0", spec.nodes[0], 0, "2026-01-01T00:00:00Z")
    for part in ("capacity", "allocatable"):
        assert node["status"][part]["rdma/ib"] == "4"
        assert node["status"][part]["hugepages-2Mi"] == "1Gi"
    with pytest.raises(ClusterSpecError, match=r"extendedResources: .*'pods' has its own field"):
        parse_cluster({"nodes": [{"name": "n", "extendedResources": {"pods": "9"}}]})
    with pytest.raises(ClusterSpecError, match=r"extendedResources: .*rdma/ib: 'x' is not a"):
        parse_cluster({"nodes": [{"name": "n", "extendedResources": {"rdma/ib": "x"}}]})


def test_bad_cluster_file_names_file_and_field(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("nodes:\n  - name: gpu\n    gpus: many\n")
    with pytest.raises(ClusterSpecError, match=r"c\.yaml: field nodes\[0\]\.gpus"):
        load_cluster(path)
    path.write_text("nodes:\n  - name: gpu\n    gpuMemroy: 80Gi\n")
    with pytest.raises(ClusterSpecError, match=r"field nodes\[0\]\.gpuMemroy: Extra inputs"):
        load_cluster(path)
    path.write_text("nodes:\n  - name: gpu\n    memory: lots\n")
    with pytest.raises(ClusterSpecError, match=r"nodes\[0\]\.memory: .*not a Kubernetes quantity"):
        load_cluster(path)
    with pytest.raises(ClusterSpecError, match=r"missing\.yaml: cannot read"):
        load_cluster(tmp_path / "missing.yaml")


def test_example_cluster_file_loads() -> None:
    example = Path(__file__).parents[2] / "examples" / "dev-cluster.yaml"
    spec = load_cluster(example)
    assert spec.nodes


def test_every_node_of_a_large_fleet_gets_a_pod_network_of_its_own() -> None:
    """Node 256 once got 10.244.256.0/24, which a real API server refuses."""
    nets = [ipaddress.ip_network(f"{node_subnet(i)}.0/24") for i in range(5000)]
    assert len(set(nets)) == 5000
    assert str(nets[0]) == "10.244.0.0/24" and str(nets[255]) == "10.244.255.0/24"
    assert str(nets[256]) == "10.245.0.0/24"
