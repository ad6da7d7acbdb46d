"""Stand-ins for workload operators on the API-server tier: minimal CRDs, and what each
operator makes for a workload, created with real owner references.

No KubeRay, LeaderWorkerSet or JobSet controller runs here. ``install_crds`` makes
their kinds exist (on the emulator or a real kube-apiserver), with the fields KAI's
pod-grouper reads typed and every other field kept; ``apply_as_operator`` creates a
workload and then what ``kai_py.state.operators`` says its operator makes (the same
objects ``kai-py simulate`` makes), each owner reference naming the uid the server
gave. Objects whose controller is a built-in one (a StatefulSet's, Job's or
ReplicaSet's pods, a Deployment's ReplicaSet) are left to the built-in controllers
that run on both backends, as on a cluster.

One thing the built-in controllers cannot do: LeaderWorkerSet's pod webhook labels
each leader pod with its group (``group-index``) and each worker with its index.
The stand-in puts the group's labels in the leader StatefulSet's template, which is
right for a LeaderWorkerSet of one group only; it refuses more groups. Workers get
no ``worker-index`` label here (KAI's grouper reads it only for ``LeaderReady``).
"""

from __future__ import annotations

import copy
from typing import Any

from kubernetes import client as k8s
from operator_helpers import wait_for
from realapi_backends import Backend

from kai_py.state.operators import Definitions, made_objects
from kai_py.state.workloads import uid_of

Json = dict[str, Any]


def _object(properties: Json | None = None) -> Json:
    """An object schema that keeps the fields it does not name."""
    schema: Json = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    if properties:
        schema["properties"] = properties
    return schema


INT: Json = {"type": "integer"}
STR: Json = {"type": "string"}
BOOL: Json = {"type": "boolean"}
TEMPLATE = _object()

#: kind -> (group, version, plural, what the pod-grouper or the stand-in reads in spec).
KINDS: dict[str, tuple[str, str, str, Json]] = {
    "JobSet": (
        "jobset.x-k8s.io",
        "v1alpha2",
        "jobsets",
        {
            "replicatedJobs": {
                "type": "array",
                "items": _object({"name": STR, "replicas": INT, "template": TEMPLATE}),
            },
            "startupPolicy": _object({"startupPolicyOrder": STR}),
            "suspend": BOOL,
        },
    ),
    "LeaderWorkerSet": (
        "leaderworkerset.x-k8s.io",
        "v1",
        "leaderworkersets",
        {
            "replicas": INT,
            "startupPolicy": STR,
            "leaderWorkerTemplate": _object(
                {
                    "size": INT,
                    "leaderTemplate": TEMPLATE,
                    "workerTemplate": TEMPLATE,
                    "subGroupPolicy": _object({"subGroupSize": INT}),
                }
            ),
        },
    ),
    "RayCluster": (
        "ray.io",
        "v1",
        "rayclusters",
        {
            "suspend": BOOL,
            "enableInTreeAutoscaling": BOOL,
            "headGroupSpec": _object({"template": TEMPLATE}),
            "workerGroupSpecs": {
                "type": "array",
                "items": _object(
                    {
                        "groupName": STR,
                        "replicas": INT,
                        "minReplicas": INT,
                        "maxReplicas": INT,
                        "numOfHosts": INT,
                        "suspended": BOOL,
                        "template": TEMPLATE,
                    }
                ),
            },
        },
    ),
    "RayJob": ("ray.io", "v1", "rayjobs", {"rayClusterSpec": _object(), "suspend": BOOL}),
    "RayService": ("ray.io", "v1", "rayservices", {"rayClusterConfig": _object()}),
    "Service": ("serving.knative.dev", "v1", "services", {"template": TEMPLATE}),
    "Configuration": ("serving.knative.dev", "v1", "configurations", {"template": TEMPLATE}),
    "Revision": ("serving.knative.dev", "v1", "revisions", {}),
    "SparkApplication": (
        "sparkoperator.k8s.io",
        "v1beta2",
        "sparkapplications",
        {"driver": _object(), "executor": _object({"instances": INT})},
    ),
    "Notebook": ("kubeflow.org", "v1", "notebooks", {"template": TEMPLATE}),
    "TrainJob": (
        "trainer.kubeflow.org",
        "v1alpha1",
        "trainjobs",
        {"runtimeRef": _object({"name": STR, "kind": STR}), "trainer": _object({"numNodes": INT})},
    ),
    "TaskRun": ("tekton.dev", "v1", "taskruns", {"taskSpec": _object(), "taskRef": _object()}),
    "PipelineRun": ("tekton.dev", "v1", "pipelineruns", {"pipelineSpec": _object()}),
    "Workflow": ("argoproj.io", "v1alpha1", "workflows", {"entrypoint": STR}),
    "PodCliqueSet": ("grove.io", "v1alpha1", "podcliquesets", {"replicas": INT}),
    "PodClique": ("grove.io", "v1alpha1", "podcliques", {"replicas": INT, "minAvailable": INT}),
    "PodGang": (
        "scheduler.grove.io",
        "v1alpha1",
        "podgangs",
        {
            "podgroups": {
                "type": "array",
                "items": _object({"name": STR, "minReplicas": INT}),
            }
        },
    ),
    "VirtualMachineInstance": (
        "kubevirt.io",
        "v1",
        "virtualmachineinstances",
        {"domain": _object()},
    ),
}
#: Kinds whose objects a built-in controller on the tier makes the pods (or ReplicaSets) of.
BUILT_IN_CONTROLLERS = frozenset({"Job", "StatefulSet", "ReplicaSet", "Deployment"})


