"""Every card of the cluster and who holds it: cluster objects -> rows (a pure function).

One place computes the per-card figures, from the objects as the API server
gives them (Nodes, pods, reservation pods), so that the operator's metrics
(``kai_py.metrics``, computed at scrape time from the watch cache) and a
command-line view of the cluster read the same figures:

- the cards: the node's inventory (``kai.scheduler/gpu-inventory`` or HAMi's
  registration): index, UUID, model, memory; a card known only from a
  reservation pod (a node without an inventory) has no index, and its model and
  memory come from the node's ``nvidia.com/gpu.product`` / ``gpu.memory`` labels;
- who holds each card: a shared pod (its GPU group -> the card its reservation
  pod reported) with its ``gpu-fraction``, or its ``gpu-memory`` over the card's
  memory; a pod whose cards are known (``kai.scheduler/gpu-uuids``: a pinned
  pod's, or the kubelet's report) holds each of them whole;
- the share allocated (the holders' shares added up), whether a holder is
  pinned (HAMi's pin annotations), and the reservation pod holding the card.

Finished pods hold nothing; a pod being deleted still does (its containers may
still run).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kai_py.api import keys
from kai_py.gpu import groups, inventory, pins


@dataclass(frozen=True, slots=True)
class Holder:
    namespace: str
    pod: str
    share: float  # of the card, 0..1
    pinned: bool


@dataclass(slots=True)
class CardRow:
    node: str
    index: int | None  # None: not in the node's inventory
    uuid: str
    model: str
    memory_mib: float
    reservation: str = ""  # namespace/name of the reservation pod holding it
    holders: list[Holder] = field(default_factory=list)

    @property
    def allocated(self) -> float:
        return sum(h.share for h in self.holders)

    @property
    def pinned(self) -> bool:
        return any(h.pinned for h in self.holders)


def reservation_cards(
    reservation_pods: Iterable[Mapping[str, Any]],
) -> dict[tuple[str, str], tuple[str, str]]:
    """(node, GPU group) -> (card UUID, reservation pod namespace/name), from the
    reservation pods that reported their card."""
    out: dict[tuple[str, str], tuple[str, str]] = {}
    for pod in reservation_pods:
        m = pod.get("metadata") or {}
        uuid = (m.get("annotations") or {}).get(keys.RESERVED_GPU_INDEX_ANNOTATION)
        node = (pod.get("spec") or {}).get("nodeName")
        group = groups.reservation_group(pod)
        if uuid and node and group and not m.get("deletionTimestamp"):
            out[(str(node), group)] = (str(uuid), f"{m.get('namespace')}/{m.get('name')}")
    return out


def _float(value: object) -> float:
    try:
        return float(str(value))
    except ValueError:
        return 0.0


def card_rows(
    nodes: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    reserved: Mapping[tuple[str, str], tuple[str, str]],
) -> list[CardRow]:
    """One row per card, by node then index; ``reserved`` from ``reservation_cards``."""
    rows: dict[tuple[str, str], CardRow] = {}
    labels_of: dict[str, Mapping[str, Any]] = {}
    for node_obj in nodes:
        nm = node_obj.get("metadata") or {}
        name = str(nm.get("name") or "")
        labels_of[name] = nm.get("labels") or {}
        try:
            cards = inventory.node_cards(nm.get("annotations") or {})
        except inventory.InventoryError:
            cards = ()  # the scheduler warns about it; its cards are unknown here
        for one in cards:
            rows[(name, one.uuid)] = CardRow(name, one.index, one.uuid, one.product, one.memory_mib)

    def row(node: str, uuid: str) -> CardRow:
        found = rows.get((node, uuid))
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
        row(where, uuid).reservation = reservation
    for pod in pods:
        m = pod.get("metadata") or {}
        node = (pod.get("spec") or {}).get("nodeName")
        if not node or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        if m.get("namespace") == keys.RESERVATION_NAMESPACE:
            continue  # the reservation pods themselves (and pinned binds' blockers)
        ann = m.get("annotations") or {}
        pinned = pins.names_pin(pod)
        ns, name = str(m.get("namespace") or ""), str(m.get("name") or "")
        shared = groups.shared_pod_groups(pod)
        if shared:
            fraction = _float(ann.get(keys.GPU_FRACTION_ANNOTATION) or 0)
            memory = _float(ann.get(keys.GPU_MEMORY_ANNOTATION) or 0)
            for group in shared:
                held = reserved.get((str(node), group))
                if held is None:
                    continue  # its card is not reported (yet): not on any row
                card = row(str(node), held[0])
                share = fraction or (memory / card.memory_mib if card.memory_mib else 0.0)
                card.holders.append(Holder(ns, name, share, pinned))
            continue
        for uuid in str(ann.get(keys.GPU_UUIDS_ANNOTATION) or "").split(","):
            if uuid.strip():
                row(str(node), uuid.strip()).holders.append(Holder(ns, name, 1.0, pinned))
    return sorted(
        rows.values(), key=lambda r: (r.node, r.index if r.index is not None else 1 << 30, r.uuid)
    )
