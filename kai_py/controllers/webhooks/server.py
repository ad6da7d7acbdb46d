"""The webhook role: Kopf's admission server with kai-py's handlers.

``kai-py run --controllers webhooks`` imports this module. Each handler's id
is its URL path (``/hami-resources``, ``/pods-deviceaccess``,
``/pods-queue-admission``, ``/pods-validate``, ``/queues-validate``, ``/podgroups-validate``,
``/topologies-validate``), the paths
the chart's webhook configurations name. HAMi's resources are translated
first (``hami.py``): the pod they give is a shared-GPU pod the device-access
mutation must see.

Settings (environment; the chart sets them):

| variable | default | meaning |
|---|---|---|
| ``KAI_PY_WEBHOOK_PORT`` | 9443 | port of the HTTPS server |
| ``KAI_PY_WEBHOOK_ADDR`` | 0.0.0.0 | address it listens on |
| ``KAI_PY_WEBHOOK_CERT_DIR`` | none | folder with ``tls.crt`` and ``tls.key``; without it the server speaks plain HTTP (local tests only: API servers call webhooks over HTTPS) |
| ``KAI_PY_WEBHOOK_HOST`` | addr | host name in the URLs of configurations Kopf manages |
| ``KAI_PY_WEBHOOK_MANAGED`` | none | let Kopf create webhook configurations of this name (``kai-py dev``, tests); the chart makes its own |
| ``KAI_PY_FRACTION_RUNTIME_CLASS`` | none | ``runtimeClassName`` for pods that share a card |
| ``KAI_PY_HAMI_CORE`` | off | give HAMi-core's memory cap to containers with a memory share |
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import kopf

from kai_py.api import keys
from kai_py.apiclient.kube import Kube, KubeError, load_api_client, path_of
from kai_py.controllers import settings as operator_settings
from kai_py.controllers.webhooks import admissiongate, deviceaccess, hami, validation

log = logging.getLogger(__name__)

DEFAULT_PORT: Final = 9443
_QUEUES: Final = path_of(keys.GROUP, keys.QUEUE_VERSION, "queues")

_kube: Kube | None = None


def _api() -> Kube:
    global _kube
    if _kube is None:
        _kube = Kube(load_api_client(), timeout=3.0)
    return _kube


def server_from_env(env: Mapping[str, str] | None = None) -> kopf.WebhookServer:
    env = os.environ if env is None else env
    port = int(env.get("KAI_PY_WEBHOOK_PORT") or DEFAULT_PORT)
    addr = env.get("KAI_PY_WEBHOOK_ADDR") or "0.0.0.0"
    cert_dir = env.get("KAI_PY_WEBHOOK_CERT_DIR")
    if cert_dir:
        folder = Path(cert_dir)
        ca = folder / "ca.crt"  # for the caBundle of configurations Kopf manages
        return kopf.WebhookServer(
            addr=addr,
            port=port,
            host=env.get("KAI_PY_WEBHOOK_HOST") or None,
            certfile=str(folder / "tls.crt"),
            pkeyfile=str(folder / "tls.key"),
            cafile=str(ca) if ca.is_file() else None,
        )
    log.warning("KAI_PY_WEBHOOK_CERT_DIR is not set: serving webhooks over plain HTTP")
    return kopf.WebhookServer(addr=addr, port=port, insecure=True, host=addr)


@kopf.on.startup(id="webhooks-start")
def _configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.admission.server = server_from_env()
    managed = os.environ.get("KAI_PY_WEBHOOK_MANAGED")
    if managed:
        settings.admission.managed = managed


def _named(body: Mapping[str, Any], namespace: str | None) -> dict[str, Any]:
    """The object with its namespace (admission bodies may lack it) for messages."""
    obj = dict(body)
    meta = dict(obj.get("metadata") or {})
    if namespace and not meta.get("namespace"):
        meta["namespace"] = namespace
    if not meta.get("name") and meta.get("generateName"):
        meta["name"] = f"{meta['generateName']}*"
    obj["metadata"] = meta
    return obj


def _deny(errors: list[str]) -> None:
    if errors:
        raise kopf.AdmissionError("; ".join(errors), code=422)


# ignore_failures: configurations Kopf keeps (``kai-py dev``, tests) get failurePolicy
# Ignore, the chart's default: a webhook that is down never locks out pod creation.
hami.register(kopf.get_default_registry(), operator_settings.current().scheduler_name)


@kopf.on.mutate(
    "", "v1", "pods", id="pods-deviceaccess", operations=["CREATE"], ignore_failures=True
)
def pods_deviceaccess(body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
    runtime_class = os.environ.get("KAI_PY_FRACTION_RUNTIME_CLASS") or None
    scheduler = operator_settings.current().scheduler_name
    mutation = deviceaccess.mutate(dict(body), scheduler, runtime_class)
    if mutation is not None:
        for key, value in mutation.spec.items():
            if (body.get("spec") or {}).get(key) != value:
                patch.spec[key] = value
        for key, text in mutation.annotations.items():
            patch.metadata.annotations[key] = text


@kopf.on.mutate(
    "", "v1", "pods", id="pods-queue-admission", operations=["CREATE"], ignore_failures=True
)
def pods_queue_admission(body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
    current = operator_settings.current()
    gates = admissiongate.gates_to_set(
        dict(body),
        current.scheduler_name,
        current.scheduler.queue_admission_gating,
        _queue_gating,
    )
    if gates is not None:
        patch.spec["schedulingGates"] = gates


def _queue_gating(name: str) -> bool | str | None:
    """The Queue's spec.admissionGating, or MISSING. When the Queue cannot be read the
    pod is let through ungated (the scheduler's quota checks hold either way)."""
    try:
        queue = _api().get(path_of(keys.GROUP, keys.QUEUE_VERSION, "queues", None, name))
    except KubeError as exc:
        if exc.code == 404:
            return admissiongate.MISSING
        log.warning("cannot read Queue %s to gate a pod: %s; the pod is not gated", name, exc)
        return False
    value = (queue.get("spec") or {}).get("admissionGating")
    return value if isinstance(value, bool) else None


@kopf.on.validate("", "v1", "pods", id="pods-validate", operations=["CREATE"], ignore_failures=True)
def pods_validate(body: kopf.Body, namespace: str | None, **_: Any) -> None:
    if (body.get("spec") or {}).get("schedulerName") != operator_settings.current().scheduler_name:
        return
    _deny(validation.validate_pod_gpu(_named(body, namespace)).errors)


@kopf.on.validate(
    keys.GROUP,
    keys.QUEUE_VERSION,
    "queues",
    id="queues-validate",
    operations=["CREATE", "UPDATE"],
    ignore_failures=True,
)
def queues_validate(body: kopf.Body, warnings: list[str], **_: Any) -> None:
    try:
        listing = _api().get(_QUEUES)
    except KubeError as exc:
        # Without the other queues the parent cannot be checked; the scheduler
        # still leaves a queue with a missing parent out, with a Warning Event.
        log.warning("cannot list queues to check a Queue's parent: %s", exc)
        listing = None
    known = (
        {str((q.get("metadata") or {}).get("name")): q for q in listing.get("items") or []}
        if listing is not None
        else None
    )
    verdict = validation.validate_queue(dict(body), known)
    warnings.extend(verdict.warnings)
    _deny(verdict.errors)


@kopf.on.validate(
    keys.GROUP,
    keys.PODGROUP_VERSION,
    "podgroups",
    id="podgroups-validate",
    operations=["CREATE", "UPDATE"],
    ignore_failures=True,
)
def podgroups_validate(
    body: kopf.Body, namespace: str | None, warnings: list[str], **kwargs: Any
) -> None:
    def queue_exists(name: str) -> bool:
        try:
            _api().get(path_of(keys.GROUP, keys.QUEUE_VERSION, "queues", None, name))
        except KubeError as exc:
            if exc.code == 404:
                return False
            log.warning("cannot read Queue %s to check a PodGroup: %s", name, exc)
        return True

    verdict = validation.validate_podgroup(
        _named(body, namespace), queue_exists, update=kwargs.get("operation") == "UPDATE"
    )
    warnings.extend(verdict.warnings)
    _deny(verdict.errors)


@kopf.on.validate(
    keys.TOPOLOGY_GROUP,
    keys.TOPOLOGY_VERSION,
    "topologies",
    id="topologies-validate",
    operations=["CREATE", "UPDATE"],
    ignore_failures=True,
)
def topologies_validate(body: kopf.Body, old: kopf.Body | None = None, **_: Any) -> None:
    _deny(validation.validate_topology(dict(body), dict(old) if old else None).errors)
