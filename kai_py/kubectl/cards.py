"""Who holds what of each GPU card, from the cluster's objects (a pure function).

Read from what is in the API, as a user's ``kubectl`` sees it: the node's cards
(kai-py's inventory annotation or HAMi's registration, else as many unnamed cards
as the node has GPUs), the reservation pods (the card each shared GPU group sits
on, ``run.ai/reserve_for_gpu_index``), the shared pods (their GPU groups and their
``gpu-fraction`` or ``gpu-memory``), whole-GPU pods (the cards the binder recorded
or the kubelet reported) and HAMi pins. No API call here: ``cards`` takes the
listed objects, so the same view can serve other readers (metrics, reports).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kai_py.api import keys
from kai_py.api.objects import WorkloadError
from kai_py.api.quantities import parse_quantity
from kai_py.gpu.groups import reservation_group, shared_pod_groups
from kai_py.gpu.inventory import InventoryError, node_cards
from kai_py.gpu.pins import pin_of, reported_uuids

Json = dict[str, Any]

#: Pods that hold nothing any more.
_DONE = frozenset({"Succeeded", "Failed"})


@dataclass(slots=True)
class Holder:
    """A pod's part of one card: a share ("0.5", "4096MiB") or the whole card ("1")."""

    pod: str  # namespace/name
    share: str
    group: str = ""  # the GPU group of a shared pod
    pin: str = ""  # the pod's HAMi pin, as written

    def json(self) -> Json:
        return {"pod": self.pod, "share": self.share, "group": self.group, "pin": self.pin}


@dataclass(slots=True)
class CardView:
    node: str
    index: int | None  # None: a card whose index the node does not publish
    uuid: str
    product: str = ""
    memory_mib: float = 0.0
    holders: list[Holder] = field(default_factory=list)
    reservation_pods: list[str] = field(default_factory=list)
    pinned_waiting: list[str] = field(default_factory=list)  # pending pods pinned to it

    @property
    def used(self) -> float:
        """The fraction of the card given out (shares by memory count by the card's)."""
        total = 0.0
        for h in self.holders:
            total += _fraction(h.share, self.memory_mib)
        return total

    def json(self) -> Json:
        return {
            "node": self.node,
            "index": self.index,
            "uuid": self.uuid,
            "product": self.product,
            "memoryMiB": self.memory_mib,
            "used": round(self.used, 4),
            "holders": [h.json() for h in self.holders],
            "reservationPods": list(self.reservation_pods),
            "pinnedWaiting": list(self.pinned_waiting),
        }


@dataclass(slots=True)
class NodeCards:
    node: str
    cards: list[CardView]
    unplaced: list[Holder] = field(default_factory=list)  # on the node, card not known
    problems: list[str] = field(default_factory=list)

    def json(self) -> Json:
        return {
            "node": self.node,
            "cards": [c.json() for c in self.cards],
            "cardNotKnown": [h.json() for h in self.unplaced],
            "problems": list(self.problems),
        }


def _fraction(share: str, memory_mib: float) -> float:
    if share.endswith("MiB"):
        mib = float(share[:-3])
        return mib / memory_mib if memory_mib > 0 else 0.0
    try:
        return float(share)
    except ValueError:
        return 0.0


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    value = obj.get("metadata")
    return value if isinstance(value, Mapping) else {}


def _key(pod: Mapping[str, Any]) -> str:
    m = _meta(pod)
    return f"{m.get('namespace') or ''}/{m.get('name') or ''}"


def _gpus(pod: Mapping[str, Any]) -> float:
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


def _share(pod: Mapping[str, Any]) -> str | None:
    """A shared pod's share of each of its cards, as written on it; None: not shared."""
    ann = _meta(pod).get("annotations") or {}
    if ann.get(keys.GPU_FRACTION_ANNOTATION):
        return str(ann[keys.GPU_FRACTION_ANNOTATION])
    if ann.get(keys.GPU_MEMORY_ANNOTATION):
        return f"{ann[keys.GPU_MEMORY_ANNOTATION]}MiB"
    return None


def _pin_text(pod: Mapping[str, Any]) -> str:
    try:
        pin = pin_of(pod)
    except WorkloadError as exc:
        return f"invalid: {exc}"
    return pin.text if pin is not None else ""


def _node_gpus(node: Mapping[str, Any]) -> int:
    status = node.get("status") or {}
    raw = (status.get("allocatable") or status.get("capacity") or {}).get(keys.GPU_RESOURCE)
    try:
        return int(parse_quantity(raw)) if raw is not None else 0
    except ValueError:
        return 0


