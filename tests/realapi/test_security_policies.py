"""A stolen token of each kai-py role, on a real kube-apiserver with the chart's
RBAC and ValidatingAdmissionPolicies (charts/kai-py/templates/security.yaml).

Each attack is made with the role's own TokenRequest token (or a tenant's, with
the rights a namespace admin gives) and must be refused, by RBAC (403) or by a
policy (its message names the object, the field and the value); next to each,
the same role's own work is allowed. Writes that would change the cluster are
sent with ``dryRun=All`` where the answer is all that matters: a dry run goes
through admission like any write. docs/deploy.md, "Security", says what each
role may do and why.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from chart_helpers import NAMESPACE, render
from operator_helpers import start_operator, stop_operator, wait_for
from realapi_backends import require_binaries
from realapi_server import ADMIN_TOKEN, RealApiServer

from kai_py.api import keys
from kai_py.binder import reservation as rsv
from kai_py.emulator.dev_cluster import kai_crds

pytestmark = pytest.mark.slow

TEAM = "team-a"
RESERVATION = keys.RESERVATION_NAMESPACE
DRY = "?dryRun=All"
Json = dict[str, Any]


class Cluster:
    """The real API server with the chart's RBAC and policies, and each role's token."""

    def __init__(self, server: RealApiServer) -> None:
        self.server = server
        self.tokens: dict[str, str] = {}

    def token(self, who: str) -> str:
        if who not in self.tokens:
            namespace, account = {
                "tenant": (TEAM, "tenant"),
                "reservation": (RESERVATION, RESERVATION),
            }.get(who, (NAMESPACE, f"kai-py-{who}"))
            self.tokens[who] = self.server.token_for(namespace, account)
        return self.tokens[who]

    def call(self, who: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        token = self.token(who) if who != "admin" else None
        kw = {"token": token} if token else {}
        if method == "PATCH":
            kw["content_type"] = "application/merge-patch+json"
        return self.server.request(method, path, body, **kw)

    def refused(self, who: str, method: str, path: str, body: Any = None) -> str:
        status, answer = self.call(who, method, path, body)
        assert status in (403, 422), f"{who} {method} {path}: {status} {answer}"
        return str(answer.get("message") if isinstance(answer, dict) else answer)

    def allowed(self, who: str, method: str, path: str, body: Any = None) -> Any:
        status, answer = self.call(who, method, path, body)
        assert status < 400, f"{who} {method} {path}: {status} {answer}"
        return answer


def _pod(name: str, namespace: str, scheduler: str = "kai-scheduler", **spec: Any) -> Json:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": "web"}},
        "spec": {
            "schedulerName": scheduler,
            "containers": [{"name": "main", "image": "busybox"}],
            **spec,
        },
    }


def _policies_in_force(server: RealApiServer) -> None:
    """Wait until the policies are loaded (a canary is refused) and check that each
    type-checked without a warning (a CEL typo would otherwise pass silently)."""
    canary = _pod("canary", RESERVATION)
    deadline = time.monotonic() + 30
    while server.request("POST", f"/api/v1/namespaces/{RESERVATION}/pods{DRY}", canary)[0] < 400:
        assert time.monotonic() < deadline, "the chart's policies were not in force after 30 s"
        time.sleep(0.2)
    path = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies"
    deadline = time.monotonic() + 30
    while True:
        found = [p for p in server.must("GET", path)["items"] if "status" in p]
        if len(found) == len(server.must("GET", path)["items"]):
            break
        assert time.monotonic() < deadline, "the policies were not type-checked"
        time.sleep(0.2)
    for policy in found:
        warnings = (policy["status"].get("typeChecking") or {}).get("expressionWarnings")
        assert not warnings, f"{policy['metadata']['name']}: {warnings}"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    server = RealApiServer(tmp_path_factory.mktemp("security"), require_binaries(), controllers="")
    server.start()
    try:
        server.apply_crds(kai_crds())
        for ns in (TEAM, RESERVATION, NAMESPACE, "kube-system"):
            server.namespace(ns)
        # The reservation pods' account, and a more powerful one an attacker would pick.
        for account in (RESERVATION, "default-admin"):
            server.service_account(RESERVATION, account)
        kinds = {
            "ClusterRole",
            "ClusterRoleBinding",
            "Role",
            "RoleBinding",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
        }
        chart = [o for o in render() if o["kind"] in kinds]
        server.apply_yaml(yaml.safe_dump_all(chart))
        # A tenant: a namespace admin of team-a, who was also given BindRequests.
        server.apply_yaml(
            yaml.safe_dump_all(
                [
                    {
                        "apiVersion": "rbac.authorization.k8s.io/v1",
                        "kind": "Role",
                        "metadata": {"name": "tenant", "namespace": TEAM},
                        "rules": [
                            {"apiGroups": [""], "resources": ["*"], "verbs": ["*"]},
                            {"apiGroups": [keys.GROUP], "resources": ["*"], "verbs": ["*"]},
                        ],
                    },
                    {
                        "apiVersion": "rbac.authorization.k8s.io/v1",
                        "kind": "RoleBinding",
                        "metadata": {"name": "tenant", "namespace": TEAM},
                        "roleRef": {
                            "apiGroup": "rbac.authorization.k8s.io",
                            "kind": "Role",
                            "name": "tenant",
                        },
                        "subjects": [
                            {"kind": "ServiceAccount", "name": "tenant", "namespace": TEAM}
                        ],
                    },
                ]
            )
        )
        for name, ns, scheduler in (
            ("kai-pod", TEAM, "kai-scheduler"),
            ("other-pod", TEAM, "default-scheduler"),
            ("coredns", "kube-system", "default-scheduler"),
        ):
            server.must("POST", f"/api/v1/namespaces/{ns}/pods", _pod(name, ns, scheduler))
        server.must(
            "POST",
            "/api/v1/namespaces/kube-system/configmaps",
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "aws-auth"}},
        )
        if any(o["kind"] == "ValidatingAdmissionPolicy" for o in chart):
            _policies_in_force(server)
        yield Cluster(server)
    finally:
        server.stop()


# ---- the binder -------------------------------------------------------------------------


def test_the_binder_creates_pods_in_the_reservation_namespace_only(cluster: Cluster) -> None:
    evil = _pod(
        "evil",
        "kube-system",
        hostPID=True,
        hostNetwork=True,
        volumes=[{"name": "root", "hostPath": {"path": "/"}}],
    )
    message = cluster.refused("binder", "POST", f"/api/v1/namespaces/kube-system/pods{DRY}", evil)
    assert 'cannot create resource "pods" in API group "" in the namespace "kube-system"' in message
    cluster.refused("binder", "POST", f"/api/v1/namespaces/{TEAM}/pods{DRY}", _pod("x", TEAM))
    cluster.refused(
        "binder",
        "POST",
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "mine"}},
    )
    # Its own pods there are allowed: a reservation pod and a blocker.
    manifest = rsv.reservation_pod_manifest("gpu-0", "g1", service_account=RESERVATION)
    cluster.allowed("binder", "POST", f"/api/v1/namespaces/{RESERVATION}/pods{DRY}", manifest)


def _reservation_pod(**change: Any) -> Json:
    manifest = rsv.reservation_pod_manifest("gpu-0", "g2", service_account=RESERVATION)
    container = manifest["spec"]["containers"][0]
    for key, value in change.items():
        if key in ("image", "command", "securityContext", "args"):
            container[key] = value
        elif key == "labels":
            manifest["metadata"]["labels"] = value
        else:
            manifest["spec"][key] = value
    return manifest


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"securityContext": {"privileged": True}}, "may not be privileged"),
        ({"securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}}, "capabilities"),
        ({"hostPID": True}, "spec.hostNetwork, hostPID and hostIPC"),
        ({"hostNetwork": True}, "spec.hostNetwork, hostPID and hostIPC"),
        ({"hostIPC": True}, "spec.hostNetwork, hostPID and hostIPC"),
        ({"volumes": [{"name": "root", "hostPath": {"path": "/"}}]}, "hostPath"),
        ({"image": "evil.example/root:latest"}, "is evil.example/root:latest"),
        ({"command": ["sh", "-c", "cat /etc/shadow"]}, "[kai-py, reserve]"),
        ({"args": ["--evil"]}, "no args"),
        ({"labels": {"app": "kai-resource-reservation"}}, "is unset"),
        ({"serviceAccountName": "default-admin"}, "is default-admin"),
    ],
)
def test_the_reservation_namespace_admits_kai_pys_reservation_pods_only(
    cluster: Cluster, change: Json, named: str
) -> None:
    path = f"/api/v1/namespaces/{RESERVATION}/pods{DRY}"
    message = cluster.refused("binder", "POST", path, _reservation_pod(**change))
    assert named in message and "in kai-resource-reservation" in message, message
    # Not the binder's token only: nobody may put another pod there.
    cluster.refused("admin", "POST", path, _reservation_pod(**change))


def test_the_binder_may_not_change_a_reservation_pods_image(cluster: Cluster) -> None:
    manifest = _reservation_pod()
    manifest["metadata"]["name"] = "held"
    cluster.allowed("binder", "POST", f"/api/v1/namespaces/{RESERVATION}/pods", manifest)
    path = f"/api/v1/namespaces/{RESERVATION}/pods/held"
    patch = {"spec": {"containers": [{"name": "reservation", "image": "evil.example/x"}]}}
    for who in ("binder", "admin"):
        status, answer = cluster.server.request(
            "PATCH",
            path,
            patch,
            content_type="application/strategic-merge-patch+json",
            **({"token": cluster.token(who)} if who != "admin" else {}),
        )
        assert status == 403, answer
    assert "spec.containers[].image must be" in answer["message"], answer
    assert "is evil.example/x" in answer["message"], answer
    # The reservation program's own write (the card's UUID) still goes through.
    cluster.allowed(
        "reservation",
        "PATCH",
        path,
        {"metadata": {"annotations": {keys.RESERVED_GPU_INDEX_ANNOTATION: "GPU-1"}}},
    )
    # The binder deletes its reservation pods, and no pod anywhere else.
    cluster.allowed("binder", "DELETE", path)
    cluster.refused("binder", "DELETE", f"/api/v1/namespaces/{TEAM}/pods/kai-pod{DRY}")
    cluster.refused("binder", "DELETE", f"/api/v1/namespaces/kube-system/pods/coredns{DRY}")


def _gpu_configmap(name: str, value: str = "GPU-1", labelled: bool = True) -> Json:
    pod = {"metadata": {"name": "kai-pod", "namespace": TEAM}}
    manifest = rsv.gpu_configmap_manifest(pod, name, {rsv.VISIBLE_DEVICES_KEY: value})
    if not labelled:
        del manifest["metadata"]["labels"]
    return manifest


def test_the_binder_writes_its_own_gpu_configmaps_and_no_other(cluster: Cluster) -> None:
    aws = "/api/v1/namespaces/kube-system/configmaps/aws-auth"
    message = cluster.refused("binder", "PATCH", aws, {"data": {"mapUsers": "- admin"}})
    assert "ConfigMap kube-system/aws-auth" in message and "kai-py-binder" in message, message
    cluster.refused("binder", "DELETE", aws)
    # Nor by labelling it as its own on the way.
    labelled = {"metadata": {"labels": {rsv.MANAGED_BY_LABEL: rsv.MANAGED_BY}}, "data": {"x": "y"}}
    cluster.refused("binder", "PATCH", aws, labelled)
    cluster.refused(
        "binder",
        "POST",
        f"/api/v1/namespaces/{TEAM}/configmaps",
        _gpu_configmap("x", labelled=False),
    )
    # Its own: created, patched and deleted.
    cms = f"/api/v1/namespaces/{TEAM}/configmaps"
    cluster.allowed("binder", "POST", cms, _gpu_configmap("kai-pod-gpu"))
    cluster.allowed(
        "binder", "PATCH", f"{cms}/kai-pod-gpu", {"data": {rsv.VISIBLE_DEVICES_KEY: "GPU-2"}}
    )
    cluster.allowed("binder", "DELETE", f"{cms}/kai-pod-gpu{DRY}")


def test_a_tenant_cannot_rewire_its_shared_pods_card(cluster: Cluster) -> None:
    cms = f"/api/v1/namespaces/{TEAM}/configmaps"
    cluster.allowed("binder", "POST", cms, _gpu_configmap("wired-0"))
    everything = {"data": {rsv.VISIBLE_DEVICES_KEY: "all"}}
    message = cluster.refused("tenant", "PATCH", f"{cms}/wired-0", everything)
    assert (
        f"ConfigMap {TEAM}/wired-0 holds the card kai-py gave a shared pod" in message
        and "only the kai-py binder may update it" in message
    ), message
    unlabel = {"metadata": {"labels": {rsv.MANAGED_BY_LABEL: None}}}
    cluster.refused("tenant", "PATCH", f"{cms}/wired-0", unlabel)
    cluster.refused("tenant", "DELETE", f"{cms}/wired-0")
    cluster.allowed("admin", "DELETE", f"{cms}/wired-0{DRY}")  # a cluster admin still may
    # Nor by making one that looks like the binder's ...
    cluster.refused("tenant", "POST", cms, _gpu_configmap("wired-1", "all"))
    # ... and one it made itself the binder will not take over (it fails closed).
    cluster.allowed("tenant", "POST", cms, _gpu_configmap("wired-2", "all", labelled=False))
    cluster.refused(
        "binder", "PATCH", f"{cms}/wired-2", {"data": {rsv.VISIBLE_DEVICES_KEY: "GPU-1"}}
    )
    # Its other ConfigMaps are its own business.
    cluster.allowed("tenant", "PATCH", f"{cms}/wired-2", everything)
    cluster.allowed("tenant", "DELETE", f"{cms}/wired-2")


def test_the_binder_writes_only_its_own_keys_on_pods_kai_py_schedules(cluster: Cluster) -> None:
    path = f"/api/v1/namespaces/{TEAM}/pods"
    message = cluster.refused(
        "binder", "PATCH", f"{path}/kai-pod{DRY}", {"metadata": {"labels": {"app": "db"}}}
    )
    assert "may change only the labels runai-gpu-group (metadata.labels changed: app)" in message
    cluster.refused(
        "binder",
        "PATCH",
        f"{path}/other-pod{DRY}",
        {"metadata": {"labels": {keys.GPU_GROUP_LABEL: "g"}}},
    )
    cluster.refused(
        "binder", "PATCH", f"{path}/kai-pod{DRY}", {"spec": {"activeDeadlineSeconds": 1}}
    )
    cluster.allowed(
        "binder",
        "PATCH",
        f"{path}/kai-pod{DRY}",
        {
            "metadata": {
                "labels": {keys.GPU_GROUP_LABEL: "g"},
                "annotations": {keys.GPU_GROUPS_ANNOTATION: "g,h"},
            }
        },
    )


# ---- the scheduler ----------------------------------------------------------------------


def _eviction(name: str, namespace: str) -> Json:
    return {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": namespace},
        "deleteOptions": {"dryRun": ["All"]},
    }


def test_the_scheduler_evicts_no_pod_in_system_namespaces(cluster: Cluster) -> None:
    path = "/api/v1/namespaces/kube-system/pods/coredns/eviction"
    message = cluster.refused("scheduler", "POST", path, _eviction("coredns", "kube-system"))
    assert "the scheduler evicts no pod in namespace kube-system" in message, message
    # A tenant's pod it may evict here (the Eviction names no scheduler; the eviction
    # webhook, not applied here, tells kai-py's pods from others: test_webhook_server.py).
    path = f"/api/v1/namespaces/{TEAM}/pods/kai-pod/eviction"
    cluster.allowed("scheduler", "POST", path, _eviction("kai-pod", TEAM))


def test_the_scheduler_writes_only_its_own_pod_conditions(cluster: Cluster) -> None:
    def status(name: str, body: Json) -> tuple[int, Any]:
        return cluster.server.request(
            "PATCH",
            f"/api/v1/namespaces/{TEAM}/pods/{name}/status{DRY}",
            body,
            token=cluster.token("scheduler"),
            content_type="application/strategic-merge-patch+json",
        )

    scheduled = {
        "status": {
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
            "nominatedNodeName": "gpu-0",
        }
    }
    code, answer = status("kai-pod", scheduled)
    assert code == 200, answer
    code, answer = status("other-pod", scheduled)
    assert code == 403 and "is default-scheduler" in answer["message"], answer
    code, answer = status("kai-pod", {"status": {"phase": "Failed", "reason": "Evicted"}})
    assert code == 403 and "status.conditions[type=PodScheduled]" in answer["message"], answer
    ready = {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    code, answer = status("kai-pod", ready)
    assert code == 403 and "(changed: Ready)" in answer["message"], answer


# ---- the pod-grouper --------------------------------------------------------------------


def test_the_pod_grouper_writes_only_its_own_keys(cluster: Cluster) -> None:
    path = f"/api/v1/namespaces/{TEAM}/pods"
    message = cluster.refused(
        "podgrouper", "PATCH", f"{path}/kai-pod{DRY}", {"metadata": {"labels": {"app": "db"}}}
    )
    assert "may change only the labels kai.scheduler/subgroup-name" in message, message
    cluster.refused(
        "podgrouper",
        "PATCH",
        f"{path}/kai-pod{DRY}",
        {"metadata": {"annotations": {"prometheus.io/scrape": "true"}}},
    )
    cluster.refused(
        "podgrouper",
        "PATCH",
        f"{path}/other-pod{DRY}",
        {"metadata": {"annotations": {keys.POD_GROUP_ANNOTATION: "pg"}}},
    )
    cluster.refused(
        "podgrouper", "PATCH", f"{path}/kai-pod{DRY}", {"metadata": {"finalizers": ["x/y"]}}
    )
    cluster.allowed(
        "podgrouper",
        "PATCH",
        f"{path}/kai-pod{DRY}",
        {
            "metadata": {
                "annotations": {keys.POD_GROUP_ANNOTATION: "pg"},
                "labels": {keys.SUBGROUP_LABEL: "workers"},
            }
        },
    )


# ---- BindRequests -----------------------------------------------------------------------


def _bindrequest(name: str) -> Json:
    return {
        "apiVersion": f"{keys.GROUP}/{keys.BINDREQUEST_VERSION}",
        "kind": "BindRequest",
        "metadata": {"name": name, "namespace": TEAM},
        "spec": {
            "podName": "kai-pod",
            "selectedNode": "gpu-0",
            "receivedResourceType": "Regular",
            "receivedGPU": {"count": 4, "portion": "1"},
        },
    }


def test_only_the_scheduler_makes_bindrequests(cluster: Cluster) -> None:
    path = f"/apis/{keys.GROUP}/{keys.BINDREQUEST_VERSION}/namespaces/{TEAM}/bindrequests"
    message = cluster.refused("tenant", "POST", path, _bindrequest("mine"))
    assert (
        "only the kai-py scheduler (system:serviceaccount:kai-system:kai-py-scheduler) may create"
        in message
        and "not system:serviceaccount:team-a:tenant" in message
    ), message
    cluster.refused("admin", "POST", f"{path}{DRY}", _bindrequest("admins"))
    made = cluster.allowed("scheduler", "POST", path, _bindrequest("decided"))
    # Nor may a tenant change the scheduler's decision.
    cluster.refused("tenant", "PATCH", f"{path}/decided", {"spec": {"selectedNode": "gpu-1"}})
    assert made["spec"]["selectedNode"] == "gpu-0"


# ---- what a container sees ---------------------------------------------------------------


def test_a_gpu_container_may_not_ask_for_every_card(cluster: Cluster, tmp_path: Path) -> None:
    """The pod webhook (kai-py run --controllers webhooks) called by the real API server:
    NVIDIA_VISIBLE_DEVICES=all on a GPU container is refused, as KAI refuses it."""
    from test_webhooks import _certificate, _free_port  # the emulator tier's helpers

    server = cluster.server
    kubeconfig = server.write_kubeconfig(str(tmp_path / "admin"), ADMIN_TOKEN, "admin")
    running = start_operator(
        kubeconfig,
        tmp_path / "webhooks.log",
        "--controllers",
        "webhooks",
        extra_env={
            "KAI_PY_WEBHOOK_CERT_DIR": str(_certificate(tmp_path / "tls")),
            "KAI_PY_WEBHOOK_ADDR": "127.0.0.1",
            "KAI_PY_WEBHOOK_PORT": str(_free_port()),
            "KAI_PY_WEBHOOK_MANAGED": "kai-py.security-test",
        },
    )
    pods = f"/api/v1/namespaces/{TEAM}/pods"
    gpu = {"limits": {keys.GPU_RESOURCE: "1"}}
    everything = _pod("all-cards", TEAM)
    everything["spec"]["containers"][0].update(
        resources=gpu, env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    )
    try:

        def served() -> bool:
            # A pod the webhook refuses only once its configuration is filled in and it listens.
            status, answer = server.request("POST", f"{pods}{DRY}", everything)
            return status == 422 and "NVIDIA_VISIBLE_DEVICES" in str(answer)

        wait_for(served, timeout=60, what=f"the webhook refusing the pod\n{running.log}")
        message = cluster.refused("tenant", "POST", f"{pods}{DRY}", everything)
        assert (
            'pod team-a/all-cards: spec.containers[0] (main) env NVIDIA_VISIBLE_DEVICES is "all"'
            in message
        ), message
        fine = _pod("no-cards", TEAM)
        fine["spec"]["containers"][0]["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]
        cluster.allowed("tenant", "POST", f"{pods}{DRY}", fine)
        # Kopf's configuration (no matchConditions) sends every eviction to kai-py: one
        # not made by a scheduler account it knows is let through.
        config = server.must(
            "GET",
            "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/"
            "kai-py.security-test",
        )
        assert any(
            r["resources"] == ["pods/eviction"] for w in config["webhooks"] for r in w["rules"]
        ), config
        path = f"/api/v1/namespaces/{TEAM}/pods/other-pod/eviction"
        cluster.allowed("admin", "POST", path, _eviction("other-pod", TEAM))
    finally:
        stop_operator(running)
        for kind in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
            server.request(
                "DELETE", f"/apis/admissionregistration.k8s.io/v1/{kind}/kai-py.security-test"
            )
