"""Pinned pods: which of a node's cards a task may take, and which are free.

A pinned task (``Task.pin``) may only use the node's cards its pin allows
(``Node.cards``, the published inventory). The scheduler knows a card is
taken when a task on the node reports it (``Task.gpu_uuids``) or a GPU group
is known to sit on it (``Node.group_cards``, or a task of the group that
reports its cards). Cards held by pods whose card is not known (an unpinned
whole-GPU pod whose kubelet does not report devices) count only in the
node's totals; the binder checks the real cards before it binds.

Everything here reads the session state that ``Statement`` keeps; nothing
changes it, so the undo log stays the only writer.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable

from kai_py.scheduler.model import Card, Node, Task, TaskStatus
from kai_py.scheduler.resources import EPS

_LEAVING = (TaskStatus.RELEASING, TaskStatus.EVICTED)


def cards_needed(task: Task) -> int:
    """How many distinct cards the task takes."""
    if task.is_shared:
        return task.gpu_devices
    return max(0, math.ceil(task.request.gpu - EPS))


def allowed_cards(task: Task, node: Node) -> list[Card]:
    pin = task.pin
    if pin is None:
        return list(node.cards)
    return [card for card in node.cards if pin.allows(card)]


def group_card(node: Node, group: str) -> str | None:
    """The UUID of the card GPU group ``group`` is on, when anybody knows it."""
    known = node.group_cards.get(group)
    if known:
        return known
    for task in node.tasks.values():
        if group in task.gpu_groups and len(task.gpu_uuids) == len(task.gpu_groups):
            return task.gpu_uuids[task.gpu_groups.index(group)]
    return None


def held_cards(node: Node, future: bool) -> set[str]:
    """Cards taken on ``node``: after pending releases (``future``), or now.

    "Now" counts a card as taken when it is held now or promised to a
    pipelined task, as the node's whole-GPU totals do.
    """
    later: set[str] = set()
    now: set[str] = set()
    for gid, group in node.groups.items():
        uuid = group_card(node, gid)
        if uuid is None:
            continue
        if group.used - group.releasing + group.pipelined > EPS:
            later.add(uuid)
        if group.used > EPS:
            now.add(uuid)
    for task in node.tasks.values():
        if not task.gpu_uuids or task.is_shared:
            continue  # shared tasks are counted through their groups above
        leaving = task.status in _LEAVING and not task.stuck
        if not leaving:
            later.update(task.gpu_uuids)
        if task.claim_now:
            now.update(task.gpu_uuids)
    return later if future else later | now


def free_allowed(task: Task, node: Node, future: bool) -> list[Card]:
    """The allowed cards nobody holds, lowest index first."""
    taken = held_cards(node, future)
    return [card for card in allowed_cards(task, node) if card.uuid not in taken]


def free_for_new_group(task: Task, node: Node, future: bool) -> list[Card]:
    """Free allowed cards that no GPU group sits on (a group about to be free still does)."""
    grouped = {group_card(node, gid) for gid in node.groups}
    return [card for card in free_allowed(task, node, future) if card.uuid not in grouped]


def whole_fits(task: Task, node: Node, future: bool) -> bool:
    return len(free_allowed(task, node, future)) >= cards_needed(task)


def group_allowed(task: Task, node: Node, group: str) -> bool:
    """May a pinned shared task join ``group``? Only when its card is known and allowed."""
    uuid = group_card(node, group)
    if uuid is None:
        return False
    return any(card.uuid == uuid for card in allowed_cards(task, node))


def choose_cards(
    task: Task, node: Node, groups: tuple[str, ...], pipelined: bool
) -> tuple[str, ...]:
    """The cards a pinned task placed on ``node`` takes (one per group for a shared task)."""
    free = [card.uuid for card in free_allowed(task, node, pipelined)]
    if not task.is_shared:
        return tuple(free[: cards_needed(task)])
    chosen: list[str] = []
    for gid in groups:
        uuid = group_card(node, gid)
        if uuid is None:
            grouped = {group_card(node, g) for g in node.groups}
            uuid = next((u for u in free if u not in chosen and u not in grouped), "")
        chosen.append(uuid)
    return tuple(chosen)


def _percent(share: float) -> str:
    return f"{max(0.0, share) * 100:.0f}%"


def shortfall(task: Task, node: Node) -> str | None:
    """Why a pinned task does not fit ``node``, naming the allowed cards; None if unpinned."""
    pin = task.pin
    if pin is None or not node.cards:
        return None
    allowed = allowed_cards(task, node)
    taken = held_cards(node, True)
    if task.is_shared:
        portion = task.portion_on(node)
        used: dict[str, float] = {}
        for gid, group in node.groups.items():
            uuid = group_card(node, gid)
            if uuid is not None:
                used[uuid] = group.used - group.releasing + group.pipelined
        parts = []
        for card in allowed:
            if card.uuid in used:
                parts.append(f"{card.uuid} {_percent(1 - used[card.uuid])} free")
            elif card.uuid in taken:
                parts.append(f"{card.uuid} held whole")
            else:
                parts.append(f"{card.uuid} 100% free")
        many = f"{task.gpu_devices} GPUs" if task.gpu_devices > 1 else "GPU"
        return (
            f"node(s) had no {many} allowed by {pin.text} with {_percent(portion)} free "
            f"({', '.join(parts)}){unhealthy_clause(task, node)}"
        )
    need = cards_needed(task)
    free = [card.uuid for card in allowed if card.uuid not in taken]
    busy = [card.uuid for card in allowed if card.uuid in taken]
    text = f"node(s) had {len(free)} free GPU(s) allowed by {pin.text}, {need} needed"
    if busy:
        text += f" ({', '.join(busy)} in use)"
    return text + unhealthy_clause(task, node)


def unhealthy_clause(task: Task, node: Node) -> str:
    """The cards the pin would allow but for their health, as a clause of the reason."""
    pin = task.pin
    assert pin is not None
    sick = [
        card.uuid
        for card in node.cards
        if not card.healthy and pin.allows(dataclasses.replace(card, healthy=True))
    ]
    return f"; unhealthy, left out: {', '.join(sick)}" if sick else ""


def never_satisfiable(task: Task, nodes: Iterable[Node]) -> str | None:
    """What in a pin no node can satisfy at all (unknown UUIDs, types nobody has)."""
    pin = task.pin
    if pin is None:
        return None
    cards = [card for node in nodes for card in node.cards]
    problems = []
    known = {card.uuid for card in cards}
    unknown = [u for u in pin.use_uuids if u not in known]
    if unknown:
        problems.append(f"nvidia.com/use-gpuuuid names {', '.join(unknown)}, which no node reports")
    products = [card.product.lower() for card in cards]
    missing = [t for t in pin.use_types if not any(t.lower() in p for p in products)]
    if missing:
        problems.append(
            f"nvidia.com/use-gputype names {', '.join(missing)}, which no node's GPU matches"
        )
    denied = [u for u in pin.use_uuids if u in pin.nouse_uuids]
    if pin.use_uuids and len(denied) == len(pin.use_uuids):
        problems.append(
            f"every card nvidia.com/use-gpuuuid names is also in nvidia.com/nouse-gpuuuid "
            f"({', '.join(denied)}), and a card in both lists is excluded"
        )
    indexes = {card.index for card in cards}
    absent = [str(i) for i in pin.use_indexes if i not in indexes]
    if absent:
        problems.append(
            f"nvidia.com/use-gpuindexes names {', '.join(absent)}, which no node's GPU has"
        )
    if not problems and not cards:
        problems.append("no node publishes a GPU inventory, so no pinned pod can be placed")
    return "; ".join(problems) or None
