"""Every card of the cluster and who holds it: cluster objects -> rows (a pure function).

One place computes the per-card figures, from the objects as the API server
gives them (Nodes, pods, reservation pods), so that the operator's metrics
(``kai_py.metrics``, computed at scrape time from the watch cache) and
``kubectl kai cards`` (``kai_py.kubectl.cards``) read the same figures:

- the cards: the node's inventory (``kai.scheduler/gpu-inventory`` or HAMi's
  registration): index, UUID, model, memory; a card known only from a
  reservation pod or a pod's recorded cards (a node without an inventory) has no
  index, and its model and memory come from the node's ``nvidia.com/gpu.product``
  / ``gpu.memory`` labels;
- who holds each card: a shared pod (its GPU group -> the card its reservation
  pod reported) with its ``gpu-fraction``, or its ``gpu-memory`` over the card's
  memory; a pod whose cards are known (``kai.scheduler/gpu-uuids``: a pinned
  pod's, or the kubelet's report) holds each of them whole;
- the share allocated (the holders' shares added up), each holder's pin (HAMi's
  pin annotations), the reservation pods holding the card, and the pending pods
  pinned to it by UUID;
- apart from the rows, per node: the pods whose card is not known (a shared pod
  whose reservation pod has not reported its card, a whole-GPU pod whose cards
  were not recorded) and what could not be read.

Only the given nodes have rows (a scheduling shard's own, or the one node asked
for). Finished pods hold nothing; a pod being deleted still does (its containers
may still run), and so does a reservation pod being deleted, as the scheduler's
cache counts it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kai_py.api import keys
from kai_py.api.objects import WorkloadError
from kai_py.api.quantities import parse_quantity
from kai_py.gpu import groups, inventory, pins

_DONE = ("Succeeded", "Failed")


@dataclass(frozen=True, slots=True)
class Holder:
    """A pod's part of one card (or, apart from the rows, of cards not known)."""

    namespace: str
    pod: str
    share: float  # of the card, 0..1; of cards not known: how many
    amount: str  # as the pod asks: "0.5", "4096MiB"; "1" a whole card (how many, if not known)
    group: str = ""  # a shared pod's GPU group
    pin: str = ""  # the pod's HAMi pin as written; "invalid: ..." for a bad one

    @property
    def pinned(self) -> bool:
        return bool(self.pin)


@dataclass(slots=True)
class CardRow:
    node: str
    index: int | None  # None: not in the node's inventory
    uuid: str
    model: str
    memory_mib: float
    reservation_pods: list[str] = field(default_factory=list)  # namespace/name
    holders: list[Holder] = field(default_factory=list)
    pinned_waiting: list[str] = field(default_factory=list)  # pending pods pinned to it

    @property
    def reservation(self) -> str:
        return ", ".join(self.reservation_pods)

    @property
    def allocated(self) -> float:
        return sum((h.share for h in self.holders), 0.0)

    @property
    def pinned(self) -> bool:
        return any(h.pinned for h in self.holders)


@dataclass(slots=True)
class Cards:
    rows: list[CardRow]  # by node, then index (cards without one last)
    unplaced: dict[str, list[Holder]]  # node -> pods on it whose card is not known
    problems: dict[str, list[str]]  # node -> what could not be read


def reservation_cards(
    reservation_pods: Iterable[Mapping[str, Any]],
) -> dict[tuple[str, str], tuple[str, str]]:
    """(node, GPU group) -> (card, reservation pod namespace/name), from the reservation
    pods that reported their card; a pinned bind's blockers are none (as the cache)."""
    out: dict[tuple[str, str], tuple[str, str]] = {}
    for pod in reservation_pods:
        m = pod.get("metadata") or {}
        uuid = (m.get("annotations") or {}).get(keys.RESERVED_GPU_INDEX_ANNOTATION)
        node = (pod.get("spec") or {}).get("nodeName")
        group = groups.reservation_group(pod)
        if uuid and node and group and not _blocker(pod):
            out[(str(node), group)] = (str(uuid), f"{m.get('namespace')}/{m.get('name')}")
    return out


def _blocker(pod: Mapping[str, Any]) -> bool:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return labels.get(keys.GPU_BLOCKER_LABEL) == "true"


def _float(value: object) -> float:
    try:
        return float(str(value))
    except ValueError:
        return 0.0


def whole_gpus(pod: Mapping[str, Any]) -> float:
    """Whole GPUs a pod asks for (its containers' nvidia.com/gpu, limits over requests)."""
    total = 0.0
    for container in (pod.get("spec") or {}).get("containers") or []:
        res = container.get("resources") or {}
        value = (res.get("limits") or {}).get(keys.GPU_RESOURCE) or (res.get("requests") or {}).get(
            keys.GPU_RESOURCE
        )
        if value is not None:
            try:
                total += parse_quantity(value)
            except ValueError:
                continue
    return total


def _pin_text(pod: Mapping[str, Any]) -> str:
    try:
        pin = pins.pin_of(pod)
    except WorkloadError as exc:
        return f"invalid: {exc}"
    return pin.text if pin is not None else ""


