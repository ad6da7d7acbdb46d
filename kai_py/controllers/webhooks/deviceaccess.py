"""The pod mutation of KAI's device access, for pods of kai-py's scheduler.

On a real node the NVIDIA container runtime shows a container the cards
named by ``NVIDIA_VISIBLE_DEVICES``. The binder writes the card of a shared
pod (``gpu-fraction`` / ``gpu-memory``) into a ConfigMap; this mutation
makes the pod read it:

- the container that shares the card (the one named by the
  ``gpu-fraction-container-name`` annotation, else the first) gets
  ``NVIDIA_VISIBLE_DEVICES`` and ``GPU_PORTION`` from that ConfigMap
  (``env[].valueFrom.configMapKeyRef``), unless it already reads them from
  one (then the binder writes that one);
- every other container that asks for no ``nvidia.com/gpu`` gets
  ``NVIDIA_VISIBLE_DEVICES=void``, so it sees no card at all (as KAI does);
- a shared pod gets ``runtimeClassName`` when one is configured and the pod
  has none.

The ConfigMap is named ``<pod>-gpu`` (the binder's default), or, for a pod
that only has ``generateName`` at admission, ``<generateName><random>-gpu``:
the binder writes every ConfigMap a pod references for those keys.
"""

from __future__ import annotations

import copy
import secrets
from collections.abc import Callable, Mapping
from typing import Any, Final

from kai_py.api import keys
from kai_py.binder.reservation import (
    GPU_KEYS,
    PORTION_KEY,
    VISIBLE_DEVICES_KEY,
    sharing_container_index,
)

Json = dict[str, Any]

#: What a container without a GPU sees: no card.
NO_DEVICES: Final = "void"


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


def _reads_gpu_configmap(container: Mapping[str, Any]) -> bool:
    for var in container.get("env") or []:
        ref = (var.get("valueFrom") or {}).get("configMapKeyRef") or {}
        if ref.get("key") in GPU_KEYS and ref.get("name"):
            return True
    return False


def configmap_name(pod: Mapping[str, Any], token: Callable[[], str]) -> str:
    meta = pod.get("metadata") or {}
    name = str(meta.get("name") or "")
    if not name:
        name = f"{meta.get('generateName') or 'pod-'}{token()}"
    return f"{name}-gpu"[:253]


def mutate(
    pod: Mapping[str, Any],
    scheduler_name: str,
    runtime_class: str | None = None,
    token: Callable[[], str] = lambda: secrets.token_hex(3),
) -> Json | None:
    """The pod's new ``spec`` (or None: nothing to change)."""
    spec = pod.get("spec") or {}
    if spec.get("schedulerName") != scheduler_name:
        return None
    new = copy.deepcopy(dict(spec))
    containers: list[Json] = list(new.get("containers") or [])
    if not containers:
        return None
    shared = shares_gpu(pod)
    sharing_index = sharing_container_index(pod) if shared else -1
    for i, container in enumerate(containers):
        env: list[Json] = list(container.get("env") or [])
        if i == sharing_index:
            if not _reads_gpu_configmap(container):
                cm = configmap_name(pod, token)
                env = [e for e in env if e.get("name") not in GPU_KEYS]
                env += [
                    {
                        "name": key,
                        "valueFrom": {"configMapKeyRef": {"name": cm, "key": key}},
                    }
                    for key in (VISIBLE_DEVICES_KEY, PORTION_KEY)
                ]
        elif not _asks_for_gpu(container):
            env = [e for e in env if e.get("name") != VISIBLE_DEVICES_KEY]
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
    return new if new != spec else None
