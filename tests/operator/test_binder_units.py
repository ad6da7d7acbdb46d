"""The binder's pure rules (kai_py.binder.reservation) and its decisions over a fake API."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from kai_py.api import keys
from kai_py.api.bindrequest import SIGNATURE_ANNOTATION, signature
from kai_py.apiclient.kube import KubeError
from kai_py.binder import reservation as rsv
from kai_py.binder.binding import Binder, BinderConfig
from kai_py.binder.podhints import PodHints
from kai_py.gpu import groups

Json = dict[str, Any]


# ---------------------------------------------------------------- names and manifests
def test_reservation_pod_names_are_deterministic_and_dns_safe() -> None:
    assert rsv.reservation_pod_name("gpu-node-0", "g1") == "gpu-reservation-gpu-node-0-g1"
    odd = rsv.reservation_pod_name("Node_A", "Group/1")
    assert odd.startswith("gpu-reservation-node-a-group-1-")
    assert odd == rsv.reservation_pod_name("Node_A", "Group/1")
    # Two groups that sanitise alike still get two pods.
    assert rsv.reservation_pod_name("n", "G") != rsv.reservation_pod_name("n", "g")
    long = rsv.reservation_pod_name("n" * 200, "g" * 200)
    assert len(long) <= 253 and long.replace("-", "").replace(".", "").isalnum()


def test_label_values_stay_valid() -> None:
    assert groups.label_value("g1") == "g1"
    assert len(groups.label_value("x" * 100)) <= 63
    assert groups.label_value("a,b") != "a,b" and "," not in groups.label_value("a,b")


def test_reservation_pod_manifest() -> None:
    pod = rsv.reservation_pod_manifest("gpu-0", "g1", image="img:1")
    meta, spec = pod["metadata"], pod["spec"]
    assert meta["namespace"] == keys.RESERVATION_NAMESPACE
    assert meta["name"] == "gpu-reservation-gpu-0-g1"
    assert meta["labels"][keys.GPU_GROUP_LABEL] == "g1"
    assert spec["nodeName"] == "gpu-0"
    (container,) = spec["containers"]
    assert container["image"] == "img:1"
    assert container["resources"]["requests"][keys.GPU_RESOURCE] == "1"
    assert container["resources"]["limits"][keys.GPU_RESOURCE] == "1"
    assert spec["tolerations"] == [{"operator": "Exists"}]
    assert groups.reservation_group(pod) == "g1"


def shared_pod(name: str = "p", env: list[Json] | None = None) -> Json:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ns", "uid": "u-1"},
        "spec": {"containers": [{"name": "c", "image": "x", "env": env or []}]},
    }


def test_configmap_names_follow_the_pods_references() -> None:
    assert rsv.gpu_configmap_names(shared_pod()) == []  # not wired: nothing to write
    by_env_from = shared_pod()
    by_env_from["spec"]["containers"][0]["envFrom"] = [{"configMapRef": {"name": "p-gpu"}}]
    assert rsv.gpu_configmap_names(by_env_from) == ["p-gpu"]  # wired before KAI's names
    ref = {
        "name": "NVIDIA_VISIBLE_DEVICES",
        "valueFrom": {"configMapKeyRef": {"name": "mine", "key": "NVIDIA_VISIBLE_DEVICES"}},
    }
    other = {"name": "X", "valueFrom": {"configMapKeyRef": {"name": "app-config", "key": "X"}}}
    assert rsv.gpu_configmap_names(shared_pod(env=[ref, other])) == ["mine"]


def test_a_shared_pod_must_read_its_card_from_the_configmap() -> None:
    def ref(key: str = "NVIDIA_VISIBLE_DEVICES", name: str = "x-gpu") -> Json:
        return {"name": key, "valueFrom": {"configMapKeyRef": {"name": name, "key": key}}}

    assert rsv.unwired_reason(shared_pod(env=[ref()])) is None
    bare = shared_pod()  # admitted while the webhook was down: no env at all
    reason = rsv.unwired_reason(bare)
    assert reason is not None
    assert 'pod ns/p, container "c"' in reason and "NVIDIA_VISIBLE_DEVICES" in reason
    assert "delete the pod" in reason
    # GPU_PORTION alone is not the card; a literal value after the reference wins.
    assert rsv.unwired_reason(shared_pod(env=[ref("GPU_PORTION")])) is not None
    overridden = [ref(), {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    assert rsv.unwired_reason(shared_pod(env=overridden)) is not None
    # envFrom of the default ConfigMap, <pod>-gpu, is read too (and written).
    by_env_from = shared_pod()
    by_env_from["spec"]["containers"][0]["envFrom"] = [{"configMapRef": {"name": "p-gpu"}}]
    assert rsv.unwired_reason(by_env_from) is None
    # The container that uses the card is the one the annotation names, else the first.
    two = shared_pod(env=[ref()])
    two["spec"]["containers"].append({"name": "worker", "image": "x"})
    assert rsv.unwired_reason(two) is None
    two["metadata"]["annotations"] = {keys.GPU_FRACTION_CONTAINER_ANNOTATION: "worker"}
    assert 'container "worker"' in (rsv.unwired_reason(two) or "")


def test_configmap_content_and_owner() -> None:
    cm = rsv.gpu_configmap_manifest(shared_pod(), "p-gpu", {"GPU_PORTION": "0.25"})
    assert cm["data"] == {"GPU_PORTION": "0.25"}
    assert cm["metadata"]["namespace"] == "ns"
    assert cm["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u-1"}
    ]
    legacy = shared_pod(env=[_ref("NVIDIA_VISIBLE_DEVICES", "p-gpu")])
    ((name, data),) = rsv.gpu_configmaps(legacy, ["GPU-1", "GPU-2"], 0.5)
    assert (name, data) == (
        "p-gpu",
        {"NVIDIA_VISIBLE_DEVICES": "GPU-1,GPU-2", "GPU_PORTION": "0.5"},
    )


def _ref(key: str, name: str) -> Json:
    return {"name": key, "valueFrom": {"configMapKeyRef": {"name": name, "key": key}}}


def kai_wired(prefix: str = "train-x7b2kq9-shared-gpu", by_env: bool = True) -> Json:
    """A shared pod as KAI's webhook wires it: the annotation, env from the first
    ConfigMap (``by_env``), envFrom of the second."""
    env = [_ref(k, f"{prefix}-0") for k in rsv.SHARING_ENV_KEYS] if by_env else []
    pod = shared_pod("train-0", env=env)
    pod["metadata"]["annotations"] = {"runai/shared-gpu-configmap": prefix}
    pod["spec"]["containers"][0]["envFrom"] = [
        {"configMapRef": {"name": f"{prefix}-0-evar", "optional": False}}
    ]
    return pod


def test_kais_two_configmaps_their_names_and_keys() -> None:
    """KAI's names: ``<annotation>-<container index>`` holds the portion (and the card
    when the container's env reads it from there), ``...-evar`` is read with envFrom."""
    pod = kai_wired()
    assert rsv.gpu_configmaps(pod, ["GPU-1"], 0.5) == [
        (
            "train-x7b2kq9-shared-gpu-0",
            {"GPU_PORTION": "0.5", "RUNAI_NUM_OF_GPUS": "0.5", "NVIDIA_VISIBLE_DEVICES": "GPU-1"},
        ),
        ("train-x7b2kq9-shared-gpu-0-evar", {}),
    ]
    assert rsv.unwired_reason(pod) is None
    # No env of the card: it goes in the envFrom one, which then is what wires the pod.
    by_env_from = kai_wired(by_env=False)
    assert dict(rsv.gpu_configmaps(by_env_from, ["GPU-1"], 0.5)) == {
        "train-x7b2kq9-shared-gpu-0": {"GPU_PORTION": "0.5", "RUNAI_NUM_OF_GPUS": "0.5"},
        "train-x7b2kq9-shared-gpu-0-evar": {"NVIDIA_VISIBLE_DEVICES": "GPU-1"},
    }
    assert rsv.unwired_reason(by_env_from) is None
    assert rsv.visible_devices_configmaps(by_env_from) == ["train-x7b2kq9-shared-gpu-0-evar"]
    # The index is the sharing container's.
    two = kai_wired()
    two["spec"]["containers"].insert(0, {"name": "side", "image": "x"})
    two["metadata"]["annotations"][keys.GPU_FRACTION_CONTAINER_ANNOTATION] = "c"
    assert rsv.shared_configmaps(two) == (
        "train-x7b2kq9-shared-gpu-1",
        "train-x7b2kq9-shared-gpu-1-evar",
    )


