"""The pod mutation of KAI's device access, for pods of kai-py's scheduler.

On a real node the NVIDIA container runtime shows a container the cards
named by ``NVIDIA_VISIBLE_DEVICES``. The binder writes the card of a shared
pod (``gpu-fraction`` / ``gpu-memory``) into ConfigMaps; this mutation makes
the pod read them, with KAI's names, so that what is built on KAI finds them:

- a shared pod gets the annotation ``runai/shared-gpu-configmap:
  <base>-<random>-shared-gpu`` (kept when it has one), the prefix of its two
  ConfigMaps (``kai_py.binder.reservation.configmap_prefix``);
- the container that shares the card (the one named by the
  ``gpu-fraction-container-name`` annotation, else the first, index ``i``)
  gets ``NVIDIA_VISIBLE_DEVICES``, ``RUNAI_NUM_OF_GPUS`` and ``GPU_PORTION``
  from ``<prefix>-<i>`` (``env[].valueFrom.configMapKeyRef``; a variable it
  already reads from a ConfigMap keeps it, and the binder writes that one too),
  and ``envFrom`` of ``<prefix>-<i>-evar``; the pod gets a volume of
  ``<prefix>-<i>``, as KAI's webhook adds;
- every other container that asks for no ``nvidia.com/gpu`` gets
  ``NVIDIA_VISIBLE_DEVICES=void``, so it sees no card at all (as KAI does);
- a shared pod gets ``runtimeClassName`` when one is configured and the pod
  has none.

``validate`` refuses, as KAI does, a container that names its own cards: an
``NVIDIA_VISIBLE_DEVICES`` other than ``void`` or ``none``, or one read from
elsewhere, in any container but the one that shares a card (which reads the
binder's ConfigMap). Otherwise ``NVIDIA_VISIBLE_DEVICES=all`` would show a
container every card of its node, whatever kai-py gave it.
"""

from __future__ import annotations

import copy
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from kai_py.api import keys
from kai_py.binder.reservation import (
    PREFIX_RANDOM_ALPHABET,
    PREFIX_RANDOM_CHARS,
    SHARED_GPU_CONFIGMAP_ANNOTATION,
    SHARING_ENV_KEYS,
    VISIBLE_DEVICES_KEY,
    configmap_prefix,
    configmap_volume_name,
    shared_configmap_names,
    shared_configmaps,
    sharing_container_index,
)

Json = dict[str, Any]

#: What a container without a GPU sees: no card.
NO_DEVICES: Final = "void"
#: The only values a pod may give ``NVIDIA_VISIBLE_DEVICES`` itself (as KAI): no card.
ALLOWED_VISIBLE_DEVICES: Final = ("void", "none")


@dataclass(frozen=True, slots=True)
class Mutation:
    """What the webhook changes: the pod's new ``spec`` and annotations to add."""

    spec: Json
    annotations: dict[str, str]


def shares_gpu(pod: Mapping[str, Any]) -> bool:
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    return keys.GPU_FRACTION_ANNOTATION in annotations or keys.GPU_MEMORY_ANNOTATION in annotations


def _asks_for_gpu(container: Mapping[str, Any]) -> bool:
    resources = container.get("resources") or {}
    for part in ("limits", "requests"):
        amount = (resources.get(part) or {}).get(keys.GPU_RESOURCE)
        if amount not in (None, 0, "0"):
            return True
    return False


def _from_configmap(var: Mapping[str, Any]) -> bool:
    return bool(((var.get("valueFrom") or {}).get("configMapKeyRef") or {}).get("name"))


def random_part() -> str:
    """The random part of a new prefix, from KAI's alphabet."""
    return "".join(secrets.choice(PREFIX_RANDOM_ALPHABET) for _ in range(PREFIX_RANDOM_CHARS))


