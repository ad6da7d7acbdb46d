"""``kai-py simulate --node-pool``: the input as one scheduler shard's watches see it.

A shard sees its pool's nodes, PodGroups and BindRequests (their own node-pool label),
and the pods of its pool: a bound pod by its node, else by its own label, else by its
PodGroup's (named in its annotation, or made by the pod-grouper from the top owner's
label). Everything else (queues, priority classes, owners, volumes) is shared.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kai_py.api import keys
from kai_py.api.objects import meta
from kai_py.emulator.cluster_spec import ClusterSpecError, parse_cluster
from kai_py.podgrouper.grouping import owner_chain
from kai_py.state.builder import OWNER_KINDS
from kai_py.state.documents import Document
from kai_py.state.partition import Partition
from kai_py.state.workloads import expand

_POOLED_KINDS = ("Node", "PodGroup", "BindRequest")


def of_pool(docs: Sequence[Document], partition: Partition) -> tuple[list[Document], list[str]]:
    """The documents of ``partition``'s pool, and what was left out (kind and name)."""
    docs = expand(list(docs))
    owners: dict[tuple[str, str], Mapping[str, Any]] = {}
    podgroups: dict[tuple[str, str], Mapping[str, Any]] = {}
    nodes: set[str] = set()
    kept: list[Document] = []
    left_out: list[str] = []
    for doc in docs:
        kind, m = doc.body.get("kind"), meta(doc.body)
        ns, name = str(m.get("namespace") or "default"), str(m.get("name") or "")
        if kind in OWNER_KINDS:
            owners[(ns, str(m.get("uid") or f"{kind}/{name}"))] = doc.body
            owners[(ns, f"{kind}/{name}")] = doc.body
        if kind == "PodGroup":
            podgroups[(ns, name)] = m.get("labels") or {}
        if kind in _POOLED_KINDS and not partition.holds(m.get("labels")):
            left_out.append(f"{kind} {name}")
            continue
        if kind == "Node":
            nodes.add(name)
        elif kind == "DevCluster":
            doc = _dev_cluster_of_pool(doc, partition, nodes, left_out)
        if kind != "Pod":
            kept.append(doc)
    # The owners of left-out pods go too (unless they own kept ones): the build would
    # make their pods again.
    owners_kept: set[int] = set()
    owners_gone: set[int] = set()
    for doc in docs:
        if doc.body.get("kind") != "Pod":
            continue
        chain = owner_chain(doc.body, owners)
        if _pod_in_pool(doc.body, partition, nodes, podgroups, chain):
            kept.append(doc)
            owners_kept.update(id(o) for o in chain)
        else:
            left_out.append(f"Pod {meta(doc.body).get('name')}")
            owners_gone.update(id(o) for o in chain)
    owners_gone -= owners_kept
    return [d for d in kept if id(d.body) not in owners_gone], left_out


def _dev_cluster_of_pool(
    doc: Document, partition: Partition, nodes: set[str], left_out: list[str]
) -> Document:
    """A ``kai-py dev`` cluster description with its pool's node groups only (a group's
    ``labels`` put its nodes in a pool)."""
    try:
        spec = parse_cluster(dict(doc.body), doc.source)
    except ClusterSpecError:
        return doc  # the build reports it
    raw = [g for g in doc.body.get("nodes") or []]
    kept = []
    for raw_group, group in zip(raw, spec.nodes, strict=True):
        if partition.holds(group.labels):
            kept.append(raw_group)
            nodes.update(group.node_names())
        else:
            left_out.extend(f"Node {name}" for name in group.node_names())
    return Document(doc.source, {**doc.body, "nodes": kept})


def _pod_in_pool(
    pod: Mapping[str, Any],
    partition: Partition,
    nodes: set[str],
    podgroups: Mapping[tuple[str, str], Mapping[str, Any]],
    chain: Sequence[Mapping[str, Any]],
) -> bool:
    node = (pod.get("spec") or {}).get("nodeName")
    if node:
        return str(node) in nodes  # it runs there, whichever pool it was meant for
    m = meta(pod)
    labels = m.get("labels") or {}
    if partition.label in labels:
        return partition.holds(labels)
    ns = str(m.get("namespace") or "default")
    named = (m.get("annotations") or {}).get(keys.POD_GROUP_ANNOTATION)
    if named:
        return partition.holds(podgroups.get((ns, str(named))))
    return partition.holds(meta(chain[-1]).get("labels") if chain else None)