def _approval(group: str) -> dict[str, str]:
    """A group under k8s.io is protected: the real server wants the approval annotation
    (spark-operator's own CRD carries one)."""
    if group.endswith((".k8s.io", ".kubernetes.io")):
        return {"api-approved.kubernetes.io": "unapproved, a test stand-in"}
    return {}


def crd(kind: str) -> Json:
    group, version, plural, spec = KINDS[kind]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}", "annotations": _approval(group)},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
            },
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {"spec": _object(spec), "status": _object()},
                        }
                    },
                    "subresources": {"status": {}},
                }
            ],
        },
    }


def install_crds(backend: Backend, api: k8s.ApiClient, *kinds: str) -> None:
    """The CRDs of ``kinds``, established and served, on either backend."""
    docs = [crd(kind) for kind in kinds]
    if backend.server is not None:
        backend.server.apply_crds(docs)
        return
    extensions = k8s.ApiextensionsV1Api(api)
    for doc in docs:
        extensions.create_custom_resource_definition(doc)
    custom = k8s.CustomObjectsApi(api)
    for kind in kinds:
        group, version, plural, _ = KINDS[kind]
        wait_for(
            lambda g=group, v=version, p=plural: (
                custom.list_cluster_custom_object(g, v, p) is not None
            ),
            timeout=20,
            what=f"{plural}.{group} served",
        )


def _create(api: k8s.ApiClient, obj: Json) -> str:
    """Create ``obj``; its uid."""
    ns, kind = obj["metadata"]["namespace"], obj["kind"]
    if kind == "Pod":
        return str(k8s.CoreV1Api(api).create_namespaced_pod(ns, obj).metadata.uid)
    if kind == "StatefulSet":
        return str(k8s.AppsV1Api(api).create_namespaced_stateful_set(ns, obj).metadata.uid)
    if kind == "Deployment":
        return str(k8s.AppsV1Api(api).create_namespaced_deployment(ns, obj).metadata.uid)
    if kind == "Job":
        return str(k8s.BatchV1Api(api).create_namespaced_job(ns, obj).metadata.uid)
    group, version, plural, _ = KINDS[kind]
    created = k8s.CustomObjectsApi(api).create_namespaced_custom_object(
        group, version, ns, plural, obj
    )
    return str(created["metadata"]["uid"])


def _read(api: k8s.ApiClient, kind: str, ns: str, name: str) -> Json:
    """An object of one of the kinds here (built-in ones too) as a dict."""
    builtin: dict[str, Any] = {
        "Pod": k8s.CoreV1Api(api).read_namespaced_pod,
        "StatefulSet": k8s.AppsV1Api(api).read_namespaced_stateful_set,
        "Deployment": k8s.AppsV1Api(api).read_namespaced_deployment,
        "ReplicaSet": k8s.AppsV1Api(api).read_namespaced_replica_set,
        "Job": k8s.BatchV1Api(api).read_namespaced_job,
    }
    if kind in builtin:
        found: Json = api.sanitize_for_serialization(builtin[kind](name, ns))
        return found
    group, version, plural, _ = KINDS[kind]
    custom: Json = k8s.CustomObjectsApi(api).get_namespaced_custom_object(
        group, version, ns, plural, name
    )
    return custom


