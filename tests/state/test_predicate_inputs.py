"""What the predicates beyond a node's labels read: ConfigMaps that exist, a pod's
ConfigMap references and host ports, through the operator's cache as through
``kai-py simulate``."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kai_py.api.objects import WorkloadError
from kai_py.binder import reservation
from kai_py.controllers.webhooks import deviceaccess
from kai_py.scheduler.model import TaskStatus
from kai_py.state import convert
from kai_py.state.builder import Built, build
from kai_py.state.cache import CONFIGMAPS, NODES, PODGROUPS, PODS, QUEUES, ClusterCache
from kai_py.state.documents import Document

NOW = 1_800_000_000.0
Json = dict[str, Any]


def _pod(**spec: Any) -> Json:
    body: Json = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "p",
            "namespace": "ns",
            "uid": "p",
            "resourceVersion": "1",
            "annotations": {"pod-group-name": "pg"},
        },
        "spec": {
            "schedulerName": "kai-scheduler",
            "containers": [{"name": "main", "image": "busybox", "resources": {}}],
        },
    }
    body["spec"].update(spec)
    return body


def _task(body: Json) -> Any:
    return convert.task_from_pod(body, "pg", TaskStatus.PENDING, NOW)


def test_the_cache_keeps_a_configmaps_name_not_its_data() -> None:
    cache = ClusterCache()
    body = {
        "metadata": {"name": "cfg", "namespace": "ns", "uid": "c", "resourceVersion": "1"},
        "data": {"big": "x" * 10_000},
    }
    before = cache.generation
    assert cache.observe(CONFIGMAPS, "ADDED", body)
    assert cache.generation > before  # a pod waiting for it is decided again
    assert cache.objects[CONFIGMAPS][("ns", "cfg")] == {
        "metadata": {"name": "cfg", "namespace": "ns", "uid": "c", "resourceVersion": "1"}
    }
    assert cache.view(NOW).config_maps == {("ns", "cfg")}
    cache.observe(CONFIGMAPS, "DELETED", body)
    assert cache.view(NOW).config_maps == frozenset()


def test_a_pod_reads_the_same_through_the_cache_as_from_its_manifest() -> None:
    body = _pod(
        volumes=[
            {"name": "a", "configMap": {"name": "cfg-a"}},
            {"name": "b", "projected": {"sources": [{"configMap": {"name": "cfg-b"}}]}},
            {"name": "scratch", "emptyDir": {}},
        ]
    )
    main = body["spec"]["containers"][0]
    main["volumeMounts"] = [{"name": n, "mountPath": f"/{n}"} for n in ("a", "b", "scratch")]
    main["env"] = [
        {"name": "X", "valueFrom": {"configMapKeyRef": {"name": "cfg-x", "key": "x"}}},
        {"name": "SECRET", "value": "not kept"},
    ]
    main["envFrom"] = [{"configMapRef": {"name": "cfg-all"}}]
    main["ports"] = [{"containerPort": 80, "hostPort": 8080}, {"containerPort": 81}]
    body["spec"]["initContainers"] = [
        {
            "name": "sidecar",
            "restartPolicy": "Always",
            "ports": [{"containerPort": 9, "hostPort": 9, "protocol": "UDP"}],
        },
        {"name": "once", "ports": [{"containerPort": 10, "hostPort": 10}]},  # gone when main runs
    ]
    direct = _task(copy.deepcopy(body))
    assert direct.needs is not None
    assert direct.needs.config_maps == (
        ("cfg-a", 'volume "a"'),
        ("cfg-b", 'volume "b"'),
        ("cfg-x", 'container "main" env X'),
        ("cfg-all", 'container "main" envFrom'),
    )
    assert direct.needs.host_ports == (("TCP", "0.0.0.0", 8080), ("UDP", "0.0.0.0", 9))
    cache = ClusterCache()
    cache.observe(
        QUEUES, "ADDED", {"metadata": {"name": "q", "uid": "q", "resourceVersion": "1"}, "spec": {}}
    )
    cache.observe(
        PODGROUPS,
        "ADDED",
        {
            "metadata": {"name": "pg", "namespace": "ns", "uid": "pg", "resourceVersion": "1"},
            "spec": {"minMember": 1, "queue": "q"},
        },
    )
    cache.observe(
        NODES,
        "ADDED",
        {
            "metadata": {"name": "n", "uid": "n", "resourceVersion": "1"},
            "status": {"allocatable": {"cpu": "8"}},
        },
    )
    cache.observe(PODS, "ADDED", body)
    projected = cache.objects[PODS][("ns", "p")]
    assert "SECRET" not in str(projected) and "emptyDir" not in str(projected)
    (task,) = [t for j in cache.view(NOW).build(NOW).snapshot.jobs for t in j.tasks]
    assert task.needs == direct.needs


def test_the_common_pod_has_nothing_to_check() -> None:
    task = _task(_pod())
    assert task.needs is None  # one test in the predicates' hot loop


def test_a_shared_pod_does_not_wait_for_the_gpu_configmap_the_binder_writes() -> None:
    assert convert._BINDER_GPU_KEYS == reservation.GPU_KEYS
    body = _pod()
    body["metadata"]["annotations"]["gpu-fraction"] = "0.5"
    wired = deviceaccess.mutate(body, "kai-scheduler")
    assert wired is not None
    body["spec"] = wired.spec
    body["metadata"]["annotations"].update(wired.annotations)
    # KAI's wiring (<prefix>-0 by key, <prefix>-0-evar by envFrom, a volume), and the
    # ConfigMap of a pod wired before KAI's naming.
    body["spec"]["containers"][0]["envFrom"].append({"configMapRef": {"name": "p-gpu"}})
    text = str(body["spec"])
    assert "configMapKeyRef" in text and "-shared-gpu-0-evar" in text
    assert _task(body).needs is None
    # The same references on a pod that shares no GPU are the user's own.
    del body["metadata"]["annotations"]["gpu-fraction"]
    needs = _task(body).needs
    assert needs is not None
    names = [name for name, _ in needs.config_maps]
    assert "p-gpu" in names and any(n.endswith("-shared-gpu-0-evar") for n in names)


def test_a_bad_host_port_is_named() -> None:
    body = _pod()
    body["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 70000}]
    with pytest.raises(WorkloadError, match=r"spec\.containers\[0\]\.ports\[0\]\.hostPort.*70000"):
        _task(body)


def test_preferred_terms_are_read_with_their_weights() -> None:
    term = {"labelSelector": {"matchLabels": {"app": "a"}}, "topologyKey": "zone"}
    body = _pod(
        affinity={
            "podAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 30, "podAffinityTerm": term}
                ]
            },
            "podAntiAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 7, "podAffinityTerm": term}
                ]
            },
            "nodeAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 5,
                        "preference": {
                            "matchExpressions": [
                                {"key": "disk", "operator": "In", "values": ["ssd"]}
                            ]
                        },
                    }
                ]
            },
        }
    )
    task = _task(body)
    assert [(w, t.topology_key, t.match_labels) for w, t in task.preferred_pod_affinity] == [
        (30, "zone", (("app", "a"),)),
        (-7, "zone", (("app", "a"),)),
    ]
    assert [(w, [(r.key, r.values) for r in reqs]) for w, reqs in task.preferred_affinity] == [
        (5, [("disk", ("ssd",))])
    ]


def test_a_bad_weight_is_named() -> None:
    body = _pod(
        affinity={
            "podAntiAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 0, "podAffinityTerm": {"topologyKey": "zone"}}
                ]
            }
        }
    )
    with pytest.raises(
        WorkloadError,
        match=r"podAntiAffinity\.preferredDuringSchedulingIgnoredDuringExecution\[0\]\.weight.*got 0",
    ):
        _task(body)


def _built_in_a_group(body: Json) -> Built:
    """``body`` (pod ``ns/p``) built with its PodGroup, as the operator reads them."""
    pg = {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": "pg", "namespace": "ns"},
        "spec": {"minMember": 1, "queue": "default-queue"},
    }
    return build([Document("pg", pg), Document("p", body)], NOW)


def test_a_preference_by_field_is_said_not_applied() -> None:
    body = _pod(
        affinity={
            "nodeAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 5,
                        "preference": {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": ["n"]}
                            ]
                        },
                    }
                ]
            }
        }
    )
    built = _built_in_a_group(body)
    (task,) = [t for j in built.snapshot.jobs for t in j.tasks]
    assert task.preferred_affinity == ()
    assert any(
        e.reason == "NotApplied" and "preference.matchFields" in e.message for e in built.events
    )


def test_a_preferred_pod_term_with_a_namespace_selector_is_said_not_applied() -> None:
    term = {
        "labelSelector": {"matchLabels": {"app": "a"}},
        "topologyKey": "kubernetes.io/hostname",
        "namespaceSelector": {"matchLabels": {"team": "x"}},
    }
    body = _pod(
        affinity={
            "podAntiAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 10, "podAffinityTerm": term}
                ]
            }
        }
    )
    built = _built_in_a_group(body)
    assert [e.message for e in built.events if e.reason == "NotApplied"] == [
        "p: Pod ns/p: spec.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution"
        "[0].podAffinityTerm.namespaceSelector is not applied by kai-py (namespace selectors "
        "other than the empty one are not implemented)"
    ]
