"""The emulator over HTTP, driven by the official ``kubernetes`` Python client."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from apiserver_helpers import QUEUE_CRD, pod_body, widget
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes import watch as k8s_watch
from kubernetes.client.rest import ApiException

from kai_py.emulator.apiserver.threaded import ThreadedServer, run_in_thread


def raw(
    server: ThreadedServer,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], Any]:
    """A bare HTTP request: status, headers, and the JSON body (or text)."""
    req = urllib.request.Request(server.url + path, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            status, hdrs, data = resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as err:
        status, hdrs, data = err.code, dict(err.headers), err.read()
    try:
        return status, hdrs, json.loads(data)
    except ValueError:
        return status, hdrs, data.decode()


def error_body(err: ApiException) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(err.body)
    return body


def test_create_get_list_with_resource_versions(core: k8s.CoreV1Api) -> None:
    created = core.create_namespaced_pod("default", pod_body("p1", labels={"app": "a"}))
    assert created.metadata.uid and created.metadata.resource_version
    got = core.read_namespaced_pod("p1", "default")
    assert got.metadata.uid == created.metadata.uid and got.status.phase == "Pending"
    listed = core.list_namespaced_pod("default")
    assert [p.metadata.name for p in listed.items] == ["p1"]
    assert int(listed.metadata.resource_version) >= int(created.metadata.resource_version)
    namespaces = {n.metadata.name for n in core.list_namespace().items}
    assert {"default", "kube-system", "kube-public"} <= namespaces


def test_watch_from_a_resource_version(core: k8s.CoreV1Api) -> None:
    core.create_namespaced_pod("default", pod_body("old"))
    rv = core.list_namespaced_pod("default").metadata.resource_version
    core.create_namespaced_pod("default", pod_body("new"))
    core.patch_namespaced_pod("new", "default", {"metadata": {"labels": {"x": "y"}}})
    core.delete_namespaced_pod("old", "default")
    seen = []
    w = k8s_watch.Watch()
    for event in w.stream(
        core.list_namespaced_pod, "default", resource_version=rv, timeout_seconds=5
    ):
        seen.append((event["type"], event["object"].metadata.name))
        if len(seen) == 3:
            w.stop()
    assert seen == [("ADDED", "new"), ("MODIFIED", "new"), ("DELETED", "old")]


def test_watch_sends_bookmarks_when_asked(server: ThreadedServer) -> None:
    status, _, _ = raw(server, "GET", "/api/v1/namespaces")
    assert status == 200
    url = (
        server.url + "/api/v1/pods?watch=1&allowWatchBookmarks=true&resourceVersion="
        f"{server.store.resource_version}&timeoutSeconds=3"
    )
    with urllib.request.urlopen(url, timeout=10) as resp:
        assert resp.headers["Content-Type"] == "application/json"
        line = json.loads(resp.readline())
    assert line["type"] == "BOOKMARK"
    assert int(line["object"]["metadata"]["resourceVersion"]) == server.store.resource_version


def test_stale_update_is_409_conflict(core: k8s.CoreV1Api) -> None:
    cm = core.create_namespaced_config_map(
        "default", {"metadata": {"name": "c"}, "data": {"a": "1"}}
    )
    cm.data = {"a": "2"}
    core.replace_namespaced_config_map("c", "default", cm)
    cm.data = {"a": "3"}
    with pytest.raises(ApiException) as err:
        core.replace_namespaced_config_map("c", "default", cm)
    assert err.value.status == 409
    body = error_body(err.value)
    assert body["kind"] == "Status" and body["reason"] == "Conflict"
    assert body["message"].startswith('Operation cannot be fulfilled on configmaps "c"')


def test_label_and_field_selectors(core: k8s.CoreV1Api, server: ThreadedServer) -> None:
    for i, app in enumerate(["web", "web", "db"]):
        core.create_namespaced_pod(
            "default",
            pod_body(
                f"p{i}",
                labels={"app": app},
                schedulerName="kai-scheduler" if i else "default-scheduler",
            ),
        )
    server.call(server.store.bind_pod("default", "p2", "node-1"))

    def names(**kw: Any) -> list[str]:
        return [p.metadata.name for p in core.list_namespaced_pod("default", **kw).items]

    assert names(label_selector="app=web") == ["p0", "p1"]
    assert names(label_selector="app in (db),app!=web") == ["p2"]
    assert names(label_selector="!app") == []
    assert names(field_selector="spec.schedulerName=kai-scheduler") == ["p1", "p2"]
    assert names(field_selector="spec.nodeName=node-1,status.phase=Pending") == ["p2"]
    assert names(field_selector="metadata.name!=p0") == ["p1", "p2"]
    with pytest.raises(ApiException) as err:
        names(field_selector="spec.unknown=x")
    assert err.value.status == 400


def test_paging_with_limit_and_continue(core: k8s.CoreV1Api) -> None:
    for i in range(12):
        core.create_namespaced_config_map("default", {"metadata": {"name": f"cm-{i:02d}"}})
    seen: list[str] = []
    token = None
    pages = 0
    while True:
        page = core.list_namespaced_config_map("default", limit=5, _continue=token)
        pages += 1
        seen += [c.metadata.name for c in page.items]
        token = page.metadata._continue
        if not token:
            break
    assert pages == 3 and seen == [f"cm-{i:02d}" for i in range(12)]


def test_expired_versions_answer_410(tmp_path: Path) -> None:
    with run_in_thread(kubeconfig_path=tmp_path / "kc", history_size=5) as srv:
        api = k8s_config.new_client_from_config(config_file=srv.kubeconfig_path)
        core = k8s.CoreV1Api(api)
        first = core.create_namespaced_config_map("default", {"metadata": {"name": "c0"}})
        core.create_namespaced_config_map("default", {"metadata": {"name": "c00"}})
        page = core.list_namespaced_config_map("default", limit=1)
        for i in range(1, 12):
            core.create_namespaced_config_map("default", {"metadata": {"name": f"c{i}"}})
        with pytest.raises(ApiException) as err:
            for _ in k8s_watch.Watch().stream(
                core.list_namespaced_config_map,
                "default",
                resource_version=first.metadata.resource_version,
                timeout_seconds=3,
            ):
                pass
        assert err.value.status == 410
        status, _, body = raw(
            srv,
            "GET",
            "/api/v1/namespaces/default/configmaps?watch=1&"
            f"resourceVersion={first.metadata.resource_version}",
        )
        assert status == 200
        event = body if isinstance(body, dict) else json.loads(body.splitlines()[0])
        assert event["type"] == "ERROR" and event["object"]["code"] == 410
        assert event["object"]["reason"] == "Expired"
        with pytest.raises(ApiException) as err:
            core.list_namespaced_config_map("default", limit=1, _continue=page.metadata._continue)
        assert err.value.status == 410
        api.close()


def _owner_ref(obj: Any, kind: str = "ConfigMap") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": kind,
        "name": obj.metadata.name,
        "uid": obj.metadata.uid,
        "blockOwnerDeletion": True,
        "controller": True,
    }


def test_garbage_collection_background_and_foreground(core: k8s.CoreV1Api) -> None:
    for policy in ("Background", "Foreground"):
        owner = core.create_namespaced_config_map(
            "default", {"metadata": {"name": f"owner-{policy.lower()}"}}
        )
        core.create_namespaced_pod(
            "default",
            {
                **pod_body(f"dep-{policy.lower()}"),
                "metadata": {
                    "name": f"dep-{policy.lower()}",
                    "ownerReferences": [_owner_ref(owner)],
                },
            },
        )
        core.delete_namespaced_config_map(
            owner.metadata.name, "default", body=k8s.V1DeleteOptions(propagation_policy=policy)
        )
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            pods = [p.metadata.name for p in core.list_namespaced_pod("default").items]
            cms = [c.metadata.name for c in core.list_namespaced_config_map("default").items]
            if f"dep-{policy.lower()}" not in pods and owner.metadata.name not in cms:
                break
            time.sleep(0.05)
        else:
            pytest.fail(f"{policy}: dependents {pods} / owners {cms} not collected")


def test_foreground_owner_waits_for_dependents_with_finalizers(core: k8s.CoreV1Api) -> None:
    owner = core.create_namespaced_config_map("default", {"metadata": {"name": "owner"}})
    core.create_namespaced_config_map(
        "default",
        {
            "metadata": {
                "name": "held",
                "finalizers": ["test.kai-py.dev/hold"],
                "ownerReferences": [_owner_ref(owner)],
            }
        },
    )
    core.delete_namespaced_config_map("owner", "default", propagation_policy="Foreground")
    time.sleep(0.2)
    waiting = core.read_namespaced_config_map("owner", "default")
    assert waiting.metadata.deletion_timestamp is not None
    assert "foregroundDeletion" in waiting.metadata.finalizers
    core.patch_namespaced_config_map(
        "held",
        "default",
        {"metadata": {"finalizers": None}},
        _content_type="application/merge-patch+json",
    )
    deadline = time.monotonic() + 5
    while core.list_namespaced_config_map("default").items and time.monotonic() < deadline:
        time.sleep(0.05)
    assert core.list_namespaced_config_map("default").items == []


def test_finalizers_and_deletion_timestamp(core: k8s.CoreV1Api) -> None:
    core.create_namespaced_config_map(
        "default",
        {"metadata": {"name": "c", "finalizers": ["kopf.zalando.org/KopfFinalizerMarker"]}},
    )
    rv = core.list_namespaced_config_map("default").metadata.resource_version
    core.delete_namespaced_config_map("c", "default")
    marked = core.read_namespaced_config_map("c", "default")
    assert marked.metadata.deletion_timestamp is not None
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_config_map(
            "c",
            "default",
            [
                {"op": "test", "path": "/metadata/finalizers/0", "value": "someone-else"},
                {"op": "remove", "path": "/metadata/finalizers/0"},
            ],
        )
    assert err.value.status == 422
    core.patch_namespaced_config_map(
        "c",
        "default",
        [
            {
                "op": "test",
                "path": "/metadata/finalizers/0",
                "value": "kopf.zalando.org/KopfFinalizerMarker",
            },
            {"op": "remove", "path": "/metadata/finalizers/0"},
        ],
    )
    events = []
    for event in k8s_watch.Watch().stream(
        core.list_namespaced_config_map, "default", resource_version=rv, timeout_seconds=2
    ):
        events.append(event["type"])
        if event["type"] == "DELETED":
            break
    assert events == ["MODIFIED", "DELETED"]


def test_crd_then_custom_resources_status_and_422(api: k8s.ApiClient) -> None:
    ext = k8s.ApiextensionsV1Api(api)
    custom = k8s.CustomObjectsApi(api)
    ext.create_custom_resource_definition(QUEUE_CRD)
    created = custom.create_namespaced_custom_object(
        "test.kai-py.dev", "v1", "default", "widgets", widget("w1", unknown=1)
    )
    assert created["spec"] == {"size": 3, "color": "red"}
    patched = custom.patch_namespaced_custom_object_status(
        "test.kai-py.dev",
        "v1",
        "default",
        "widgets",
        "w1",
        {"status": {"phase": "Ready"}, "spec": {"size": 50}},
    )
    assert patched["status"] == {"phase": "Ready"} and patched["spec"]["size"] == 3
    patched = custom.patch_namespaced_custom_object(
        "test.kai-py.dev",
        "v1",
        "default",
        "widgets",
        "w1",
        {"status": {"phase": "Nope"}, "spec": {"size": 7}},
    )
    assert patched["status"] == {"phase": "Ready"} and patched["spec"]["size"] == 7
    assert patched["metadata"]["generation"] == 2
    with pytest.raises(ApiException) as err:
        custom.create_namespaced_custom_object(
            "test.kai-py.dev", "v1", "default", "widgets", widget("bad", size="huge")
        )
    assert err.value.status == 422
    body = error_body(err.value)
    assert body["reason"] == "Invalid"
    assert body["message"] == (
        'Widget.test.kai-py.dev "bad" is invalid: spec.size: Invalid '
        'value: "string": spec.size in body must be of type integer: '
        '"string"'
    )
    assert body["details"]["causes"][0]["field"] == "spec.size"
    listed = custom.list_namespaced_custom_object("test.kai-py.dev", "v1", "default", "widgets")
    assert [w["metadata"]["name"] for w in listed["items"]] == ["w1"]


def test_patch_types(core: k8s.CoreV1Api, server: ThreadedServer) -> None:
    core.create_namespaced_pod(
        "default",
        {
            **pod_body("p"),
            "spec": {
                "containers": [
                    {"name": "a", "image": "img:1", "env": [{"name": "X", "value": "1"}]},
                    {"name": "b", "image": "img:1"},
                ]
            },
        },
    )
    # A dict body goes as a strategic merge patch: containers merge by name.
    out = core.patch_namespaced_pod(
        "p", "default", {"spec": {"containers": [{"name": "b", "image": "img:2"}]}}
    )
    assert [(c.name, c.image) for c in out.spec.containers] == [("a", "img:1"), ("b", "img:2")]
    out = core.patch_namespaced_pod(
        "p",
        "default",
        {"metadata": {"labels": {"k": "v"}}},
        _content_type="application/merge-patch+json",
    )
    assert out.metadata.labels == {"k": "v"}
    out = core.patch_namespaced_pod(
        "p", "default", [{"op": "add", "path": "/metadata/annotations", "value": {"n": "1"}}]
    )
    assert out.metadata.annotations == {"n": "1"}
    status, _, body = raw(
        server,
        "PATCH",
        "/api/v1/namespaces/default/configmaps/applied?fieldManager=test",
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "applied"},
                "data": {"a": "1"},
            }
        ).encode(),
        {"Content-Type": "application/apply-patch+yaml"},
    )
    assert status == 201 and body["data"] == {"a": "1"}
    status, _, body = raw(
        server,
        "PATCH",
        "/api/v1/namespaces/default/configmaps/applied?fieldManager=other",
        b"data:\n  b: '2'\n",
        {"Content-Type": "application/apply-patch+yaml"},
    )
    assert status == 200 and body["data"] == {"a": "1", "b": "2"}
    # The first manager drops "a" from its configuration: the field goes.
    status, _, body = raw(
        server,
        "PATCH",
        "/api/v1/namespaces/default/configmaps/applied?fieldManager=test",
        b"data:\n  c: '3'\n",
        {"Content-Type": "application/apply-patch+yaml"},
    )
    assert status == 200 and body["data"] == {"b": "2", "c": "3"}
    status, _, body = raw(
        server,
        "PATCH",
        "/apis/test.kai-py.dev/v1/namespaces/default/x/y",
        b"{}",
        {"Content-Type": "application/merge-patch+json"},
    )
    assert status == 404


def test_status_subresource_of_pods(core: k8s.CoreV1Api) -> None:
    core.create_namespaced_pod("default", pod_body("p"))
    # As the real pod status strategy (tests/realapi's probe): labels and annotations
    # are written through pods/status too; the spec is not.
    out = core.patch_namespaced_pod_status(
        "p",
        "default",
        {
            "status": {"phase": "Running"},
            "metadata": {"labels": {"x": "y"}},
            "spec": {"activeDeadlineSeconds": 5},
        },
    )
    assert out.status.phase == "Running" and out.metadata.labels == {"x": "y"}
    assert out.spec.active_deadline_seconds is None
    out = core.patch_namespaced_pod("p", "default", {"status": {"phase": "Failed"}})
    assert out.status.phase == "Running"


def test_binding_and_eviction(core: k8s.CoreV1Api, server: ThreadedServer) -> None:
    core.create_namespaced_pod("default", pod_body("p"))
    binding = k8s.V1Binding(
        metadata=k8s.V1ObjectMeta(name="p"),
        target=k8s.V1ObjectReference(kind="Node", name="node-1"),
    )
    resp = core.create_namespaced_pod_binding("p", "default", binding, _preload_content=False)
    assert resp.status == 201
    assert json.loads(resp.data) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "code": 201,
    }
    pod = core.read_namespaced_pod("p", "default")
    assert pod.spec.node_name == "node-1"
    assert [c.type for c in pod.status.conditions] == ["PodScheduled"]
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod_binding("p", "default", binding, _preload_content=False)
    assert err.value.status == 409
    assert 'pod p is already assigned to node "node-1"' in error_body(err.value)["message"]
    core.create_namespaced_pod("default", pod_body("legacy"))
    legacy = k8s.V1Binding(
        metadata=k8s.V1ObjectMeta(name="legacy"),
        target=k8s.V1ObjectReference(kind="Node", name="node-2"),
    )
    resp = core.create_namespaced_binding("default", legacy, _preload_content=False)
    assert resp.status == 201
    assert core.read_namespaced_pod("legacy", "default").spec.node_name == "node-2"
    eviction = k8s.V1Eviction(metadata=k8s.V1ObjectMeta(name="p", namespace="default"))
    resp = core.create_namespaced_pod_eviction("p", "default", eviction, _preload_content=False)
    assert resp.status == 201
    pod = core.read_namespaced_pod("p", "default")
    assert pod.metadata.deletion_timestamp is not None  # graceful: still there
    assert pod.metadata.deletion_grace_period_seconds == 30
    core.delete_namespaced_pod("p", "default", grace_period_seconds=0)
    assert [p.metadata.name for p in core.list_namespaced_pod("default").items] == ["legacy"]


def test_binding_and_eviction_refuse_another_pods_uid(core: k8s.CoreV1Api) -> None:
    # As kube-apiserver: a Binding or Eviction naming the uid of an earlier pod of the
    # same name must not land on the pod made since.
    old = core.create_namespaced_pod("default", pod_body("again")).metadata.uid
    core.delete_namespaced_pod("again", "default", grace_period_seconds=0)
    new = core.create_namespaced_pod("default", pod_body("again")).metadata.uid
    binding = k8s.V1Binding(
        metadata=k8s.V1ObjectMeta(name="again", uid=old),
        target=k8s.V1ObjectReference(kind="Node", name="node-1"),
    )
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod_binding("again", "default", binding, _preload_content=False)
    assert err.value.status == 409
    message = error_body(err.value)["message"]
    assert f"Precondition failed: UID in precondition: {old}, UID in object meta: {new}" in message
    assert core.read_namespaced_pod("again", "default").spec.node_name is None
    eviction = k8s.V1Eviction(
        metadata=k8s.V1ObjectMeta(name="again", namespace="default"),
        delete_options=k8s.V1DeleteOptions(preconditions=k8s.V1Preconditions(uid=old)),
    )
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod_eviction("again", "default", eviction, _preload_content=False)
    assert err.value.status == 409
    assert core.read_namespaced_pod("again", "default").metadata.deletion_timestamp is None
    binding.metadata.uid = new
    core.create_namespaced_pod_binding("again", "default", binding, _preload_content=False)
    assert core.read_namespaced_pod("again", "default").spec.node_name == "node-1"


def test_bad_input_gets_status_errors(server: ThreadedServer) -> None:
    cases = [
        ("POST", "/api/v1/namespaces/default/pods", b"{not json", 400, "BadRequest"),
        ("GET", "/api/v1/namespaces/default/nosuchthings", None, 404, "NotFound"),
        ("GET", "/apis/nosuch.group/v1/things", None, 404, "NotFound"),
        ("GET", "/api/v1/namespaces/default/pods/missing", None, 404, "NotFound"),
        (
            "POST",
            "/api/v1/namespaces/default/pods",
            json.dumps(
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}
            ).encode(),
            400,
            "BadRequest",
        ),
        (
            "POST",
            "/api/v1/namespaces/default/pods",
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": "x"},
                    "spec": {"containers": []},
                }
            ).encode(),
            422,
            "Invalid",
        ),
        (
            "POST",
            "/api/v1/namespaces/other/configmaps",
            json.dumps({"metadata": {"name": "x", "namespace": "default"}}).encode(),
            400,
            "BadRequest",
        ),
        ("PUT", "/api/v1/namespaces/default/pods", b"{}", 405, "MethodNotAllowed"),
        (
            "POST",
            "/api/v1/pods",
            json.dumps({"metadata": {"name": "x", "namespace": "default"}, "spec": {}}).encode(),
            405,
            "MethodNotAllowed",
        ),
        ("GET", "/api/v1/pods/x", None, 404, "NotFound"),
        ("PATCH", "/api/v1/namespaces/default/configmaps/x", b"{}", 404, "NotFound"),
    ]
    for method, path, body, code, reason in cases:
        content_type = "application/merge-patch+json" if method == "PATCH" else "application/json"
        status, headers, answer = raw(server, method, path, body, {"Content-Type": content_type})
        assert status == code, (method, path, answer)
        assert headers["Content-Type"].startswith("application/json")
        assert answer["kind"] == "Status" and answer["code"] == code
        assert answer["reason"] == reason, answer
    status, _, answer = raw(
        server,
        "PATCH",
        "/api/v1/namespaces/default/configmaps/x",
        b"{}",
        {"Content-Type": "text/plain"},
    )
    assert status == 415


def test_discovery_lists_resources_and_subresources(server: ThreadedServer) -> None:
    _, _, core_list = raw(server, "GET", "/api/v1")
    names = {r["name"]: r for r in core_list["resources"]}
    assert {
        "pods",
        "pods/status",
        "pods/binding",
        "pods/eviction",
        "nodes",
        "nodes/status",
        "namespaces",
        "configmaps",
        "events",
        "serviceaccounts",
    } <= set(names)
    assert names["pods"]["shortNames"] == ["po"] and "watch" in names["pods"]["verbs"]
    assert names["pods/eviction"]["group"] == "policy"
    _, _, groups = raw(server, "GET", "/apis")
    served = {g["name"] for g in groups["groups"]}
    assert {
        "apps",
        "batch",
        "scheduling.k8s.io",
        "coordination.k8s.io",
        "events.k8s.io",
        "apiextensions.k8s.io",
        "admissionregistration.k8s.io",
    } <= served
    server.call(server.store.create("customresourcedefinitions", QUEUE_CRD))
    _, _, crd_list = raw(server, "GET", "/apis/test.kai-py.dev/v1")
    entries = {r["name"]: r for r in crd_list["resources"]}
    assert set(entries) == {"widgets", "widgets/status"}
    assert entries["widgets"]["shortNames"] == ["wd"]
    assert entries["widgets"]["categories"] == ["all"]
    _, _, version = raw(server, "GET", "/version")
    assert version["major"] == "1"


def test_table_output_for_pods_and_custom_columns(server: ThreadedServer) -> None:
    store = server.store
    server.call(store.create("pods", pod_body("p")))
    server.call(store.bind_pod("default", "p", "node-9"))
    server.call(store.create("customresourcedefinitions", QUEUE_CRD))
    server.call(store.create("widgets", widget("w", size=4, color="blue")))
    accept = {"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"}
    _, _, table = raw(server, "GET", "/api/v1/namespaces/default/pods", None, accept)
    assert table["kind"] == "Table"
    cols = [c["name"] for c in table["columnDefinitions"]]
    assert cols[:5] == ["Name", "Ready", "Status", "Restarts", "Age"]
    row = table["rows"][0]["cells"]
    assert row[:4] == ["p", "0/1", "Pending", 0] and row[6] == "node-9"
    assert table["rows"][0]["object"]["kind"] == "PartialObjectMetadata"
    _, _, table = raw(
        server, "GET", "/apis/test.kai-py.dev/v1/namespaces/default/widgets", None, accept
    )
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Size", "Color", "Phase"]
    assert table["rows"][0]["cells"] == ["w", 4, "blue", None]


def test_faults_latency_dropped_watches_and_restart(
    core: k8s.CoreV1Api, server: ThreadedServer
) -> None:
    srv = server.server
    fault = srv.faults.add(verb="create", resource="pods", code=500, times=1)
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod("default", pod_body("p"))
    assert err.value.status == 500 and fault.fired == 1
    core.create_namespaced_pod("default", pod_body("p"))  # the fault was used up
    srv.faults.add(verb="patch", resource="pods", code=409, fraction=1.0)
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_pod("p", "default", {"metadata": {"labels": {"a": "b"}}})
    assert err.value.status == 409
    srv.faults.clear()
    srv.faults.add(verb="get", resource="pods", latency=0.3)
    started = time.monotonic()
    core.read_namespaced_pod("p", "default")
    assert time.monotonic() - started >= 0.3
    srv.faults.clear()

    ended = threading.Event()

    def watch() -> None:
        for _ in k8s_watch.Watch().stream(
            core.list_namespaced_pod,
            "default",
            resource_version="1",
            timeout_seconds=20,
            _request_timeout=30,
        ):
            pass
        ended.set()

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    deadline = time.monotonic() + 5
    while not srv._http_watches and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server.call_soon(srv.drop_watches) == 1
    assert ended.wait(5), "the watch stream did not end when dropped"

    port = srv.port
    server.call(srv.stop())
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(server.url + "/version", timeout=2)
    server.call(srv.start())
    assert srv.port == port
    assert core.read_namespaced_pod("p", "default").metadata.name == "p"


def test_deletecollection_and_dry_run(core: k8s.CoreV1Api) -> None:
    for i in range(3):
        core.create_namespaced_config_map(
            "default", {"metadata": {"name": f"c{i}", "labels": {"group": "a" if i < 2 else "b"}}}
        )
    core.create_namespaced_config_map("default", {"metadata": {"name": "dry"}}, dry_run="All")
    assert len(core.list_namespaced_config_map("default").items) == 3
    core.delete_collection_namespaced_config_map("default", label_selector="group=a")
    assert [c.metadata.name for c in core.list_namespaced_config_map("default").items] == ["c2"]


def test_a_uid_in_a_patch_is_a_precondition(core: k8s.CoreV1Api) -> None:
    old = core.create_namespaced_pod("default", pod_body("again")).metadata.uid
    core.delete_namespaced_pod("again", "default", grace_period_seconds=0)
    new = core.create_namespaced_pod("default", pod_body("again")).metadata.uid
    for patch in (core.patch_namespaced_pod, core.patch_namespaced_pod_status):
        with pytest.raises(ApiException) as err:
            patch("again", "default", {"metadata": {"uid": old, "labels": {"x": "y"}}})
        assert err.value.status == 409
        assert (
            f"UID in precondition: {old}, UID in object meta: {new}"
            in error_body(err.value)["message"]
        )
    out = core.patch_namespaced_pod(
        "again", "default", {"metadata": {"uid": new, "labels": {"x": "y"}}}
    )
    assert out.metadata.labels == {"x": "y"}


def test_answers_and_watch_events_carry_each_stored_version_as_it_was(
    server: ThreadedServer,
) -> None:
    """Objects are serialized once per stored version and the bytes reused: every answer
    and event must still show the version it is about, never a later one."""
    json_type = {"Content-Type": "application/json"}
    merge = {"Content-Type": "application/merge-patch+json"}
    rv0 = server.store.resource_version
    _, _, created = raw(
        server,
        "POST",
        "/api/v1/namespaces/default/pods",
        json.dumps(pod_body("v")).encode(),
        json_type,
    )
    path = "/api/v1/namespaces/default/pods/v"
    answers = [created]
    for value in ("1", "2"):
        patch = {"metadata": {"labels": {"step": value}}}
        status, _, answer = raw(server, "PATCH", path, json.dumps(patch).encode(), merge)
        assert status == 200
        answers.append(answer)
    status_patch = {"status": {"phase": "Running"}}
    _, _, running = raw(server, "PATCH", path + "/status", json.dumps(status_patch).encode(), merge)
    answers.append(running)
    _, _, now = raw(server, "GET", path)
    assert now == running
    versions = [a["metadata"]["resourceVersion"] for a in answers]
    assert len(set(versions)) == 4
    assert [a["metadata"].get("labels", {}).get("step") for a in answers] == [None, "1", "2", "2"]
    url = f"{server.url}/api/v1/namespaces/default/pods?watch=1&resourceVersion={rv0}"
    with urllib.request.urlopen(url + "&timeoutSeconds=2", timeout=10) as resp:
        events = [json.loads(resp.readline()) for _ in answers]
    assert [e["type"] for e in events] == ["ADDED", "MODIFIED", "MODIFIED", "MODIFIED"]
    assert [e["object"] for e in events] == answers
