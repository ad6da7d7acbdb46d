"""Probes of API-server behaviour that matters to an operator, run alike on any server.

Each probe does a few HTTP requests and returns a short outcome string
(mostly the HTTP status of the request that tells, and the reason or the
message's key words). ``test_differences.py`` runs every probe against the
emulator and a real kube-apiserver and checks the outcomes against the table
in docs/emulator.md, so the table stays true.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

NS = "probes"


@dataclass
class Target:
    """A server to probe: base URL, admin token (None: no auth), CA file (None: plain HTTP)."""

    url: str
    token: str | None = None
    ca_file: str | None = None

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        token: str | bool | None = True,
        content_type: str = "application/json",
    ) -> tuple[int, Any]:
        """(status, JSON body); ``token=True`` is the admin's, a string another's, None none."""
        data = body if isinstance(body, bytes) else None
        if body is not None and data is None:
            data = json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        bearer = self.token if token is True else token
        if bearer:
            req.add_header("Authorization", f"Bearer {bearer}")
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", content_type)
        context = ssl.create_default_context(cafile=self.ca_file) if self.ca_file else None
        try:
            with urllib.request.urlopen(req, context=context, timeout=30) as resp:
                status, text = resp.status, resp.read().decode()
        except urllib.error.HTTPError as exc:
            status, text = exc.code, exc.read().decode()
        try:
            return status, json.loads(text) if text else None
        except ValueError:
            return status, text


def pod(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]},
    }


def _pods(t: Target) -> str:
    return f"/api/v1/namespaces/{NS}/pods"


def setup(t: Target) -> None:
    """The namespace the probes write in (and its default ServiceAccount, as a controller would)."""
    t.call(
        "POST",
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}},
    )
    t.call(
        "POST",
        f"/api/v1/namespaces/{NS}/serviceaccounts",
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}},
    )


# ---------------------------------------------------------------- probes
def no_credentials(t: Target) -> str:
    """A request without a token."""
    status, _ = t.call("GET", _pods(t), token=None)
    return str(status)


def bad_token(t: Target) -> str:
    status, _ = t.call("GET", _pods(t), token="not-a-valid-token")
    return str(status)


def deployment_replicas_not_a_number(t: Target) -> str:
    body = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "bad-replicas"},
        "spec": {
            "replicas": "abc",
            "selector": {"matchLabels": {"app": "x"}},
            "template": {
                "metadata": {"labels": {"app": "x"}},
                "spec": {"containers": [{"name": "main", "image": "busybox"}]},
            },
        },
    }
    status, _ = t.call("POST", f"/apis/apps/v1/namespaces/{NS}/deployments", body)
    return str(status)


def deployment_selector_mismatch(t: Target) -> str:
    body = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "bad-selector"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "x"}},
            "template": {
                "metadata": {"labels": {"app": "y"}},
                "spec": {"containers": [{"name": "main", "image": "busybox"}]},
            },
        },
    }
    status, _ = t.call("POST", f"/apis/apps/v1/namespaces/{NS}/deployments", body)
    return str(status)


def pod_without_containers(t: Target) -> str:
    body = pod("empty")
    body["spec"]["containers"] = []
    status, _ = t.call("POST", _pods(t), body)
    return str(status)


def binding_with_a_wrong_uid(t: Target) -> str:
    t.call("POST", _pods(t), pod("bind-me"))
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "bind-me", "uid": "00000000-0000-0000-0000-000000000000"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "node-1"},
    }
    status, _ = t.call("POST", f"{_pods(t)}/bind-me/binding", binding)
    return str(status)


def binding_of_a_gated_pod(t: Target) -> str:
    """A pod with spec.schedulingGates: its PodScheduled condition, then a Binding."""
    body = pod("gated")
    body["spec"]["schedulingGates"] = [{"name": "example.com/wait"}]
    _, created = t.call("POST", _pods(t), body)
    conditions = ((created or {}).get("status") or {}).get("conditions") or []
    scheduled = [c.get("reason") for c in conditions if c.get("type") == "PodScheduled"]
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "gated"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "node-1"},
    }
    status, _ = t.call("POST", f"{_pods(t)}/gated/binding", binding)
    _, after = t.call("GET", f"{_pods(t)}/gated")
    bound = ((after or {}).get("spec") or {}).get("nodeName")
    return f"created {scheduled}, binding {status}, bound to {bound}"


def eviction_against_a_pdb(t: Target) -> str:
    """A running, ready pod covered by a PodDisruptionBudget that allows no disruption."""
    t.call("POST", _pods(t), pod("guarded", {"app": "guarded"}))
    # As its kubelet would report it (a pod not Running and Ready may always be evicted).
    running = {
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}],
        }
    }
    t.call(
        "PATCH",
        f"{_pods(t)}/guarded/status",
        running,
        content_type="application/merge-patch+json",
    )
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "guard"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}},
    }
    t.call("POST", f"/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets", pdb)
    eviction = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": "guarded", "namespace": NS},
    }
    status, _ = t.call("POST", f"{_pods(t)}/guarded/eviction", eviction)
    return str(status)


def apply_conflict_between_managers(t: Target) -> str:
    """Server-side apply: a second manager setting a field the first owns."""
    path = f"/api/v1/namespaces/{NS}/configmaps/applied"
    outcomes = []
    for manager, value in (("one", "1"), ("two", "2")):
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "applied", "namespace": NS},
            "data": {"key": value},
        }
        status, _ = t.call(
            "PATCH",
            f"{path}?fieldManager={manager}",
            body,
            content_type="application/apply-patch+yaml",
        )
        outcomes.append(str(status))
    return "/".join(outcomes)


def unknown_field_strict(t: Target) -> str:
    body = pod("strict")
    body["spec"]["notAField"] = True
    status, _ = t.call("POST", f"{_pods(t)}?fieldValidation=Strict", body)
    return str(status)


def grace_delete_of_an_unbound_pod(t: Target) -> str:
    """A pod no kubelet runs is deleted at once, even with a grace period."""
    t.call("POST", _pods(t), pod("unbound"))
    t.call(
        "DELETE",
        f"{_pods(t)}/unbound",
        {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 30},
    )
    status, _ = t.call("GET", f"{_pods(t)}/unbound")
    return "gone" if status == 404 else "terminating"


def pod_status_write_with_metadata(t: Target) -> str:
    """A merge patch of pods/status that also sets an annotation and a label: the pod
    status strategy resets only the spec, deletionTimestamp and ownerReferences."""
    t.call("POST", _pods(t), pod("status-meta"))
    patch = {
        "metadata": {"annotations": {"probe": "a"}, "labels": {"probe": "l"}},
        "spec": {"activeDeadlineSeconds": 5},
        "status": {"message": "probed"},
    }
    got = _status_patched(t, f"{_pods(t)}/status-meta", patch)
    meta, spec = got["metadata"], got["spec"]
    return _kept(
        ("annotation", (meta.get("annotations") or {}).get("probe")),
        ("label", (meta.get("labels") or {}).get("probe")),
        ("spec", spec.get("activeDeadlineSeconds")),
        ("status", got.get("status", {}).get("message")),
    )


def _status_patched(t: Target, path: str, patch: dict[str, Any]) -> dict[str, Any]:
    """The object at ``path`` after a merge patch of its /status."""
    t.call("PATCH", f"{path}/status", patch, content_type="application/merge-patch+json")
    _, got = t.call("GET", path)
    return got


def _kept(*found: tuple[str, object]) -> str:
    """What a status write kept, as ``annotation+status`` (``nothing`` when none)."""
    return "+".join(what for what, value in found if value) or "nothing"


def custom_status_write_with_metadata(t: Target) -> str:
    """The same on a custom resource's /status: only the status is kept."""
    base = "/apis/scheduling.run.ai/v2/queues"
    body = {
        "apiVersion": "scheduling.run.ai/v2",
        "kind": "Queue",
        "metadata": {"name": "status-meta"},
        "spec": {},
    }
    t.call("POST", base, body)
    patch = {"metadata": {"annotations": {"probe": "a"}}, "status": {"childQueues": ["x"]}}
    got = _status_patched(t, f"{base}/status-meta", patch)
    return _kept(
        ("annotation", (got["metadata"].get("annotations") or {}).get("probe")),
        ("status", got.get("status")),
    )


PROBES: dict[str, Callable[[Target], str]] = {
    "no credentials": no_credentials,
    "a bad bearer token": bad_token,
    'Deployment with `replicas: "abc"`': deployment_replicas_not_a_number,
    "Deployment whose selector misses its template": deployment_selector_mismatch,
    "Pod without containers": pod_without_containers,
    "Binding with a wrong pod uid": binding_with_a_wrong_uid,
    "Binding of a pod with scheduling gates": binding_of_a_gated_pod,
    "Eviction against a PodDisruptionBudget": eviction_against_a_pdb,
    "server-side apply: a 2nd manager sets an owned field": apply_conflict_between_managers,
    "unknown field with `fieldValidation=Strict`": unknown_field_strict,
    "graceful delete of a never-bound pod": grace_delete_of_an_unbound_pod,
    "pods/status merge patch that also sets metadata and spec": pod_status_write_with_metadata,
    "custom resource /status patch that also sets metadata": custom_status_write_with_metadata,
}