def test_the_configmap_prefix_is_kais() -> None:
    """``<owner or pod>-<random>-shared-gpu``, cut so that the volume name
    ``<prefix>-<index>-vol`` and ``<prefix>-<index>-evar`` fit 63 characters."""
    pod = shared_pod("train-0")
    assert rsv.configmap_prefix(pod, "x7b2kq9") == "train-0-x7b2kq9-shared-gpu"
    pod["metadata"]["ownerReferences"] = [{"kind": "Job", "name": "train", "uid": "j"}]
    assert rsv.configmap_prefix(pod, "x7b2kq9") == "train-x7b2kq9-shared-gpu"
    long = shared_pod("a" * 31 + ".-" + "b" * 100)
    prefix = rsv.configmap_prefix(long, "x7b2kq9")
    assert prefix == "a" * 31 + "-x7b2kq9-shared-gpu"  # cut at 33, no "." or "-" left at the end
    first, evar = rsv.shared_configmap_names(prefix, 0)
    assert len(rsv.configmap_volume_name(first)) <= 63 and len(evar) <= 63
    unnamed = {"metadata": {"generateName": "job-"}, "spec": {"containers": [{"name": "c"}]}}
    assert rsv.configmap_prefix(unnamed, "x7b2kq9") == "job-x7b2kq9-shared-gpu"
    assert rsv.configmap_volume_name("My.Map-0") == "my-map-0-vol"


def test_group_label_patch_and_rollback() -> None:
    assert rsv.group_label_patch(["g1"]) == {"metadata": {"labels": {keys.GPU_GROUP_LABEL: "g1"}}}
    two = rsv.group_label_patch(["g1", "g2"])
    assert two["metadata"]["annotations"] == {rsv.GPU_GROUPS_ANNOTATION: "g1,g2"}
    undo = rsv.group_label_rollback(shared_pod())
    assert undo["metadata"]["labels"] == {keys.GPU_GROUP_LABEL: None}
    labelled = shared_pod()
    labelled["metadata"]["labels"] = {keys.GPU_GROUP_LABEL: "g1"}
    labelled["metadata"]["annotations"] = {rsv.GPU_GROUPS_ANNOTATION: "g1,g2"}
    assert groups.shared_pod_groups(labelled) == ["g1", "g2"]
    assert groups.uses_group(labelled, "g2") and not groups.uses_group(labelled, "g3")


@pytest.mark.parametrize(
    ("attempts", "base", "delay"), [(1, 1.0, 2.0), (2, 1.0, 4.0), (3, 0.5, 4.0), (0, 1.0, 1.0)]
)
def test_retry_delay_doubles(attempts: int, base: float, delay: float) -> None:
    assert rsv.retry_delay(attempts, base) == delay


def test_retry_while_under_the_backoff_limit() -> None:
    assert rsv.should_retry(1, 2) and not rsv.should_retry(2, 2)
    assert not rsv.should_retry(1, 0)
    assert rsv.should_retry(2, None) and not rsv.should_retry(rsv.DEFAULT_BACKOFF_LIMIT, None)


def test_config_from_env() -> None:
    config = BinderConfig.from_env(
        {"KAI_PY_RESERVATION_IMAGE": "r:2", "KAI_PY_BINDER_RETRY_BASE_DELAY": "0.1"}
    )
    assert (config.reservation_image, config.retry_base_delay) == ("r:2", 0.1)
    with pytest.raises(ValueError, match="KAI_PY_BINDER_RESERVATION_TIMEOUT"):
        BinderConfig.from_env({"KAI_PY_BINDER_RESERVATION_TIMEOUT": "soon"})


