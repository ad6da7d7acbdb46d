"""Render charts/kai-py with Helm's own engine (helm-python-sdk embeds Helm v4)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import helm_python as helm
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "kai-py"
RELEASE = "kai"
NAMESPACE = "kai-system"

Json = dict[str, Any]

#: A second set of values: every switch flipped away from its default.
OTHER_VALUES: Json = {
    "image": {"repository": "registry.example/kai-py", "tag": "9.9.9"},
    "schedulerName": "my-scheduler",
    "schedulePeriod": 0.5,
    "placement": "spread",
    "logFormat": "text",
    "logLevel": "debug",
    "deploymentMode": "single",
    "leaderElection": {"enabled": True},
    "scheduler": {"replicas": 2, "resources": {"requests": {"cpu": "1"}}},
    "podgrouper": {
        "replicas": 1,
        "resources": {},
        "extraOwnerGroups": ["ray.io"],
    },
    "gpuSharing": {"runtimeClassName": "nvidia"},
    "webhooks": {"failurePolicy": "Fail", "excludeNamespaces": ["kube-system", "monitoring"]},
    "metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}}},
    "nodeAgent": {"enabled": True},
}


def render(values: Json | None = None) -> list[Json]:
    """Every object the chart renders (templates only: Helm installs crds/ as they are)."""
    chart = helm.Chart.load(str(CHART))
    manifests = chart.render(values or {}, name=RELEASE, namespace=NAMESPACE, is_install=True)
    objects: list[Json] = []
    for path in sorted(manifests):
        for doc in yaml.safe_load_all(manifests[path]):
            if doc is not None:
                objects.append(doc)
    return objects


def by_kind(objects: list[Json], kind: str) -> dict[str, Json]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}
