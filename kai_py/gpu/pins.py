"""Reading a pod's GPU pin from HAMi's annotations, with messages a person can act on.

``nvidia.com/use-gpuuuid`` / ``nvidia.com/nouse-gpuuuid`` hold comma-separated
card UUIDs (exact match); ``nvidia.com/use-gputype`` / ``nvidia.com/nouse-gputype``
comma-separated model names (case-insensitive substring of the product name).
As in HAMi, a deny list is ignored when the allow list of the same kind is
present; kai-py says so in a Warning rather than silently.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from kai_py.api import keys
from kai_py.api.objects import WorkloadError, meta, ref
from kai_py.scheduler.model import GpuPin

_UUID: Final = re.compile(r"^GPU-[0-9A-Fa-f]+(-[0-9A-Fa-f]+)*$")
_PIN_KEYS: Final = (
    keys.USE_GPU_UUID_ANNOTATION,
    keys.NOUSE_GPU_UUID_ANNOTATION,
    keys.USE_GPU_TYPE_ANNOTATION,
    keys.NOUSE_GPU_TYPE_ANNOTATION,
)


def _items(who: str, annotation: str, raw: object, uuids: bool) -> tuple[str, ...]:
    path = f"metadata.annotations[{annotation}]"
    items = tuple(part.strip() for part in str(raw).split(",") if part.strip())
    if not items:
        what = "card UUID" if uuids else "GPU type"
        raise WorkloadError(
            who, path, f"is empty ({raw!r}): name at least one {what}, or remove the annotation"
        )
    if uuids:
        for item in items:
            if not _UUID.match(item):
                raise WorkloadError(
                    who,
                    path,
                    f"{item!r} in {raw!r} is not a GPU UUID "
                    "(expected GPU- followed by hex digits and dashes, as nvidia-smi -L shows)",
                )
    return items


def names_pin(obj: Mapping[str, Any]) -> bool:
    """Does the object carry any pin annotation (valid or not)? Cheap: no parsing."""
    ann = meta(obj).get("annotations") or {}
    return any(k in ann for k in _PIN_KEYS)


def pin_of(obj: Mapping[str, Any]) -> GpuPin | None:
    """The pod's pin, or None when it names no cards; WorkloadError for a bad value."""
    ann = meta(obj).get("annotations") or {}
    if not any(k in ann for k in _PIN_KEYS):
        return None
    who = ref(obj)
    found: dict[str, tuple[str, ...]] = {}
    for key in _PIN_KEYS:
        if key in ann:
            found[key] = _items(who, key, ann[key], uuids=key.endswith("gpuuuid"))
    text = ", ".join(f'{k}="{ann[k]}"' for k in _PIN_KEYS if k in ann)
    return GpuPin(
        use_uuids=found.get(keys.USE_GPU_UUID_ANNOTATION, ()),
        nouse_uuids=found.get(keys.NOUSE_GPU_UUID_ANNOTATION, ()),
        use_types=found.get(keys.USE_GPU_TYPE_ANNOTATION, ()),
        nouse_types=found.get(keys.NOUSE_GPU_TYPE_ANNOTATION, ()),
        text=text,
    )


def pin_notes(obj: Mapping[str, Any]) -> list[str]:
    """Warnings about a valid pin: deny lists that HAMi's rules make ignored."""
    ann = meta(obj).get("annotations") or {}
    notes = []
    for use, nouse in (
        (keys.USE_GPU_UUID_ANNOTATION, keys.NOUSE_GPU_UUID_ANNOTATION),
        (keys.USE_GPU_TYPE_ANNOTATION, keys.NOUSE_GPU_TYPE_ANNOTATION),
    ):
        if use in ann and nouse in ann:
            notes.append(
                f"{ref(obj)}: metadata.annotations[{nouse}]={ann[nouse]!r} is ignored because "
                f"{use}={ann[use]!r} is present (only the allow list applies, as in HAMi)"
            )
    return notes


def reported_uuids(obj: Mapping[str, Any]) -> tuple[str, ...]:
    """The cards a bound pod holds, when known: the binder's record, else the kubelet's.

    The kubelet reports a container's devices in ``allocatedResourcesStatus``
    (KEP-4680) where that feature is on.
    """
    ann = meta(obj).get("annotations") or {}
    recorded = ann.get(keys.GPU_UUIDS_ANNOTATION)
    if recorded:
        return tuple(u for u in str(recorded).split(",") if u)
    found: list[str] = []
    for status in (obj.get("status") or {}).get("containerStatuses") or []:
        for entry in status.get("allocatedResourcesStatus") or []:
            if entry.get("name") == keys.GPU_RESOURCE:
                found.extend(str(r.get("resourceID")) for r in entry.get("resources") or [])
    return tuple(u for u in found if u)
