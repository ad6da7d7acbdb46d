"""HAMi's GPU resources, translated into kai-py's sharing (a pure function).

HAMi asks for N different cards with a share of each:
``nvidia.com/gpu: N`` plus ``nvidia.com/gpumem: MiB`` or
``nvidia.com/gpumem-percentage: P`` (per card). The NVIDIA device plugin does
not advertise ``gpumem``, so kai-py's mutating webhook rewrites such a pod
into KAI's sharing annotations before it is stored, and ``kai-py simulate``
reads such a pod as the webhook would write it:

- ``gpumem-percentage: P`` (P < 100)  -> ``gpu-fraction: P/100``
- ``gpumem-percentage: 100`` (or 0)   -> N whole GPUs (``nvidia.com/gpu: N`` stays)
- ``gpumem: M``                       -> ``gpu-memory: M``
- N > 1                               -> ``gpu-fraction-num-devices: N``

and takes ``nvidia.com/gpu`` and the HAMi resources out of the container.
``nvidia.com/gpucores`` (a compute share) is dropped: neither kai-py nor the
NVIDIA device plugin enforces compute. What was done is recorded in the
annotation ``kai.scheduler/hami-translation``.

With ``memory_cap`` (HAMi-core installed), the container also gets HAMi-core's
per-card cap ``CUDA_DEVICE_MEMORY_LIMIT`` for a share given in MiB, unless it
sets ``CUDA_DISABLE_CONTROL=true`` (HAMi-core off for that container).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Final

from kai_py.api import keys

Json = dict[str, Any]

TRANSLATION_ANNOTATION: Final = "kai.scheduler/hami-translation"
#: Set by the operator's cache on a stored pod that still has HAMi's resources.
UNTRANSLATED_ANNOTATION: Final = "kai.scheduler/hami-untranslated"
GPUCORES_RESOURCE: Final = "nvidia.com/gpucores"
MEMORY_LIMIT_ENV: Final = "CUDA_DEVICE_MEMORY_LIMIT"
DISABLE_CONTROL_ENV: Final = "CUDA_DISABLE_CONTROL"
_HAMI: Final = (
    keys.HAMI_GPUMEM_RESOURCE,
    keys.HAMI_GPUMEM_PERCENTAGE_RESOURCE,
    GPUCORES_RESOURCE,
)
_HAMI_SET: Final = frozenset(_HAMI)


class HamiError(ValueError):
    """A HAMi request kai-py cannot translate; the message names pod, field and value."""


def pod_ref(pod: Mapping[str, Any]) -> str:
    m = pod.get("metadata") or {}
    name = m.get("name") or m.get("generateName") or "<unnamed>"
    return f"Pod {m.get('namespace') or 'default'}/{name}"


def _value(pod: Mapping[str, Any], container: Mapping[str, Any], res: str) -> str | None:
    resources = container.get("resources") or {}
    for part in ("limits", "requests"):
        value = (resources.get(part) or {}).get(res)
        if value is not None:
            return str(value).strip()
    return None


def _whole(pod: Mapping[str, Any], path: str, raw: str, low: int, high: int | None) -> int:
    if not raw.isdigit() or int(raw) < low or (high is not None and int(raw) > high):
        span = f"{low}..{high}" if high is not None else f"{low} or more"
        raise HamiError(f"{pod_ref(pod)}: {path}: must be a whole number {span}, got {raw!r}")
    return int(raw)


def needs_translation(pod: Mapping[str, Any]) -> bool:
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        # Asked of every pod in a snapshot: most name none of HAMi's resources, which
        # one set test per map tells (a value of null does not count, as in _value).
        for part in ("limits", "requests"):
            given = resources.get(part)
            if (
                given
                and not _HAMI_SET.isdisjoint(given)
                and any(given.get(res) is not None for res in _HAMI)
            ):
                return True
    return False


def translate(pod: Mapping[str, Any], memory_cap: bool = False) -> tuple[Json, str] | None:
    """(the pod as kai-py reads it, what was done), or None when it has no HAMi resources."""
    if not needs_translation(pod):
        return None
    out: Json = copy.deepcopy(dict(pod))
    containers = (out.get("spec") or {}).get("containers") or []
    users = [
        i for i, c in enumerate(containers) if any(_value(pod, c, r) is not None for r in _HAMI)
    ]
    if len(users) > 1:
        names = ", ".join(str(containers[i].get("name")) for i in users)
        raise HamiError(
            f"{pod_ref(pod)}: containers {names} all ask for HAMi GPU shares; kai-py shares "
            "cards per pod, so only one container may"
        )
    index = users[0]
    container = containers[index]
    base = f"spec.containers[{index}].resources"
    ann = dict((out.get("metadata") or {}).get("annotations") or {})
    for key in (keys.GPU_FRACTION_ANNOTATION, keys.GPU_MEMORY_ANNOTATION):
        if key in ann:
            raise HamiError(
                f"{pod_ref(pod)}: metadata.annotations[{key}]={ann[key]!r} cannot be combined with "
                f"HAMi's resources in {base}; use one way to share"
            )
    mem = _value(pod, container, keys.HAMI_GPUMEM_RESOURCE)
    pct = _value(pod, container, keys.HAMI_GPUMEM_PERCENTAGE_RESOURCE)
    cores = _value(pod, container, GPUCORES_RESOURCE)
    gpus_raw = _value(pod, container, keys.GPU_RESOURCE)
    count = 1 if gpus_raw is None else _whole(pod, f"{base}.{keys.GPU_RESOURCE}", gpus_raw, 1, None)
    if mem is not None and pct is not None:
        raise HamiError(
            f"{pod_ref(pod)}: {base}: {keys.HAMI_GPUMEM_RESOURCE}={mem!r} and "
            f"{keys.HAMI_GPUMEM_PERCENTAGE_RESOURCE}={pct!r} together; give one"
        )
    before = [f"{keys.GPU_RESOURCE}: {count}"]
    after: list[str] = []
    whole = False
    memory_mib: int | None = None
    if pct is not None:
        path = f"{base}.{keys.HAMI_GPUMEM_PERCENTAGE_RESOURCE}"
        percent = _whole(pod, path, pct, 0, 100)
        before.append(f"{keys.HAMI_GPUMEM_PERCENTAGE_RESOURCE}: {percent}")
        if percent in (0, 100):
            # HAMi v2.10 books the whole card for 0 (no share given, and its default
            # share is the whole card): whole cards, never a card shared at 0 %.
            whole = True
        else:
            fraction = f"{percent / 100:g}"
            ann[keys.GPU_FRACTION_ANNOTATION] = fraction
            after.append(f"{keys.GPU_FRACTION_ANNOTATION}: {fraction}")
    elif mem is not None:
        memory_mib = _whole(pod, f"{base}.{keys.HAMI_GPUMEM_RESOURCE}", mem, 1, None)
        before.append(f"{keys.HAMI_GPUMEM_RESOURCE}: {memory_mib}")
        ann[keys.GPU_MEMORY_ANNOTATION] = str(memory_mib)
        after.append(f"{keys.GPU_MEMORY_ANNOTATION}: {memory_mib}")
    elif cores is not None:
        whole = True  # a compute share alone: the cards are whole as far as memory goes
    if cores is not None:
        before.append(f"{GPUCORES_RESOURCE}: {cores}")
    if not whole and count > 1:
        ann[keys.GPU_FRACTION_NUM_DEVICES_ANNOTATION] = str(count)
        after.append(f"{keys.GPU_FRACTION_NUM_DEVICES_ANNOTATION}: {count}")
    resources = dict(container.get("resources") or {})
    for part in ("limits", "requests"):
        values = dict(resources.get(part) or {})
        for res in _HAMI:
            values.pop(res, None)
        if whole:
            if part == "limits":
                values[keys.GPU_RESOURCE] = str(count)
        else:
            values.pop(keys.GPU_RESOURCE, None)
        if values:
            resources[part] = values
        else:
            resources.pop(part, None)
    container["resources"] = resources
    if whole:
        after.append(f"{keys.GPU_RESOURCE}: {count} (whole cards)")
    if cores is not None:
        after.append(f"{GPUCORES_RESOURCE} dropped (compute shares are not enforced)")
    if memory_cap and memory_mib is not None and _cap(container, memory_mib):
        after.append(f"env {MEMORY_LIMIT_ENV}={memory_mib}m for HAMi-core")
    summary = f"container {container.get('name')}: {', '.join(before)} -> {'; '.join(after)}"
    ann[TRANSLATION_ANNOTATION] = summary
    out.setdefault("metadata", {})["annotations"] = ann
    return out, summary


def _cap(container: Json, memory_mib: int) -> bool:
    """Give one container HAMi-core's per-card cap; False when it opts out or has one."""
    env = list(container.get("env") or [])
    disabled = any(
        e.get("name") == DISABLE_CONTROL_ENV and str(e.get("value", "")).strip().lower() == "true"
        for e in env
    )
    if disabled or any(e.get("name") == MEMORY_LIMIT_ENV for e in env):
        return False
    env.append({"name": MEMORY_LIMIT_ENV, "value": f"{memory_mib}m"})
    container["env"] = env
    return True


