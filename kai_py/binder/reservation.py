"""The binder's pure decisions: names, manifests and messages (docs/operator.md, "Binding one request").

Nothing here talks to Kubernetes, so every rule is unit-testable:

- one reservation pod per (node, GPU group) in ``kai-resource-reservation``,
  named ``gpu-reservation-<node>-<group>`` (DNS-safe; a hash keeps long or
  unusual names unique), with ``nodeName`` preset, ``nvidia.com/gpu: 1`` and
  the label ``runai-gpu-group=<group>``;
- the ConfigMap a shared pod reads ``NVIDIA_VISIBLE_DEVICES`` and
  ``GPU_PORTION`` from: every ConfigMap the pod's containers reference for
  one of those keys, else ``<pod>-gpu``;
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
GPU_KEYS: Final = (VISIBLE_DEVICES_KEY, PORTION_KEY)

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


def gpu_configmap_names(pod: Mapping[str, Any]) -> list[str]:
    """The ConfigMaps the shared pod reads its GPU from, sorted.

    Those its containers reference for ``NVIDIA_VISIBLE_DEVICES`` or
    ``GPU_PORTION`` (``env[].valueFrom.configMapKeyRef``), plus
    ``<pod>-gpu``, the default name, when it is referenced through
    ``envFrom`` or nothing else is. Other ConfigMaps are the user's and are
    never written.
    """
    default = default_configmap_name(str((pod.get("metadata") or {}).get("name") or ""))
    names: set[str] = set()
    spec = pod.get("spec") or {}
    for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        for var in container.get("env") or []:
            ref = (var.get("valueFrom") or {}).get("configMapKeyRef") or {}
            if ref.get("name") and ref.get("key") in GPU_KEYS:
                names.add(str(ref["name"]))
    return sorted(names) if names else [default]


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
    (the pod webhook adds it), or ``envFrom`` of ``<pod>-gpu`` with no ``env`` of that
    name. A pod admitted while the webhook was down (its ``failurePolicy`` is
    ``Ignore``) has neither, and on a real node its container would see every card
    of the node.
    """
    index = sharing_container_index(pod)
    m = pod.get("metadata") or {}
    where = f"pod {m.get('namespace')}/{m.get('name')}"
    if index < 0:
        return f"{where} has no container"
    container = ((pod.get("spec") or {}).get("containers") or [])[index]
    defined = [v for v in container.get("env") or [] if v.get("name") == VISIBLE_DEVICES_KEY]
    if defined:
        ref = (defined[-1].get("valueFrom") or {}).get("configMapKeyRef") or {}  # the last wins
        if ref.get("name") and ref.get("key") == VISIBLE_DEVICES_KEY:
            return None
    elif any(
        ((source.get("configMapRef") or {}).get("name")) in gpu_configmap_names(pod)
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
    return f"{pod_name}-gpu"[:_MAX_POD_NAME]


def portion_text(portion: float) -> str:
    return f"{portion:g}"


def gpu_configmap_manifest(
    pod: Mapping[str, Any], name: str, uuids: Sequence[str], portion: float, group: str
) -> Json:
    """A ConfigMap with ``NVIDIA_VISIBLE_DEVICES`` and ``GPU_PORTION``, owned by the pod
    (so it goes when the pod goes)."""
    m = pod.get("metadata") or {}
    owner: Json = {"apiVersion": "v1", "kind": "Pod", "name": str(m.get("name") or "")}
    if m.get("uid"):
        owner["uid"] = str(m["uid"])
    metadata: Json = {
        "name": name,
        "namespace": str(m.get("namespace") or "default"),
        "labels": {keys.GPU_GROUP_LABEL: label_value(group), MANAGED_BY_LABEL: MANAGED_BY},
    }
    if "uid" in owner:
        metadata["ownerReferences"] = [owner]
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata,
        "data": configmap_data(uuids, portion),
    }


def configmap_data(uuids: Sequence[str], portion: float) -> dict[str, str]:
    return {VISIBLE_DEVICES_KEY: ",".join(uuids), PORTION_KEY: portion_text(portion)}


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
