"""Reading a pod's GPU pin and HAMi's placement policies, with messages a person can act on.

``nvidia.com/use-gpuuuid`` / ``nvidia.com/nouse-gpuuuid`` hold comma-separated
card UUIDs (exact match); ``nvidia.com/use-gputype`` / ``nvidia.com/nouse-gputype``
comma-separated model names (case-insensitive substring of the product name);
``nvidia.com/use-gpuindexes`` card indexes, the same on every node. Every list
given applies, so a card in an allow and a deny list is excluded, and an empty or
blank value is no constraint (both as HAMi v2.10); kai-py says in a Normal Event
which blank annotation it ignored.

``hami.io/node-scheduler-policy`` and ``hami.io/gpu-scheduler-policy`` choose,
per pod, binpack or spread for nodes and for cards (HAMi v2.10's keys).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from kai_py.api import keys
from kai_py.api.objects import WorkloadError, meta, ref
from kai_py.gpu.hami import TRANSLATION_ANNOTATION
from kai_py.scheduler.model import GpuPin, PodPolicy

_UUID: Final = re.compile(r"^GPU-[0-9A-Fa-f]+(-[0-9A-Fa-f]+)*$")
_PIN_KEYS: Final = (
    keys.USE_GPU_UUID_ANNOTATION,
    keys.NOUSE_GPU_UUID_ANNOTATION,
    keys.USE_GPU_TYPE_ANNOTATION,
    keys.NOUSE_GPU_TYPE_ANNOTATION,
    keys.USE_GPU_INDEX_ANNOTATION,
)
_POLICY_KEYS: Final = (keys.HAMI_NODE_POLICY_ANNOTATION, keys.HAMI_GPU_POLICY_ANNOTATION)
_POLICIES: Final = ("binpack", "spread")
#: HAMi's defaults for a pod that uses its keys: binpack nodes, spread cards (v2.10).
_HAMI_DEFAULT: Final = PodPolicy(node="binpack", card="spread")
#: Keys that make a pod a HAMi pod (its resources leave the translation record).
_HAMI_POD_KEYS: Final = (*_PIN_KEYS, *_POLICY_KEYS, TRANSLATION_ANNOTATION)


def _blank(raw: object) -> bool:
    return not str(raw).strip()


def _items(who: str, annotation: str, raw: object) -> tuple[str, ...]:
    path = f"metadata.annotations[{annotation}]"
    items = tuple(part.strip() for part in str(raw).split(",") if part.strip())
    if not items:
        # Only commas: HAMi v2.10 reads that as a list naming no card, which no card
        # matches, so the pod could never run; refused with a message instead.
        raise WorkloadError(
            who, path, f"names nothing ({raw!r}): name at least one, or remove the annotation"
        )
    if annotation.endswith("gpuuuid"):
        for item in items:
            if not _UUID.match(item):
                raise WorkloadError(
                    who,
                    path,
                    f"{item!r} in {raw!r} is not a GPU UUID "
                    "(expected GPU- followed by hex digits and dashes, as nvidia-smi -L shows)",
                )
    if annotation == keys.USE_GPU_INDEX_ANNOTATION:
        for item in items:
            if not item.isdigit():
                raise WorkloadError(
                    who,
                    path,
                    f"{item!r} in {raw!r} is not a card index (expected whole numbers 0 or "
                    "more, as nvidia-smi -L numbers the cards)",
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
        if key in ann and not _blank(ann[key]):
            found[key] = _items(who, key, ann[key])
    if not found:
        return None
    text = ", ".join(f'{k}="{ann[k]}"' for k in _PIN_KEYS if k in found)
    return GpuPin(
        use_uuids=found.get(keys.USE_GPU_UUID_ANNOTATION, ()),
        nouse_uuids=found.get(keys.NOUSE_GPU_UUID_ANNOTATION, ()),
        use_types=found.get(keys.USE_GPU_TYPE_ANNOTATION, ()),
        nouse_types=found.get(keys.NOUSE_GPU_TYPE_ANNOTATION, ()),
        use_indexes=tuple(int(i) for i in found.get(keys.USE_GPU_INDEX_ANNOTATION, ())),
        text=text,
    )


def pin_notes(obj: Mapping[str, Any]) -> list[str]:
    """Normal notes about a pod's pin: the empty or blank annotations that were ignored."""
    ann = meta(obj).get("annotations") or {}
    return [
        f"{ref(obj)}: metadata.annotations[{key}]={ann[key]!r} is empty, so it is ignored "
        "(no constraint, as in HAMi v2.10)"
        for key in (*_PIN_KEYS, *_POLICY_KEYS)
        if key in ann and _blank(ann[key])
    ]


def policy_of(obj: Mapping[str, Any]) -> PodPolicy | None:
    """The pod's node and card policies, or None to follow the cluster's placement.

    A pod that uses HAMi's keys gets HAMi's defaults (nodes binpack, cards spread)
    for what it does not set; WorkloadError for a value other than binpack or spread.
    """
    ann = meta(obj).get("annotations") or {}
    if not any(k in ann for k in _HAMI_POD_KEYS):
        return None
    chosen: list[str] = []
    for key, default in zip(_POLICY_KEYS, (_HAMI_DEFAULT.node, _HAMI_DEFAULT.card), strict=True):
        raw = ann.get(key)
        if raw is None or _blank(raw):
            chosen.append(default)
            continue
        value = str(raw).strip()
        if value not in _POLICIES:
            raise WorkloadError(
                ref(obj),
                f"metadata.annotations[{key}]",
                f"{value!r} is not a policy kai-py applies: expected binpack or spread",
            )
        chosen.append(value)
    return PodPolicy(node=chosen[0], card=chosen[1])


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