# ---------------------------------------------------------------- the Binder over a fake API
class FakeKube:
    """Just enough of the API for the binder: objects by path, bindings, status."""

    def __init__(self) -> None:
        self.objects: dict[str, Json] = {}
        self.calls: list[tuple[str, str]] = []
        self.bodies: list[tuple[str, str, Any]] = []
        self.on_reservation: Any = None  # called with a reservation pod when created
        self.missing_namespaces: set[str] = set()  # a create there answers 404, as the API

    def add(self, path: str, obj: Json) -> None:
        self.objects[path] = obj

    def request(
        self,
        method: str,
        path: str,
        body: object = None,
        *,
        content_type: str = "",
        query: Any = None,
    ) -> Json:
        self.calls.append((method, path))
        self.bodies.append((method, path, copy.deepcopy(body)))
        if method == "GET":
            if path in self.objects:
                return copy.deepcopy(self.objects[path])
            plural = path.rstrip("/").split("/")[-1]
            items = [o for p, o in self.objects.items() if p.split("/")[-2] == plural]
            if items or plural in ("pods", "bindrequests"):
                return {"items": copy.deepcopy(items)}
            raise KubeError(404, "NotFound", f"{path} not found")
        if method == "POST":
            assert isinstance(body, dict)
            if path.endswith("/binding"):
                # As kube-apiserver: 404 for no pod, 409 for a uid precondition that
                # names another pod or a pod bound already, 500 for a pod being deleted.
                pod = self.objects.get(path.removesuffix("/binding"))
                if pod is None:
                    raise KubeError(404, "NotFound", "pod not found")
                uid = (body.get("metadata") or {}).get("uid")
                if uid and uid != pod["metadata"].get("uid"):
                    raise KubeError(409, "Conflict", "Precondition failed: UID")
                if pod["metadata"].get("deletionTimestamp"):
                    raise KubeError(500, "InternalError", "pod is being deleted")
                if pod["spec"].get("nodeName"):
                    raise KubeError(409, "Conflict", "pod is already assigned to node")
                pod["spec"]["nodeName"] = body["target"]["name"]
                return {"kind": "Status", "status": "Success"}
            parts = path.split("/")
            if "namespaces" in parts and parts[parts.index("namespaces") + 1] in (
                self.missing_namespaces
            ):
                ns = parts[parts.index("namespaces") + 1]
                raise KubeError(404, "NotFound", f'namespaces "{ns}" not found')
            meta = body.get("metadata") or {}
            name = meta.get("name") or f"{meta.get('generateName')}{len(self.objects)}"
            key = f"{path}/{name}"
            if key in self.objects:
                raise KubeError(409, "AlreadyExists", "exists")
            self.objects[key] = copy.deepcopy(body)
            if "/kai-resource-reservation/pods/" in key and self.on_reservation:
                self.on_reservation(self.objects[key])
            return copy.deepcopy(body)
        if method == "PATCH":
            target = path.removesuffix("/status")
            if target not in self.objects:
                raise KubeError(404, "NotFound", "gone")
            wanted = ((body or {}).get("metadata") or {}).get("resourceVersion")  # type: ignore[attr-defined]
            held = self.objects[target]["metadata"].get("resourceVersion")
            if wanted and held and wanted != held:
                raise KubeError(409, "Conflict", "the object has been modified")
            _merge(self.objects[target], body)
            return copy.deepcopy(self.objects[target])
        if method == "DELETE":
            if path not in self.objects:
                raise KubeError(404, "NotFound", "gone")
            del self.objects[path]
            return {}
        raise AssertionError(method)

    def get(self, path: str) -> Json:
        return self.request("GET", path)

    def create(self, path: str, body: Json) -> Json:
        return self.request("POST", path, body)

    def patch(self, path: str, body: Json, content_type: str = "") -> Json:
        return self.request("PATCH", path, body)

    def delete(self, path: str, body: Json | None = None) -> Json:
        return self.request("DELETE", path, body)


def _merge(target: Json, patch: Any) -> None:
    for k, v in patch.items():
        if v is None:
            target.pop(k, None)
        elif isinstance(v, dict) and isinstance(target.get(k), dict):
            _merge(target[k], v)
        else:
            target[k] = copy.deepcopy(v)


POD = "/api/v1/namespaces/ns/pods/p"
BR = "/apis/scheduling.run.ai/v1alpha2/namespaces/ns/bindrequests/p"
RES = "/api/v1/namespaces/kai-resource-reservation/pods/gpu-reservation-n1-g1"


#: What the pod webhook gives a shared pod's container: its card from the ConfigMap.
WIRED = [
    {
        "name": "NVIDIA_VISIBLE_DEVICES",
        "valueFrom": {"configMapKeyRef": {"name": "p-gpu", "key": "NVIDIA_VISIBLE_DEVICES"}},
    }
]


def setup(
    kind: str = "Fraction", limit: int = 3, node_exists: bool = True
) -> tuple[FakeKube, Json]:
    kube = FakeKube()
    kube.add(POD, shared_pod(env=WIRED if kind == "Fraction" else None))
    if node_exists:
        kube.add("/api/v1/nodes/n1", {"metadata": {"name": "n1"}})
    br: Json = {
        "metadata": {"name": "p", "namespace": "ns", "uid": "br-1"},
        "spec": {
            "podName": "p",
            "selectedNode": "n1",
            "receivedResourceType": kind,
            "receivedGPU": {"count": 1, "portion": "0.5"},
            "backoffLimit": limit,
        },
    }
    if kind == "Fraction":
        br["spec"]["selectedGPUGroups"] = ["g1"]
    kube.add(BR, br)
    return kube, br


def binder(kube: FakeKube, hints: PodHints | None = None, **config: Any) -> Binder:
    ticks = iter(range(10_000))
    return Binder(
        kube,  # type: ignore[arg-type]
        BinderConfig(**config),
        sleep=lambda _s: None,
        clock=lambda: float(next(ticks)),
        hints=hints,
    )


def events(kube: FakeKube, reason: str) -> list[Json]:
    return [o for p, o in kube.objects.items() if "/events/" in p and o["reason"] == reason]


def test_fraction_bind_over_the_fake_api() -> None:
    kube, br = setup()

    def report(pod: Json) -> None:
        pod["metadata"]["annotations"][keys.RESERVED_GPU_INDEX_ANNOTATION] = "GPU-abc"

    kube.on_reservation = report
    outcome = binder(kube).reconcile(br)
    assert (outcome.phase, outcome.retry_in) == ("Succeeded", None)
    pod = kube.objects[POD]
    assert pod["spec"]["nodeName"] == "n1"
    assert pod["metadata"]["labels"][keys.GPU_GROUP_LABEL] == "g1"
    assert kube.objects["/api/v1/namespaces/ns/configmaps/p-gpu"]["data"] == {
        "NVIDIA_VISIBLE_DEVICES": "GPU-abc",
        "GPU_PORTION": "0.5",
    }
    assert kube.objects[BR]["status"]["phase"] == "Succeeded"
    # No namespace is made: the chart makes it, the binder may not create namespaces.
    assert not [c for c in kube.calls if c == ("POST", "/api/v1/namespaces")]
    (bound,) = events(kube, "Bound")
    assert "n1" in bound["message"] and "GPU-abc" in bound["message"]


def test_a_bindrequest_not_signed_by_the_scheduler_is_ignored_with_a_warning() -> None:
    """A tenant who may create BindRequests asks for a 4-GPU bind: with the chart's key
    set, the binder acts only on the scheduler's signed decisions."""
    kube, br = setup(kind="Regular")
    br["spec"]["receivedGPU"] = {"count": 4, "portion": "1"}
    outcome = binder(kube, bind_key=b"key").reconcile(br)
    assert (outcome.phase, outcome.retry_in) == ("Failed", None)
    assert kube.objects[POD]["spec"].get("nodeName") is None
    assert not [c for c in kube.calls if c[1].endswith("/binding")]
    assert kube.objects[BR]["status"]["phase"] == "Failed"
    (warning,) = events(kube, "BindingError")
    assert (
        "not made by kai-py's scheduler (metadata.annotations[kai.scheduler/bind-signature]"
        in (warning["message"])
    )
    # Signed by the scheduler (the writer's manifest), the same decision is bound.
    kube, br = setup(kind="Regular")
    br["metadata"]["annotations"] = {SIGNATURE_ANNOTATION: signature(b"key", br)}
    kube.add(BR, br)
    assert binder(kube, bind_key=b"key").reconcile(br).phase == "Succeeded"
    assert kube.objects[POD]["spec"]["nodeName"] == "n1"


