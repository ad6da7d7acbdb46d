"""What a pod asks of a node, and whether the node can admit it.

This mirrors the kubelet's admission check (the same one kube-scheduler's
NodeResourcesFit runs): a pod is admitted if, for every resource it
requests, requested + used by the pods already admitted <= allocatable.
The first resource that does not fit becomes the rejection, worded as the
kubelet words it, because users and operators match on those strings.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kai_py.emulator.quantity import QuantityError, parse_quantity, to_int_units

# The order in which the kubelet checks resources; extended resources follow
# in name order. It decides which rejection a user sees when several fail.
_BASIC_ORDER = ("cpu", "memory", "ephemeral-storage")

Resources = dict[str, int]


def parse_resource_map(raw: Mapping[str, Any] | None) -> Resources:
    """A ``{name: quantity}`` map in kubelet units; bad quantities count as 0.

    The API server validates quantities before a pod is stored, so a bad one
    here can only come from a hand-made object; it must not crash a kubelet.
    """
    out: Resources = {}
    for name, value in (raw or {}).items():
        if isinstance(value, str) and value.isdigit():  # the common case, 50x faster
            out[name] = int(value) * 1000 if name == "cpu" else int(value)
            continue
        try:
            out[name] = to_int_units(name, parse_quantity(value))
        except (QuantityError, TypeError):
            continue
    return out


def _container_requests(container: Mapping[str, Any]) -> Resources:
    resources = container.get("resources") or {}
    requests = parse_resource_map(resources.get("requests"))
    # A limit without a request means request == limit (API server defaulting;
    # done again here in case the object came from a store that skipped it).
    for name, amount in parse_resource_map(resources.get("limits")).items():
        requests.setdefault(name, amount)
    return requests


def _add(into: Resources, other: Mapping[str, int]) -> None:
    for name, amount in other.items():
        into[name] = into.get(name, 0) + amount


def _max(into: Resources, other: Mapping[str, int]) -> None:
    for name, amount in other.items():
        into[name] = max(into.get(name, 0), amount)


def pod_requests(pod: Mapping[str, Any]) -> Resources:
    """The effective requests of a pod, as Kubernetes computes them.

    max(sum of app containers + restartable init containers, each init
    container on its own + the restartable ones started before it) + overhead.
    """
    spec = pod.get("spec") or {}
    total: Resources = {}
    for container in spec.get("containers") or []:
        _add(total, _container_requests(container))
    sidecars: Resources = {}
    init_peak: Resources = {}
    for container in spec.get("initContainers") or []:
        requests = _container_requests(container)
        if container.get("restartPolicy") == "Always":
            _add(sidecars, requests)
            continue
        step = dict(sidecars)
        _add(step, requests)
        _max(init_peak, step)
    _add(total, sidecars)
    _max(total, init_peak)
    _add(total, parse_resource_map(spec.get("overhead")))
    return {name: amount for name, amount in total.items() if amount > 0}


def container_gpu_requests(pod: Mapping[str, Any], resource: str) -> list[tuple[str, int]]:
    """(container name, devices) for each app container that asks for devices.

    The device plugin allocates per container. Init containers are left out:
    a real kubelet hands their devices on to the app containers, so they
    never hold cards of their own once the pod runs.
    """
    spec = pod.get("spec") or {}
    out: list[tuple[str, int]] = []
    for container in spec.get("containers") or []:
        count = _container_requests(container).get(resource, 0)
        if count > 0:
            out.append((str(container.get("name", "")), count))
    return out


@dataclass(frozen=True)
class Rejection:
    """Why a kubelet refuses a pod: the pod's status reason and message."""

    reason: str
    message: str


def check_fit(
    requested: Mapping[str, int],
    used: Mapping[str, int],
    allocatable: Mapping[str, int],
    pods_used: int,
) -> Rejection | None:
    """The kubelet's resource admission; None if the pod fits."""
    max_pods = allocatable.get("pods")
    if max_pods is not None and pods_used + 1 > max_pods:
        return _insufficient("pods", 1, pods_used, max_pods)
    extended = sorted(name for name in requested if name not in _BASIC_ORDER and name != "pods")
    for name in [*_BASIC_ORDER, *extended]:
        amount = requested.get(name, 0)
        if amount <= 0:
            continue
        capacity = allocatable.get(name, 0)
        in_use = used.get(name, 0)
        if amount + in_use > capacity:
            return _insufficient(name, amount, in_use, capacity)
    return None


def _insufficient(name: str, requested: int, used: int, capacity: int) -> Rejection:
    return Rejection(
        reason=f"OutOf{name}",
        message=(
            "Pod was rejected: Node didn't have enough resource: "
            f"{name}, requested: {requested}, used: {used}, capacity: {capacity}"
        ),
    )


def node_selector_matches(pod: Mapping[str, Any], node_labels: Mapping[str, str]) -> bool:
    """The kubelet re-checks spec.nodeSelector at admission (affinity is the scheduler's)."""
    selector = (pod.get("spec") or {}).get("nodeSelector") or {}
    return all(node_labels.get(key) == value for key, value in selector.items())


NODE_AFFINITY_REJECTION = Rejection(
    reason="NodeAffinity",
    message="Pod was rejected: Predicate NodeAffinity failed: "
    "node(s) didn't match Pod's node affinity/selector",
)


def sum_requests(pods: Iterable[Mapping[str, int]]) -> Resources:
    total: Resources = {}
    for requests in pods:
        _add(total, requests)
    return total


__all__ = [
    "NODE_AFFINITY_REJECTION",
    "Rejection",
    "Resources",
    "check_fit",
    "container_gpu_requests",
    "node_selector_matches",
    "parse_resource_map",
    "pod_requests",
    "sum_requests",
]
