"""Built-in kinds and pod admission on both servers: storage and node kinds, RuntimeClass.

The emulator serves the storage kinds (PersistentVolume, StorageClass, the
CSI kinds) and RuntimeClass as the real API server does, and admits a pod
naming a RuntimeClass as the real RuntimeClass admission plugin does (the
class's overhead, nodeSelector and tolerations; 403 for a missing class or a
conflicting pod). Pods with limits and no requests are requested at their
limits (the API server's defaulting). Each case runs on both servers.
"""

from __future__ import annotations

import json
import ssl
import urllib.request
from typing import Any

import pytest
from probes import Target

BACKENDS = ["emulator", "real"]

#: (collection, object) of each kind; namespaced ones in "default".
KINDS: dict[str, tuple[str, dict[str, Any]]] = {
    "PersistentVolume": (
        "/api/v1/persistentvolumes",
        {
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"],
                "hostPath": {"path": "/mnt/x"},
            }
        },
    ),
    "StorageClass": ("/apis/storage.k8s.io/v1/storageclasses", {"provisioner": "example.com/x"}),
    "CSIDriver": ("/apis/storage.k8s.io/v1/csidrivers", {"spec": {"attachRequired": False}}),
    "CSINode": (
        "/apis/storage.k8s.io/v1/csinodes",
        {"spec": {"drivers": [{"name": "example.com", "nodeID": "n1"}]}},
    ),
    "CSIStorageCapacity": (
        "/apis/storage.k8s.io/v1/namespaces/default/csistoragecapacities",
        {"storageClassName": "standard", "capacity": "10Gi"},
    ),
    "VolumeAttachment": (
        "/apis/storage.k8s.io/v1/volumeattachments",
        {
            "spec": {
                "attacher": "example.com",
                "nodeName": "n1",
                "source": {"persistentVolumeName": "pv1"},
            }
        },
    ),
    "RuntimeClass": ("/apis/node.k8s.io/v1/runtimeclasses", {"handler": "runc"}),
}
DEFAULTS = {
    "PersistentVolume": {
        "spec": {"persistentVolumeReclaimPolicy": "Retain", "volumeMode": "Filesystem"},
        "status": {"phase": "Pending"},
    },
    "StorageClass": {"reclaimPolicy": "Delete", "volumeBindingMode": "Immediate"},
}


def _api_version(collection: str) -> str:
    parts = collection.split("/")
    return "v1" if parts[1] == "api" else f"{parts[2]}/{parts[3]}"


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_storage_and_node_kinds_are_served(
    servers: dict[str, Target], backend: str, kind: str
) -> None:
    target = servers[backend]
    collection, fields = KINDS[kind]
    api_version = _api_version(collection)
    name = f"k-{kind.lower()}"
    body = {"apiVersion": api_version, "kind": kind, "metadata": {"name": name}, **fields}
    status, created = target.call("POST", collection, body)
    assert status == 201, created
    for key, value in DEFAULTS.get(kind, {}).items():
        want = value if not isinstance(value, dict) else {**created[key], **value}
        assert created[key] == want, key
    status, listed = target.call("GET", collection)
    assert status == 200 and listed["kind"] == f"{kind}List"
    assert name in [item["metadata"]["name"] for item in listed["items"]]
    group_path = collection.rsplit("/", 1)[0].split("/namespaces/")[0]
    status, discovery = target.call("GET", group_path)
    plural = collection.rsplit("/", 1)[1]
    found = [r for r in discovery["resources"] if r["name"] == plural]
    assert found and found[0]["kind"] == kind
    assert found[0]["namespaced"] == ("/namespaces/" in collection)


def _runtime_class(target: Target, name: str, **fields: Any) -> None:
    body = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": name}}
    status, answer = target.call(
        "POST", "/apis/node.k8s.io/v1/runtimeclasses", {**body, "handler": "kata", **fields}
    )
    assert status in (201, 409), answer


def _pod(target: Target, name: str, **spec: Any) -> tuple[int, Any]:
    container = {
        "name": "c",
        "image": "busybox",
        "resources": {"limits": {"cpu": "1", "nvidia.com/gpu": "1"}, "requests": {"memory": "1Gi"}},
    }
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [container], **spec},
    }
    return target.call("POST", "/api/v1/namespaces/default/pods", body)