def test_a_missing_reservation_namespace_is_said_plainly_and_not_made() -> None:
    kube, br = setup()
    kube.missing_namespaces = {keys.RESERVATION_NAMESPACE}
    outcome = binder(kube).reconcile(br)
    assert outcome.phase != "Succeeded" and outcome.retry_in is not None
    assert not [c for c in kube.calls if c == ("POST", "/api/v1/namespaces")]
    assert kube.objects[POD]["spec"].get("nodeName") is None  # nothing bound, rolled back
    message = str(outcome.reason)
    assert (
        "namespace kai-resource-reservation does not exist: the GPU reservation pods live "
        "there and the binder may not create namespaces; install kai-py's chart" in message
    ), message


def test_a_shared_pod_not_wired_to_its_card_is_not_bound() -> None:
    # Admitted while the pod webhook was down: its container would see every card.
    kube, br = setup(limit=3)
    kube.objects[POD]["spec"]["containers"][0]["env"] = []
    _reporting(kube)
    outcome = binder(kube).reconcile(br)
    assert (outcome.phase, outcome.retry_in) == ("Failed", None)
    assert 'container "c"' in outcome.reason and "NVIDIA_VISIBLE_DEVICES" in outcome.reason
    assert kube.objects[BR]["status"]["phase"] == "Failed"
    assert kube.objects[BR]["status"]["reason"] == outcome.reason
    pod = kube.objects[POD]  # left Pending: not bound, not labelled, not deleted
    assert not pod["spec"].get("nodeName")
    assert keys.GPU_GROUP_LABEL not in (pod["metadata"].get("labels") or {})
    assert RES not in kube.objects  # nothing made for it
    assert not [p for m, p in kube.calls if m == "POST" and "/pods" in p]
    assert not [p for m, p in kube.calls if m == "DELETE" and p == POD]
    (error,) = events(kube, "BindingError")
    assert error["type"] == "Warning"
    assert "pod ns/p" in error["message"] and "delete the pod" in error["message"]


def test_a_failed_reservation_pod_is_rolled_back_and_retried_later() -> None:
    kube, br = setup(limit=3)

    def reject(pod: Json) -> None:
        pod["status"] = {"phase": "Failed", "reason": "OutOfnvidia.com/gpu", "message": "no card"}

    kube.on_reservation = reject
    outcome = binder(kube, retry_base_delay=1.0).reconcile(br)
    assert (outcome.phase, outcome.failed_attempts, outcome.retry_in) == ("Pending", 1, 2.0)
    assert "OutOfnvidia.com/gpu" in outcome.reason
    assert RES not in kube.objects  # nobody else used it: deleted
    assert "/api/v1/namespaces/ns/configmaps/p-gpu" not in kube.objects
    assert not kube.objects[POD]["spec"].get("nodeName")
    status = kube.objects[BR]["status"]
    assert (status["phase"], status["failedAttempts"]) == ("Pending", 1)
    (error,) = events(kube, "BindingError")
    assert error["type"] == "Warning" and "retrying in 2s" in error["message"]


def test_the_wait_for_the_uuid_times_out_and_the_last_attempt_fails() -> None:
    kube, br = setup(limit=2)
    br["status"] = {"phase": "Pending", "failedAttempts": 1}
    outcome = binder(kube, reservation_timeout=5).reconcile(br)
    assert (outcome.phase, outcome.failed_attempts, outcome.retry_in) == ("Failed", 2, None)
    assert "did not report its GPU within 5s" in outcome.reason
    assert kube.objects[BR]["status"]["phase"] == "Failed"
    # The scheduler's cache recognises this failure by the reason's first word.
    assert kube.objects[BR]["status"]["reason"].startswith("ReservationTimeout: ")


def test_a_reservation_pod_another_request_waits_for_is_kept() -> None:
    kube, br = setup(limit=1)
    other: Json = copy.deepcopy(br)
    other["metadata"] = {"name": "q", "namespace": "ns", "uid": "br-2"}
    kube.add("/apis/scheduling.run.ai/v1alpha2/namespaces/ns/bindrequests/q", other)
    kube.add(RES, rsv.reservation_pod_manifest("n1", "g1"))  # no UUID yet
    outcome = binder(kube, reservation_timeout=2).reconcile(br)
    assert outcome.phase == "Failed"
    assert RES in kube.objects


def test_a_pod_bound_elsewhere_fails_at_once() -> None:
    kube, br = setup(kind="Regular", limit=5)
    kube.objects[POD]["spec"]["nodeName"] = "n2"
    outcome = binder(kube).reconcile(br)
    assert (outcome.phase, outcome.retry_in) == ("Failed", None)
    assert outcome.reason == 'pod is already bound to node "n2"'


def test_kopfs_retry_count_stands_in_for_a_lost_status() -> None:
    kube, br = setup(kind="Regular", limit=3, node_exists=False)
    outcome = binder(kube).reconcile(br, retry=2)
    assert (outcome.phase, outcome.failed_attempts) == ("Failed", 3)


def test_clean_up_keeps_a_card_a_shared_pod_still_uses() -> None:
    kube, _ = setup()
    kube.add(RES, rsv.reservation_pod_manifest("n1", "g1"))
    kube.objects[BR]["status"] = {"phase": "Succeeded"}
    user = shared_pod("u")
    user["metadata"]["labels"] = {keys.GPU_GROUP_LABEL: "g1"}
    user["spec"]["nodeName"] = "n1"
    user["status"] = {"phase": "Running"}
    kube.add("/api/v1/namespaces/ns/pods/u", user)
    b = binder(kube)
    assert b.release_if_unused("n1", "g1") is False
    user["status"]["phase"] = "Succeeded"
    assert b.pod_gone(user) == ["gpu-reservation-n1-g1"]
    assert RES not in kube.objects


def test_a_request_for_an_earlier_pod_of_the_same_name_fails() -> None:
    kube, br = setup(kind="Regular")
    br["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "old-uid"}
    ]
    outcome = binder(kube).reconcile(br)
    assert (outcome.phase, outcome.retry_in) == ("Failed", None)
    assert "earlier pod" in outcome.reason
    assert not kube.objects[POD]["spec"].get("nodeName")


def test_a_phase_set_by_someone_else_meanwhile_is_not_overwritten() -> None:
    kube, br = setup(kind="Regular")
    kube.objects[BR] = copy.deepcopy(br)
    kube.objects[BR]["status"] = {"phase": "Failed", "reason": "by hand"}
    outcome = binder(kube).reconcile(br)  # the handler saw it still Pending
    assert outcome.phase == "Succeeded"
    assert kube.objects[BR]["status"] == {"phase": "Failed", "reason": "by hand"}
    # A failing attempt stops retrying too.
    kube2, br2 = setup(kind="Regular", node_exists=False)
    kube2.objects[BR] = copy.deepcopy(br2)
    kube2.objects[BR]["status"] = {"phase": "Failed"}
    assert binder(kube2).reconcile(br2).retry_in is None


