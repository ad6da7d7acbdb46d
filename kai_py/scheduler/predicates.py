"""Node predicates with a cache: can this task run on this node, resources aside?

Answers are cached per (task shape, node), because the pods of one job, and
often of many jobs, share a shape; a node's labels and taints do not change
within a session. The predicates themselves are plugins
(``plugins/predicates.py``) on the framework's ``predicates`` extension point.

Three checks are not cached, each asked only of the few pods it concerns (an
empty field of the Task otherwise): required ConfigMaps (the same answer on
every node, from the snapshot's ConfigMaps), host ports and pod affinity (both
depend on where pods are in the session).

Host ports are kube-scheduler's NodePorts: a port is (protocol, hostIP, port); an
empty hostIP is 0.0.0.0, which takes the port on every address of the node, so it
clashes with the same protocol and port on any address. Every pod the session has
on the node counts (running, releasing: it holds the port until it is gone, placed
or pipelined this cycle).
"""

from __future__ import annotations

from collections.abc import Set

from kai_py.scheduler.framework import Framework
from kai_py.scheduler.model import (
    Config,
    Node,
    PodNeeds,
    SelectorRequirement,
    Shape,
    Storage,
    Task,
    quota_gpus,
)
from kai_py.scheduler.podaffinity import PodAffinity
from kai_py.scheduler.resources import Res


class PredicateCache:
    """Missing ConfigMaps, the cached static predicates, then (not cached) host ports
    and pod affinity, when they apply."""

    def __init__(
        self,
        framework: Framework,
        pod_affinity: PodAffinity | None = None,
        config_maps: Set[tuple[str, str]] = frozenset(),
        storage: Storage | None = None,
    ) -> None:
        self._framework = framework
        self._cache: dict[tuple[Shape, str], str | None] = {}
        self._pod_affinity = pod_affinity
        self._config_maps = config_maps
        self._missing: dict[str, str | None] = {}
        self._storage = storage if storage is not None else Storage()
        self._volumes: dict[tuple[str, tuple[tuple[str, str], ...], str], str | None] = {}

    def check(self, task: Task, node: Node) -> str | None:
        needs = task.needs
        if needs is not None:
            return self._check_needs(task, needs, node)
        key = (task.shape, node.name)
        try:
            result = self._cache[key]
        except KeyError:
            result = self._cache[key] = self._framework.check_node(task, node)
        if result is None and self._pod_affinity is not None and self._pod_affinity.applies(task):
            return self._pod_affinity.check(task, node)
        return result

    def _check_needs(self, task: Task, needs: PodNeeds, node: Node) -> str | None:
        """``check`` for a task with host ports, ConfigMaps or claims (the common one
        has none, and pays one test for them all)."""
        if needs.config_maps:
            # Once per task: on a real cluster every pod mounts kube-root-ca.crt.
            try:
                missing = self._missing[task.uid]
            except KeyError:
                missing = self._missing[task.uid] = missing_config_map(
                    task.namespace, needs, self._config_maps
                )
            if missing is not None:
                return missing
        key = (task.shape, node.name)
        try:
            result = self._cache[key]
        except KeyError:
            result = self._cache[key] = self._framework.check_node(task, node)
        if result is None and needs.claims:
            # Per claims and node: pods of one StatefulSet name claims of their own.
            vkey = (task.namespace, needs.claims, node.name)
            try:
                result = self._volumes[vkey]
            except KeyError:
                result = self._volumes[vkey] = volume_conflict(
                    task.namespace, needs, node, self._storage
                )
        if result is None and needs.host_ports:
            result = host_port_conflict(task, needs, node)
        if result is None and self._pod_affinity is not None and self._pod_affinity.applies(task):
            return self._pod_affinity.check(task, node)
        return result


class RoleRestrictedCache(PredicateCache):
    """``PredicateCache`` with KAI's restrict node scheduling: GPU pods only on GPU
    worker nodes, CPU-only pods only on CPU worker nodes."""

    def __init__(
        self,
        framework: Framework,
        config: Config,
        pod_affinity: PodAffinity | None = None,
        config_maps: Set[tuple[str, str]] = frozenset(),
        storage: Storage | None = None,
    ) -> None:
        super().__init__(framework, pod_affinity, config_maps, storage)
        self._config = config

    def check(self, task: Task, node: Node) -> str | None:
        result = PredicateCache.check(self, task, node)
        if result is None:
            result = node_role(task, node, self._config)
        return result