def owner_chain(api: k8s.ApiClient, obj: Json) -> list[tuple[str, str, str]]:
    """(kind, name, uid) of each owner up the controller references, as the server has
    them, nearest first; each reference's uid is checked against the object it names."""
    chain = []
    while refs := obj["metadata"].get("ownerReferences"):
        ref = next(r for r in refs if r.get("controller"))
        obj = _read(api, ref["kind"], obj["metadata"]["namespace"], ref["name"])
        assert obj["metadata"]["uid"] == ref["uid"], (ref, obj["metadata"])
        chain.append((ref["kind"], ref["name"], ref["uid"]))
    return chain


def _uid_of_made(api: k8s.ApiClient, kind: str, ns: str, name: str) -> str:
    """The uid of an object a built-in controller makes, once it has made it."""
    if kind != "Pod":
        raise ValueError(f"{kind} {ns}/{name}: the stand-in waits only for pods")
    core = k8s.CoreV1Api(api)
    pod = wait_for(lambda: core.read_namespaced_pod(name, ns), timeout=30, what=f"pod {name}")
    return str(pod.metadata.uid)


def _for_server(obj: Json, uid: str) -> Json:
    """``obj`` as a client sends it: no uid, times or status of its own, its owner's real uid."""
    body = copy.deepcopy(obj)
    metadata = body["metadata"]
    for key in ("uid", "creationTimestamp"):
        metadata.pop(key, None)
    metadata["ownerReferences"][0]["uid"] = uid
    body.pop("status", None)
    return body


def apply_as_operator(
    api: k8s.ApiClient, workload: Json, definitions: list[Json] | None = None
) -> dict[str, str]:
    """Create ``workload`` and what its operator makes (from ``definitions`` it names, such
    as a TrainJob's runtime, read as the operator reads them and not created); kind/name
    -> uid of each created."""
    workload = copy.deepcopy(workload)
    kind, ns = workload["kind"], workload["metadata"].setdefault("namespace", "default")
    made = made_objects(
        {**workload, "metadata": {**workload["metadata"], "uid": uid_of(workload)}},
        Definitions(definitions or []),
    )
    if made is None:
        raise ValueError(f"no operator stand-in for {kind}")
    uids = {uid_of(workload): _create(api, workload)}
    created = {f"{kind}/{workload['metadata']['name']}": uids[uid_of(workload)]}
    if made.status:
        group, version, plural, _ = KINDS[kind]
        k8s.CustomObjectsApi(api).patch_namespaced_custom_object_status(
            group, version, ns, plural, workload["metadata"]["name"], {"status": made.status}
        )
    if kind == "LeaderWorkerSet":
        _leader_webhook_labels(made.objects)
    by_uid = {o["metadata"]["uid"]: o for o in made.objects}
    for obj in made.objects:  # parents come before their children
        ref = obj["metadata"]["ownerReferences"][0]
        if ref["kind"] in BUILT_IN_CONTROLLERS:
            continue  # made by the built-in controller
        if ref["uid"] not in uids:
            owner = by_uid[ref["uid"]]
            uids[ref["uid"]] = _uid_of_made(api, owner["kind"], ns, owner["metadata"]["name"])
        uids[obj["metadata"]["uid"]] = _create(api, _for_server(obj, uids[ref["uid"]]))
        created[f"{obj['kind']}/{obj['metadata']['name']}"] = uids[obj["metadata"]["uid"]]
    return created


def _leader_webhook_labels(objects: list[Json]) -> None:
    """What LeaderWorkerSet's pod webhook adds to the one leader pod, in its template."""
    leader_sts = objects[0]
    leaders = [
        o
        for o in objects
        if o["kind"] == "Pod"
        and o["metadata"]["ownerReferences"][0]["uid"] == leader_sts["metadata"]["uid"]
    ]
    if len(leaders) != 1:
        raise ValueError("the LeaderWorkerSet stand-in makes one group only (see the module)")
    labels = leader_sts["spec"]["template"]["metadata"]["labels"]
    for key, value in leaders[0]["metadata"]["labels"].items():
        if key.startswith("leaderworkerset.sigs.k8s.io/"):
            labels[key] = value