def card_rows(
    nodes: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    reserved: Mapping[tuple[str, str], tuple[str, str]],
) -> list[CardRow]:
    """One row per card of ``nodes``; ``reserved`` from ``reservation_cards``."""
    return cluster_cards(nodes, pods, reserved).rows


def cluster_cards(
    nodes: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    reserved: Mapping[tuple[str, str], tuple[str, str]],
) -> Cards:
    """The cards of ``nodes`` and who holds them; ``pods`` may hold other nodes' pods
    (and the reservation pods, which are read from ``reserved``)."""
    rows: dict[tuple[str, str], CardRow] = {}
    by_index: dict[tuple[str, str], CardRow] = {}
    labels_of: dict[str, Mapping[str, Any]] = {}
    unplaced: dict[str, list[Holder]] = {}
    problems: dict[str, list[str]] = {}
    for node_obj in nodes:
        nm = node_obj.get("metadata") or {}
        name = str(nm.get("name") or "")
        labels_of[name] = nm.get("labels") or {}
        try:
            cards = inventory.node_cards(nm.get("annotations") or {})
        except inventory.InventoryError as exc:
            cards = ()  # the scheduler warns about it too; its cards are unknown here
            problems.setdefault(name, []).append(str(exc))
        for one in cards:
            card = CardRow(name, one.index, one.uuid, one.product, one.memory_mib)
            rows[(name, one.uuid)] = by_index[(name, str(one.index))] = card

    def row(node: str, uuid: str) -> CardRow:
        # A report that names a card by index (a device plugin that hands out indexes)
        # is that card of the inventory.
        found = rows.get((node, uuid)) or by_index.get((node, uuid))
        if found is None:
            labels = labels_of.get(node) or {}
            found = rows[(node, uuid)] = CardRow(
                node,
                None,
                uuid,
                str(labels.get(keys.GPU_PRODUCT_NODE_LABEL) or ""),
                _float(labels.get(keys.GPU_MEMORY_NODE_LABEL) or 0),
            )
        return found

    for (where, _group), (uuid, reservation) in reserved.items():
        if where in labels_of:
            row(where, uuid).reservation_pods.append(reservation)
    waiting: list[Mapping[str, Any]] = []
    for pod in pods:
        m = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        if (pod.get("status") or {}).get("phase") in _DONE:
            continue
        ann = m.get("annotations") or {}
        node = spec.get("nodeName")
        if not node:
            if keys.USE_GPU_UUID_ANNOTATION in ann:
                waiting.append(pod)
            continue
        node = str(node)
        if node not in labels_of:
            continue  # another shard's node, or not asked for
        ns, name = str(m.get("namespace") or ""), str(m.get("name") or "")
        if ns == keys.RESERVATION_NAMESPACE:
            # The reservation pods are read from ``reserved``; a pinned bind's blockers
            # hold cards for a moment and are not shown.
            if not ann.get(keys.RESERVED_GPU_INDEX_ANNOTATION) and not _blocker(pod):
                problems.setdefault(node, []).append(
                    f"reservation pod {ns}/{name} holds a card not yet reported"
                )
            continue
        fraction = ann.get(keys.GPU_FRACTION_ANNOTATION)
        memory = ann.get(keys.GPU_MEMORY_ANNOTATION)
        if fraction or memory:
            pin = _pin_text(pod)
            amount = str(fraction) if fraction else f"{memory}MiB"
            share = _float(fraction or 0)
            for group in groups.shared_pod_groups(pod) or [""]:
                held = reserved.get((node, group))
                if held is None:  # its card is not reported (yet)
                    unplaced.setdefault(node, []).append(
                        Holder(ns, name, share, amount, group, pin)
                    )
                    continue
                card = row(node, held[0])
                by_memory = _float(memory or 0) / card.memory_mib if card.memory_mib else 0.0
                card.holders.append(Holder(ns, name, share or by_memory, amount, group, pin))
            continue
        uuids = pins.reported_uuids(pod)
        missing = int(whole_gpus(pod)) - len(uuids)
        if not uuids and missing <= 0:
            continue  # no GPU (most pods): read no further
        pin = _pin_text(pod)
        for uuid in uuids:
            row(node, uuid).holders.append(Holder(ns, name, 1.0, "1", pin=pin))
        if missing > 0:
            unplaced.setdefault(node, []).append(
                Holder(ns, name, float(missing), str(missing), pin=pin)
            )
    if waiting:
        by_uuid: dict[str, list[CardRow]] = {}
        for card in rows.values():
            by_uuid.setdefault(card.uuid, []).append(card)
        for pod in waiting:
            try:
                wanted = pins.pin_of(pod)
            except WorkloadError:
                continue  # the scheduler says why in the pod's Events
            m = pod.get("metadata") or {}
            for uuid in wanted.use_uuids if wanted is not None else ():
                for card in by_uuid.get(uuid, ()):
                    card.pinned_waiting.append(f"{m.get('namespace') or ''}/{m.get('name') or ''}")
    ordered = sorted(rows.values(), key=lambda r: (r.node, r.index is None, r.index or 0, r.uuid))
    return Cards(ordered, unplaced, problems)