KATA = {
    "overhead": {"podFixed": {"cpu": "250m", "memory": "64Mi"}},
    "scheduling": {
        "nodeSelector": {"runtime": "kata"},
        "tolerations": [{"key": "kata", "operator": "Exists", "effect": "NoSchedule"}],
    },
}
KATA_TOLERATION = {"key": "kata", "operator": "Exists", "effect": "NoSchedule"}


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_runtime_class_gives_the_pod_its_overhead_and_scheduling(
    servers: dict[str, Target], backend: str
) -> None:
    target = servers[backend]
    _runtime_class(target, "kata", **KATA)
    status, pod = _pod(
        target,
        "rc-merged",
        runtimeClassName="kata",
        nodeSelector={"zone": "a"},
        tolerations=[KATA_TOLERATION, {"key": "x", "operator": "Exists"}],
    )
    assert status == 201, pod
    spec = pod["spec"]
    assert spec["overhead"] == {"cpu": "250m", "memory": "64Mi"}
    assert spec["nodeSelector"] == {"zone": "a", "runtime": "kata"}
    # The pod's own first, the class's only once (the real server also adds its
    # default not-ready/unreachable tolerations, which the emulator does not).
    assert spec["tolerations"][:2] == [KATA_TOLERATION, {"key": "x", "operator": "Exists"}]
    assert spec["tolerations"].count(KATA_TOLERATION) == 1
    status, pod = _pod(
        target,
        "rc-same-overhead",
        runtimeClassName="kata",
        overhead={"cpu": "0.25", "memory": "64Mi"},
    )
    assert status == 201, pod


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    ("spec", "why"),
    [
        ({"runtimeClassName": "nope"}, 'pod rejected: RuntimeClass "nope" not found'),
        (
            {"runtimeClassName": "kata", "overhead": {"cpu": "1"}},
            "pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead",
        ),
        (
            {"overhead": {"cpu": "1"}},
            "pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead",
        ),
        (
            {"runtimeClassName": "kata", "nodeSelector": {"runtime": "runc"}},
            "conflict: runtimeClass.scheduling.nodeSelector[runtime] = kata; "
            "pod.spec.nodeSelector[runtime] = runc",
        ),
    ],
)
def test_a_pod_at_odds_with_its_runtime_class_is_forbidden(
    servers: dict[str, Target], backend: str, spec: dict[str, Any], why: str
) -> None:
    target = servers[backend]
    _runtime_class(target, "kata", **KATA)
    status, answer = _pod(target, "rc-refused", **spec)
    assert (status, answer["reason"]) == (403, "Forbidden")
    assert answer["message"] == f'pods "rc-refused" is forbidden: {why}'


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_limit_without_a_request_is_requested_at_the_limit(
    servers: dict[str, Target], backend: str
) -> None:
    target = servers[backend]
    init = {"name": "i", "image": "busybox", "resources": {"limits": {"memory": "2Gi"}}}
    status, pod = _pod(target, "limits-only", initContainers=[init])
    assert status == 201, pod
    assert pod["spec"]["containers"][0]["resources"]["requests"] == {
        "cpu": "1",
        "memory": "1Gi",
        "nvidia.com/gpu": "1",
    }
    assert pod["spec"]["initContainers"][0]["resources"]["requests"] == {"memory": "2Gi"}
    assert pod["status"]["qosClass"] == "Burstable"


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_events_v1_series_does_not_fill_the_core_count_or_last_timestamp(
    servers: dict[str, Target], backend: str
) -> None:
    target = servers[backend]
    body = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": "series-only"},
        "eventTime": "2026-01-02T03:04:05.123456Z",
        "series": {"count": 2, "lastObservedTime": "2026-01-02T03:04:05.123456Z"},
        "reportingController": "kai-py/test",
        "reportingInstance": "x",
        "action": "Bind",
        "reason": "Scheduled",
        "regarding": {"kind": "Pod", "namespace": "default", "name": "p"},
        "type": "Normal",
    }
    status, answer = target.call("POST", "/apis/events.k8s.io/v1/namespaces/default/events", body)
    assert status == 201, answer
    status, core = target.call("GET", "/api/v1/namespaces/default/events/series-only")
    assert status == 200
    assert core.get("count") is None and core.get("lastTimestamp") is None
    assert core["series"] == body["series"]


TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"


def _table(target: Target, collection: str) -> tuple[list[str], list[list[Any]]]:
    """(column names, rows without the Age column) of ``kubectl get``'s Table."""
    req = urllib.request.Request(target.url + collection, headers={"Accept": TABLE})
    if target.token:
        req.add_header("Authorization", f"Bearer {target.token}")
    context = ssl.create_default_context(cafile=target.ca_file) if target.ca_file else None
    with urllib.request.urlopen(req, context=context, timeout=30) as resp:
        table = json.loads(resp.read())
    names = [c["name"] for c in table["columnDefinitions"]]
    age = names.index("Age")
    rows = [[v for i, v in enumerate(r["cells"]) if i != age] for r in table["rows"]]
    return [n for n in names if n != "Age"], rows


