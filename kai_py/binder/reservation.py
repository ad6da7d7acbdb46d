"""The binder's pure decisions: names, manifests and messages (docs/operator.md, "Binding one request").

Nothing here talks to Kubernetes, so every rule is unit-testable:

- one reservation pod per (node, GPU group) in ``kai-resource-reservation``,
  named ``gpu-reservation-<node>-<group>`` (DNS-safe; a hash keeps long or
  unusual names unique), with ``nodeName`` preset, ``nvidia.com/gpu: 1`` and
  the label ``runai-gpu-group=<group>``;
- the ConfigMaps a shared pod reads its card from, as KAI names them: the pod
  annotation ``runai/shared-gpu-configmap`` holds ``<base>-<random>-shared-gpu``
  (the pod webhook sets it), the ConfigMap ``<that>-<container index>`` gets
  ``GPU_PORTION`` and ``RUNAI_NUM_OF_GPUS`` and ``<that>-<index>-evar`` is read
  with ``envFrom``; ``NVIDIA_VISIBLE_DEVICES`` goes in the first when the
  container's ``env`` takes it from a ConfigMap, else in the second. Any other
  ConfigMap the pod references for those keys is written too (a pod wired
  before KAI's names: ``<pod>-gpu``);
- the retry rule: after ``n`` failed attempts wait ``base * 2**n`` seconds,
  while ``n < backoffLimit``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

from kai_py.api import install, keys
from kai_py.gpu.groups import label_value, short_digest

Json = dict[str, Any]

RESERVATION_PREFIX: Final = "gpu-reservation"
GPU_GROUPS_ANNOTATION: Final = keys.GPU_GROUPS_ANNOTATION
#: On what the binder creates, so that clean-up never touches anything else.
MANAGED_BY_LABEL: Final = "app.kubernetes.io/managed-by"
MANAGED_BY: Final = "kai-py-binder"
#: The reservation pods' app label (KAI's reservation pods carry one too).
APP_LABEL: Final = "app"
RESERVATION_APP: Final = "kai-resource-reservation"

VISIBLE_DEVICES_KEY: Final = "NVIDIA_VISIBLE_DEVICES"
PORTION_KEY: Final = "GPU_PORTION"
#: KAI's older name for ``GPU_PORTION``, still written and wired as KAI does.
NUM_OF_GPUS_KEY: Final = "RUNAI_NUM_OF_GPUS"
GPU_KEYS: Final = (VISIBLE_DEVICES_KEY, PORTION_KEY)
#: HAMi-core's per-card memory cap (``<name>_<i>`` for the i-th visible card) and its
#: off switch, read from the container's environment.
MEMORY_LIMIT_ENV: Final = "CUDA_DEVICE_MEMORY_LIMIT"
DISABLE_CONTROL_ENV: Final = "CUDA_DISABLE_CONTROL"
#: What the pod webhook makes the sharing container read from the first ConfigMap.
SHARING_ENV_KEYS: Final = (VISIBLE_DEVICES_KEY, NUM_OF_GPUS_KEY, PORTION_KEY)
SHARED_GPU_CONFIGMAP_ANNOTATION: Final = keys.SHARED_GPU_CONFIGMAP_ANNOTATION
_SHARED_GPU_SUFFIX: Final = "shared-gpu"
_EVAR_SUFFIX: Final = "-evar"
#: KAI's: the random part of the prefix, its letters (no vowels: no words), and the
#: bound the names are cut to: the volume ``<prefix>-<index>-vol`` is a DNS label.
PREFIX_RANDOM_CHARS: Final = 7
PREFIX_RANDOM_ALPHABET: Final = "bcdfghjklmnpqrstvwxz2456789"
_MAX_VOLUME_NAME: Final = 63

DEFAULT_BACKOFF_LIMIT: Final = 3
#: The image the repository's Dockerfile builds, tagged with this version (the chart's default).
DEFAULT_RESERVATION_IMAGE: Final = install.DEFAULT_IMAGE

_MAX_POD_NAME: Final = 253
_NOT_DNS = re.compile(r"[^a-z0-9.-]+")


def _dns_part(text: str) -> str:
    return _NOT_DNS.sub("-", text.lower()).strip("-.")


def reservation_pod_name(node: str, group: str) -> str:
    """``gpu-reservation-<node>-<group>``, a valid pod name, unique per (node, group).

    When the plain name would not be a DNS subdomain as given (upper case, odd
    characters, too long) a hash of the real node and group is appended, so two
    groups that sanitise alike still get different pods.
    """
    node_part, group_part = _dns_part(node), _dns_part(group)
    plain = f"{RESERVATION_PREFIX}-{node_part}-{group_part}"
    if node_part == node and group_part == group and len(plain) <= _MAX_POD_NAME:
        return plain
    suffix = short_digest(node, group)
    head = plain[: _MAX_POD_NAME - len(suffix) - 1].rstrip("-.")
    return f"{head}-{suffix}"


def reservation_pod_manifest(
    node: str,
    group: str,
    *,
    image: str = DEFAULT_RESERVATION_IMAGE,
    namespace: str = keys.RESERVATION_NAMESPACE,
    service_account: str | None = None,
) -> Json:
    """The pod that holds the group's card: one whole GPU on ``node``, never scheduled.

    The container runs kai-py's reservation program (``kai-py reserve``), which
    writes the card's UUID into the pod's ``run.ai/reserve_for_gpu_index``
    annotation; the emulator's kubelet does that itself and runs nothing.
    """
    spec: Json = {
        "nodeName": node,
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": 0,
        # Whatever taints the node has, the card stays held.
        "tolerations": [{"operator": "Exists"}],
        "containers": [
            {
                "name": "reservation",
                "image": image,
                "command": ["kai-py", "reserve"],
                "env": [
                    {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {
                        "name": "POD_NAMESPACE",
                        "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}},
                    },
                ],
                "resources": {
                    "requests": {"cpu": "2m", "memory": "20Mi", keys.GPU_RESOURCE: "1"},
                    "limits": {"memory": "64Mi", keys.GPU_RESOURCE: "1"},
                },
            }
        ],
    }
    if service_account:
        spec["serviceAccountName"] = service_account
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": reservation_pod_name(node, group),
            "namespace": namespace,
            "labels": {
                keys.GPU_GROUP_LABEL: label_value(group),
                APP_LABEL: RESERVATION_APP,
                MANAGED_BY_LABEL: MANAGED_BY,
            },
            "annotations": {GPU_GROUPS_ANNOTATION: group},
        },
        "spec": spec,
    }


def missing_namespace(namespace: str) -> str:
    """Why no reservation pod can be made: the namespace is not there. kai-py's chart
    makes it; the binder may not create namespaces (docs/deploy.md, "Security")."""
    return (
        f"namespace {namespace} does not exist: the GPU reservation pods live there and "
        "the binder may not create namespaces; install kai-py's chart (it makes the "
        f"namespace), or create namespace {namespace} and the binder's Role in it"
    )


def reserved_uuid(pod: Mapping[str, Any]) -> str | None:
    """The card UUID the reservation pod reported, if it has."""
    value = ((pod.get("metadata") or {}).get("annotations") or {}).get(
        keys.RESERVED_GPU_INDEX_ANNOTATION
    )
    return str(value) if value else None


def reservation_failure(pod: Mapping[str, Any]) -> str | None:
    """Why the reservation pod can never report a card, or None while it still may."""
    status = pod.get("status") or {}
    if status.get("phase") in ("Failed", "Succeeded"):
        why = ": ".join(str(x) for x in (status.get("reason"), status.get("message")) if x)
        return f"{status.get('phase')}" + (f" ({why})" if why else "")
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return "being deleted"
    return None


def configmap_prefix(pod: Mapping[str, Any], random_part: str) -> str:
    """KAI's ``runai/shared-gpu-configmap`` value for a shared pod:
    ``<base>-<random_part>-shared-gpu``, where the base is the pod's first owner's name
    (a mutating webhook sees no name yet for a pod made from ``generateName``), else
    its name or ``generateName``, cut so that ``<prefix>-<index>-evar`` and the volume
    ``<prefix>-<index>-vol`` stay within 63 characters."""
    m = pod.get("metadata") or {}
    owners = m.get("ownerReferences") or []
    base = str((owners[0].get("name") if owners else None) or m.get("name") or "")
    base = base or str(m.get("generateName") or "")
    index = str(max(0, sharing_container_index(pod)))
    room = (
        _MAX_VOLUME_NAME
        - len(random_part)
        - len("--")
        - len("-vol")
        - len(_SHARED_GPU_SUFFIX)
        - len(index)
        - 1
        - len(_EVAR_SUFFIX)
    )
    base = base[: max(0, room)].rstrip(".-") or "pod"
    return f"{base}-{random_part}-{_SHARED_GPU_SUFFIX}"


def shared_configmaps(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    """KAI's two GPU ConfigMaps of a shared pod, (``<prefix>-<index>``,
    ``<prefix>-<index>-evar``), from its ``runai/shared-gpu-configmap`` annotation and
    the index of the container that uses the card; None without the annotation."""
    prefix = ((pod.get("metadata") or {}).get("annotations") or {}).get(
        SHARED_GPU_CONFIGMAP_ANNOTATION
    )
    index = sharing_container_index(pod)
    if not prefix or index < 0:
        return None
    return shared_configmap_names(str(prefix), index)


def shared_configmap_names(prefix: str, index: int) -> tuple[str, str]:
    first = f"{prefix}-{index}"
    return first, f"{first}{_EVAR_SUFFIX}"


def configmap_volume_name(configmap: str) -> str:
    """The pod volume of a GPU ConfigMap, as KAI names it: a DNS label."""
    return re.sub(r"[^a-z0-9-]+", "-", f"{configmap}-vol".lower()).strip("-")


def _sharing_container(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    index = sharing_container_index(pod)
    return ((pod.get("spec") or {}).get("containers") or [])[index] if index >= 0 else None


def _visible_devices_by_key_ref(container: Mapping[str, Any] | None) -> bool:
    return any(
        var.get("name") == VISIBLE_DEVICES_KEY
        and ((var.get("valueFrom") or {}).get("configMapKeyRef"))
        for var in (container or {}).get("env") or []
    )


def gpu_configmaps(
    pod: Mapping[str, Any],
    uuids: Sequence[str],
    portion: float,
    container_env: Mapping[str, str] | None = None,
) -> list[tuple[str, dict[str, str]]]:
    """Each GPU ConfigMap of the shared pod and what the binder writes in it.

    With the ``runai/shared-gpu-configmap`` annotation, KAI's pair: ``<prefix>-<i>``
    with ``GPU_PORTION`` and ``RUNAI_NUM_OF_GPUS``, ``<prefix>-<i>-evar`` (read with
    ``envFrom``), and ``NVIDIA_VISIBLE_DEVICES`` in the first when the sharing
    container's ``env`` takes it from a ConfigMap, else in the second. Then every
    other ConfigMap the pod's containers reference for ``NVIDIA_VISIBLE_DEVICES`` or
    ``GPU_PORTION`` (``env[].valueFrom.configMapKeyRef``), and ``<pod>-gpu`` when the
    sharing container reads it with ``envFrom``: a pod wired before KAI's names (or
    by its author) still gets its card. Other ConfigMaps are the user's and are
    never written. ``container_env`` (HAMi-core's caps, ``hami_core_limits``) goes in
    the ConfigMaps the sharing container reads with ``envFrom``.
    """
    visible, share = ",".join(uuids), portion_text(portion)
    legacy = {VISIBLE_DEVICES_KEY: visible, PORTION_KEY: share}
    out: dict[str, dict[str, str]] = {}
    container = _sharing_container(pod)
    kai = shared_configmaps(pod)
    if kai is not None:
        by_key_ref = _visible_devices_by_key_ref(container)
        out[kai[0]] = {PORTION_KEY: share, NUM_OF_GPUS_KEY: share}
        out[kai[1]] = {}
        out[kai[0] if by_key_ref else kai[1]][VISIBLE_DEVICES_KEY] = visible
        out[kai[1]].update(container_env or {})
    spec = pod.get("spec") or {}
    for one in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        for var in one.get("env") or []:
            ref = (var.get("valueFrom") or {}).get("configMapKeyRef") or {}
            if ref.get("name") and ref.get("key") in GPU_KEYS:
                out.setdefault(str(ref["name"]), dict(legacy))
    default = default_configmap_name(str((pod.get("metadata") or {}).get("name") or ""))
    if any(
        (source.get("configMapRef") or {}).get("name") == default
        for source in (container or {}).get("envFrom") or []
    ):
        out.setdefault(default, {**legacy, **(container_env or {})})
    return list(out.items())


def hami_core_limits(
    pod: Mapping[str, Any], memories_mib: Sequence[float], portion: float
) -> dict[str, str]:
    """HAMi-core's per-card caps for the sharing container of a shared pod, given the
    memory of each card it got (in its ``NVIDIA_VISIBLE_DEVICES`` order):
    ``CUDA_DEVICE_MEMORY_LIMIT_<i>=<MiB>m``, as HAMi's device plugin names them.

    The share in MiB is the pod's ``gpu-memory`` when it has one, else ``portion`` of
    each card's memory (rounded down: the cap never exceeds the share). Nothing when the
    container sets ``CUDA_DISABLE_CONTROL=true`` (HAMi-core off for it) or sets a cap
    itself (its own ``env`` would win over ``envFrom`` anyway), or when a card's memory
    is unknown (a cap of a wrong size is worse than none)."""
    container = _sharing_container(pod)
    env = (container or {}).get("env") or []
    if container is None or any(
        (
            var.get("name") == DISABLE_CONTROL_ENV
            and str(var.get("value", "")).strip().lower() == "true"
        )
        or str(var.get("name") or "").startswith(MEMORY_LIMIT_ENV)
        for var in env
    ):
        return {}
    raw = str(
        ((pod.get("metadata") or {}).get("annotations") or {}).get(keys.GPU_MEMORY_ANNOTATION, "")
    ).strip()
    fixed = int(raw) if raw.isdigit() and int(raw) > 0 else None
    if not memories_mib or any(m <= 0 for m in memories_mib) or (fixed is None and portion <= 0):
        return {}
    return {
        f"{MEMORY_LIMIT_ENV}_{i}": f"{fixed if fixed is not None else int(portion * m)}m"
        for i, m in enumerate(memories_mib)
    }


def gpu_configmap_names(pod: Mapping[str, Any]) -> list[str]:
    """The names of ``gpu_configmaps``: KAI's pair first, then the others."""
    return [name for name, _ in gpu_configmaps(pod, (), 0.0)]


def visible_devices_configmaps(pod: Mapping[str, Any]) -> list[str]:
    """The GPU ConfigMaps that hold the pod's ``NVIDIA_VISIBLE_DEVICES``."""
    return [name for name, data in gpu_configmaps(pod, (), 0.0) if VISIBLE_DEVICES_KEY in data]


def sharing_container_index(pod: Mapping[str, Any]) -> int:
    """Which container of a shared pod uses its card: the one the
    ``gpu-fraction-container-name`` annotation names, else the first (as KAI); -1 if
    the pod has none. The pod webhook wires that one; the binder checks it."""
    m = pod.get("metadata") or {}
    names = [c.get("name") for c in (pod.get("spec") or {}).get("containers") or []]
    wanted = (m.get("annotations") or {}).get(keys.GPU_FRACTION_CONTAINER_ANNOTATION)
    return names.index(wanted) if wanted in names else (0 if names else -1)


def unwired_reason(pod: Mapping[str, Any]) -> str | None:
    """Why the shared pod would not see only its card, or None when it would.

    The container that uses the card must take ``NVIDIA_VISIBLE_DEVICES`` from a
    ConfigMap the binder writes: ``env[].valueFrom.configMapKeyRef`` with that key
    (the pod webhook adds it), or, with no ``env`` of that name, ``envFrom`` of the
    ConfigMap that gets it (KAI's ``<prefix>-<index>-evar``, or ``<pod>-gpu``). A pod
    admitted while the webhook was down (its ``failurePolicy`` is ``Ignore``) has
    neither, and on a real node its container would see every card of the node.
    """
    container = _sharing_container(pod)
    m = pod.get("metadata") or {}
    where = f"pod {m.get('namespace')}/{m.get('name')}"
    if container is None:
        return f"{where} has no container"
    defined = [v for v in container.get("env") or [] if v.get("name") == VISIBLE_DEVICES_KEY]
    if defined:
        ref = (defined[-1].get("valueFrom") or {}).get("configMapKeyRef") or {}  # the last wins
        if ref.get("name") and ref.get("key") == VISIBLE_DEVICES_KEY:
            return None
    elif any(
        ((source.get("configMapRef") or {}).get("name")) in visible_devices_configmaps(pod)
        for source in container.get("envFrom") or []
    ):
        return None
    return (
        f'{where}, container "{container.get("name")}": {VISIBLE_DEVICES_KEY} is not read '
        f"from the binder's GPU ConfigMap (env {VISIBLE_DEVICES_KEY} with valueFrom."
        f"configMapKeyRef key {VISIBLE_DEVICES_KEY}), so the container would see every "
        "card of the node; the pod was likely created while kai-py's pod webhook was "
        "down. Not bound; to recover, delete the pod once the webhook is up so that its "
        "owner makes a new one (a bare pod: create it again)"
    )


def default_configmap_name(pod_name: str) -> str:
    """The GPU ConfigMap kai-py named before it took KAI's names: still written for a
    pod that reads it."""
    return f"{pod_name}-gpu"[:_MAX_POD_NAME]


def portion_text(portion: float) -> str:
    return f"{portion:g}"


def gpu_configmap_manifest(pod: Mapping[str, Any], name: str, data: Mapping[str, str]) -> Json:
    """A GPU ConfigMap of the pod, owned by it (so it goes when the pod goes), as KAI
    makes it: the owner reference names the pod's apiVersion, kind, name and uid."""
    m = pod.get("metadata") or {}
    owner: Json = {"apiVersion": "v1", "kind": "Pod", "name": str(m.get("name") or "")}
    if m.get("uid"):
        owner["uid"] = str(m["uid"])
    metadata: Json = {
        "name": name,
        "namespace": str(m.get("namespace") or "default"),
        "labels": {MANAGED_BY_LABEL: MANAGED_BY},
    }
    if "uid" in owner:
        metadata["ownerReferences"] = [owner]
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": dict(data)}


def group_label_patch(groups: Sequence[str]) -> Json:
    """Merge patch that marks a pod as sharing the cards of ``groups``."""
    patch: Json = {"metadata": {"labels": {keys.GPU_GROUP_LABEL: label_value(groups[0])}}}
    if len(groups) > 1:
        patch["metadata"]["annotations"] = {GPU_GROUPS_ANNOTATION: ",".join(groups)}
    return patch


def group_label_rollback(pod_before: Mapping[str, Any]) -> Json:
    """Merge patch that puts the group label and annotation back as they were."""
    m = pod_before.get("metadata") or {}
    return {
        "metadata": {
            "labels": {keys.GPU_GROUP_LABEL: (m.get("labels") or {}).get(keys.GPU_GROUP_LABEL)},
            "annotations": {
                GPU_GROUPS_ANNOTATION: (m.get("annotations") or {}).get(GPU_GROUPS_ANNOTATION)
            },
        }
    }


def holds_card(pod: Mapping[str, Any]) -> bool:
    """A pod that is (or may still be) running: not finished. Terminating pods count,
    since their containers may still use the card."""
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def binding_body(pod_name: str, namespace: str, node: str, uid: str | None = None) -> Json:
    metadata: Json = {"name": pod_name, "namespace": namespace}
    if uid:
        metadata["uid"] = uid
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": metadata,
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }


def retry_delay(failed_attempts: int, base: float = 1.0) -> float:
    """Seconds to wait after ``failed_attempts`` failures: ``base * 2**failed_attempts``."""
    return base * float(2 ** max(0, failed_attempts))


def should_retry(failed_attempts: int, backoff_limit: int | None) -> bool:
    """Retry while fewer than ``backoffLimit`` attempts have failed (unset: the default)."""
    limit = DEFAULT_BACKOFF_LIMIT if backoff_limit is None else backoff_limit
    return failed_attempts < limit


def gpus_text(groups: Sequence[str], uuids: Sequence[str], portion: float) -> str:
    """How a message names the GPUs of a shared pod: ``GPU group g (GPU-...) at portion 0.5``."""
    padded = [*uuids, *[""] * (len(groups) - len(uuids))]
    parts = [f"{g} ({u})" if u else g for g, u in zip(groups, padded, strict=False)]
    noun = "GPU group" if len(groups) == 1 else "GPU groups"
    return f"{noun} {', '.join(parts)} at portion {portion_text(portion)}"