def memory_cap_only(pod: Mapping[str, Any]) -> tuple[Json, str] | None:
    """A pod with KAI's ``gpu-memory`` share: HAMi-core's cap on each of its containers.

    (A ``gpu-fraction`` share's size in MiB depends on the card it lands on, which is
    not known at admission: such pods are not capped.)
    """
    ann = (pod.get("metadata") or {}).get("annotations") or {}
    raw = str(ann.get(keys.GPU_MEMORY_ANNOTATION, "")).strip()
    if not raw.isdigit() or int(raw) <= 0:
        return None
    out: Json = copy.deepcopy(dict(pod))
    capped = [
        str(c.get("name"))
        for c in (out.get("spec") or {}).get("containers") or []
        if _cap(c, int(raw))
    ]
    if not capped:
        return None
    summary = f"env {MEMORY_LIMIT_ENV}={raw}m for HAMi-core in container(s) {', '.join(capped)}"
    annotations = dict(ann)
    annotations[TRANSLATION_ANNOTATION] = summary
    out.setdefault("metadata", {})["annotations"] = annotations
    return out, summary


# strconv.ParseBool's true words: HAMi v2.10 binds to one NUMA node only for these.
_PARSEBOOL_TRUE: Final = frozenset({"1", "t", "T", "TRUE", "true", "True"})


