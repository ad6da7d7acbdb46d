"""Discovery documents: /version, /api, /apis, /api/v1, /apis/GROUP/VERSION.

Plain (unaggregated) discovery only: kubectl and client-go ask for the
aggregated ``APIGroupDiscoveryList`` first and fall back to these when the
answer is plain ``application/json``.
"""

from __future__ import annotations

from typing import Any

from kai_py.emulator.storage.resources import Registry, ResourceType

JSON = dict[str, Any]

VERSION_INFO: JSON = {
    "major": "1",
    "minor": "32",
    "gitVersion": "v1.32.0-kai-py-emulator",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z",
    "goVersion": "go1.23.0",
    "compiler": "gc",
    "platform": "linux/amd64",
}

_SUB_VERBS = {
    "status": ("get", "patch", "update"),
    "scale": ("get", "patch", "update"),
    "binding": ("create",),
    "eviction": ("create",),
    "finalize": ("update",),
    "log": ("get",),
}


def api_versions(address: str) -> JSON:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": address}],
    }


def _group_entry(group: str, versions: list[str]) -> JSON:
    gvs = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    return {"name": group, "versions": gvs, "preferredVersion": gvs[0]}


def api_group_list(registry: Registry) -> JSON:
    groups = [_group_entry(g, vs) for g, vs in registry.groups().items() if g]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_group(registry: Registry, group: str) -> JSON | None:
    versions = registry.groups().get(group)
    if not versions:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group_entry(group, versions)}


def _resource_entry(rt: ResourceType) -> JSON:
    entry: JSON = {
        "name": rt.plural,
        "singularName": rt.singular,
        "namespaced": rt.namespaced,
        "kind": rt.kind,
        "verbs": list(rt.verbs),
    }
    if rt.short_names:
        entry["shortNames"] = list(rt.short_names)
    if rt.categories:
        entry["categories"] = list(rt.categories)
    return entry


def _sub_entry(rt: ResourceType, sub: str) -> JSON:
    entry: JSON = {
        "name": f"{rt.plural}/{sub}",
        "singularName": "",
        "namespaced": rt.namespaced,
        "kind": rt.kind,
        "verbs": list(_SUB_VERBS.get(sub, ("get",))),
    }
    if sub == "binding":
        entry["kind"] = "Binding"
    elif sub == "eviction":
        entry.update(kind="Eviction", group="policy", version="v1")
    elif sub == "scale":
        entry.update(kind="Scale", group="autoscaling", version="v1")
    return entry


def api_resource_list(registry: Registry, group: str, version: str) -> JSON | None:
    types = registry.in_group_version(group, version)
    if not types:
        return None
    resources: list[JSON] = []
    for rt in sorted(types, key=lambda t: t.plural):
        resources.append(_resource_entry(rt))
        resources.extend(_sub_entry(rt, s) for s in sorted(rt.subresources))
    if not group and version == "v1":
        resources.append(
            {
                "name": "bindings",
                "singularName": "binding",
                "namespaced": True,
                "kind": "Binding",
                "verbs": ["create"],
            }
        )
    gv = f"{group}/{version}" if group else version
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": gv,
        "resources": resources,
    }


# ---- OpenAPI v3 (just enough for kubectl) -------------------------------------------------
# kubectl 1.32 refuses to apply without OpenAPI ("failed to download openapi") unless
# the server supports server-side field validation, which it learns from each PATCH
# operation's ``fieldValidation`` parameter in /openapi/v3. Leaving the strategic
# merge content type out makes kubectl compute apply patches from its compiled-in
# types (built-ins) or as JSON merge patches (CRDs), which is what we serve best.

_PATCH_CONTENT = (
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/apply-patch+yaml",
)


def _gv_path(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


def openapi_v3_gv(registry: Registry, group: str, version: str) -> JSON | None:
    types = registry.in_group_version(group, version)
    if not types:
        return None
    paths: JSON = {}
    for rt in sorted(types, key=lambda t: t.plural):
        prefix = "/" + _gv_path(group, version)
        scope = "/namespaces/{namespace}" if rt.namespaced else ""
        gvk = {"group": rt.group, "version": rt.version, "kind": rt.kind}
        params = [
            {"name": n, "in": "query", "schema": {"type": "string", "uniqueItems": True}}
            for n in ("dryRun", "fieldManager", "fieldValidation", "force")
        ]
        patch = {
            "operationId": f"patch{rt.kind}",
            "x-kubernetes-action": "patch",
            "x-kubernetes-group-version-kind": gvk,
            "parameters": params,
            "requestBody": {"content": {c: {"schema": {"type": "object"}} for c in _PATCH_CONTENT}},
            "responses": {"200": {"description": "OK"}},
        }
        paths[f"{prefix}{scope}/{rt.plural}/{{name}}"] = {"patch": patch}
        if rt.has_status:
            paths[f"{prefix}{scope}/{rt.plural}/{{name}}/status"] = {
                "patch": {**patch, "operationId": f"patch{rt.kind}Status"}
            }
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.32.0"},
        "paths": paths,
        "components": {"schemas": {}},
    }


def openapi_v3_root(registry: Registry) -> JSON:
    import hashlib
    import json

    paths: JSON = {}
    for group, versions in registry.groups().items():
        for version in versions:
            doc = openapi_v3_gv(registry, group, version)
            digest = hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:32]
            key = _gv_path(group, version)
            paths[key] = {"serverRelativeURL": f"/openapi/v3/{key}?hash={digest.upper()}"}
    return {"paths": paths}
