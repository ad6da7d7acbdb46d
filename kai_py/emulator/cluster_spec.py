"""The description of an emulated cluster: which nodes, with how many GPUs.

A YAML file (docs/dev-cluster.md) lists node groups; each group makes
``count`` identical nodes named ``<name>-0``, ``<name>-1``, ... The built-in
default is a small training cluster: 4 nodes x 8 GPUs of 80 GiB and 2
CPU-only nodes. Node objects carry the labels GPU Feature Discovery sets
on a real GPU node, because the scheduler reads GPU memory from them.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Final, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from kai_py.api import keys
from kai_py.emulator.annotations import EMULATED_NODE
from kai_py.emulator.quantity import QuantityError, parse_quantity

API_VERSION: Final = "kai-py.dev/v1"
KIND: Final = "DevCluster"


def gpu_uuid(node_name: str, index: int) -> str:
    """A stable, NVIDIA-shaped UUID for card ``index`` of ``node_name``."""
    digest = hashlib.sha256(f"kai-py-gpu/{node_name}/{index}".encode()).hexdigest()
    return f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


class ClusterSpecError(ValueError):
    """A cluster file that cannot be used; the message names the file and field."""


def _check_quantity(value: str | int | float) -> str:
    try:
        amount = parse_quantity(value)
    except QuantityError as exc:
        raise ValueError(f"{value!r} is not a Kubernetes quantity (e.g. 64, 500m, 512Gi)") from exc
    if amount < 0:
        raise ValueError("must not be negative")
    return str(value)


class Taint(BaseModel):
    model_config = ConfigDict(extra="forbid")

    key: str
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


#: Resources a node group sets with a field of its own, not in extendedResources.
_OWN_FIELDS = {
    "cpu": "cpu",
    "memory": "memory",
    "pods": "pods",
    "ephemeral-storage": "ephemeralStorage",
    keys.GPU_RESOURCE: "gpus",
}


class NodeGroup(BaseModel):
    """``count`` identical nodes."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=50)
    count: int = Field(default=1, ge=0, le=10_000)
    gpus: int = Field(default=0, ge=0, le=64)
    gpu_product: str = Field(default="NVIDIA-A100-SXM4-80GB", alias="gpuProduct")
    # Per card, as GPU Feature Discovery reports it (label value in MiB).
    # null leaves the label off, as on a node without GFD.
    gpu_memory: str | None = Field(default="80Gi", alias="gpuMemory")
    cpu: str = "64"
    memory: str = "512Gi"
    pods: int = Field(default=110, ge=1)
    ephemeral_storage: str = Field(default="1Ti", alias="ephemeralStorage")
    # Any other resource the node advertises (a device plugin's rdma/ib, hugepages-2Mi,
    # a MIG profile...): name -> quantity, in capacity and allocatable.
    extended_resources: dict[str, str] = Field(default_factory=dict, alias="extendedResources")
    # Held back for the system, as kubelet's --system-reserved does:
    # allocatable = capacity - reserved.
    system_reserved: dict[str, str] = Field(default_factory=dict, alias="systemReserved")
    instance_type: str | None = Field(default=None, alias="instanceType")
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    taints: list[Taint] = Field(default_factory=list)
    unschedulable: bool = False

    @field_validator("cpu", "memory", "ephemeral_storage", "gpu_memory", mode="before")
    @classmethod
    def _quantity(cls, value: Any) -> Any:
        if value is None:
            return None
        if not isinstance(value, str | int | float) or isinstance(value, bool):
            raise ValueError("must be a quantity such as 64, 500m or 512Gi")
        return _check_quantity(value)

    @field_validator("system_reserved", "extended_resources", mode="before")
    @classmethod
    def _reserved(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        out: dict[str, str] = {}
        for name, amount in value.items():
            try:
                out[str(name)] = _check_quantity(amount)
            except ValueError as exc:
                raise ValueError(f"{name}: {exc}") from None
        return out

    @field_validator("extended_resources")
    @classmethod
    def _not_basic(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if name in _OWN_FIELDS:
                raise ValueError(f"{name!r} has its own field: {_OWN_FIELDS[name]}")
        return value

    def node_names(self) -> list[str]:
        return [f"{self.name}-{index}" for index in range(self.count)]

    def gpu_memory_mib(self) -> int | None:
        if self.gpu_memory is None:
            return None
        return int(parse_quantity(self.gpu_memory) / 2**20)


class ClusterSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    api_version: Literal["kai-py.dev/v1"] = Field(default="kai-py.dev/v1", alias="apiVersion")
    kind: Literal["DevCluster"] = "DevCluster"
    nodes: list[NodeGroup]
    # Namespaces made at start besides default, kube-system, kube-public,
    # kube-node-lease and kai-resource-reservation.
    namespaces: list[str] = Field(default_factory=list)

    @field_validator("nodes")
    @classmethod
    def _unique_names(cls, groups: list[NodeGroup]) -> list[NodeGroup]:
        seen: set[str] = set()
        for group in groups:
            for name in group.node_names():
                if name in seen:
                    raise ValueError(f"node name {name!r} is made by two groups")
                seen.add(name)
        return groups

    def node_groups(self) -> dict[str, NodeGroup]:
        """Node name -> the group it comes from."""
        return {name: group for group in self.nodes for name in group.node_names()}


def default_cluster() -> ClusterSpec:
    """4 nodes x 8 A100 80 GiB and 2 CPU-only nodes."""
    return ClusterSpec(
        nodes=[
            NodeGroup(
                name="gpu-node",
                count=4,
                gpus=8,
                gpu_product="NVIDIA-A100-SXM4-80GB",
                gpu_memory="80Gi",
                cpu="96",
                memory="1024Gi",
                instance_type="p4de.24xlarge",
            ),
            NodeGroup(
                name="cpu-node",
                count=2,
                gpus=0,
                gpu_memory=None,
                cpu="32",
                memory="128Gi",
                instance_type="m6i.8xlarge",
            ),
        ]
    )


def _field_path(loc: tuple[int | str, ...]) -> str:
    aliases = {
        "gpu_product": "gpuProduct",
        "gpu_memory": "gpuMemory",
        "ephemeral_storage": "ephemeralStorage",
        "system_reserved": "systemReserved",
        "extended_resources": "extendedResources",
        "instance_type": "instanceType",
        "api_version": "apiVersion",
    }
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + aliases.get(part, part)
    return out or "(top level)"


def parse_cluster(data: Any, source: str = "<cluster>") -> ClusterSpec:
    if not isinstance(data, dict):
        got = type(data).__name__
        raise ClusterSpecError(f"{source}: expected a mapping with 'nodes', got {got}")
    try:
        return ClusterSpec.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"field {_field_path(tuple(error['loc']))}: {error['msg']}" for error in exc.errors()
        )
        raise ClusterSpecError(f"{source}: {problems}") from None


def load_cluster(path: Path | None) -> ClusterSpec:
    """The cluster in ``path``, or the default one when ``path`` is None."""
    if path is None:
        return default_cluster()
    try:
        text = path.read_text()
    except OSError as exc:
        raise ClusterSpecError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ClusterSpecError(f"{path}: not valid YAML: {exc}") from None
    return parse_cluster(data, str(path))


def _gpu_labels(group: NodeGroup) -> dict[str, str]:
    if group.gpus == 0:
        return {}
    labels = {
        "nvidia.com/gpu.present": "true",
        keys.GPU_COUNT_NODE_LABEL: str(group.gpus),
        keys.GPU_PRODUCT_NODE_LABEL: group.gpu_product,
    }
    memory = group.gpu_memory_mib()
    if memory is not None:
        labels[keys.GPU_MEMORY_NODE_LABEL] = str(memory)
    return labels


def node_capacity(group: NodeGroup) -> dict[str, str]:
    capacity = {
        "cpu": group.cpu,
        "memory": group.memory,
        "pods": str(group.pods),
        "ephemeral-storage": group.ephemeral_storage,
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
    }
    if group.gpus:
        capacity[keys.GPU_RESOURCE] = str(group.gpus)
    capacity.update(group.extended_resources)
    return capacity


def node_allocatable(group: NodeGroup) -> dict[str, str]:
    allocatable = node_capacity(group)
    for name, reserved in group.system_reserved.items():
        if name not in allocatable:
            continue
        left = parse_quantity(allocatable[name]) - parse_quantity(reserved)
        if name == "cpu":
            allocatable[name] = f"{max(0, int(left * 1000))}m"
        else:
            allocatable[name] = str(max(0, int(left)))
    return allocatable


def node_conditions(now: str) -> list[dict[str, str]]:
    """A healthy node's conditions, as a kubelet posts them."""
    healthy = [
        ("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
        ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
    ]
    conditions = [
        {
            "type": kind,
            "status": "False",
            "reason": reason,
            "message": message,
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        }
        for kind, reason, message in healthy
    ]
    conditions.append(
        {
            "type": "Ready",
            "status": "True",
            "reason": "KubeletReady",
            "message": "kubelet is posting ready status",
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        }
    )
    return conditions


def gpu_inventory(name: str, group: NodeGroup) -> str:
    """The node's cards as ``kai-py node-agent`` publishes them (docs/pinning.md, version 1).

    The UUIDs are the ones the simulated device plugin hands out.
    """
    product = group.gpu_product.replace("NVIDIA-", "NVIDIA ", 1)
    memory = group.gpu_memory_mib() or 0
    cards = [
        {
            "index": index,
            "uuid": gpu_uuid(name, index),
            "product": product,
            "memoryMiB": memory,
            "health": "Healthy",
        }
        for index in range(group.gpus)
    ]
    return json.dumps(
        {"version": 1, "source": "kai-py-emulator", "cards": cards}, separators=(",", ":")
    )


def node_subnet(index: int) -> str:
    """The first three octets of node ``index``'s pod network (a /24 of its own).

    10.244.<index>.0/24 for the first 256 nodes, as a kind cluster has them; then
    10.245 ... 10.255, then 10.0 ... 10.243: distinct for 65,536 nodes. A real API
    server refuses an octet above 255 (node 256 once got 10.244.256.0/24)."""
    return f"10.{(244 + index // 256) % 256}.{index % 256}"


def node_manifest(name: str, group: NodeGroup, index: int, now: str) -> dict[str, Any]:
    """The Node object as the kubelet registers it (status included).

    ``index`` is the node's position in the whole cluster; it picks a unique
    internal IP and pod CIDR.
    """
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "beta.kubernetes.io/arch": "amd64",
        **_gpu_labels(group),
    }
    if group.instance_type:
        labels["node.kubernetes.io/instance-type"] = group.instance_type
    labels.update(group.labels)
    cidr = f"{node_subnet(index)}.0/24"
    spec: dict[str, Any] = {"podCIDR": cidr, "podCIDRs": [cidr]}
    if group.taints:
        spec["taints"] = [t.model_dump(exclude_none=True) for t in group.taints]
    if group.unschedulable:
        spec["unschedulable"] = True
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                EMULATED_NODE: "true",
                **(
                    {keys.GPU_INVENTORY_ANNOTATION: gpu_inventory(name, group)}
                    if group.gpus
                    else {}
                ),
                **group.annotations,
            },
        },
        "spec": spec,
        "status": {
            "capacity": node_capacity(group),
            "allocatable": node_allocatable(group),
            "addresses": [
                {"type": "InternalIP", "address": node_ip(index)},
                {"type": "Hostname", "address": name},
            ],
            "nodeInfo": {
                "architecture": "amd64",
                "operatingSystem": "linux",
                "osImage": "Ubuntu 22.04.4 LTS (kai-py emulated)",
                "kernelVersion": "5.15.0-kai-py",
                "containerRuntimeVersion": "containerd://1.7.13",
                "kubeletVersion": "v1.32.0-kai-py",
                "kubeProxyVersion": "v1.32.0-kai-py",
                "machineID": _hex_id(name, "machine"),
                "systemUUID": _hex_id(name, "system"),
                "bootID": _hex_id(name, "boot"),
            },
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "conditions": node_conditions(now),
        },
    }


def node_ip(index: int) -> str:
    return f"10.0.{index // 250}.{index % 250 + 2}"


def _hex_id(name: str, what: str) -> str:
    return hashlib.sha256(f"{what}/{name}".encode()).hexdigest()[:32]