def unapplied_pod_annotations(annotations: Mapping[str, Any]) -> list[tuple[str, str]]:
    """HAMi v2.10's pod annotations that ask for something kai-py does not do, as
    (annotation, its value and why): the pod is placed without them, and says so."""
    out: list[tuple[str, str]] = []
    numa = annotations.get(keys.HAMI_NUMA_BIND_ANNOTATION)
    if numa is not None and str(numa) in _PARSEBOOL_TRUE:
        out.append(
            (
                keys.HAMI_NUMA_BIND_ANNOTATION,
                f"value {numa!r}: cards are not kept on one NUMA node",
            )
        )
    mode = annotations.get(keys.HAMI_VGPU_MODE_ANNOTATION)
    if mode is not None:
        out.append(
            (
                keys.HAMI_VGPU_MODE_ANNOTATION,
                f"value {mode!r}: cards are not chosen by their sharing mode (hami-core, mig, mps)",
            )
        )
    weights = annotations.get(keys.HAMI_SCORING_WEIGHTS_ANNOTATION)
    if weights is not None:
        out.append(
            (
                keys.HAMI_SCORING_WEIGHTS_ANNOTATION,
                f"value {weights!r}: cards are scored by the pod's card policy only",
            )
        )
    return out


def unapplied_node_annotations(annotations: Mapping[str, Any]) -> list[tuple[str, str]]:
    """HAMi v2.10's Node annotations set by an admin that kai-py does not apply."""
    cordon = annotations.get(keys.HAMI_DEVICE_CORDON_ANNOTATION)
    if cordon is None or not str(cordon).strip():
        return []  # HAMi v2.10: empty means nothing is cordoned
    return [
        (
            keys.HAMI_DEVICE_CORDON_ANNOTATION,
            f"value {cordon!r}: new pods, pinned or not, may still get these cards, since "
            "the NVIDIA device plugin, not kai-py, picks an unpinned pod's cards; take a "
            "card out of the device plugin to keep pods off it",
        )
    ]
