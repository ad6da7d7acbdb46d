"""Which namespaces may use a queue and which priority classes its jobs may name.

A queue that sets a list uses it; one that does not takes its nearest ancestor's
(so an admin can fence a whole subtree on its parent); no list up the tree means
anyone, as in KAI. Refusals name the queue that set the list, and the list.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

from kai_py.api import keys
from kai_py.api.common import ManifestError
from kai_py.api.queue import Queue, QueueSpec
from kai_py.scheduler.model import OwnedCards, QueueTenancy

#: The PodGroup condition and Event reason of a job its queue does not take.
NOT_ALLOWED: Final = "NotAllowedInQueue"

#: The Queues as read from manifests: name -> (parent, tenancy).
Tree = dict[str, tuple[str | None, QueueTenancy | None]]
Json = Mapping[str, Any]

#: A queue's tenancy up its tree, the queue itself first: (name, tenancy or None).
Chain = Sequence[tuple[str, QueueTenancy | None]]


def of_spec(spec: QueueSpec) -> QueueTenancy | None:
    """A Queue's tenancy fields; None when it sets none (KAI's queues)."""
    if spec.namespaces is None and spec.priority_classes is None and not spec.cards:
        return None
    return QueueTenancy(
        namespaces=frozenset(spec.namespaces) if spec.namespaces is not None else None,
        priority_classes=(
            frozenset(spec.priority_classes) if spec.priority_classes is not None else None
        ),
        cards=tuple(OwnedCards(c.node, c.uuid, c.index, c.model) for c in spec.cards or ()),
        lend_cards=bool(spec.lend_cards),
    )


def chain_of(name: str, tree: Mapping[str, tuple[str | None, QueueTenancy | None]]) -> Chain:
    """The queue ``name`` and its ancestors in ``tree`` (name -> (parent, tenancy))."""
    chain: list[tuple[str, QueueTenancy | None]] = []
    seen: set[str] = set()
    current: str | None = name
    while current is not None and current in tree and current not in seen:
        seen.add(current)  # a cycle (refused elsewhere) must not loop here
        parent, tenancy = tree[current]
        chain.append((current, tenancy))
        current = parent
    return chain


def _nearest(
    chain: Chain, pick: Callable[[QueueTenancy], frozenset[str] | None]
) -> tuple[str, frozenset[str]] | None:
    for name, tenancy in chain:
        if tenancy is not None:
            found = pick(tenancy)
            if found is not None:
                return name, found
    return None


def _set_by(queue: str, owner: str, field: str) -> str:
    if owner == queue:
        return f'spec.{field} of queue "{queue}"'
    return f'spec.{field} of queue "{owner}" (an ancestor of "{queue}", which sets none)'


def _listed(values: frozenset[str]) -> str:
    return ", ".join(sorted(values)) if values else "none"


def namespace_refusal(chain: Chain, queue: str, namespace: str) -> str | None:
    """Why ``namespace`` may not use ``queue`` (its ``chain``), or None if it may."""
    found = _nearest(chain, lambda t: t.namespaces)
    if found is None or namespace in found[1]:
        return None
    owner, allowed = found
    return (
        f'queue "{queue}" does not take namespace "{namespace}": '
        f"{_set_by(queue, owner, 'namespaces')} allows {_listed(allowed)}"
    )


def priority_refusal(chain: Chain, queue: str, priority_class: str) -> str | None:
    """Why a job of ``queue`` may not have ``priority_class``, or None if it may."""
    found = _nearest(chain, lambda t: t.priority_classes)
    if found is None or priority_class in found[1]:
        return None
    owner, allowed = found
    return (
        f'priority class "{priority_class}" is not allowed in queue "{queue}": '
        f"{_set_by(queue, owner, 'priorityClasses')} allows {_listed(allowed)}"
    )


def job_refusal(chain: Chain, queue: str, namespace: str, priority_class: str) -> str | None:
    """Why a job may not be in ``queue``, with the field at fault; None if it may.
    ``priority_class`` "" (a pod without a PodGroup spec): not checked."""
    why = namespace_refusal(chain, queue, namespace)
    if why is not None:
        return f"spec.queue: {why}"
    if priority_class:
        why = priority_refusal(chain, queue, priority_class)
        if why is not None:
            return f"spec.priorityClassName: {why}"
    return None


def queue_tree(queues: Iterable[Json]) -> Tree:
    """Queue manifests -> name -> (parent, tenancy). A Queue the model refuses (stored
    before a rule) is kept with its parent and no tenancy read from it."""
    tree: Tree = {}
    for manifest in queues:
        name = str((manifest.get("metadata") or {}).get("name") or "")
        try:
            queue = Queue.from_manifest(manifest)
        except ManifestError:
            parent = (manifest.get("spec") or {}).get("parentQueue")
            tree[name] = (str(parent) if parent else None, None)
            continue
        tree[name] = (queue.spec.parent_queue or None, of_spec(queue.spec))
    return tree


def who(kind: str, obj: Json) -> str:
    """How messages name a namespaced object: ``Kind "namespace/name"``."""
    m = obj.get("metadata") or {}
    return f'{kind} "{m.get("namespace") or "default"}/{m.get("name")}"'


def podgroup_errors(group: Json, tree: Tree, old: Json | None = None) -> list[str]:
    """The PodGroup's queue against its namespace and its priority class (unset: the
    default, ``train``, as the scheduler reads it) against that queue. An update
    (``old``) that changes neither is not checked: a list set after the group was made
    must not refuse the writes it still gets (labels, the scheduler's annotations);
    the scheduler holds such a group instead."""
    spec = group.get("spec") or {}
    if old is not None:
        before = old.get("spec") or {}
        if all(before.get(k) == spec.get(k) for k in ("queue", "priorityClassName")):
            return []
    queue = spec.get("queue") or keys.DEFAULT_QUEUE
    chain = chain_of(str(queue), tree)
    name = who("PodGroup", group)
    errors = []
    namespace = str((group.get("metadata") or {}).get("namespace") or "default")
    why = namespace_refusal(chain, str(queue), namespace)
    if why is not None:
        errors.append(f"{name}: spec.queue: {why}")
    named = spec.get("priorityClassName")
    value = str(named) if named else keys.DEFAULT_PRIORITY_CLASS
    why = priority_refusal(chain, str(queue), value)
    if why is not None:
        unset = "" if named else " (unset, so the default)"
        errors.append(f"{name}: spec.priorityClassName{unset}: {why}")
    return errors
