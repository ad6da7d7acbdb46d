"""Which PodGroup a pod belongs to: its annotation, or the pod-grouper's rules.

The owner chain is resolved here from the objects given (by uid, or by kind
and name when the input has no uids) and handed to the pure pod-grouper.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from typing import Any

from kai_py.api import keys
from kai_py.api.objects import meta
from kai_py.podgrouper.rules import Grouped as GrouperGrouped
from kai_py.podgrouper.rules import GroupingFailed, group_pod

Owners = Mapping[tuple[str, str], Mapping[str, Any]]


@dataclass(slots=True)
class Grouped:
    name: str
    podgroup: Mapping[str, Any] | None = None  # a PodGroup to create, if the grouper made one
    warnings: list[str] = field(default_factory=list)
    failed: bool = False
    # The pod's subgroup in ``podgroup`` (the label the live grouper writes on the pod).
    sub_group: str | None = None


OwnerFetch = Callable[[str, Mapping[str, Any]], Mapping[str, Any] | None]

#: Far deeper than any real workload; stops a pathological chain.
MAX_OWNER_DEPTH = 16


def controller_reference(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The controller ownerReference of ``obj``, else its first one."""
    refs = meta(obj).get("ownerReferences") or []
    return next((r for r in refs if r.get("controller")), refs[0] if refs else None)


#: The walk up a pod's owners: yields (namespace, ownerReference) for each owner it
#: needs, is sent what was found (None: not there), returns the chain nearest first.
OwnerWalk = Generator[
    tuple[str, Mapping[str, Any]], Mapping[str, Any] | None, list[Mapping[str, Any]]
]


def owner_walk(pod: Mapping[str, Any]) -> OwnerWalk:
    """The pod's owners as a walk that asks for each one (the same walk for callers that
    fetch synchronously, ``walk_owner_chain``, and for those that await)."""
    chain: list[Mapping[str, Any]] = []
    ns = str(meta(pod).get("namespace") or "default")
    current = pod
    seen: set[int] = set()
    while len(chain) < MAX_OWNER_DEPTH:
        ref = controller_reference(current)
        if ref is None:
            return chain
        found = yield ns, ref
        if found is None or id(found) in seen:
            return chain
        seen.add(id(found))
        chain.append(found)
        current = found
    return chain


def walk_owner_chain(pod: Mapping[str, Any], fetch: OwnerFetch) -> list[Mapping[str, Any]]:
    """The pod's owners, nearest first, as far up as ``fetch(namespace, ref)`` finds them."""
    walk = owner_walk(pod)
    try:
        wanted = next(walk)
        while True:
            wanted = walk.send(fetch(*wanted))
    except StopIteration as done:
        chain: list[Mapping[str, Any]] = done.value
        return chain


def owner_chain(pod: Mapping[str, Any], owners: Owners) -> list[Mapping[str, Any]]:
    """The pod's owners, nearest first, as far up as the input has them."""

    def fetch(ns: str, ref: Mapping[str, Any]) -> Mapping[str, Any] | None:
        return owners.get((ns, str(ref.get("uid") or ""))) or owners.get(
            (ns, f"{ref.get('kind')}/{ref.get('name')}")
        )

    return walk_owner_chain(pod, fetch)


def group_for_pod(pod: Mapping[str, Any], owners: Owners) -> Grouped:
    annotations = meta(pod).get("annotations") or {}
    if annotations.get(keys.POD_GROUP_ANNOTATION):
        return Grouped(str(annotations[keys.POD_GROUP_ANNOTATION]))
    ns = str(meta(pod).get("namespace") or "default")

    def related(_api_version: str, kind: str, name: str) -> Mapping[str, Any] | None:
        # Objects a kind reads besides the owners (a PodGang, a RayJob's RayCluster).
        return owners.get((ns, f"{kind}/{name}"))

    result = group_pod(pod, owner_chain(pod, owners), scheduler_name=None, related=related)
    warnings = [w.message for w in result.warnings]
    if isinstance(result, GrouperGrouped):
        manifest = result.pod_group.to_manifest()
        # Groups made for pods inherit the creation time of what they group, so that
        # job order (older first) follows the workload, not the moment of grouping.
        created = meta(pod).get("creationTimestamp")
        if created and not manifest["metadata"].get("creationTimestamp"):
            manifest["metadata"]["creationTimestamp"] = created
        return Grouped(result.group_name, manifest, warnings, sub_group=result.sub_group)
    if isinstance(result, GroupingFailed):
        name = f"ungrouped-{meta(pod).get('name')}"
        return Grouped(name, None, warnings, failed=True)
    return Grouped(result.group_name or f"pg-{meta(pod).get('name')}", None, warnings)
