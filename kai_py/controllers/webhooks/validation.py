"""Validation of Queues, PodGroups and pods' GPU annotations, before they are stored.

The same rules ``kai-py simulate`` applies to its input, said at admission
time, with messages that name the object, the field and the value. Each
function is pure: the webhook handlers (``server.py``) fetch what they need.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kai_py.api.common import ManifestError
from kai_py.api.objects import WorkloadError
from kai_py.api.podgroup import PodGroup
from kai_py.api.queue import MAX_QUEUE_DEPTH, Queue
from kai_py.api.topology import Topology, label_change
from kai_py.state.convert import gpu_share
from kai_py.state.queuetree import level_text, levels

Json = Mapping[str, Any]


@dataclass
class Verdict:
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def validate_queue(manifest: Json, queues: Mapping[str, Json] | None) -> Verdict:
    """A Queue, against the Queues that exist (by name; the old version of this one too).

    ``queues`` None: they could not be read; the parent is not checked then.
    """
    verdict = Verdict()
    try:
        queue = Queue.from_manifest(manifest)
    except ManifestError as exc:
        verdict.errors.append(str(exc))
        return verdict
    name = queue.metadata.name or "?"
    parent = queue.spec.parent_queue
    if parent and queues is not None:
        if parent == name:
            verdict.errors.append(
                f'Queue "{name}": spec.parentQueue: "{parent}" is the queue itself'
            )
        else:
            parents = {
                n: str(((q.get("spec") or {}).get("parentQueue")) or "") for n, q in queues.items()
            }
            parents[name] = parent
            if parent not in queues:
                # Accepted, as KAI does: GitOps tools apply a child before its parent. The
                # queue's jobs wait until the parent is made (the operator says so on the
                # Queue). No loop can pass through a queue that does not exist; one that
                # the parent would close is refused when the parent is created.
                verdict.warnings.append(
                    f'Queue "{name}": spec.parentQueue: queue "{parent}" does not exist '
                    f"yet; this queue's jobs wait until it is created"
                )
            chain, current = [name], parent
            seen = {name}  # what ``chain`` holds: a set, as the tree may be deep
            while current in parents:
                if current == name:
                    verdict.errors.append(
                        f'Queue "{name}": spec.parentQueue: "{parent}" makes the parents a '
                        f"cycle: {' -> '.join([*chain, name])}"
                    )
                    break
                if current in seen:
                    break  # a cycle above that does not pass through this queue
                chain.append(current)
                seen.add(current)
                current = parents[current]
            if not verdict.errors:
                verdict.errors.extend(_too_deep(name, parent, parents))
    # A quota above its limit is a warning, not a refusal: KAI accepts it.
    verdict.warnings.extend(queue.warnings())
    return verdict


def _too_deep(name: str, parent: str, parents: dict[str, str]) -> list[str]:
    """The queue, or the deepest of the queues under it, past ``MAX_QUEUE_DEPTH`` with
    this parent (KAI has no limit; a deeper tree would be left out by the scheduler)."""
    # A missing parent is counted as a root: the levels are then the least the tree can
    # have, so a chain already too deep is refused before its top is made.
    missing = {p for p in parents.values() if p and p not in parents}
    level = levels({n: p or None for n, p in parents.items()} | dict.fromkeys(missing))
    children: dict[str, list[str]] = {}
    for child, up in parents.items():
        children.setdefault(up, []).append(child)
    deepest, todo = name, [name]  # the subtree, with a list: the tree may be deep
    while todo:
        for child in children.get(todo.pop(), []):
            todo.append(child)
            if level.get(child, 0) > level.get(deepest, 0):
                deepest = child
    if level.get(deepest, 0) <= MAX_QUEUE_DEPTH:
        return []
    text = level_text(deepest, parent, level[deepest], MAX_QUEUE_DEPTH)
    return [f'Queue "{name}": spec.parentQueue: {text}']


def validate_podgroup(
    manifest: Json, queue_exists: Callable[[str], bool], *, update: bool = False
) -> Verdict:
    verdict = Verdict()
    try:
        group = PodGroup.from_manifest(manifest)
    except ManifestError as exc:
        verdict.errors.append(str(exc))
        return verdict
    for problem, severity in group.spec.min_definition_problems():
        text = f'PodGroup "{group.ref}": spec.{problem}'
        refused = severity == "error" or (severity == "error-on-create" and not update)
        (verdict.errors if refused else verdict.warnings).append(text)
    queue = group.spec.queue
    if queue and not queue_exists(queue):
        # Accepted, as KAI's PodGroup webhook does not look at the queue: GitOps tools apply
        # in any order. The job waits with QueueDoesNotExist until the queue is made.
        verdict.warnings.append(
            f'PodGroup "{group.ref}": spec.queue: queue "{queue}" does not exist yet; '
            f"the PodGroup waits until it is created"
        )
    return verdict


def validate_topology(manifest: Json, old: Json | None = None) -> Verdict:
    """A Topology: the schema, distinct levels, hostname last, aliases unique and never a
    nodeLabel; on update (``old``) the nodeLabels may not change, only the aliases."""
    verdict = Verdict()
    try:
        topology = Topology.from_manifest(manifest)
    except ManifestError as exc:
        verdict.errors.append(str(exc))
        return verdict
    if old is not None:
        try:
            change = label_change(Topology.from_manifest(old), topology)
        except ManifestError:
            change = None  # a stored object the rules refuse now: let it be fixed
        if change:
            verdict.errors.append(f'Topology "{topology.ref}": {change}')
    return verdict


def validate_pod_gpu(manifest: Json) -> Verdict:
    """The gpu-fraction, gpu-memory and gpu-fraction-num-devices annotations."""
    verdict = Verdict()
    try:
        gpu_share(manifest)
    except WorkloadError as exc:
        verdict.errors.append(str(exc))
    return verdict
