"""Admission webhooks: the emulator calls registered webhooks as the API server does.

For every write the dispatcher finds the MutatingWebhookConfigurations and
then the ValidatingWebhookConfigurations whose rules match (operations,
apiGroups, apiVersions, resources incl. subresources, scope,
namespaceSelector, objectSelector, matchConditions in the part of CEL
``matchconditions`` reads), sends each an ``admission.k8s.io/v1``
AdmissionReview over HTTPS (trusting ``caBundle``) or HTTP, applies JSONPatch
responses, and turns a denial into the error the real server returns
(``admission webhook "NAME" denied the request: MESSAGE``). ``failurePolicy:
Ignore`` skips an unreachable webhook; ``Fail`` (the default) rejects with 500.

A webhook addressed by ``clientConfig.service`` is reached through the
``service_resolver`` given to the server: a callable ``(namespace, name,
port) -> "host:port"``; TLS then verifies the name ``NAME.NAMESPACE.svc``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import aiohttp

from kai_py.emulator.apiserver.matchconditions import MatchConditionError, evaluate
from kai_py.emulator.storage.errors import ApiError
from kai_py.emulator.storage.patches import json_patch
from kai_py.emulator.storage.selectors import labels_match, selector_from_label_selector

if TYPE_CHECKING:
    from kai_py.emulator.storage.store import AdmissionRequest, Store

JSON = dict[str, Any]
ServiceResolver = Callable[[str, str, int], str | None]

_MUTATING = "mutatingwebhookconfigurations.admissionregistration.k8s.io"
_VALIDATING = "validatingwebhookconfigurations.admissionregistration.k8s.io"


class WebhookDispatcher:
    """Implements the store's AdmissionHook by calling the registered webhooks."""

    def __init__(self, store: Store, service_resolver: ServiceResolver | None = None) -> None:
        self._store = store
        self.service_resolver = service_resolver
        self._session: aiohttp.ClientSession | None = None
        self._session_loop: asyncio.AbstractEventLoop | None = None
        self.calls = 0

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if (
            session is not None
            and not session.closed
            and (self._session_loop is asyncio.get_running_loop())
        ):
            await session.close()

    def _configs(self, key: str) -> list[JSON]:
        bucket = self._store._objects.get(key)
        if not bucket:
            return []
        return [bucket[k] for k in sorted(bucket)]

    def active(self) -> bool:
        objects = self._store._objects
        return bool(objects.get(_MUTATING) or objects.get(_VALIDATING))

    async def mutate(self, request: AdmissionRequest) -> JSON | None:
        configs = self._configs(_MUTATING)
        if not configs:
            return None
        obj = request.obj
        changed = False
        for config in configs:
            for hook in config.get("webhooks") or []:
                if not self._matches(hook, request, obj):
                    continue
                response = await self._call(hook, request, obj)
                if response is None:
                    continue
                patch = response.get("patch")
                if patch and obj is not None:
                    ops = json.loads(base64.b64decode(patch))
                    obj = json_patch(obj, ops)
                    changed = True
        return obj if changed else None

    async def validate(self, request: AdmissionRequest) -> None:
        configs = self._configs(_VALIDATING)
        if not configs:
            return
        for config in configs:
            for hook in config.get("webhooks") or []:
                if self._matches(hook, request, request.obj):
                    await self._call(hook, request, request.obj)

    # ---- matching -------------------------------------------------------------------------

    def _matches(self, hook: JSON, request: AdmissionRequest, obj: JSON | None) -> bool:
        rt = request.resource
        resource = f"{rt.plural}/{request.subresource}" if request.subresource else rt.plural
        if not any(
            _rule_matches(rule, request.operation, rt.group, rt.version, resource, rt.namespaced)
            for rule in hook.get("rules") or []
        ):
            return False
        ns_sel = selector_from_label_selector(hook.get("namespaceSelector"))
        if ns_sel:
            if rt.storage_key == "namespaces":
                target = obj or request.old_obj or {}
            elif rt.namespaced:
                target = (
                    self._store._objects.get("namespaces", {}).get(("", request.namespace)) or {}
                )
            else:
                target = None
            if target is not None and not labels_match(ns_sel, target):
                return False
        obj_sel = selector_from_label_selector(hook.get("objectSelector"))
        if obj_sel:
            candidates = [o for o in (obj, request.old_obj) if o is not None]
            if not any(labels_match(obj_sel, o) for o in candidates):
                return False
        return self._conditions_hold(hook, request, obj)

    def _conditions_hold(self, hook: JSON, request: AdmissionRequest, obj: JSON | None) -> bool:
        """``matchConditions``: all true calls the webhook, one false skips it; an error
        is the failurePolicy's (Fail refuses the request, Ignore skips the webhook)."""
        conditions = hook.get("matchConditions") or []
        if not conditions:
            return True
        variables = {"object": obj, "oldObject": request.old_obj, "request": _review(request, obj)}
        for condition in conditions:
            try:
                if not evaluate(str(condition.get("expression", "")), variables):
                    return False
            except MatchConditionError as exc:
                if hook.get("failurePolicy", "Fail") == "Ignore":
                    return False
                raise ApiError(
                    500,
                    "InternalError",
                    f'Internal error occurred: failed calling webhook "{hook.get("name", "")}": '
                    f'failed to evaluate match condition "{condition.get("name", "")}": {exc}',
                ) from None
        return True

    # ---- calling --------------------------------------------------------------------------

    async def _call(self, hook: JSON, request: AdmissionRequest, obj: JSON | None) -> JSON | None:
        name = hook.get("name", "")
        if request.dry_run and hook.get("sideEffects") not in ("None", "NoneOnDryRun"):
            raise ApiError(
                400, "BadRequest", f'admission webhook "{name}" does not support dry run'
            )
        policy = hook.get("failurePolicy", "Fail")
        url, server_hostname = self._url(hook)
        review = _review(request, obj)
        timeout = float(hook.get("timeoutSeconds", 10))
        try:
            if url is None:
                raise RuntimeError("the webhook's service could not be resolved")
            ssl_ctx = _ssl_context((hook.get("clientConfig") or {}).get("caBundle"))
            session = self._get_session()
            self.calls += 1
            async with session.post(
                url,
                json=review,
                ssl=ssl_ctx if url.startswith("https") else False,
                server_hostname=server_hostname if url.startswith("https") else None,
                timeout=aiohttp.ClientTimeout(total=timeout),
            ) as resp:
                if resp.status != 200:
                    raise RuntimeError(f"received invalid webhook response code {resp.status}")
                body = await resp.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, RuntimeError, ValueError, OSError) as exc:
            if policy == "Ignore":
                return None
            raise ApiError(
                500,
                "InternalError",
                f'Internal error occurred: failed calling webhook "{name}": '
                f'failed to call webhook: Post "{url}": {exc}',
            ) from None
        response = (body or {}).get("response") or {}
        if request.warnings is not None:
            # Passed on to the client as the real server does, denied or not.
            request.warnings.extend(str(w) for w in response.get("warnings") or [])
        if not response.get("allowed", False):
            raise _denied(name, response.get("status") or {})
        return dict(response)

    def _url(self, hook: JSON) -> tuple[str | None, str | None]:
        cc = hook.get("clientConfig") or {}
        if cc.get("url"):
            return str(cc["url"]), None
        svc = cc.get("service") or {}
        if not svc or self.service_resolver is None:
            return None, None
        port = int(svc.get("port", 443))
        where = self.service_resolver(svc.get("namespace", ""), svc.get("name", ""), port)
        if where is None:
            return None, None
        path = svc.get("path") or "/"
        return f"https://{where}{path}", f"{svc.get('name')}.{svc.get('namespace')}.svc"

    def _get_session(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        if self._session is None or self._session.closed or self._session_loop is not loop:
            self._session = aiohttp.ClientSession()
            self._session_loop = loop
        return self._session


def _rule_matches(
    rule: JSON, operation: str, group: str, version: str, resource: str, namespaced: bool
) -> bool:
    def has(values: Any, value: str) -> bool:
        return "*" in (values or []) or value in (values or [])

    if not has(rule.get("operations"), operation):
        return False
    if not has(rule.get("apiGroups"), group) or not has(rule.get("apiVersions"), version):
        return False
    scope = rule.get("scope", "*")
    if (scope == "Cluster" and namespaced) or (scope == "Namespaced" and not namespaced):
        return False
    base, _, sub = resource.partition("/")
    for pattern in rule.get("resources") or []:
        p_base, _, p_sub = pattern.partition("/")
        if p_base not in ("*", base):
            continue
        if (not sub and not p_sub) or (sub and p_sub in ("*", sub)):
            return True
    return False


def _ssl_context(ca_bundle: str | None) -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    if ca_bundle:
        ctx.load_verify_locations(cadata=base64.b64decode(ca_bundle).decode())
    return ctx


def _review(request: AdmissionRequest, obj: JSON | None) -> JSON:
    rt = request.resource
    kind = {"group": rt.group, "version": rt.version, "kind": rt.kind}
    if request.subresource == "binding":
        kind = {"group": "", "version": "v1", "kind": "Binding"}
    elif request.subresource == "eviction":
        kind = {"group": "policy", "version": "v1", "kind": "Eviction"}
    resource = {"group": rt.group, "version": rt.version, "resource": rt.plural}
    options_kind = {
        "CREATE": "CreateOptions",
        "UPDATE": "UpdateOptions",
        "DELETE": "DeleteOptions",
    }.get(request.operation, "CreateOptions")
    body: JSON = {
        "uid": str(uuid.uuid4()),
        "kind": kind,
        "resource": resource,
        "requestKind": kind,
        "requestResource": resource,
        "name": request.name,
        "operation": request.operation,
        "userInfo": request.user,
        "object": obj,
        "oldObject": request.old_obj,
        "dryRun": request.dry_run,
        "options": {"kind": options_kind, "apiVersion": "meta.k8s.io/v1", **request.options},
    }
    if rt.namespaced:
        body["namespace"] = request.namespace
    if request.subresource:
        body["subResource"] = body["requestSubResource"] = request.subresource
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": body}


def _denied(name: str, status: JSON) -> ApiError:
    denied_by = f'admission webhook "{name}" denied the request'
    code = int(status.get("code") or 400)
    if code < 400:
        code = 400
    if status.get("message"):
        message = f"{denied_by}: {status['message']}"
    elif status.get("reason"):
        message = f"{denied_by}: {status['reason']}"
    else:
        message = f"{denied_by} without explanation"
    reason = str(
        status.get("reason")
        or ("BadRequest" if code == 400 else "Forbidden" if code == 403 else "")
    )
    return ApiError(code, reason, message, details=status.get("details"))
