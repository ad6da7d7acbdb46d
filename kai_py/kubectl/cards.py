"""``kubectl kai cards``: each node's GPU cards and who holds what of them.

The figures are ``kai_py.gpu.cards``' (the same as the operator's per-card
metrics), from the listed objects as a user's ``kubectl`` sees them; this module
only groups them by node, adds the cards a node without an inventory is known to
have by count only, and writes the table and the ``-o json`` shape. No API call
here: ``cards`` takes the listed objects.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kai_py.api import keys
from kai_py.api.quantities import parse_quantity
from kai_py.gpu.cards import CardRow, Holder, cluster_cards, reservation_cards

Json = dict[str, Any]


def holder_json(holder: Holder) -> Json:
    return {
        "pod": f"{holder.namespace}/{holder.pod}",
        "share": holder.amount,
        "group": holder.group,
        "pin": holder.pin,
    }


def card_json(card: CardRow) -> Json:
    return {
        "node": card.node,
        "index": card.index,
        "uuid": card.uuid,
        "product": card.model,
        "memoryMiB": card.memory_mib,
        "used": round(card.allocated, 4),
        "holders": [holder_json(h) for h in card.holders],
        "reservationPods": list(card.reservation_pods),
        "pinnedWaiting": list(card.pinned_waiting),
    }


@dataclass(slots=True)
class NodeCards:
    node: str
    cards: list[CardRow]
    unplaced: list[Holder] = field(default_factory=list)  # on the node, card not known
    problems: list[str] = field(default_factory=list)

    def json(self) -> Json:
        return {
            "node": self.node,
            "cards": [card_json(c) for c in self.cards],
            "cardNotKnown": [holder_json(h) for h in self.unplaced],
            "problems": list(self.problems),
        }


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def _node_gpus(node: Mapping[str, Any]) -> int:
    status = node.get("status") or {}
    raw = (status.get("allocatable") or status.get("capacity") or {}).get(keys.GPU_RESOURCE)
    try:
        return int(parse_quantity(raw)) if raw is not None else 0
    except ValueError:
        return 0


def cards(nodes: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]) -> list[NodeCards]:
    """Every GPU node's cards, by node name (nodes without GPUs are left out); ``pods``
    may hold other nodes' pods and the reservation pods."""
    listed = list(pods)
    given = sorted(nodes, key=_name)
    reservations = [
        p
        for p in listed
        if (p.get("metadata") or {}).get("namespace") == keys.RESERVATION_NAMESPACE
    ]
    found = cluster_cards(given, listed, reservation_cards(reservations))
    by_node: dict[str, list[CardRow]] = {}
    for row in found.rows:
        by_node.setdefault(row.node, []).append(row)
    views = []
    for node in given:
        name = _name(node)
        rows = by_node.get(name, [])
        if not any(r.index is not None for r in rows):
            # No inventory: the cards no pod names are known by count only.
            unnamed = range(_node_gpus(node) - len(rows))
            rows = [CardRow(name, i, "", "", 0.0) for i in unnamed] + rows
        view = NodeCards(name, rows, found.unplaced.get(name, []), found.problems.get(name, []))
        if view.cards or view.unplaced or view.problems:
            views.append(view)
    return views


def _short(uuid: str) -> str:
    return uuid if len(uuid) <= 16 else uuid[:15] + "…"


def cards_table(views: Iterable[NodeCards]) -> list[str]:
    """Each card on a line (at most 120 columns), its holders and reservation pods under it."""
    lines = [f"{'NODE':<20} {'CARD':>4}  {'UUID':<16}  {'PRODUCT':<24} {'MEMORY':>9} {'USED':>6}"]
    for view in views:
        for card in view.cards:
            memory = f"{show_mib(card.memory_mib)}" if card.memory_mib else "-"
            index = "?" if card.index is None else str(card.index)
            lines.append(
                f"{view.node[:20]:<20} {index:>4}  {_short(card.uuid) or '-':<16}  "
                f"{card.model[:24]:<24} {memory:>9} {round(card.allocated, 3):>6g}"
            )
            for h in card.holders:
                what = f"  group {h.group}" if h.group else ""
                pin = f"  pin {h.pin}" if h.pin else ""
                lines.append(f"{'':<27}{h.namespace}/{h.pod}  {h.amount}{what}{pin}"[:120])
            for r in card.reservation_pods:
                lines.append(f"{'':<27}reserved by {r}"[:120])
            for w in card.pinned_waiting:
                lines.append(f"{'':<27}pinned, waiting: {w}"[:120])
        for h in view.unplaced:
            pin = f"  pin {h.pin}" if h.pin else ""
            lines.append(
                f"{view.node[:20]:<20} {'?':>4}  card not reported: "
                f"{h.namespace}/{h.pod} {h.amount}{pin}"[:120]
            )
        for p in view.problems:
            lines.append(f"{view.node[:20]:<20} problem: {p}"[:120])
    return lines


def show_mib(mib: float) -> str:
    return f"{mib / 1024:g}GiB" if mib >= 1024 else f"{mib:g}MiB"
