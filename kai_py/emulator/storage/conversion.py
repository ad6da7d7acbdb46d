"""Kinds served in two API groups over one storage: events.k8s.io/v1 <-> core/v1 Event.

The real API server stores Events once and converts, so an event posted
through events.k8s.io/v1 shows in ``kubectl describe`` (which reads core/v1
events by ``involvedObject``) and the other way round. The emulator stores
the core/v1 form and converts events.k8s.io/v1 on the way in and out.
"""

from __future__ import annotations

from typing import Any

from kai_py.api.jsoncodec import copy as copy_json
from kai_py.emulator.storage.errors import FieldError
from kai_py.emulator.storage.resources import ResourceType

JSON = dict[str, Any]

# (events.k8s.io/v1 field, core/v1 field)
_EVENT_FIELDS = (
    ("regarding", "involvedObject"),
    ("related", "related"),
    ("note", "message"),
    ("reason", "reason"),
    ("type", "type"),
    ("action", "action"),
    ("reportingController", "reportingComponent"),
    ("reportingInstance", "reportingInstance"),
    ("eventTime", "eventTime"),
    ("series", "series"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
)
_SELECTOR_FIELDS = {"regarding.": "involvedObject.", "reportingController": "reportingComponent"}


def is_converted(rt: ResourceType) -> bool:
    return rt.group == "events.k8s.io" and rt.plural == "events"


def validate_view(rt: ResourceType, obj: JSON, creating: bool) -> list[FieldError]:
    """What events.k8s.io/v1 requires that core/v1 does not."""
    if not is_converted(rt) or not creating:
        return []
    errors = []
    for field in ("eventTime", "reportingController", "reportingInstance", "action", "reason"):
        if not obj.get(field):
            errors.append(FieldError(field, "FieldValueRequired", ""))
    return errors


def to_storage(rt: ResourceType, obj: JSON) -> JSON:
    if not is_converted(rt):
        return obj
    out: JSON = {"apiVersion": "v1", "kind": "Event", "metadata": obj.get("metadata") or {}}
    for new, old in _EVENT_FIELDS:
        if new in obj:
            out[old] = obj[new]
    # As the real conversion: count and lastTimestamp come from the deprecated
    # fields only, never from series (which core/v1 keeps as it is).
    return out


def from_storage(rt: ResourceType, obj: JSON) -> JSON:
    """A copy of the stored object in ``rt``'s form."""
    if not is_converted(rt):
        out: JSON = copy_json(obj)
        return out
    view: JSON = {"metadata": copy_json(obj.get("metadata") or {})}
    for new, old in _EVENT_FIELDS:
        if old in obj:
            view[new] = copy_json(obj[old])
    return view


def translate_field_selector(rt: ResourceType, selector: str | None) -> str | None:
    if not selector or not is_converted(rt):
        return selector
    for new, old in _SELECTOR_FIELDS.items():
        selector = selector.replace(new, old)
    return selector