def node_view(node: Mapping[str, Any], pods: Iterable[Mapping[str, Any]]) -> NodeCards:
    """One node's cards with their holders; ``pods`` may hold pods of other nodes."""
    name = str(_meta(node).get("name") or "")
    problems: list[str] = []
    try:
        known = node_cards(_meta(node).get("annotations") or {})
    except InventoryError as exc:
        known, problems = (), [str(exc)]
    if known:
        cards = [CardView(name, c.index, c.uuid, c.product, c.memory_mib) for c in known]
    else:  # no inventory published: the cards are known by count only
        cards = [CardView(name, i, "") for i in range(_node_gpus(node))]
    by_uuid = {c.uuid: c for c in cards if c.uuid}
    by_index = {str(c.index): c for c in cards}
    group_card: dict[str, CardView] = {}
    on_node: list[Mapping[str, Any]] = []
    waiting: list[Mapping[str, Any]] = []
    for pod in pods:
        spec = pod.get("spec") or {}
        phase = (pod.get("status") or {}).get("phase")
        if phase in _DONE:
            continue
        if not spec.get("nodeName"):
            waiting.append(pod)
            continue
        if spec.get("nodeName") != name:
            continue
        if _meta(pod).get("namespace") == keys.RESERVATION_NAMESPACE:
            group = reservation_group(pod)
            where = (_meta(pod).get("annotations") or {}).get(keys.RESERVED_GPU_INDEX_ANNOTATION)
            card = by_uuid.get(str(where)) or by_index.get(str(where)) if where else None
            if card is None and where and not known:
                # The node publishes no inventory: the reservation pod names the card.
                card = CardView(name, None, str(where))
                cards.append(card)
                by_uuid[card.uuid] = card
            if card is not None:
                card.reservation_pods.append(_key(pod))
                if group:
                    group_card[group] = card
            else:
                problems.append(f"reservation pod {_key(pod)} holds a card not yet reported")
            continue
        on_node.append(pod)
    unplaced: list[Holder] = []
    for pod in on_node:
        share, pin = _share(pod), _pin_text(pod)
        if share is not None:
            for group in shared_pod_groups(pod) or [""]:
                holder = Holder(_key(pod), share, group, pin)
                card = group_card.get(group)
                (card.holders if card is not None else unplaced).append(holder)
            continue
        whole = _gpus(pod)
        if whole <= 0:
            continue
        uuids = reported_uuids(pod)
        placed = [by_uuid[u] for u in uuids if u in by_uuid]
        for card in placed:
            card.holders.append(Holder(_key(pod), "1", pin=pin))
        missing = int(whole) - len(placed)
        if missing > 0:
            unplaced.append(Holder(_key(pod), str(missing), pin=pin))
    for pod in waiting:
        ann = _meta(pod).get("annotations") or {}
        if keys.USE_GPU_UUID_ANNOTATION not in ann:
            continue
        try:
            wanted = pin_of(pod)
        except WorkloadError:
            continue
        for uuid in wanted.use_uuids if wanted is not None else ():
            if uuid in by_uuid:
                by_uuid[uuid].pinned_waiting.append(_key(pod))
    cards.sort(key=lambda c: (c.index is None, c.index or 0, c.uuid))
    return NodeCards(name, cards, unplaced, problems)


def cards(nodes: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]) -> list[NodeCards]:
    """Every GPU node's cards, by node name (nodes without GPUs are left out)."""
    listed = list(pods)
    found = []
    for node in sorted(nodes, key=lambda n: str(_meta(n).get("name") or "")):
        view = node_view(node, listed)
        if view.cards or view.unplaced or view.problems:
            found.append(view)
    return found


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
                f"{card.product[:24]:<24} {memory:>9} {round(card.used, 3):>6g}"
            )
            for h in card.holders:
                what = f"  group {h.group}" if h.group else ""
                pin = f"  pin {h.pin}" if h.pin else ""
                lines.append(f"{'':<27}{h.pod}  {h.share}{what}{pin}"[:120])
            for r in card.reservation_pods:
                lines.append(f"{'':<27}reserved by {r}"[:120])
            for w in card.pinned_waiting:
                lines.append(f"{'':<27}pinned, waiting: {w}"[:120])
        for h in view.unplaced:
            pin = f"  pin {h.pin}" if h.pin else ""
            lines.append(
                f"{view.node[:20]:<20} {'?':>4}  card not reported: {h.pod} {h.share}{pin}"[:120]
            )
        for p in view.problems:
            lines.append(f"{view.node[:20]:<20} problem: {p}"[:120])
    return lines


def show_mib(mib: float) -> str:
    return f"{mib / 1024:g}GiB" if mib >= 1024 else f"{mib:g}MiB"