def _wire(container: Json, spec: Json, first: str, evar: str) -> None:
    """Make the sharing container read its card from KAI's two ConfigMaps."""
    env: list[Json] = list(container.get("env") or [])
    kept = {
        str(v.get("name")) for v in env if v.get("name") in SHARING_ENV_KEYS and _from_configmap(v)
    }
    env = [v for v in env if v.get("name") not in SHARING_ENV_KEYS or str(v.get("name")) in kept]
    env += [
        {"name": key, "valueFrom": {"configMapKeyRef": {"name": first, "key": key}}}
        for key in SHARING_ENV_KEYS
        if key not in kept
    ]
    container["env"] = env
    sources: list[Json] = list(container.get("envFrom") or [])
    if not any((s.get("configMapRef") or {}).get("name") == evar for s in sources):
        sources.append({"configMapRef": {"name": evar, "optional": False}})
    container["envFrom"] = sources
    volume = configmap_volume_name(first)
    volumes: list[Json] = [v for v in spec.get("volumes") or [] if v.get("name") != volume]
    volumes.append({"name": volume, "configMap": {"name": first}})
    spec["volumes"] = volumes


def mutate(
    pod: Mapping[str, Any],
    scheduler_name: str,
    runtime_class: str | None = None,
    token: Callable[[], str] = random_part,
) -> Mutation | None:
    """The pod's new ``spec`` and the annotations to add (or None: nothing to change)."""
    spec = pod.get("spec") or {}
    if spec.get("schedulerName") != scheduler_name:
        return None
    new = copy.deepcopy(dict(spec))
    containers: list[Json] = list(new.get("containers") or [])
    if not containers:
        return None
    shared = shares_gpu(pod)
    sharing_index = sharing_container_index(pod) if shared else -1
    annotations: dict[str, str] = {}
    for i, container in enumerate(containers):
        if i == sharing_index:
            names = shared_configmaps(pod)
            if names is None:
                prefix = configmap_prefix(pod, token())
                annotations[SHARED_GPU_CONFIGMAP_ANNOTATION] = prefix
                names = shared_configmap_names(prefix, i)
            _wire(container, new, *names)
        elif not _asks_for_gpu(container):
            env = [e for e in container.get("env") or [] if e.get("name") != VISIBLE_DEVICES_KEY]
            env.append({"name": VISIBLE_DEVICES_KEY, "value": NO_DEVICES})
            if env != list(container.get("env") or []):
                container["env"] = env
    for i, container in enumerate(new.get("initContainers") or []):
        if not _asks_for_gpu(container):
            env = [e for e in container.get("env") or [] if e.get("name") != VISIBLE_DEVICES_KEY]
            env.append({"name": VISIBLE_DEVICES_KEY, "value": NO_DEVICES})
            new["initContainers"][i] = {**container, "env": env}
    if shared and runtime_class and not new.get("runtimeClassName"):
        new["runtimeClassName"] = runtime_class
    if new == spec and not annotations:
        return None
    return Mutation(new, annotations)


def validate(pod: Mapping[str, Any]) -> list[str]:
    """Why the pod may not be admitted: a container names the cards it sees (empty: none)."""
    m = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    sharing = sharing_container_index(pod) if shares_gpu(pod) else -1
    errors = []
    for field_name in ("initContainers", "containers"):
        for i, container in enumerate(spec.get(field_name) or []):
            if field_name == "containers" and i == sharing:
                continue  # reads the binder's ConfigMap (the binder checks how)
            for var in container.get("env") or []:
                if var.get("name") != VISIBLE_DEVICES_KEY:
                    continue
                where = (
                    f"pod {m.get('namespace')}/{m.get('name')}: spec.{field_name}[{i}] "
                    f"({container.get('name')}) env {VISIBLE_DEVICES_KEY}"
                )
                value = var.get("value")
                if var.get("valueFrom") is not None and not value:
                    errors.append(
                        f"{where} is read from valueFrom: a container may not choose the "
                        f"cards it sees; only {' or '.join(ALLOWED_VISIBLE_DEVICES)} may be set"
                    )
                elif value and value not in ALLOWED_VISIBLE_DEVICES:
                    errors.append(
                        f'{where} is "{value}": a container may not choose the cards it '
                        f"sees; only {' or '.join(ALLOWED_VISIBLE_DEVICES)} may be set"
                    )
    return errors
