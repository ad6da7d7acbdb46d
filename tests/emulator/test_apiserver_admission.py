"""Admission webhooks registered through the API are called over HTTPS, as for real."""

from __future__ import annotations

import base64
import json
import ssl
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from apiserver_helpers import free_port, pod_body, self_signed_cert
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from kai_py.emulator.apiserver.threaded import ThreadedServer

REVIEWS: list[dict[str, Any]] = []


async def _mutate(request: web.Request) -> web.Response:
    review = await request.json()
    REVIEWS.append(review)
    patch = [{"op": "add", "path": "/metadata/labels/mutated", "value": "yes"}]
    return web.json_response(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "response": {
                "uid": review["request"]["uid"],
                "allowed": True,
                "patchType": "JSONPatch",
                "patch": base64.b64encode(json.dumps(patch).encode()).decode(),
            },
        }
    )


async def _validate(request: web.Request) -> web.Response:
    review = await request.json()
    REVIEWS.append(review)
    obj = review["request"]["object"] or {}
    allowed = "forbidden" not in (obj.get("data") or {})
    response: dict[str, Any] = {"uid": review["request"]["uid"], "allowed": allowed}
    if not allowed:
        response["status"] = {
            "code": 403,
            "reason": "Forbidden",
            "message": "the key 'forbidden' is not allowed",
        }
    return web.json_response(
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}
    )


@pytest.fixture
def webhook(server: ThreadedServer, tmp_path: Path) -> Any:
    cert, key = self_signed_cert(tmp_path)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(str(cert), str(key))
    port = free_port()
    app = web.Application()
    app.router.add_post("/mutate", _mutate)
    app.router.add_post("/validate", _validate)
    runner = web.AppRunner(app)

    async def start() -> None:
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port, ssl_context=ctx).start()

    server.call(start())
    REVIEWS.clear()
    yield f"https://127.0.0.1:{port}", base64.b64encode(cert.read_bytes()).decode()
    server.call(runner.cleanup())


def _rules(resources: list[str], operations: list[str]) -> list[dict[str, Any]]:
    return [
        {
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "operations": operations,
            "resources": resources,
            "scope": "*",
        }
    ]


def test_mutating_and_validating_webhooks(api: k8s.ApiClient, webhook: Any) -> None:
    url, ca = webhook
    adm = k8s.AdmissionregistrationV1Api(api)
    core = k8s.CoreV1Api(api)
    adm.create_mutating_webhook_configuration(
        {
            "metadata": {"name": "label-pods"},
            "webhooks": [
                {
                    "name": "label.test.kai-py.dev",
                    "admissionReviewVersions": ["v1"],
                    "sideEffects": "None",
                    "clientConfig": {"url": f"{url}/mutate", "caBundle": ca},
                    "objectSelector": {"matchLabels": {"mutate": "please"}},
                    "rules": _rules(["pods"], ["CREATE"]),
                }
            ],
        }
    )
    adm.create_validating_webhook_configuration(
        {
            "metadata": {"name": "check-configmaps"},
            "webhooks": [
                {
                    "name": "deny.test.kai-py.dev",
                    "admissionReviewVersions": ["v1"],
                    "sideEffects": "None",
                    "clientConfig": {"url": f"{url}/validate", "caBundle": ca},
                    "namespaceSelector": {
                        "matchLabels": {"kubernetes.io/metadata.name": "default"}
                    },
                    "rules": _rules(["configmaps"], ["CREATE", "UPDATE"]),
                }
            ],
        }
    )
    mutated = core.create_namespaced_pod("default", pod_body("m", labels={"mutate": "please"}))
    assert mutated.metadata.labels == {"mutate": "please", "mutated": "yes"}
    dry = core.create_namespaced_pod(
        "default", pod_body("dry", labels={"mutate": "please"}), dry_run="All"
    )
    assert dry.metadata.labels["mutated"] == "yes"  # webhooks see dry runs (sideEffects None)
    assert REVIEWS[-1]["request"]["dryRun"] is True
    assert [p.metadata.name for p in core.list_namespaced_pod("default").items] == ["m"]
    plain = core.create_namespaced_pod("default", pod_body("plain"))
    assert plain.metadata.labels in (None, {})  # the objectSelector did not match
    request = REVIEWS[0]["request"]
    assert REVIEWS[0]["apiVersion"] == "admission.k8s.io/v1"
    assert request["operation"] == "CREATE" and request["namespace"] == "default"
    assert request["resource"] == {"group": "", "version": "v1", "resource": "pods"}
    assert request["kind"] == {"group": "", "version": "v1", "kind": "Pod"}

    core.create_namespaced_config_map("default", {"metadata": {"name": "ok"}, "data": {"a": "1"}})
    with pytest.raises(ApiException) as err:
        core.create_namespaced_config_map(
            "default", {"metadata": {"name": "no"}, "data": {"forbidden": "1"}}
        )
    assert err.value.status == 403
    assert json.loads(err.value.body)["message"] == (
        'admission webhook "deny.test.kai-py.dev" denied the request: '
        "the key 'forbidden' is not allowed"
    )
    with pytest.raises(ApiException):
        core.patch_namespaced_config_map("ok", "default", {"data": {"forbidden": "x"}})
    core.create_namespace({"metadata": {"name": "elsewhere"}})
    core.create_namespaced_config_map(
        "elsewhere", {"metadata": {"name": "free"}, "data": {"forbidden": "1"}}
    )


def test_failure_policy(api: k8s.ApiClient, server: ThreadedServer) -> None:
    adm = k8s.AdmissionregistrationV1Api(api)
    core = k8s.CoreV1Api(api)
    dead = f"https://127.0.0.1:{free_port()}/nothing-here"
    for name, policy, resource in (
        ("ignore", "Ignore", "configmaps"),
        ("fail", "Fail", "serviceaccounts"),
    ):
        adm.create_validating_webhook_configuration(
            {
                "metadata": {"name": name},
                "webhooks": [
                    {
                        "name": f"{name}.test.kai-py.dev",
                        "admissionReviewVersions": ["v1"],
                        "sideEffects": "None",
                        "failurePolicy": policy,
                        "clientConfig": {"url": dead},
                        "rules": _rules([resource], ["CREATE"]),
                    }
                ],
            }
        )
    core.create_namespaced_config_map("default", {"metadata": {"name": "passes"}})
    with pytest.raises(ApiException) as err:
        core.create_namespaced_service_account("default", {"metadata": {"name": "blocked"}})
    assert err.value.status == 500
    assert 'failed calling webhook "fail.test.kai-py.dev"' in json.loads(err.value.body)["message"]