def test_a_newer_version_than_offered_is_read_before_the_status_write() -> None:
    kube, br = setup(kind="Regular")
    br["metadata"]["resourceVersion"] = "1"
    kube.objects[BR] = copy.deepcopy(br)
    kube.objects[BR]["metadata"]["resourceVersion"] = "2"
    kube.objects[BR]["status"] = {"phase": "Failed", "reason": "by hand"}
    outcome = binder(kube).reconcile(br)  # offered while still Pending at version 1
    assert outcome.phase == "Succeeded"
    assert kube.objects[BR]["status"] == {"phase": "Failed", "reason": "by hand"}
    # The write over version 1 was refused (409), the GET found Failed: nothing more.
    status_calls = [(m, p) for m, p in kube.calls if p.startswith(BR)]
    assert status_calls == [("PATCH", f"{BR}/status"), ("GET", BR)]


def test_the_offered_version_is_written_without_a_read() -> None:
    kube, br = setup(kind="Regular")
    br["metadata"]["resourceVersion"] = "5"
    binder(kube).reconcile(br)
    assert [(m, p) for m, p in kube.calls if p.startswith(BR)] == [("PATCH", f"{BR}/status")]
    assert kube.objects[BR]["status"]["phase"] == "Succeeded"


def test_a_node_found_is_not_read_again_for_every_pod() -> None:
    kube, br = setup(kind="Regular")
    b = binder(kube)
    b.reconcile(br)
    del kube.objects[POD]["spec"]["nodeName"]
    b.reconcile(br)
    assert [p for m, p in kube.calls if p == "/api/v1/nodes/n1"] == ["/api/v1/nodes/n1"]


def test_status_writes_name_the_version_they_read() -> None:
    kube, br = setup(kind="Regular")
    br["metadata"]["resourceVersion"] = "42"
    binder(kube).reconcile(br)
    (patch,) = [b for m, p, b in kube.bodies if m == "PATCH" and p.endswith("/status")]
    assert patch == {
        "status": {"phase": "Succeeded", "reason": None},
        "metadata": {"resourceVersion": "42"},
    }


# ---------------------------------------------------------------- faults (issue 8)
def _reporting(kube: FakeKube) -> None:
    def report(pod: Json) -> None:
        pod["metadata"]["uid"] = "res-1"
        pod["metadata"]["annotations"][keys.RESERVED_GPU_INDEX_ANNOTATION] = "GPU-abc"

    kube.on_reservation = report


def test_a_card_gone_before_the_binding_is_not_bound_to() -> None:
    # The reservation pod is deleted after it reported its card and before the Binding.
    kube, br = setup(limit=3)
    _reporting(kube)
    original = kube.request

    def deleting_on_label(method: str, path: str, body: object = None, **kw: Any) -> Json:
        if method == "PATCH" and path == POD:
            kube.objects.pop(RES, None)
        return original(method, path, body, **kw)

    kube.request = deleting_on_label  # type: ignore[method-assign]
    outcome = binder(kube).reconcile(br)
    assert outcome.phase == "Pending" and "disappeared" in outcome.reason
    assert not kube.objects[POD]["spec"].get("nodeName")
    assert keys.GPU_GROUP_LABEL not in (kube.objects[POD]["metadata"].get("labels") or {})
    assert not [p for m, p in kube.calls if m == "DELETE" and p == POD]
    assert "/api/v1/namespaces/ns/configmaps/p-gpu" not in kube.objects


def _reporting_cards(kube: FakeKube) -> None:
    """Each new reservation pod gets a new uid and card, as after a delete and re-create."""
    made = iter(range(1, 100))

    def report(pod: Json) -> None:
        n = next(made)
        pod["metadata"]["uid"] = f"res-{n}"
        pod["metadata"]["annotations"][keys.RESERVED_GPU_INDEX_ANNOTATION] = f"GPU-{n}"

    kube.on_reservation = report


@pytest.mark.parametrize("how", ["deleted", "replaced"])
def test_a_card_lost_during_the_binding_is_replaced_and_the_pod_kept(how: str) -> None:
    # The reservation pod goes after the last check, while the Binding is under way
    # (a slow Binding): the pod lands on the node. It must not be deleted (a bare pod
    # would be lost) nor shown the card nobody holds: its ConfigMap names the card of
    # a new reservation pod.
    kube, br = setup(limit=3)
    _reporting_cards(kube)
    original = kube.request

    def losing_on_bind(method: str, path: str, body: object = None, **kw: Any) -> Json:
        if method == "POST" and path.endswith("/binding"):
            lost = kube.objects.pop(RES)
            if how == "replaced":  # deleted and made again by someone else meanwhile
                original("POST", RES.rsplit("/", 1)[0], lost)
        return original(method, path, body, **kw)

    kube.request = losing_on_bind  # type: ignore[method-assign]
    outcome = binder(kube).reconcile(br)
    assert outcome.phase == "Succeeded", outcome
    assert POD in kube.objects and kube.objects[POD]["spec"]["nodeName"] == "n1"
    assert not [p for m, p in kube.calls if m == "DELETE" and p == POD]
    assert kube.objects[RES]["metadata"]["uid"] == "res-2"
    cm = kube.objects["/api/v1/namespaces/ns/configmaps/p-gpu"]
    assert cm["data"]["NVIDIA_VISIBLE_DEVICES"] == "GPU-2"
    # The ConfigMap (what the containers wait for) is written only after the Binding.
    order = [(m, p) for m, p in kube.calls if m == "POST"]
    binding = order.index(("POST", f"{POD}/binding"))
    assert order.index(("POST", "/api/v1/namespaces/ns/configmaps")) > binding
    (bound,) = events(kube, "Bound")
    assert "GPU-2" in bound["message"]


def test_a_bound_pod_whose_new_card_is_not_there_yet_is_completed_by_the_retry() -> None:
    # The card went during the Binding and the new reservation pod does not report one
    # in time: the pod stays bound without its ConfigMap (its containers wait), nothing
    # of it is rolled back or deleted, and the next attempt completes it.
    kube, br = setup(limit=3)
    _reporting_cards(kube)
    original = kube.request
    quiet = [True]

    def losing_on_bind(method: str, path: str, body: object = None, **kw: Any) -> Json:
        if method == "POST" and path.endswith("/binding"):
            kube.objects.pop(RES)
            kube.on_reservation = None if quiet[0] else kube.on_reservation
        return original(method, path, body, **kw)

    kube.request = losing_on_bind  # type: ignore[method-assign]
    b = binder(kube, reservation_timeout=3)
    first = b.reconcile(br)
    assert first.phase == "Pending" and "did not report its GPU" in first.reason
    pod = kube.objects[POD]
    assert pod["spec"]["nodeName"] == "n1"
    assert pod["metadata"]["labels"][keys.GPU_GROUP_LABEL] == "g1"
    assert "/api/v1/namespaces/ns/configmaps/p-gpu" not in kube.objects
    assert RES in kube.objects  # the bound pod uses it: not released
    kube.objects[RES]["metadata"]["annotations"][keys.RESERVED_GPU_INDEX_ANNOTATION] = "GPU-9"
    second = b.reconcile(kube.objects[BR])
    assert second.phase == "Succeeded"
    cm = kube.objects["/api/v1/namespaces/ns/configmaps/p-gpu"]
    assert cm["data"]["NVIDIA_VISIBLE_DEVICES"] == "GPU-9"
    assert not [p for m, p in kube.calls if m == "DELETE" and p == POD]


