"""The emulator's StatefulSet controller on both backends (over HTTP against the real server).

The real-API tier runs kai-py's simulated controllers, not
kube-controller-manager's: a StatefulSet must get its ordered pods and its
claims there as in the emulator.
"""

from __future__ import annotations

from typing import Any

from kubernetes import client as k8s
from operator_helpers import wait_for
from realapi_backends import Backend

NS = "team-a"


def _statefulset(name: str, replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "replicas": replicas,
            "serviceName": name,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "containers": [
                        {
                            "name": "main",
                            "image": "busybox",
                            "resources": {"requests": {"cpu": "1"}},
                        }
                    ]
                },
            },
            "volumeClaimTemplates": [
                {
                    "metadata": {"name": "data"},
                    "spec": {
                        "accessModes": ["ReadWriteOnce"],
                        "resources": {"requests": {"storage": "1Gi"}},
                    },
                }
            ],
        },
    }


def test_a_statefulset_gets_its_pods_and_claims(backend: Backend, api: k8s.ApiClient) -> None:
    apps, core = k8s.AppsV1Api(api), k8s.CoreV1Api(api)
    apps.create_namespaced_stateful_set(NS, _statefulset("db", 2))

    def ready() -> Any:
        sts = apps.read_namespaced_stateful_set("db", NS)
        return sts if (sts.status.ready_replicas or 0) == 2 else None

    sts = wait_for(ready, timeout=60, what="two ready replicas")
    pods = core.list_namespaced_pod(NS, label_selector="app=db").items
    assert sorted(p.metadata.name for p in pods) == ["db-0", "db-1"]
    assert all(p.metadata.owner_references[0].uid == sts.metadata.uid for p in pods)
    claims = core.list_namespaced_persistent_volume_claim(NS).items
    assert sorted(c.metadata.name for c in claims) == ["data-db-0", "data-db-1"]
