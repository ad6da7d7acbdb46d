"""The webhook role: Kopf's admission server with kai-py's handlers.

``kai-py run --controllers webhooks`` imports this module. Each handler's id
is its URL path (``/hami-resources``, ``/pods-deviceaccess``,
``/pods-queue-admission``, ``/pods-validate``, ``/queues-validate``, ``/podgroups-validate``,
``/topologies-validate``, ``/pods-eviction``), the paths
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
| ``KAI_PY_SCHEDULER_USERS`` | none | user names of kai-py's schedulers, comma-separated: their evictions of pods kai-py does not schedule are refused (``evictions.py``) |

The server answers what is not an admission review with HTTP 400 and a
message (an API server never sends one; a probe or a broken client may), a
path no handler serves with 404, and takes reviews as large as the API
server can send (``MAX_REVIEW_BYTES``).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import aiohttp.web
import kopf

from kai_py.api import keys
from kai_py.apiclient.kube import Kube, KubeError, load_api_client, path_of
from kai_py.controllers import settings as operator_settings
from kai_py.controllers.webhooks import (
    admissiongate,
    deviceaccess,
    evictions,
    hami,
    tenancy,
    validation,
)

log = logging.getLogger(__name__)

DEFAULT_PORT: Final = 9443
_QUEUES: Final = path_of(keys.GROUP, keys.QUEUE_VERSION, "queues")

#: The API server stores objects of up to 3 MiB (etcd's request limit); an UPDATE's
#: review carries the object and its old version, plus the request's own fields.
#: aiohttp's default (1 MiB) answered 413 to a large pod, and the API server then
#: admitted it unchecked under failurePolicy Ignore.
MAX_REVIEW_BYTES: Final = 2 * 3 * 1024 * 1024 + 256 * 1024

_kube: Kube | None = None


def _api() -> Kube:
    global _kube
    if _kube is None:
        # Within the webhook's own time-out (the chart's timeoutSeconds, 3 s): a
        # queue whose parent cannot be read is let through, not timed out.
        _kube = Kube(load_api_client(), timeout=2.0)
    return _kube


def _type_name(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    return "a string" if isinstance(value, str) else "a number"


def review_problem(review: object) -> str | None:
    """What makes ``review`` not an AdmissionReview Kopf can answer, or None.

    Kopf reads these fields without checking them, so a broken review ended in
    a 500 (an unhandled exception) instead of a 400 naming the field.
    """
    if not isinstance(review, dict):
        return f"the body is {_type_name(review)}, not an AdmissionReview object"
    request = review.get("request")
    if not isinstance(request, dict):
        return f"request: is {_type_name(request)}, not an object"
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        return f"request.uid: {json.dumps(uid)} is not a non-empty string"
    resource = request.get("resource")
    if not isinstance(resource, dict):
        return f"request.resource: is {_type_name(resource)}, not an object"
    for field in ("group", "version", "resource"):
        if not isinstance(resource.get(field), str):
            return f"request.resource.{field}: {json.dumps(resource.get(field))} is not a string"
    if not isinstance(request.get("userInfo"), dict):
        return f"request.userInfo: is {_type_name(request.get('userInfo'))}, not an object"
    for field in ("object", "oldObject"):
        if request.get(field) is not None and not isinstance(request.get(field), dict):
            return f"request.{field}: is {_type_name(request.get(field))}, not an object or null"
    if request.get("object") is None and request.get("oldObject") is None:
        return "request.object and request.oldObject: both are missing"
    return None


def _served_ids() -> set[str]:
    registry = kopf.get_default_registry()
    return {str(handler.id) for handler in registry._webhooks.get_all_handlers()}


class WebhookServer(kopf.WebhookServer):
    """Kopf's HTTPS server, with the body limit and the 400/404 answers above."""

    @staticmethod
    async def _serve(fn: kopf.WebhookFn, request: aiohttp.web.Request) -> aiohttp.web.Response:
        webhook = request.match_info.get("id", "")
        if webhook not in _served_ids():
            raise aiohttp.web.HTTPNotFound(text=f"no webhook is served at /{webhook}")
        request = request.clone(client_max_size=MAX_REVIEW_BYTES)
        try:
            review = json.loads(await request.read())
        except RecursionError:
            raise aiohttp.web.HTTPBadRequest(text="the body is JSON nested too deeply") from None
        except ValueError as exc:  # also UnicodeDecodeError
            raise aiohttp.web.HTTPBadRequest(text=f"the body is not JSON: {exc}") from None
        problem = review_problem(review)
        if problem is not None:
            raise aiohttp.web.HTTPBadRequest(text=problem)
        # Kopf's own serving reads the body again from aiohttp's cache.
        return await kopf.WebhookServer._serve(fn, request)