def _bound_shared_pod(kube: FakeKube, name: str, group: str, phase: str = "Running") -> str:
    pod = shared_pod(name)
    pod["metadata"]["uid"] = f"u-{name}"
    pod["metadata"]["labels"] = {keys.GPU_GROUP_LABEL: group}
    pod["spec"]["nodeName"] = "n1"
    pod["status"] = {"phase": phase}
    path = f"/api/v1/namespaces/ns/pods/{name}"
    kube.add(path, pod)
    return path


def test_a_reservation_pod_deleted_under_bound_pods_is_made_again_not_their_pods() -> None:
    kube, _ = setup()
    kube.objects[BR]["status"] = {"phase": "Succeeded"}
    gone = rsv.reservation_pod_manifest("n1", "g1")
    gone["metadata"]["uid"] = "res-old"
    running = _bound_shared_pod(kube, "r", "g1")
    waiting = _bound_shared_pod(kube, "w", "g1", phase="Pending")
    b = binder(kube)
    assert b.reservation_gone(gone) == ["ns/r", "ns/w"]
    assert running in kube.objects and waiting in kube.objects
    assert not [p for m, p in kube.calls if m == "DELETE" and "/ns/pods/" in p]
    made = kube.objects[RES]
    assert made["spec"]["nodeName"] == "n1" and made["metadata"]["labels"][keys.GPU_GROUP_LABEL]
    warnings = events(kube, "GPUReservationLost")
    assert len(warnings) == 2 and all(w["type"] == "Warning" for w in warnings)
    assert "delete the pod" in warnings[0]["message"]
    # Made again by someone else meanwhile: nothing to do.
    kube2, _ = setup()
    _bound_shared_pod(kube2, "r", "g1")
    again = rsv.reservation_pod_manifest("n1", "g1")
    again["metadata"]["uid"] = "res-new"
    kube2.add(RES, again)
    assert binder(kube2).reservation_gone(gone) == []
    assert not events(kube2, "GPUReservationLost")


def test_a_lost_succeeded_write_is_retried_not_dropped() -> None:
    kube, br = setup(kind="Regular")
    original = kube.request
    failures = iter([True])

    def failing_status(method: str, path: str, body: object = None, **kw: Any) -> Json:
        if method == "PATCH" and path.endswith("/status") and next(failures, False):
            raise KubeError(500, "InternalError", "injected")
        return original(method, path, body, **kw)

    kube.request = failing_status  # type: ignore[method-assign]
    b = binder(kube)
    first = b.reconcile(br)
    assert (first.phase, first.retry_in) == ("Pending", 1.0)
    assert kube.objects[POD]["spec"]["nodeName"] == "n1"
    second = b.reconcile(kube.objects[BR])
    assert second.phase == "Succeeded"
    assert kube.objects[BR]["status"]["phase"] == "Succeeded"


def test_the_label_patch_names_the_pods_uid_and_version() -> None:
    kube, br = setup()
    _reporting(kube)
    kube.objects[POD]["metadata"]["resourceVersion"] = "7"
    binder(kube).reconcile(br)
    (label,) = [b for m, p, b in kube.bodies if m == "PATCH" and p == POD]
    assert label["metadata"]["uid"] == "u-1"
    assert label["metadata"]["resourceVersion"] == "7"


def test_a_pod_made_again_during_the_attempt_is_not_labelled() -> None:
    kube, br = setup()
    _reporting(kube)
    original = kube.request

    def recreate_before_label(method: str, path: str, body: object = None, **kw: Any) -> Json:
        if method == "PATCH" and path == POD:
            kube.objects[POD]["metadata"]["uid"] = "u-2"
            raise KubeError(409, "Conflict", "the object has been modified")
        return original(method, path, body, **kw)

    kube.request = recreate_before_label  # type: ignore[method-assign]
    outcome = binder(kube).reconcile(br)
    assert (outcome.phase, outcome.retry_in) == ("Failed", None)
    assert "made again" in outcome.reason
    assert "/api/v1/namespaces/ns/configmaps/p-gpu" not in kube.objects
    assert not kube.objects[POD]["spec"].get("nodeName")


def test_the_sweep_finds_leftovers_and_orphans_from_state() -> None:
    kube, _ = setup()
    kube.objects[BR]["status"] = {"phase": "Succeeded"}
    leftover = rsv.reservation_pod_manifest("n1", "g1")
    leftover["metadata"]["creationTimestamp"] = "2020-01-01T00:00:00Z"
    kube.add(RES, leftover)  # its shared pod went while the operator was down
    orphan = _bound_shared_pod(kube, "o", "g2", phase="Pending")  # its card is gone
    b = binder(kube)
    assert b.sweep() == ["gpu-reservation-n1-g1"]
    assert RES not in kube.objects
    assert b.orphaned_shared_pods() == ["ns/o"]
    assert orphan in kube.objects  # never deleted: its group's card is held again
    assert "/api/v1/namespaces/kai-resource-reservation/pods/gpu-reservation-n1-g2" in kube.objects
    assert b.orphaned_shared_pods() == []  # held now: once


def test_a_card_is_held_again_as_kais_configmap_names_it() -> None:
    """A bound shared pod whose reservation pod went while the operator was down: the
    card it was shown is read from its KAI ConfigMap (here ``<prefix>-0-evar``: its
    container takes the card by envFrom) and held again."""
    kube, _ = setup()
    kube.objects[BR]["status"] = {"phase": "Succeeded"}
    pod = kai_wired(by_env=False)
    pod["metadata"].update(name="o", uid="u-o", labels={keys.GPU_GROUP_LABEL: "g2"})
    pod["spec"]["nodeName"] = "n1"
    pod["status"] = {"phase": "Running"}
    kube.add("/api/v1/namespaces/ns/pods/o", pod)
    first, evar = rsv.shared_configmaps(pod) or ("", "")
    kube.add(f"/api/v1/namespaces/ns/configmaps/{first}", {"data": {"GPU_PORTION": "0.5"}})
    kube.add(
        f"/api/v1/namespaces/ns/configmaps/{evar}", {"data": {"NVIDIA_VISIBLE_DEVICES": "GPU-7"}}
    )

    def report(res: Json) -> None:
        res["metadata"]["uid"] = "res-1"
        res["metadata"]["annotations"][keys.RESERVED_GPU_INDEX_ANNOTATION] = "GPU-7"

    kube.on_reservation = report
    assert binder(kube).orphaned_shared_pods() == ["ns/o"]
    (warning,) = events(kube, "GPUReservationLost")
    assert "holds its card GPU-7 again" in warning["message"]


