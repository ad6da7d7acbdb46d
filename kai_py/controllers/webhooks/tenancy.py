"""Tenancy at admission: a pod or PodGroup is refused when its namespace may not use its
queue or its queue does not allow its priority class (the rules: ``scheduler/tenancy``).

Pure, as ``validation.py``: the handlers (``server.py``) read the Queues. A pod is
checked against the queue it names (its ``kai.scheduler/queue`` label); a pod that
names none gets its queue from its owners or the default, and its PodGroup is checked
when the pod-grouper makes it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kai_py.api import keys
from kai_py.api.objects import WorkloadError
from kai_py.gpu.inventory import InventoryError, node_cards
from kai_py.gpu.pins import names_pin, pin_of
from kai_py.scheduler.tenancy import access, cards
from kai_py.scheduler.tenancy.access import Tree, podgroup_errors, queue_tree

__all__ = [
    "Tree",
    "needs_nodes",
    "needs_queues",
    "pin_errors",
    "pod_errors",
    "podgroup_errors",
    "queue_tree",
]

Json = Mapping[str, Any]


def needs_queues(pod: Json) -> bool:
    """Whether ``pod_errors`` has anything to check (the Queues are read only then)."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return bool(labels.get(keys.QUEUE_LABEL))


def pod_errors(pod: Json, tree: Tree) -> list[str]:
    """The pod's queue label against its namespace, and the priority classes it names
    (``spec.priorityClassName``, the ``priorityClassName`` label) against that queue."""
    m = pod.get("metadata") or {}
    labels = m.get("labels") or {}
    queue = labels.get(keys.QUEUE_LABEL)
    if not isinstance(queue, str) or not queue:
        return []
    chain = access.chain_of(queue, tree)
    who = access.who("Pod", pod)
    errors = []
    why = access.namespace_refusal(chain, queue, str(m.get("namespace") or "default"))
    if why is not None:
        errors.append(f'{who}: metadata.labels["{keys.QUEUE_LABEL}"]: {why}')
    named = [
        (f'metadata.labels["{keys.PRIORITY_CLASS_LABEL}"]', labels.get(keys.PRIORITY_CLASS_LABEL)),
        ("spec.priorityClassName", (pod.get("spec") or {}).get("priorityClassName")),
    ]
    for path, value in named:
        if isinstance(value, str) and value:
            why = access.priority_refusal(chain, queue, value)
            if why is not None:
                errors.append(f"{who}: {path}: {why}")
    return errors


def needs_nodes(pod: Json, tree: Tree) -> bool:
    """Whether ``pin_errors`` has anything to check: a pinned pod that names its queue,
    while some queue owns cards (the Nodes are read only then)."""
    return needs_queues(pod) and names_pin(pod) and any(t and t.cards for _, t in tree.values())


def pin_errors(pod: Json, tree: Tree, nodes: Iterable[Json]) -> list[str]:
    """A pod whose GPU pin allows a card that another queue owns (and does not lend):
    the cards the nodes publish that its pin allows, against its queue's. The message
    names the cards, never who uses them."""
    queue = str(((pod.get("metadata") or {}).get("labels") or {}).get(keys.QUEUE_LABEL) or "")
    try:
        pin = pin_of(pod)
    except WorkloadError:
        return []  # a bad pin is the scheduler's to report, with the pod's other faults
    owning = [(name, t) for name, (_, t) in tree.items() if t is not None and t.cards]
    if pin is None or not queue or not owning:
        return []
    mine = {name for name, _ in access.chain_of(queue, tree)}
    taken = []
    for node in nodes:
        m = node.get("metadata") or {}
        try:
            found = node_cards(m.get("annotations") or {})
        except InventoryError:
            continue  # the node's own Warning says so; its cards are unknown here
        for card in found:
            if not pin.allows(card):
                continue
            owners, lent = cards.owners_of(owning, str(m.get("name")), card)
            if owners and not lent and not owners & mine:
                taken.append(f"{card.uuid} on node {m.get('name')}")
    if not taken:
        return []
    return [
        f"{access.who('Pod', pod)}: metadata.annotations: the GPU pin {pin.text} allows "
        f'card(s) owned by another queue, which queue "{queue}" may not use: '
        f"{', '.join(taken)}; pin the pod to its queue's cards or to unowned ones"
    ]
