"""Pods for workloads given without their pods, as their controllers would make them.

``kai-py simulate job.yaml`` should answer "what happens if I apply this",
so a batch Job, a Deployment or a Kubeflow job that comes without pods in the
input gets the pods its controller would create: Job ``parallelism`` pods
(capped by ``completions``), Deployment ``replicas`` pods through a
ReplicaSet, and each Kubeflow replica type's ``replicas``. The operators' custom
kinds are in ``operators``, which builds on the helpers here.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Final

from kai_py.api.objects import meta
from kai_py.podgrouper.rules import KUBEFLOW_REPLICA_SPECS
from kai_py.state.documents import Document


def count_or(value: object, default: int) -> int:
    return (
        value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else default
    )


def uid_of(obj: Mapping[str, Any]) -> str:
    m = meta(obj)
    return str(
        m.get("uid") or f"{obj.get('kind')}-{m.get('namespace') or 'default'}-{m.get('name')}"
    )


def owner_ref(owner: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": owner.get("apiVersion", ""),
        "kind": owner.get("kind", ""),
        "name": meta(owner).get("name"),
        "uid": uid_of(owner),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def pod_from_template(
    template: Mapping[str, Any], name: str, owner: Mapping[str, Any], extra_labels: dict[str, str]
) -> dict[str, Any]:
    t_meta = dict(template.get("metadata") or {})
    labels = {**(t_meta.get("labels") or {}), **extra_labels}
    ns = meta(owner).get("namespace") or "default"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": ns,
            "uid": f"{uid_of(owner)}-{name}",
            "labels": labels,
            "annotations": dict(t_meta.get("annotations") or {}),
            "creationTimestamp": meta(owner).get("creationTimestamp"),
            "ownerReferences": [owner_ref(owner)],
        },
        "spec": copy.deepcopy(dict(template.get("spec") or {})),
        "status": {"phase": "Pending"},
    }


def _with_uid(doc: Document) -> Document:
    """Owners need a uid for their pods to point at; give one where the input has none."""
    if meta(doc.body).get("uid"):
        return doc
    body = dict(doc.body)
    body["metadata"] = {**meta(doc.body), "uid": uid_of(doc.body)}
    return Document(doc.source, body)


_EXPANDED_KINDS: Final = frozenset({"Job", "Deployment", *KUBEFLOW_REPLICA_SPECS})


def expand(docs: list[Document]) -> list[Document]:
    if not any(doc.body.get("kind") in _EXPANDED_KINDS for doc in docs):
        return docs  # nothing to make pods for (the operator's input never has owners)
    owned: set[str] = set()
    for doc in docs:
        for ref in meta(doc.body).get("ownerReferences") or []:
            owned.add(f"{ref.get('kind')}/{ref.get('name')}")
            if ref.get("uid"):
                owned.add(str(ref["uid"]))
    out: list[Document] = []
    for doc in docs:
        kind = doc.body.get("kind")
        name = str(meta(doc.body).get("name") or "")
        if kind not in _EXPANDED_KINDS:
            out.append(doc)
            continue
        doc = _with_uid(doc)
        out.append(doc)
        if f"{kind}/{name}" in owned or uid_of(doc.body) in owned:
            continue  # its pods are in the input
        out.extend(
            Document(f"{doc.source} (made by the {kind} controller)", p) for p in _pods_of(doc.body)
        )
    return out


def job_pods(job: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The pods the Job controller starts for ``job``: ``parallelism``, capped by
    ``completions``; none while the Job is suspended."""
    name = str(meta(job).get("name"))
    spec = job.get("spec") or {}
    if spec.get("suspend") is True:
        return []
    parallelism = count_or(spec.get("parallelism"), 1)
    completions = spec.get("completions")
    count = (
        min(parallelism, count_or(completions, parallelism))
        if completions is not None
        else parallelism
    )
    labels = {"job-name": name, "batch.kubernetes.io/job-name": name}
    return [
        pod_from_template(
            spec.get("template") or {},
            f"{name}-{i}",
            job,
            {**labels, "batch.kubernetes.io/job-completion-index": str(i)},
        )
        for i in range(count)
    ]


def _pods_of(owner: Mapping[str, Any]) -> list[dict[str, Any]]:
    kind = owner.get("kind")
    name = str(meta(owner).get("name"))
    spec = owner.get("spec") or {}
    if kind == "Job":
        return job_pods(owner)
    if kind == "Deployment":
        rs_name = f"{name}-sim"
        replicaset = {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {
                "name": rs_name,
                "namespace": meta(owner).get("namespace") or "default",
                "uid": f"{uid_of(owner)}-rs",
                "labels": dict(
                    ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
                ),
                "ownerReferences": [owner_ref(owner)],
                "creationTimestamp": meta(owner).get("creationTimestamp"),
            },
            "spec": {
                "replicas": count_or(spec.get("replicas"), 1),
                "template": spec.get("template") or {},
            },
        }
        pods = [
            pod_from_template(
                spec.get("template") or {},
                f"{rs_name}-{i}",
                replicaset,
                {"pod-template-hash": "sim"},
            )
            for i in range(count_or(spec.get("replicas"), 1))
        ]
        return [replicaset, *pods]
    replica_specs = spec.get(KUBEFLOW_REPLICA_SPECS[str(kind)]) or {}
    pods = []
    for role, rspec in replica_specs.items():
        for i in range(count_or((rspec or {}).get("replicas"), 1)):
            labels = {
                "training.kubeflow.org/job-name": name,
                "training.kubeflow.org/replica-type": str(role).lower(),
                "training.kubeflow.org/replica-index": str(i),
            }
            pods.append(
                pod_from_template(
                    (rspec or {}).get("template") or {},
                    f"{name}-{str(role).lower()}-{i}",
                    owner,
                    labels,
                )
            )
    return pods
