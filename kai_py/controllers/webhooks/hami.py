"""The mutating webhook that turns HAMi's GPU resources into kai-py's sharing.

A pod that asks for ``nvidia.com/gpumem`` or ``nvidia.com/gpumem-percentage``
(HAMi's resources, which the NVIDIA device plugin does not advertise) is
rewritten on CREATE by ``kai_py.gpu.hami.translate``: KAI's sharing
annotations instead of those resources, and a record of what was done in
``kai.scheduler/hami-translation``. A request that cannot be translated, and a
bad value of HAMi's pin or policy annotations (``nvidia.com/use-gpuuuid`` and
friends, ``hami.io/node-scheduler-policy``, ``hami.io/gpu-scheduler-policy``),
is refused with a message naming the pod, the field and the value.

With HAMi-core installed on the nodes, ``KAI_PY_HAMI_CORE=true`` (off by
default; a chart value sets it) also gives containers with a memory share
HAMi-core's cap, ``CUDA_DEVICE_MEMORY_LIMIT``, unless they set
``CUDA_DISABLE_CONTROL=true``.

Only pods for kai-py's scheduler are touched. The webhook server itself
(address, certificates, the WebhookConfiguration) is set up with the other
webhooks of the operator; ``register(registry)`` adds this handler to a
registry, so the module stands alone.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Final

import kopf

from kai_py.api import keys
from kai_py.api.objects import WorkloadError
from kai_py.gpu import hami, pins

HAMI_CORE_ENV: Final = "KAI_PY_HAMI_CORE"


def memory_cap_enabled(env: Mapping[str, str] | None = None) -> bool:
    value = (os.environ if env is None else env).get(HAMI_CORE_ENV, "")
    return value.strip().lower() in ("1", "true", "yes", "on")


def _ours(body: Mapping[str, Any], scheduler_name: str) -> bool:
    return (body.get("spec") or {}).get("schedulerName") == scheduler_name


def mutation(
    body: Mapping[str, Any], *, memory_cap: bool, scheduler_name: str
) -> dict[str, Any] | None:
    """The merge patch for one pod, or None to leave it; HamiError when it cannot be done."""
    if not _ours(body, scheduler_name):
        return None
    try:
        # HAMi's pod annotations are checked here too, so that a typo in a pin or a
        # policy is refused when the pod is created rather than left Pending.
        pins.pin_of(body)
        pins.policy_of(body)
    except WorkloadError as exc:
        # Named as the translation's errors are: a pod being created may have only a
        # generateName, and its namespace comes with the request.
        raise hami.HamiError(
            f"{hami.pod_ref(body)}: {str(exc).removeprefix(exc.obj + ': ')}"
        ) from None
    done = hami.translate(body, memory_cap=memory_cap)
    if done is None and memory_cap:
        done = hami.memory_cap_only(body)
    if done is None:
        return None
    pod, _ = done
    return {
        "metadata": {"annotations": dict((pod.get("metadata") or {}).get("annotations") or {})},
        "spec": {"containers": (pod.get("spec") or {}).get("containers") or []},
    }


def register(
    registry: kopf.OperatorRegistry, scheduler_name: str = keys.DEFAULT_SCHEDULER_NAME
) -> None:
    @kopf.on.mutate(
        "",
        "v1",
        "pods",
        id="hami-resources",
        operations={"CREATE"},
        ignore_failures=True,  # failurePolicy Ignore where Kopf keeps the configuration
        registry=registry,
    )
    def translate_hami(body: Any, patch: Any, **_: Any) -> None:
        try:
            wanted = mutation(body, memory_cap=memory_cap_enabled(), scheduler_name=scheduler_name)
        except hami.HamiError as exc:
            raise kopf.AdmissionError(str(exc), code=422) from None
        if wanted is None:
            return
        patch.metadata["annotations"] = wanted["metadata"]["annotations"]
        patch.spec["containers"] = wanted["spec"]["containers"]