def server_from_env(env: Mapping[str, str] | None = None) -> kopf.WebhookServer:
    env = os.environ if env is None else env
    port = int(env.get("KAI_PY_WEBHOOK_PORT") or DEFAULT_PORT)
    addr = env.get("KAI_PY_WEBHOOK_ADDR") or "0.0.0.0"
    cert_dir = env.get("KAI_PY_WEBHOOK_CERT_DIR")
    if cert_dir:
        folder = Path(cert_dir)
        ca = folder / "ca.crt"  # for the caBundle of configurations Kopf manages
        return WebhookServer(
            addr=addr,
            port=port,
            host=env.get("KAI_PY_WEBHOOK_HOST") or None,
            certfile=str(folder / "tls.crt"),
            pkeyfile=str(folder / "tls.key"),
            cafile=str(ca) if ca.is_file() else None,
        )
    log.warning("KAI_PY_WEBHOOK_CERT_DIR is not set: serving webhooks over plain HTTP")
    return WebhookServer(addr=addr, port=port, insecure=True, host=addr)


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


def _queue_tree() -> tenancy.Tree | None:
    """The Queues' tree and tenancy fields, or None when they cannot be read (the
    scheduler still holds a job its queue does not take, with an Event)."""
    try:
        listing = _api().get(_QUEUES)
    except KubeError as exc:
        log.warning("cannot list queues to check a queue's tenancy: %s", exc)
        return None
    return tenancy.queue_tree(listing.get("items") or [])


def _nodes() -> list[Mapping[str, Any]]:
    """The Nodes (their GPU inventories), for a pinned pod while some queue owns cards;
    none when they cannot be read (the scheduler still keeps the pod off owned cards)."""
    try:
        return list(_api().get("/api/v1/nodes").get("items") or [])
    except KubeError as exc:
        log.warning("cannot list nodes to check a pinned pod's cards: %s", exc)
        return []


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
    pod = _named(body, namespace)
    errors = validation.validate_pod_gpu(pod).errors + deviceaccess.validate(pod)
    if tenancy.needs_queues(pod):
        tree = _queue_tree()  # read only for a pod that names a queue
        if tree is not None:
            errors.extend(tenancy.pod_errors(pod, tree))
        if tree is not None and tenancy.needs_nodes(pod, tree):
            errors.extend(tenancy.pin_errors(pod, tree, _nodes()))
    _deny(errors)


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
        log.warning("cannot list queues to check a Queue's parent", extra={"error": str(exc)})
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
    # One read of the Queues: whether the queue exists, and its tenancy up the tree.
    tree = _queue_tree()
    group = _named(body, namespace)
    verdict = validation.validate_podgroup(
        group,
        lambda name: tree is None or name in tree,
        update=kwargs.get("operation") == "UPDATE",
    )
    warnings.extend(verdict.warnings)
    before = kwargs.get("old") if kwargs.get("operation") == "UPDATE" else None
    if tree is not None:
        verdict.errors.extend(
            tenancy.podgroup_errors(group, tree, dict(before) if before else None)
        )
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


@kopf.on.validate(
    "",
    "v1",
    "pods",
    subresource="eviction",
    id="pods-eviction",
    operations=["CREATE"],
    ignore_failures=True,
)
def pods_eviction(
    body: kopf.Body, userinfo: Mapping[str, Any], namespace: str | None, **_: Any
) -> None:
    if userinfo.get("username") not in evictions.scheduler_users(os.environ):
        return
    # The API server checks that the Eviction's name is the pod's and fills in its namespace.
    name = str((body.get("metadata") or {}).get("name") or "")
    namespace = namespace or ""
    try:
        pod: Mapping[str, Any] | None = _api().get(path_of("", "v1", "pods", namespace, name))
    except KubeError as exc:
        if exc.code != 404:
            # Refused, not let through: the scheduler tries again in a later cycle.
            raise kopf.AdmissionError(
                f"pod {namespace}/{name}: cannot read it to check its spec.schedulerName: {exc}",
                code=503,
            ) from None
        pod = None
    problem = evictions.refusal(pod, namespace, name, {operator_settings.current().scheduler_name})
    if problem is not None:
        raise kopf.AdmissionError(problem, code=403)
