"""Card ownership: an admin gives GPU cards to queues (``spec.cards``: by node, UUID,
index or model); a GPU pod of another queue does not take one unless every queue that
owns it lends it (``spec.lendCards``). A card is a queue's when the queue or one of its
ancestors owns it.

For a pod the scheduler places on a node, not on a card, ownership is a count: the
node keeps as many GPUs free as its owned cards that their owners' pods do not hold,
so a pod of another queue takes only what is left; a node whose every card is owned
elsewhere takes none. A pinned pod names cards: it is not placed on a node where its
pin allows a card owned elsewhere. The reasons say a card is owned by another queue,
never who holds what on it: a tenant learns nothing of other tenants' use.

Checked only when some queue owns cards (``OwnedCardsCheck`` wraps the predicates
then): the common pod of a cluster without owners pays nothing.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from kai_py.scheduler.model import (
    RELEASING,
    Card,
    Job,
    Node,
    OwnedCards,
    Queue,
    QueueTenancy,
    Task,
)
from kai_py.scheduler.predicates import PredicateCache
from kai_py.scheduler.resources import EPS

ALL_OWNED: Final = "node(s) had only GPUs owned by another queue"
NO_FREE_OWN: Final = (
    "node(s) had no free GPU its queue may use (the rest are owned by another queue)"
)
PIN_OWNED: Final = "node(s) had a GPU the pod's pin allows that is owned by another queue"


def matches(entry: OwnedCards, node: str, card: Card | None) -> bool:
    """Does ``entry`` own ``card`` of ``node``? ``card`` None: a GPU of a node that
    publishes no inventory, which only a whole-node entry (node alone) can name."""
    if entry.node is not None and entry.node != node:
        return False
    if card is None:
        whole_node = entry.uuid is None and entry.index is None and entry.model is None
        return entry.node is not None and whole_node
    if entry.uuid is not None and entry.uuid != card.uuid:
        return False
    if entry.index is not None and entry.index != card.index:
        return False
    return entry.model is None or entry.model.lower() in card.product.lower()


def owners_of(
    queues: Sequence[tuple[str, QueueTenancy]], node: str, card: Card | None
) -> tuple[frozenset[str], bool]:
    """The queues that own ``card`` and whether they all lend it (False when none owns it)."""
    found = [(name, t) for name, t in queues if any(matches(e, node, card) for e in t.cards)]
    return frozenset(name for name, _ in found), bool(found) and all(t.lend_cards for _, t in found)


@dataclass(slots=True, frozen=True)
class OwnedCard:
    uuid: str  # "" for a GPU of a node without a published inventory
    owners: frozenset[str]


@dataclass(slots=True, frozen=True)
class NodeCards:
    """A node's cards that some queue owns and does not lend, out of ``total``."""

    owned: tuple[OwnedCard, ...]
    total: int


#: A queue and its ancestors (``Session.ancestors``).
Ancestors = Callable[[str], list[Queue]]


class Ownership:
    """The owned cards of a session's nodes, and which queues may use them."""

    def __init__(
        self, nodes: dict[str, NodeCards], jobs: Mapping[str, Job], ancestors: Ancestors
    ) -> None:
        self.nodes = nodes
        self._jobs = jobs
        self._ancestors = ancestors
        self._chains: dict[str, frozenset[str]] = {}

    @staticmethod
    def of(
        queues: Iterable[Queue],
        nodes: Iterable[Node],
        jobs: Mapping[str, Job],
        ancestors: Ancestors,
    ) -> Ownership | None:
        """A session's (its queues, nodes, jobs by uid); None when no queue owns a card,
        or no card is owned and kept from others."""
        owning = [(q.name, q.tenancy) for q in queues if q.tenancy is not None and q.tenancy.cards]
        if not owning:
            return None
        found: dict[str, NodeCards] = {}
        for node in nodes:
            cards: list[Card | None] = list(node.cards) or [None] * int(node.allocatable.gpu)
            owned = []
            for card in cards:
                owners, lent = owners_of(owning, node.name, card)
                if owners and not lent:
                    owned.append(OwnedCard(card.uuid if card is not None else "", owners))
            if owned:
                found[node.name] = NodeCards(tuple(owned), len(cards))
        return Ownership(found, jobs, ancestors) if found else None

    def queue_of(self, task: Task) -> str:
        job = self._jobs.get(task.job_uid)
        return job.queue if job is not None else ""

    def _chain(self, queue: str) -> frozenset[str]:
        found = self._chains.get(queue)
        if found is None:
            found = frozenset(q.name for q in self._ancestors(queue))
            self._chains[queue] = found
        return found

    def refusal(self, task: Task, node: Node) -> str | None:
        """Why ``task`` may not use ``node``'s GPUs for their owners, or None."""
        info = self.nodes.get(node.name)
        if info is None or not (task.request.gpu > EPS or task.is_shared):
            return None
        mine = self._chain(self.queue_of(task))
        blocked = [c for c in info.owned if not c.owners & mine]
        if not blocked:
            return None
        pin = task.pin
        if pin is not None:
            kept = {c.uuid for c in blocked}
            if not node.cards or any(c.uuid in kept and pin.allows(c) for c in node.cards):
                return PIN_OWNED
            # Its pin keeps it off the owned cards; an unpinned pod's card is not known,
            # so what it leaves free is counted below, as for an unpinned pod.
        if len(blocked) >= info.total:
            return ALL_OWNED
        owners = frozenset().union(*(c.owners for c in blocked))
        # The owned cards the owners' own pods hold are not free anyway: keep free only
        # the rest, so an owner's pod always finds its card.
        held = 0.0
        groups: set[str] = set()
        for other in node.tasks.values():
            if other.status is RELEASING or not self._chain(self.queue_of(other)) & owners:
                continue
            if other.is_shared:
                groups.update(other.gpu_groups)
            else:
                held += other.request.gpu
        keep = max(0.0, len(blocked) - math.ceil(held - EPS) - len(groups))
        need = task.gpu_devices if task.is_shared else math.ceil(task.request.gpu - EPS)
        if need > node.free_gpus_future() - keep + EPS:
            return NO_FREE_OWN
        return None


class OwnedCardsCheck(PredicateCache):
    """The session's predicates, then card ownership (``Ownership.refusal``)."""

    def __init__(self, inner: PredicateCache, ownership: Ownership) -> None:
        # Not PredicateCache.__init__: every check is the inner one's, with its caches.
        self._inner = inner
        self.ownership = ownership

    def check(self, task: Task, node: Node) -> str | None:
        result = self._inner.check(task, node)
        if result is None:
            result = self.ownership.refusal(task, node)
        return result