# ---------------------------------------------------------------- binds that do not read the pod
def hinted(kube: FakeKube, br: Json, *, pod_uid: str = "u-1") -> PodHints:
    """The BindRequest owned by ``pod_uid`` and a watch that has shown pod ns/p (ours)."""
    br["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": pod_uid}
    ]
    hints = PodHints("kai-scheduler")
    pod = copy.deepcopy(kube.objects[POD])
    pod["spec"]["schedulerName"] = "kai-scheduler"
    hints.observe("ADDED", pod)
    return hints


def test_a_regular_bind_of_a_pod_the_watch_showed_does_not_read_it() -> None:
    kube, br = setup(kind="Regular")
    br["metadata"]["resourceVersion"] = "5"
    outcome = binder(kube, hinted(kube, br)).reconcile(br)
    assert outcome.phase == "Succeeded"
    assert kube.objects[POD]["spec"]["nodeName"] == "n1"
    assert ("GET", POD) not in kube.calls
    binding = next(b for m, p, b in kube.bodies if p == f"{POD}/binding")
    assert binding["metadata"]["uid"] == "u-1"  # the precondition still names the pod
    # A plain bind posts no Event of its own (the scheduler's Scheduled one names the node).
    assert events(kube, "Bound") == []


def test_a_pod_made_again_since_the_request_is_not_bound() -> None:
    kube, br = setup(kind="Regular")
    hints = hinted(kube, br)
    kube.objects[POD]["metadata"]["uid"] = "u-2"  # deleted and made again; watch behind
    outcome = binder(kube, hints).reconcile(br)
    assert (outcome.phase, outcome.retry_in) == ("Failed", None)
    assert "earlier pod" in outcome.reason
    assert not kube.objects[POD]["spec"].get("nodeName")


def test_a_pod_bound_meanwhile_counts_as_done_or_fails_at_once() -> None:
    kube, br = setup(kind="Regular")
    hints = hinted(kube, br)
    kube.objects[POD]["spec"]["nodeName"] = "n1"  # the watch has not shown it bound yet
    outcome = binder(kube, hints).reconcile(br)
    assert outcome.phase == "Succeeded" and "already bound" in outcome.reason
    kube, br = setup(kind="Regular", limit=5)
    hints = hinted(kube, br)
    kube.objects[POD]["spec"]["nodeName"] = "n2"
    outcome = binder(kube, hints).reconcile(br)
    assert (outcome.phase, outcome.retry_in) == ("Failed", None)


def test_a_pod_gone_or_being_deleted_fails_at_once() -> None:
    kube, br = setup(kind="Regular", limit=5)
    hints = hinted(kube, br)
    del kube.objects[POD]
    outcome = binder(kube, hints).reconcile(br)
    assert (outcome.phase, outcome.retry_in) == ("Failed", None)
    assert "not found" in outcome.reason
    kube, br = setup(kind="Regular", limit=5)
    hints = hinted(kube, br)
    kube.objects[POD]["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    outcome = binder(kube, hints).reconcile(br)
    assert (outcome.phase, outcome.retry_in) == ("Failed", None)
    assert "being deleted" in outcome.reason


def test_pinned_fraction_and_unknown_pods_are_read_first() -> None:
    # No hint for the pod (the watch has not shown it): read.
    kube, br = setup(kind="Regular")
    br["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u-1"}
    ]
    binder(kube, PodHints("kai-scheduler")).reconcile(br)
    assert ("GET", POD) in kube.calls
    # A pod that names cards: the pinned bind needs all of it.
    kube, br = setup(kind="Regular")
    kube.objects[POD]["metadata"]["annotations"] = {keys.USE_GPU_UUID_ANNOTATION: "GPU-1"}
    hints = hinted(kube, br)
    assert hints.get("ns", "p") is not None and hints.get("ns", "p").pinned  # type: ignore[union-attr]
    binder(kube, hints).reconcile(br)
    assert ("GET", POD) in kube.calls
    # A Fraction labels the pod over its resourceVersion: read.
    kube, br = setup(kind="Fraction")
    assert binder(kube, hinted(kube, br))._hinted_pod(_request(br)) is None


def _request(br: Json) -> Any:
    from kai_py.binder.binding import _Request

    return _Request.of(br)


