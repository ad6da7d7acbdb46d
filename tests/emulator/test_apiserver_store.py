"""The in-process Store: the semantics controllers and the HTTP layer share."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from apiserver_helpers import QUEUE_CRD, pod_body, run, widget

from kai_py.emulator.storage.errors import ApiError
from kai_py.emulator.storage.store import Store, collect


def test_create_assigns_metadata_and_one_counter_orders_everything() -> None:
    async def body() -> None:
        store = Store()
        a = await store.create("pods", pod_body("a"))
        b = await store.create("configmaps", {"metadata": {"name": "c", "namespace": "default"}})
        meta = a["metadata"]
        assert meta["uid"] and meta["creationTimestamp"].endswith("Z")
        assert int(b["metadata"]["resourceVersion"]) == int(meta["resourceVersion"]) + 1
        assert a["kind"] == "Pod" and a["apiVersion"] == "v1"
        assert a["status"]["phase"] == "Pending"
        with pytest.raises(ApiError) as err:
            await store.create("pods", pod_body("a"))
        assert err.value.code == 409 and err.value.reason == "AlreadyExists"
        assert err.value.message == 'pods "a" already exists'

    run(body())


def test_generate_name_and_missing_name() -> None:
    async def body() -> None:
        store = Store()
        obj = await store.create(
            "configmaps", {"metadata": {"generateName": "cm-", "namespace": "default"}}
        )
        assert obj["metadata"]["name"].startswith("cm-") and len(obj["metadata"]["name"]) == 8
        with pytest.raises(ApiError) as err:
            await store.create("configmaps", {"metadata": {"namespace": "default"}})
        assert err.value.code == 422
        assert (
            "metadata.name: Required value: name or generateName is required" in err.value.message
        )

    run(body())


def test_namespace_must_exist() -> None:
    async def body() -> None:
        store = Store()
        with pytest.raises(ApiError) as err:
            await store.create("pods", pod_body("a", namespace="nope"))
        assert err.value.code == 404 and err.value.message == 'namespaces "nope" not found'

    run(body())


def test_stale_update_is_a_conflict_and_generation_tracks_spec() -> None:
    async def body() -> None:
        store = Store()
        await store.create(QUEUE_CRD["kind"], QUEUE_CRD)
        w = await store.create("widgets", widget("w1"))
        assert w["metadata"]["generation"] == 1
        w["spec"]["size"] = 5
        w2 = await store.update("widgets", w)
        assert w2["metadata"]["generation"] == 2
        w2["metadata"]["labels"] = {"a": "b"}
        w3 = await store.update("widgets", w2)
        assert w3["metadata"]["generation"] == 2  # metadata is not spec
        with pytest.raises(ApiError) as err:
            await store.update("widgets", w2)  # w2's resourceVersion is stale now
        assert err.value.code == 409 and err.value.reason == "Conflict"
        assert "the object has been modified" in err.value.message

    run(body())


def test_noop_update_keeps_resource_version() -> None:
    async def body() -> None:
        store = Store()
        cm = await store.create(
            "configmaps", {"metadata": {"name": "c", "namespace": "default"}, "data": {"k": "v"}}
        )
        again = await store.update("configmaps", cm)
        assert again["metadata"]["resourceVersion"] == cm["metadata"]["resourceVersion"]

    run(body())


def test_status_subresource_separates_spec_and_status() -> None:
    async def body() -> None:
        store = Store()
        await store.create("customresourcedefinitions", QUEUE_CRD)
        w = await store.create("widgets", {**widget("w1"), "status": {"phase": "Ignored"}})
        assert "status" not in w
        w["status"] = {"phase": "Ready"}
        w["spec"]["size"] = 9
        w = await store.update_status("widgets", w)
        assert w["status"] == {"phase": "Ready"} and w["spec"]["size"] == 3
        w["status"] = {"phase": "Changed"}
        w["spec"]["size"] = 4
        w = await store.update("widgets", w)
        assert w["status"] == {"phase": "Ready"} and w["spec"]["size"] == 4

    run(body())


def test_crd_schema_defaults_prunes_and_validates() -> None:
    async def body() -> None:
        store = Store()
        await store.create("customresourcedefinitions", QUEUE_CRD)
        warnings: list[str] = []
        w = await store.create(
            "widgets", widget("w1", bogus=1, extra={"free": {"x": 1}}), warnings=warnings
        )
        assert w["spec"]["color"] == "red"
        assert "bogus" not in w["spec"] and w["spec"]["extra"] == {"free": {"x": 1}}
        assert warnings == ['unknown field "spec.bogus"']
        with pytest.raises(ApiError) as err:
            await store.create("widgets", widget("w2", bogus=1), field_validation="Strict")
        assert err.value.code == 400 and 'unknown field "spec.bogus"' in err.value.message
        cases: list[tuple[dict[str, Any], str, str]] = [
            (
                widget("x", size="big"),
                "spec.size",
                'spec.size: Invalid value: "string": spec.size in body must be of type integer: '
                '"string"',
            ),
            (
                widget("x", size=0),
                "spec.size",
                "spec.size: Invalid value: 0: spec.size in body should be greater than or equal "
                "to 1",
            ),
            (widget("x", size=101), "spec.size", "should be less than or equal to 100"),
            (
                widget("x", color="pink"),
                "spec.color",
                'spec.color: Unsupported value: "pink": supported values: "red", "green", "blue"',
            ),
            (widget("x", label="Bad1"), "spec.label", "spec.label in body should match '^[a-z]+$'"),
            (
                widget("x", tags=["a", "b", "c", "d"]),
                "spec.tags",
                "spec.tags: Too many: 4: must have at most 3 items",
            ),
            ({**widget("x"), "spec": {}}, "spec.size", "spec.size: Required value"),
        ]
        for obj, field, text in cases:
            with pytest.raises(ApiError) as err:
                await store.create("widgets", obj)
            assert err.value.code == 422, obj
            assert err.value.message.startswith('Widget.test.kai-py.dev "x" is invalid: ')
            assert text in err.value.message, err.value.message
            causes = err.value.status["details"]["causes"]
            assert [c["field"] for c in causes] == [field]

    run(body())


def test_list_selectors_and_paging() -> None:
    async def body() -> None:
        store = Store()
        for i in range(7):
            labels = {"app": "web" if i % 2 else "db", "tier": str(i)}
            await store.create("pods", pod_body(f"p{i}", labels=labels))
        await store.bind_pod("default", "p3", "node-a")
        items, rv = await store.list("pods", label_selector="app=web")
        assert [p["metadata"]["name"] for p in items] == ["p1", "p3", "p5"]
        assert int(rv) == store.resource_version
        items, _ = await store.list("pods", label_selector="app!=web,tier in (0,2,9)")
        assert [p["metadata"]["name"] for p in items] == ["p0", "p2"]
        items, _ = await store.list("pods", label_selector="tier notin (0,1,2,3,4),!missing")
        assert [p["metadata"]["name"] for p in items] == ["p5", "p6"]
        items, _ = await store.list("pods", field_selector="spec.nodeName=node-a")
        assert [p["metadata"]["name"] for p in items] == ["p3"]
        items, _ = await store.list("pods", field_selector="spec.nodeName=")
        assert len(items) == 6
        with pytest.raises(ApiError) as err:
            await store.list("pods", field_selector="spec.bogus=1")
        assert err.value.code == 400
        names, token = [], None
        while True:
            page = await store.list_page("pods", limit=3, continue_=token)
            names += [p["metadata"]["name"] for p in page.items]
            token = page.continue_token
            if not token:
                break
            assert page.remaining is not None and page.remaining > 0
        assert names == [f"p{i}" for i in range(7)]

    run(body())


def test_watch_from_resource_version_replays_and_follows() -> None:
    async def body() -> None:
        store = Store()
        await store.create("pods", pod_body("before"))
        _, rv = await store.list("pods")
        await store.create("pods", pod_body("after"))
        w = store.watch("pods", resource_version=rv)
        await store.delete("pods", "default", "before")
        events = await collect(w, 2)
        assert [(t, o["metadata"]["name"]) for t, o in events] == [
            ("ADDED", "after"),
            ("DELETED", "before"),
        ]
        w.close()
        fresh = store.watch("pods")  # no resourceVersion: the current state first
        events = await collect(fresh, 1)
        assert events[0][0] == "ADDED" and events[0][1]["metadata"]["name"] == "after"

    run(body())


def test_watch_with_label_selector_sees_objects_leave_and_enter() -> None:
    async def body() -> None:
        store = Store()
        cm = await store.create(
            "configmaps",
            {"metadata": {"name": "c", "namespace": "default", "labels": {"watched": "yes"}}},
        )
        w = store.watch(
            "configmaps",
            "default",
            resource_version=cm["metadata"]["resourceVersion"],
            label_selector="watched=yes",
        )
        cm["metadata"]["labels"]["watched"] = "no"
        cm = await store.update("configmaps", cm)
        cm["metadata"]["labels"]["watched"] = "yes"
        await store.update("configmaps", cm)
        events = await collect(w, 2)
        assert [t for t, _ in events] == ["DELETED", "ADDED"]

    run(body())


def test_expired_resource_version_is_410() -> None:
    async def body() -> None:
        store = Store(history_size=5)
        first = await store.create(
            "configmaps", {"metadata": {"name": "c0", "namespace": "default"}}
        )
        for i in range(1, 10):
            await store.create(
                "configmaps", {"metadata": {"name": f"c{i}", "namespace": "default"}}
            )
        with pytest.raises(ApiError) as err:
            store.watch("configmaps", resource_version=first["metadata"]["resourceVersion"])
        assert err.value.code == 410 and err.value.reason == "Expired"
        assert err.value.message.startswith("too old resource version")

    run(body())


def test_finalizers_delay_deletion_until_removed() -> None:
    async def body() -> None:
        store = Store()
        cm = await store.create(
            "configmaps",
            {"metadata": {"name": "c", "namespace": "default", "finalizers": ["test/hold"]}},
        )
        w = store.watch("configmaps", resource_version=cm["metadata"]["resourceVersion"])
        out = await store.delete("configmaps", "default", "c")
        assert out["metadata"]["deletionTimestamp"]
        still = await store.get("configmaps", "default", "c")
        with pytest.raises(ApiError) as err:
            await store.patch(
                "configmaps",
                "default",
                "c",
                {"metadata": {"finalizers": ["test/hold", "test/new"]}},
            )
        assert err.value.code == 422 and "no new finalizers" in err.value.message
        await store.patch(
            "configmaps",
            "default",
            "c",
            [
                {"op": "test", "path": "/metadata/finalizers/0", "value": "test/hold"},
                {"op": "remove", "path": "/metadata/finalizers/0"},
            ],
            "json",
        )
        events = await collect(w, 2)
        assert [t for t, _ in events] == ["MODIFIED", "DELETED"]
        assert still["metadata"]["finalizers"] == ["test/hold"]
        with pytest.raises(ApiError):
            await store.get("configmaps", "default", "c")

    run(body())


def _owned(
    name: str, owner: dict[str, Any], kind: str = "ConfigMap", block: bool = False
) -> dict[str, Any]:
    ref = {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "blockOwnerDeletion": block,
    }
    return {"metadata": {"name": name, "namespace": "default", "ownerReferences": [ref]}}


def test_garbage_collection_background_foreground_orphan() -> None:
    async def body() -> None:
        store = Store()
        for policy in ("Background", "Foreground", "Orphan"):
            tag = policy.lower()
            owner = await store.create(
                "configmaps", {"metadata": {"name": f"owner-{tag}", "namespace": "default"}}
            )
            child = await store.create("configmaps", _owned(f"child-{tag}", owner))
            await store.create("configmaps", _owned(f"grandchild-{tag}", child))
            result = await store.delete(
                "configmaps", "default", f"owner-{tag}", propagation_policy=policy
            )
            if policy == "Foreground":
                assert "foregroundDeletion" in result["metadata"]["finalizers"]
            await store.wait_idle()
            names = {c["metadata"]["name"] for c in (await store.list("configmaps"))[0]}
            assert f"owner-{tag}" not in names
            if policy == "Orphan":
                assert {f"child-{tag}", f"grandchild-{tag}"} <= names
                orphan = await store.get("configmaps", "default", f"child-{tag}")
                assert "ownerReferences" not in orphan["metadata"]
            else:
                assert f"child-{tag}" not in names and f"grandchild-{tag}" not in names

    run(body())


def test_dependent_with_a_live_second_owner_survives() -> None:
    async def body() -> None:
        store = Store()
        a = await store.create("configmaps", {"metadata": {"name": "a", "namespace": "default"}})
        b = await store.create("configmaps", {"metadata": {"name": "b", "namespace": "default"}})
        child = _owned("child", a)
        child["metadata"]["ownerReferences"].append(
            _owned("x", b)["metadata"]["ownerReferences"][0]
        )
        await store.create("configmaps", child)
        await store.delete("configmaps", "default", "a")
        await store.wait_idle()
        kept = await store.get("configmaps", "default", "child")
        assert [r["name"] for r in kept["metadata"]["ownerReferences"]] == ["b"]

    run(body())


def test_graceful_pod_deletion_with_and_without_kubelet() -> None:
    async def body() -> None:
        store = Store()
        store.attach_kubelet("node-k")
        await store.create("pods", pod_body("on-kubelet", node="node-k"))
        await store.create("pods", pod_body("no-kubelet", node="node-x"))
        await store.create("pods", pod_body("unbound"))
        out = await store.delete("pods", "default", "unbound")
        assert "deletionTimestamp" not in out["metadata"]  # never scheduled: gone at once
        out = await store.delete("pods", "default", "on-kubelet")
        assert out["metadata"]["deletionGracePeriodSeconds"] == 30
        out = await store.delete("pods", "default", "no-kubelet", grace_period_seconds=1)
        assert out["metadata"]["deletionGracePeriodSeconds"] == 1
        await asyncio.sleep(1.3)
        names = [p["metadata"]["name"] for p in (await store.list("pods"))[0]]
        assert names == ["on-kubelet"]  # waits for its kubelet; the other timed out
        await store.delete("pods", "default", "on-kubelet", grace_period_seconds=0)
        assert (await store.list("pods"))[0] == []

    run(body())


def test_namespace_deletion_removes_contents() -> None:
    async def body() -> None:
        store = Store()
        await store.create("namespaces", {"metadata": {"name": "team"}})
        await store.create("pods", pod_body("p", namespace="team", node="n1"))
        await store.create("configmaps", {"metadata": {"name": "c", "namespace": "team"}})
        ns = await store.delete("namespaces", None, "team")
        assert ns["status"]["phase"] == "Terminating"
        with pytest.raises(ApiError) as err:
            await store.create("configmaps", {"metadata": {"name": "d", "namespace": "team"}})
        assert err.value.code == 403
        await store.wait_idle()
        with pytest.raises(ApiError):
            await store.get("namespaces", None, "team")
        assert (await store.list("pods", "team"))[0] == []

    run(body())


def test_binding_and_pod_spec_immutability() -> None:
    async def body() -> None:
        store = Store()
        await store.create("pods", pod_body("p"))
        bound = await store.bind_pod("default", "p", "node-1")
        assert bound["spec"]["nodeName"] == "node-1"
        assert any(
            c["type"] == "PodScheduled" and c["status"] == "True"
            for c in bound["status"]["conditions"]
        )
        with pytest.raises(ApiError) as err:
            await store.bind_pod("default", "p", "node-2")
        assert err.value.code == 409
        assert 'pod p is already assigned to node "node-1"' in err.value.message
        with pytest.raises(ApiError) as err:
            await store.patch("pods", "default", "p", {"spec": {"nodeName": "node-2"}})
        assert (
            err.value.code == 422
            and "spec: Forbidden: pod updates may not change" in err.value.message
        )
        image = await store.patch(
            "pods",
            "default",
            "p",
            {"spec": {"containers": [{"name": "main", "image": "busybox:1.37"}]}},
            "strategic",
        )
        assert image["spec"]["containers"][0]["image"] == "busybox:1.37"
        assert image["spec"]["containers"][0]["terminationMessagePath"]  # merged, not replaced

    run(body())


def test_json_patch_test_failure_is_422() -> None:
    async def body() -> None:
        store = Store()
        await store.create(
            "configmaps", {"metadata": {"name": "c", "namespace": "default"}, "data": {"k": "v"}}
        )
        with pytest.raises(ApiError) as err:
            await store.patch(
                "configmaps",
                "default",
                "c",
                [
                    {"op": "test", "path": "/data/k", "value": "other"},
                    {"op": "replace", "path": "/data/k", "value": "new"},
                ],
                "json",
            )
        assert err.value.code == 422
        assert (await store.get("configmaps", "default", "c"))["data"] == {"k": "v"}

    run(body())


def test_crd_deletion_stops_serving_its_resources() -> None:
    async def body() -> None:
        store = Store()
        await store.create("customresourcedefinitions", QUEUE_CRD)
        crd = await store.get("customresourcedefinitions", None, QUEUE_CRD["metadata"]["name"])
        assert {c["type"] for c in crd["status"]["conditions"]} == {"Established", "NamesAccepted"}
        await store.create("widgets", widget("w"))
        await store.delete("customresourcedefinitions", None, QUEUE_CRD["metadata"]["name"])
        with pytest.raises(ApiError) as err:
            await store.get("widgets", "default", "w")
        assert err.value.code == 404

    run(body())


def test_pod_priority_comes_from_its_priority_class() -> None:
    async def body() -> None:
        store = Store()
        await store.create(
            "priorityclasses",
            {"metadata": {"name": "train"}, "value": 50, "preemptionPolicy": "Never"},
        )
        pod = await store.create("pods", pod_body("p", priorityClassName="train"))
        assert pod["spec"]["priority"] == 50 and pod["spec"]["preemptionPolicy"] == "Never"
        plain = await store.create("pods", pod_body("q"))
        assert plain["spec"]["priority"] == 0
        system = await store.create("pods", pod_body("s", priorityClassName="system-node-critical"))
        assert system["spec"]["priority"] == 2000001000
        with pytest.raises(ApiError) as err:
            await store.create("pods", pod_body("x", priorityClassName="missing"))
        assert err.value.code == 403
        assert err.value.message == (
            'pods "x" is forbidden: no PriorityClass with name missing was found'
        )
        await store.create(
            "priorityclasses", {"metadata": {"name": "dflt"}, "value": 7, "globalDefault": True}
        )
        defaulted = await store.create("pods", pod_body("d"))
        assert defaulted["spec"]["priority"] == 7
        assert defaulted["spec"]["priorityClassName"] == "dflt"

    run(body())


def test_server_side_apply_removes_fields_the_manager_dropped() -> None:
    async def body() -> None:
        store = Store()
        manifest: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "c", "namespace": "default", "labels": {"a": "1", "b": "2"}},
            "data": {"x": "1", "y": "2"},
        }
        await store.patch("configmaps", "default", "c", manifest, "apply", field_manager="me")
        await store.patch(
            "configmaps", "default", "c", {"metadata": {"labels": {"c": "3"}}}, "merge"
        )
        manifest["metadata"]["labels"] = {"a": "1"}
        manifest["data"] = {"x": "1"}
        out = await store.patch("configmaps", "default", "c", manifest, "apply", field_manager="me")
        assert out["metadata"]["labels"] == {"a": "1", "c": "3"}  # c was not applied by "me"
        assert out["data"] == {"x": "1"}

    run(body())


def test_events_are_one_storage_in_two_groups() -> None:
    async def body() -> None:
        store = Store()
        pod = await store.create("pods", pod_body("p"))
        ref = {
            "kind": "Pod",
            "namespace": "default",
            "name": "p",
            "uid": pod["metadata"]["uid"],
            "apiVersion": "v1",
        }
        new_style = {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"name": "p.1", "namespace": "default"},
            "eventTime": "2026-01-01T00:00:00.000000Z",
            "reportingController": "kai-py",
            "reportingInstance": "kai-py-0",
            "action": "Scheduling",
            "reason": "Unschedulable",
            "type": "Warning",
            "note": "0/4 nodes have a free GPU",
            "regarding": ref,
        }
        await store.create("events.v1.events.k8s.io", new_style)
        core, _ = await store.list(
            "events", "default", field_selector="involvedObject.name=p,involvedObject.kind=Pod"
        )
        assert [(e["message"], e["reportingComponent"], e["apiVersion"]) for e in core] == [
            ("0/4 nodes have a free GPU", "kai-py", "v1")
        ]
        back, _ = await store.list(
            "events.v1.events.k8s.io", "default", field_selector="regarding.name=p"
        )
        assert back[0]["note"] == "0/4 nodes have a free GPU"
        assert back[0]["apiVersion"] == "events.k8s.io/v1" and "message" not in back[0]
        with pytest.raises(ApiError) as err:
            await store.create(
                "events.v1.events.k8s.io",
                {"metadata": {"name": "bad", "namespace": "default"}, "regarding": ref},
            )
        assert err.value.code == 422 and "eventTime: Required value" in err.value.message

    run(body())


def test_interrupted_garbage_collection_resumes_on_a_new_loop() -> None:
    store = Store()

    async def first() -> None:
        owner = await store.create(
            "configmaps", {"metadata": {"name": "o", "namespace": "default"}}
        )
        await store.create("configmaps", _owned("dep", owner))
        await store.delete("configmaps", "default", "o")
        store.cancel_background()  # the loop ends before the collector ran

    async def second() -> list[str]:
        store.resume_background()
        await store.wait_idle()
        return [c["metadata"]["name"] for c in (await store.list("configmaps"))[0]]

    run(first())
    assert [c["metadata"]["name"] for c in store.iter_objects("configmaps")] == ["dep"]
    assert run(second()) == []


def test_dependents_of_an_owner_that_never_existed_are_collected() -> None:
    async def body() -> None:
        store = Store()
        live = await store.create(
            "configmaps", {"metadata": {"name": "live", "namespace": "default"}}
        )
        ghost = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "ghost", "uid": "no-such-uid"},
        }
        await store.create("configmaps", _owned("orphaned", ghost))
        both = _owned("shared", live)
        both["metadata"]["ownerReferences"] += _owned("x", ghost)["metadata"]["ownerReferences"]
        await store.create("configmaps", both)
        await store.wait_idle()
        left = {c["metadata"]["name"]: c for c in (await store.list("configmaps"))[0]}
        assert set(left) == {"live", "shared"}
        assert [r["name"] for r in left["shared"]["metadata"]["ownerReferences"]] == ["live"]

    run(body())


def test_server_side_apply_of_a_custom_resource_treats_lists_as_atomic() -> None:
    async def body() -> None:
        store = Store()
        await store.create("customresourcedefinitions", QUEUE_CRD)
        await store.patch(
            "widgets", "default", "w", widget("w", tags=["a", "b"]), "apply", field_manager="me"
        )
        out = await store.patch(
            "widgets", "default", "w", widget("w", tags=["c"]), "apply", field_manager="me"
        )
        assert out["spec"]["tags"] == ["c"]
        out = await store.patch("widgets", "default", "w", widget("w"), "apply", field_manager="me")
        assert "tags" not in out["spec"] and out["spec"]["size"] == 3

    run(body())


def test_status_given_at_creation_is_dropped_except_for_nodes() -> None:
    async def body() -> None:
        store = Store()
        pod = await store.create("pods", {**pod_body("p"), "status": {"phase": "Running"}})
        assert pod["status"] == {"phase": "Pending", "qosClass": "BestEffort"}
        node = await store.create(
            "nodes", {"metadata": {"name": "n"}, "status": {"capacity": {"nvidia.com/gpu": "8"}}}
        )
        assert node["status"] == {"capacity": {"nvidia.com/gpu": "8"}}

    run(body())


def test_owner_references_are_validated() -> None:
    async def body() -> None:
        store = Store()
        with pytest.raises(ApiError) as err:
            await store.create(
                "configmaps",
                {
                    "metadata": {
                        "name": "c",
                        "namespace": "default",
                        "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "o"}],
                    }
                },
            )
        assert err.value.code == 422
        assert (
            'metadata.ownerReferences.uid: Invalid value: "": uid must not be empty'
            in err.value.message
        )

    run(body())


def test_namespaces_get_a_default_service_account_and_services_a_cluster_ip() -> None:
    async def body() -> None:
        store = Store()
        await store.create("namespaces", {"metadata": {"name": "team"}})
        accounts, _ = await store.list("serviceaccounts")
        assert sorted(a["metadata"]["namespace"] for a in accounts) == [
            "default",
            "kube-node-lease",
            "kube-public",
            "kube-system",
            "team",
        ]
        assert {a["metadata"]["name"] for a in accounts} == {"default"}
        a = await store.create(
            "services",
            {"metadata": {"name": "a", "namespace": "team"}, "spec": {"ports": [{"port": 80}]}},
        )
        b = await store.create(
            "services",
            {"metadata": {"name": "b", "namespace": "team"}, "spec": {"ports": [{"port": 80}]}},
        )
        assert a["spec"]["type"] == "ClusterIP"
        assert a["spec"]["clusterIP"] != b["spec"]["clusterIP"]
        assert a["spec"]["clusterIPs"] == [a["spec"]["clusterIP"]]
        replaced = await store.update(
            "services",
            {"metadata": {"name": "a", "namespace": "team"}, "spec": {"ports": [{"port": 81}]}},
        )
        assert replaced["spec"]["clusterIP"] == a["spec"]["clusterIP"]

    run(body())


def test_shared_answers_are_the_stored_versions_and_later_writes_leave_them_alone() -> None:
    """What the HTTP layer serializes without a copy (and keeps serialized, by identity)
    must never change: each write stores a new object, and the in-process callers still
    get copies of their own."""

    async def body() -> None:
        store = Store()
        created = await store.create("pods", pod_body("a"), shared=True)
        assert await store.get("pods", "default", "a", shared=True) is created
        before = json.dumps(created, sort_keys=True)
        labelled = await store.patch(
            "pods", "default", "a", {"metadata": {"labels": {"x": "1"}}}, shared=True
        )
        status = await store.patch(
            "pods",
            "default",
            "a",
            {
                "metadata": {"labels": {"x": "2"}},
                "spec": {"activeDeadlineSeconds": 5},
                "status": {"phase": "Running"},
            },
            subresource="status",
            shared=True,
        )
        bound = await store.bind_pod("default", "a", "node-1", shared=True)
        assert json.dumps(created, sort_keys=True) == before
        assert labelled["metadata"]["labels"] == {"x": "1"} and "nodeName" not in labelled["spec"]
        # pods/status writes the metadata too (as a real server), never the spec.
        assert status["metadata"]["labels"] == {"x": "2"}
        assert "activeDeadlineSeconds" not in status["spec"]
        assert status["status"]["phase"] == "Running" and labelled["status"]["phase"] == "Pending"
        assert bound["spec"]["nodeName"] == "node-1" and "nodeName" not in status["spec"]
        assert status["spec"] is not labelled["spec"]  # versions share nothing mutable
        assert bound is await store.get("pods", "default", "a", shared=True)
        mine = await store.get("pods", "default", "a")
        assert mine == bound and mine is not bound
        mine["spec"]["nodeName"] = "elsewhere"
        assert (await store.get("pods", "default", "a"))["spec"]["nodeName"] == "node-1"

    run(body())


def test_node_pod_cidrs_must_be_cidrs() -> None:
    """As the real API server: a Node whose spec.podCIDRs holds no CIDR is refused."""

    async def body() -> None:
        store = Store()
        good = {"metadata": {"name": "n1"}, "spec": {"podCIDRs": ["10.245.0.0/24"]}}
        assert (await store.create("nodes", good))["spec"]["podCIDRs"] == ["10.245.0.0/24"]
        bad = {"metadata": {"name": "n2"}, "spec": {"podCIDRs": ["10.244.256.0/24"]}}
        with pytest.raises(ApiError) as err:
            await store.create("nodes", bad)
        assert err.value.code == 422
        assert 'spec.podCIDRs[0]: Invalid value: "10.244.256.0/24"' in err.value.message

    run(body())