@pytest.mark.parametrize("backend", BACKENDS)
def test_kubectl_tables_of_storage_classes_runtime_classes_and_volumes(
    servers: dict[str, Target], backend: str
) -> None:
    target = servers[backend]
    sc = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {
            "name": "t-default",
            "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
        },
        "provisioner": "example.com/x",
        "allowVolumeExpansion": True,
    }
    pv = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": "t-pv"},
        "spec": {
            "capacity": {"storage": "2Gi"},
            "accessModes": ["ReadWriteOnce", "ReadOnlyMany"],
            "hostPath": {"path": "/mnt/t"},
            "storageClassName": "t-default",
        },
    }
    rc = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "t-rc"}}
    for collection, body in (
        ("/apis/storage.k8s.io/v1/storageclasses", sc),
        ("/api/v1/persistentvolumes", pv),
        ("/apis/node.k8s.io/v1/runtimeclasses", {**rc, "handler": "runsc"}),
    ):
        status, answer = target.call("POST", collection, body)
        assert status == 201, answer
    names, rows = _table(target, "/apis/storage.k8s.io/v1/storageclasses/t-default")
    assert names == [
        "Name",
        "Provisioner",
        "ReclaimPolicy",
        "VolumeBindingMode",
        "AllowVolumeExpansion",
    ]
    assert rows == [["t-default", "example.com/x", "Delete", "Immediate", True]]
    names, rows = _table(target, "/apis/node.k8s.io/v1/runtimeclasses/t-rc")
    assert (names, rows) == (["Name", "Handler"], [["t-rc", "runsc"]])
    names, rows = _table(target, "/api/v1/persistentvolumes/t-pv")
    assert names == [
        "Name",
        "Capacity",
        "Access Modes",
        "Reclaim Policy",
        "Status",
        "Claim",
        "StorageClass",
        "VolumeAttributesClass",
        "Reason",
        "VolumeMode",
    ]
    assert rows == [
        [
            "t-pv",
            "2Gi",
            "RWO,ROX",
            "Retain",
            "Pending",
            "",
            "t-default",
            "<unset>",
            "",
            "Filesystem",
        ]
    ]


@pytest.mark.parametrize("backend", BACKENDS)
def test_claims_and_statefulsets_get_the_real_defaults_and_tables(
    servers: dict[str, Target], backend: str
) -> None:
    target = servers[backend]
    default_class = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {
            "name": "t-default",
            "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
        },
        "provisioner": "example.com/x",
    }
    status, answer = target.call("POST", "/apis/storage.k8s.io/v1/storageclasses", default_class)
    assert status in (201, 409), answer
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "t-claim"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }
    status, created = target.call(
        "POST", "/api/v1/namespaces/default/persistentvolumeclaims", claim
    )
    assert status == 201, created
    assert (created["spec"]["volumeMode"], created["status"]) == (
        "Filesystem",
        {"phase": "Pending"},
    )
    names, rows = _table(target, "/api/v1/namespaces/default/persistentvolumeclaims/t-claim")
    assert names == [
        "Name",
        "Status",
        "Volume",
        "Capacity",
        "Access Modes",
        "StorageClass",
        "VolumeAttributesClass",
        "VolumeMode",
    ]
    assert rows == [["t-claim", "Pending", "", "", "", "t-default", "<unset>", "Filesystem"]]
    template = {
        "metadata": {"labels": {"a": "b"}},
        "spec": {
            "containers": [{"name": "c", "image": "busybox"}, {"name": "d", "image": "nginx"}]
        },
    }
    sts = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "t-sts"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"a": "b"}}, "template": template},
    }
    status, created = target.call("POST", "/apis/apps/v1/namespaces/default/statefulsets", sts)
    assert status == 201, created
    spec = created["spec"]
    assert spec["podManagementPolicy"] == "OrderedReady" and spec["revisionHistoryLimit"] == 10
    assert spec["updateStrategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"partition": 0, "maxUnavailable": 1},
    }
    assert spec["persistentVolumeClaimRetentionPolicy"] == {
        "whenDeleted": "Retain",
        "whenScaled": "Retain",
    }
    names, rows = _table(target, "/apis/apps/v1/namespaces/default/statefulsets/t-sts")
    assert names == ["Name", "Ready", "Containers", "Images"]
    assert rows == [["t-sts", "0/2", "c,d", "busybox,nginx"]]