def test_hints_follow_the_scheduler_s_unbound_pods_only() -> None:
    hints = PodHints(lambda: "kai-scheduler")
    pod: Json = {
        "metadata": {"name": "a", "namespace": "ns", "uid": "u"},
        "spec": {"schedulerName": "kai-scheduler"},
    }
    hints.observe(None, pod)  # from a listing
    assert hints.get("ns", "a") is not None and len(hints) == 1
    other = copy.deepcopy(pod)
    other["metadata"]["name"] = "b"
    other["spec"]["schedulerName"] = "default-scheduler"
    hints.observe("ADDED", other)
    assert hints.get("ns", "b") is None
    bound = copy.deepcopy(pod)
    bound["spec"]["nodeName"] = "n1"
    hints.observe("MODIFIED", bound)
    assert hints.get("ns", "a") is None and len(hints) == 0
    hints.observe("MODIFIED", pod)
    terminating = copy.deepcopy(pod)
    terminating["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    hints.observe("MODIFIED", terminating)
    assert hints.get("ns", "a") is None
    hints.observe("MODIFIED", pod)
    hints.observe("DELETED", pod)
    assert len(hints) == 0


def test_hints_never_pile_up(monkeypatch: pytest.MonkeyPatch) -> None:
    from kai_py.binder import podhints

    monkeypatch.setattr(podhints, "MAX_HINTS", 3)
    hints = PodHints("kai-scheduler")
    for i in range(5):
        hints.observe(
            "ADDED",
            {
                "metadata": {"name": f"p{i}", "namespace": "ns", "uid": f"u{i}"},
                "spec": {"schedulerName": "kai-scheduler"},
            },
        )
    assert len(hints) <= 3
    assert hints.get("ns", "p4") is not None  # the newest is kept


def test_a_request_another_attempt_finished_gets_no_second_bound_event() -> None:
    # Two attempts at one request (a pod made again under its name brought a second
    # offer): the second finds the pod bound and the request Succeeded; the pod was told
    # once, by the first.
    kube, br = setup()

    def report(pod: Json) -> None:
        pod["metadata"]["annotations"][keys.RESERVED_GPU_INDEX_ANNOTATION] = "GPU-abc"

    kube.on_reservation = report
    br["metadata"]["resourceVersion"] = "1"
    kube.objects[BR] = copy.deepcopy(br)
    kube.objects[BR]["metadata"]["resourceVersion"] = "2"
    kube.objects[BR]["status"] = {"phase": "Succeeded"}
    outcome = binder(kube).reconcile(br)
    assert outcome.phase == "Succeeded"
    assert events(kube, "Bound") == []


PVC = "/api/v1/namespaces/ns/persistentvolumeclaims"


def test_an_unbound_claim_is_told_the_node_before_the_bind() -> None:
    """As kube-scheduler's VolumeBinding: the external provisioner of a class that waits
    for the first consumer reads the node from the claim's selected-node annotation."""
    kube, br = setup(kind="Regular")
    kube.objects[POD]["spec"]["volumes"] = [
        {"name": "data", "persistentVolumeClaim": {"claimName": "late"}},
        {"name": "old", "persistentVolumeClaim": {"claimName": "bound"}},
        {"name": "tmp", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
    ]
    kube.add(f"{PVC}/late", {"metadata": {"name": "late"}, "spec": {}})
    kube.add(f"{PVC}/bound", {"metadata": {"name": "bound"}, "spec": {"volumeName": "pv-1"}})
    kube.add(f"{PVC}/p-tmp", {"metadata": {"name": "p-tmp"}, "spec": {}})
    hints = PodHints("kai-scheduler")
    hints.observe(
        "ADDED",
        {
            **kube.objects[POD],
            "spec": {**kube.objects[POD]["spec"], "schedulerName": "kai-scheduler"},
        },
    )
    outcome = binder(kube, hints).reconcile(br)
    assert outcome.phase == "Succeeded"
    for name in ("late", "p-tmp"):
        annotations = kube.objects[f"{PVC}/{name}"]["metadata"]["annotations"]
        assert annotations == {keys.SELECTED_NODE_ANNOTATION: "n1"}
    assert "annotations" not in kube.objects[f"{PVC}/bound"]["metadata"]  # bound: left alone
    patched = [i for i, c in enumerate(kube.calls) if c[0] == "PATCH" and "claims" in c[1]]
    binding = next(i for i, c in enumerate(kube.calls) if c[1].endswith("/binding"))
    assert patched and max(patched) < binding


def test_a_claim_gone_or_chosen_for_another_node_fails_the_attempt_unbound() -> None:
    kube, br = setup(kind="Regular")
    kube.objects[POD]["spec"]["volumes"] = [
        {"name": "data", "persistentVolumeClaim": {"claimName": "late"}}
    ]
    outcome = binder(kube).reconcile(br)
    assert (
        outcome.phase == "Pending"
        and "persistentvolumeclaim ns/late does not exist" in outcome.reason
    )
    kube.add(
        f"{PVC}/late",
        {
            "metadata": {"name": "late", "annotations": {keys.SELECTED_NODE_ANNOTATION: "n2"}},
            "spec": {},
        },
    )
    outcome = binder(kube).reconcile(br)
    assert "is being provisioned for node n2" in outcome.reason
    assert not kube.objects[POD]["spec"].get("nodeName")


# ---------------------------------------------------------------- HAMi-core's caps
def test_hami_core_caps_a_fraction_per_card_unless_the_container_opts_out() -> None:
    pod = kai_wired(by_env=False)
    # A 45 % share of an 80 GB and a 40 GB card: the cap is per card, rounded down.
    assert rsv.hami_core_limits(pod, [81920.0, 40960.0], 0.45) == {
        "CUDA_DEVICE_MEMORY_LIMIT_0": "36864m",
        "CUDA_DEVICE_MEMORY_LIMIT_1": "18432m",
    }
    # A share in MiB is that many MiB on every card.
    pod["metadata"]["annotations"][keys.GPU_MEMORY_ANNOTATION] = "5000"
    assert rsv.hami_core_limits(pod, [81920.0], 0.06) == {"CUDA_DEVICE_MEMORY_LIMIT_0": "5000m"}
    # The vLLM case: HAMi-core off for the container; or a cap of its own; or a card
    # whose memory is unknown: no cap.
    off = kai_wired(by_env=False)
    off["spec"]["containers"][0]["env"] = [{"name": "CUDA_DISABLE_CONTROL", "value": "true"}]
    assert rsv.hami_core_limits(off, [81920.0], 0.5) == {}
    own = kai_wired(by_env=False)
    own["spec"]["containers"][0]["env"] = [{"name": "CUDA_DEVICE_MEMORY_LIMIT", "value": "1m"}]
    assert rsv.hami_core_limits(own, [81920.0], 0.5) == {}
    assert rsv.hami_core_limits(kai_wired(), [0.0], 0.5) == {}
    # The caps go where the sharing container reads its environment from (envFrom).
    data = dict(
        rsv.gpu_configmaps(kai_wired(), ["GPU-1"], 0.5, {"CUDA_DEVICE_MEMORY_LIMIT_0": "9m"})
    )
    assert data["train-x7b2kq9-shared-gpu-0-evar"] == {"CUDA_DEVICE_MEMORY_LIMIT_0": "9m"}
    assert "CUDA_DEVICE_MEMORY_LIMIT_0" not in data["train-x7b2kq9-shared-gpu-0"]


@pytest.mark.parametrize("hami_core", [True, False])
def test_the_binder_gives_a_fraction_hami_cores_cap_from_the_card_it_got(hami_core: bool) -> None:
    kube, br = setup()
    kube.objects[POD] = kai_wired()
    kube.objects[POD]["metadata"].update(name="p", uid="u-1")
    inventory = [
        {"index": 0, "uuid": "GPU-small", "product": "A", "memoryMiB": 40960},
        {"index": 1, "uuid": "GPU-big", "product": "A", "memoryMiB": 81920},
    ]
    kube.objects["/api/v1/nodes/n1"]["metadata"]["annotations"] = {
        keys.GPU_INVENTORY_ANNOTATION: json.dumps({"version": 1, "cards": inventory})
    }
    br["spec"]["receivedGPU"]["portion"] = "0.25"

    def report(pod: Json) -> None:
        pod["metadata"]["annotations"][keys.RESERVED_GPU_INDEX_ANNOTATION] = "GPU-big"

    kube.on_reservation = report
    outcome = binder(kube, hami_core=hami_core).reconcile(br)
    assert outcome.phase == "Succeeded", outcome.reason
    evar = kube.objects["/api/v1/namespaces/ns/configmaps/train-x7b2kq9-shared-gpu-0-evar"]
    if hami_core:
        assert evar["data"] == {"CUDA_DEVICE_MEMORY_LIMIT_0": "20480m"}
    else:
        assert evar["data"] == {}


def test_the_hami_core_switch_is_read_from_the_environment() -> None:
    assert BinderConfig.from_env({"KAI_PY_HAMI_CORE": "true"}).hami_core
    assert not BinderConfig.from_env({}).hami_core
