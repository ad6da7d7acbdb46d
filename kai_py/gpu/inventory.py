"""A node's GPU inventory: kai-py's annotation, and HAMi's where that is all there is.

kai-py's annotation ``kai.scheduler/gpu-inventory`` (written by
``kai-py node-agent`` and by the emulator's simulated nodes) holds JSON of
this shape, version 1 (docs/pinning.md)::

    {"version": 1, "source": "nvml",
     "cards": [{"index": 0, "uuid": "GPU-...", "product": "NVIDIA A100-SXM4-80GB",
                "memoryMiB": 81920, "health": "Healthy"}]}

HAMi's device plugin registers a node's cards in ``hami.io/node-nvidia-register``:
as ``UUID,count,memMiB,cores,type,numa,health[,index,mode]`` items joined by
``:``, or as a JSON list of objects (``id``, ``index``, ``devmem``, ``type``,
``health``). It is read as HAMi v2.10 reads it: one malformed field refuses the
whole annotation. kai-py's own annotation wins when both are present.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

from kai_py.api import keys
from kai_py.scheduler.model import Card

INVENTORY_VERSION: Final = 1
HEALTHY: Final = "Healthy"
UNHEALTHY: Final = "Unhealthy"


class InventoryError(ValueError):
    """An inventory annotation that cannot be read; the message names annotation and value."""


def inventory_json(cards: Sequence[Card], source: str) -> str:
    """The annotation value for ``cards`` (stable key order, so unchanged cards do not rewrite)."""
    return json.dumps(
        {
            "version": INVENTORY_VERSION,
            "source": source,
            "cards": [
                {
                    "index": card.index,
                    "uuid": card.uuid,
                    "product": card.product,
                    "memoryMiB": int(card.memory_mib),
                    "health": HEALTHY if card.healthy else UNHEALTHY,
                }
                for card in sorted(cards, key=lambda c: c.index)
            ],
        },
        separators=(",", ":"),
    )


def _bad(annotation: str, raw: str, why: str) -> InventoryError:
    shown = raw if len(raw) <= 120 else raw[:117] + "..."
    return InventoryError(f"annotation {annotation}: {why} (value {shown!r})")


def parse_inventory(raw: str) -> tuple[Card, ...]:
    name = keys.GPU_INVENTORY_ANNOTATION
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        raise _bad(name, raw, f"not JSON: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("cards"), list):
        raise _bad(name, raw, 'expected an object with a "cards" list')
    if doc.get("version", INVENTORY_VERSION) != INVENTORY_VERSION:
        raise _bad(name, raw, f"unknown version {doc.get('version')!r}")
    cards = []
    for i, item in enumerate(doc["cards"]):
        if not isinstance(item, dict) or not isinstance(item.get("uuid"), str):
            raise _bad(name, raw, f"cards[{i}] needs a uuid")
        try:
            index = int(item.get("index", i))
            memory = float(item.get("memoryMiB") or 0)
        except (TypeError, ValueError):
            raise _bad(name, raw, f"cards[{i}]: index and memoryMiB must be numbers") from None
        cards.append(
            Card(
                index=index,
                uuid=item["uuid"],
                product=str(item.get("product") or ""),
                memory_mib=memory,
                healthy=str(item.get("health", HEALTHY)) == HEALTHY,
            )
        )
    return _checked(name, raw, cards)


# strconv.ParseBool's words, as HAMi reads the health field.
_TRUE: Final = frozenset({"1", "t", "true"})
_BOOLS: Final = _TRUE | {"0", "f", "false"}


def parse_hami_register(raw: str) -> tuple[Card, ...]:
    """HAMi's registration, read as HAMi v2.10 reads it: one bad field refuses it all."""
    name = keys.HAMI_NODE_REGISTER_ANNOTATION
    text = raw.strip()
    cards: list[Card] = []
    if text.startswith("["):
        try:
            items = json.loads(text)
        except ValueError as exc:
            raise _bad(name, raw, f"not JSON: {exc}") from None
        if not isinstance(items, list):
            raise _bad(name, raw, "expected a JSON list of devices")
        for i, item in enumerate(items):
            if not isinstance(item, dict) or not isinstance(item.get("id"), str):
                raise _bad(name, raw, f"device {i} needs an id")
            for key in ("index", "count", "devmem", "devcore", "numa"):
                value = item.get(key, 0)
                if not isinstance(value, int) or isinstance(value, bool):
                    raise _bad(name, raw, f"device {i}: {key} {value!r} is not a whole number")
            if item.get("index", 0) < 0:
                raise _bad(name, raw, f"device {i}: index {item['index']} is negative")
            if not isinstance(item.get("health", False), bool):
                raise _bad(name, raw, f"device {i}: health {item['health']!r} is not true or false")
            cards.append(
                Card(
                    # HAMi leaves out zero values (index 0, health false) when it writes.
                    index=int(item.get("index", 0)),
                    uuid=item["id"],
                    product=_hami_product(str(item.get("type") or "")),
                    memory_mib=float(item.get("devmem") or 0),
                    healthy=bool(item.get("health", False)),
                )
            )
        return _checked(name, raw, cards)
    if ":" not in text:
        raise _bad(name, raw, "no ':' between devices")
    for i, part in enumerate(p for p in text.split(":") if p):
        fields = [f.strip() for f in part.split(",")]
        if len(fields) not in (7, 9):
            raise _bad(name, raw, f"device {i} has {len(fields)} fields, 7 or 9 expected")
        for pos, field in ((1, "count"), (2, "memory"), (3, "cores"), (5, "numa")):
            _whole_field(name, raw, i, field, fields[pos], signed=True)
        if fields[6].lower() not in _BOOLS:
            raise _bad(name, raw, f"device {i}: health {fields[6]!r} is not true or false")
        # The 7-field form has no index: the cards are numbered in the order listed.
        index = i
        if len(fields) == 9:
            index = _whole_field(name, raw, i, "index", fields[7], signed=False)
        cards.append(
            Card(
                index=index,
                uuid=fields[0],
                product=_hami_product(fields[4]),
                memory_mib=float(fields[2]),
                healthy=fields[6].lower() in _TRUE,
            )
        )
    return _checked(name, raw, cards)


