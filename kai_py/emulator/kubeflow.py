"""CustomResourceDefinitions of the Kubeflow training operator's jobs, for ``kai-py dev``.

KAI's examples submit PyTorchJobs (and TFJobs, MPIJobs, ...); on a cluster
without the Kubeflow training operator's CRDs ``kubectl apply`` fails with
"no matches for kind". These definitions make the kinds exist, so the
examples apply and kai-py's pod-grouper can find them as owners. Their
schemas keep every field (``x-kubernetes-preserve-unknown-fields``): they
are the kinds' names and scopes, not the training operator's validation, and
no controller here turns them into pods.
"""

from __future__ import annotations

from typing import Any

Json = dict[str, Any]

#: (kind, plural, served versions) of the Kubeflow training jobs.
KUBEFLOW_JOBS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("PyTorchJob", "pytorchjobs", ("v1",)),
    ("TFJob", "tfjobs", ("v1",)),
    ("MPIJob", "mpijobs", ("v2beta1",)),
    ("XGBoostJob", "xgboostjobs", ("v1",)),
    ("PaddleJob", "paddlejobs", ("v1",)),
    ("JAXJob", "jaxjobs", ("v1",)),
)
GROUP = "kubeflow.org"


def _crd(kind: str, plural: str, versions: tuple[str, ...]) -> Json:
    schema: Json = {
        "openAPIV3Schema": {
            "type": "object",
            "properties": {
                "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            },
        }
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
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
                    "storage": index == 0,
                    "schema": schema,
                    "subresources": {"status": {}},
                }
                for index, version in enumerate(versions)
            ],
        },
    }


def kubeflow_crds() -> list[Json]:
    """One CRD per Kubeflow training job kind."""
    return [_crd(kind, plural, versions) for kind, plural, versions in KUBEFLOW_JOBS]