def wants_gpu(task: Task) -> bool:
    """Whole GPUs, a fraction or memory of a card, MIG instances or AMD GPUs (KAI's
    "requires any kind of GPU")."""
    return (
        task.request.gpu > 0
        or task.gpu_fraction > 0
        or task.gpu_memory_mib > 0
        or (task.extended is not None and quota_gpus(task.extended) > 0)
    )


def node_role(task: Task, node: Node, config: Config) -> str | None:
    """Why ``node`` may not take ``task`` under restrict node scheduling, or None. The
    message names the label a person would add to the node."""
    if wants_gpu(task):
        if config.gpu_worker_label not in node.labels:
            return (
                f"node(s) had no {config.gpu_worker_label} label "
                "(restrict node scheduling: GPU pods run only on GPU worker nodes)"
            )
    elif config.cpu_worker_label not in node.labels:
        return (
            f"node(s) had no {config.cpu_worker_label} label "
            "(restrict node scheduling: CPU-only pods run only on CPU worker nodes)"
        )
    return None


def role_capacity(node: Node, config: Config) -> Res:
    """What ``node`` adds to the cluster's total for fair share under restrict node
    scheduling: nothing without either worker label (it takes no pod), no GPUs without
    the GPU worker label (no GPU pod may use them), as KAI counts them."""
    gpu_worker = config.gpu_worker_label in node.labels
    if not gpu_worker and config.cpu_worker_label not in node.labels:
        return Res()
    return Res(
        node.allocatable.cpu,
        node.allocatable.memory,
        node.allocatable.gpu if gpu_worker else 0.0,
    )


def missing_config_map(ns: str, needs: PodNeeds, existing: Set[tuple[str, str]]) -> str | None:
    """The first ConfigMap the pod needs that does not exist (as KAI's ConfigMap
    predicate: the pod could not start anywhere without it)."""
    for name, where in needs.config_maps:
        if (ns, name) not in existing:
            return f"configmap {ns}/{name} ({where}) does not exist"
    return None


ANY_IP = "0.0.0.0"


def host_port_conflict(task: Task, needs: PodNeeds, node: Node) -> str | None:
    """Why ``task`` cannot have its host ports on ``node``, or None."""
    for other in node.tasks.values():
        if other.needs is None or not other.needs.host_ports or other.key == task.key:
            continue
        for mine in needs.host_ports:
            for theirs in other.needs.host_ports:
                if _clash(mine, theirs):
                    protocol, ip, port = mine
                    at = "" if ip == ANY_IP else f" on {ip}"
                    return (
                        f"node(s) didn't have free ports for the requested pod ports "
                        f"(hostPort {port}/{protocol}{at} is taken)"
                    )
    return None


def _clash(a: tuple[str, str, int], b: tuple[str, str, int]) -> bool:
    return a[0] == b[0] and a[2] == b[2] and (a[1] == b[1] or ANY_IP in (a[1], b[1]))


def volume_conflict(ns: str, needs: PodNeeds, node: Node, storage: Storage) -> str | None:
    """Why the task's PersistentVolumeClaims keep it off ``node`` (kube-scheduler's
    VolumeBinding, with dynamic provisioning for a class that waits for the first
    consumer), or None."""
    for name, volume in needs.claims:
        claim = storage.claims.get((ns, name))
        what = f"persistentvolumeclaim {ns}/{name}"
        if claim is None:
            return f'{what} (volume "{volume}") does not exist'
        if claim.volume:
            terms = storage.volumes.get(claim.volume)
            if terms is None:
                return f"persistentvolume {claim.volume} (bound to {what}) does not exist"
            if terms and not _any_term(terms, node):
                return (
                    f"node(s) had volume node affinity conflict (persistentvolume {claim.volume})"
                )
            continue
        cls = storage.classes.get(claim.storage_class) if claim.storage_class else None
        if claim.storage_class and cls is None:
            return f"storageclass {claim.storage_class} (of {what}) does not exist"
        if cls is None or not cls.wait_for_consumer:
            return f"pod has unbound immediate PersistentVolumeClaims ({what})"
        if cls.topologies and not _any_term(cls.topologies, node):
            return (
                f"node(s) didn't find available persistent volumes to bind (storageclass "
                f"{claim.storage_class}: allowedTopologies)"
            )
    return None


def _any_term(terms: tuple[tuple[SelectorRequirement, ...], ...], node: Node) -> bool:
    labels = {**node.labels, "metadata.name": node.name}
    return any(all(r.matches(labels) for r in term) for term in terms)