def _whole_field(
    annotation: str, raw: str, device: int, field: str, value: str, signed: bool
) -> int:
    try:
        number = int(value)
    except ValueError:
        raise _bad(
            annotation, raw, f"device {device}: {field} {value!r} is not a whole number"
        ) from None
    if number < 0 and not signed:
        raise _bad(annotation, raw, f"device {device}: {field} {number} is negative")
    return number


def _hami_product(kind: str) -> str:
    # HAMi prefixes the vendor ("NVIDIA-NVIDIA A100..."); the product name follows.
    return kind[len("NVIDIA-") :] if kind.startswith("NVIDIA-NVIDIA") else kind


def _checked(annotation: str, raw: str, cards: list[Card]) -> tuple[Card, ...]:
    seen: set[str] = set()
    for card in cards:
        if card.uuid in seen:
            raise _bad(annotation, raw, f"card {card.uuid} is listed twice")
        seen.add(card.uuid)
    return tuple(sorted(cards, key=lambda c: c.index))


def node_cards(annotations: Mapping[str, Any]) -> tuple[Card, ...]:
    """The node's cards: kai-py's annotation, else HAMi's, else none."""
    raw = annotations.get(keys.GPU_INVENTORY_ANNOTATION)
    if raw:
        return _parsed_inventory(str(raw))
    raw = annotations.get(keys.HAMI_NODE_REGISTER_ANNOTATION)
    if raw:
        return _parsed_hami_register(str(raw))
    return ()


# A snapshot reads every node's inventory, every cycle, twice (the node and its
# warning), while an annotation changes rarely: each text is parsed once (Cards are
# frozen; a text that does not parse is not kept and raises each time).
_parsed_inventory = functools.lru_cache(maxsize=8192)(parse_inventory)
_parsed_hami_register = functools.lru_cache(maxsize=8192)(parse_hami_register)


def card_memory_mib(cards: Sequence[Card]) -> float:
    """Per-card memory for shares by memory: the smallest card, so a share fits every card."""
    sizes = [card.memory_mib for card in cards if card.memory_mib > 0]
    return min(sizes) if sizes else 0.0


def group_cards(annotations: Mapping[str, Any]) -> dict[str, str]:
    """GPU group -> card UUID, as the operator's cache records it (``kai.scheduler/gpu-group-cards``).

    Also accepted in ``kai-py simulate`` input; an unreadable value is ignored (the
    groups' cards are then unknown, which only keeps pinned pods off them).
    """
    raw = annotations.get(keys.GPU_GROUP_CARDS_ANNOTATION)
    if not raw:
        return {}
    try:
        value = json.loads(str(raw))
    except ValueError:
        return {}
    if not isinstance(value, dict):
        return {}
    return {str(k): str(v) for k, v in value.items() if v}
