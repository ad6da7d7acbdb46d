"""Render charts/kai-py with Helm's own engine (helm-python-sdk embeds Helm v4)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import helm_python as helm
import yaml

from kai_py.apiclient.kube import Kube, KubeError, path_of

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
    "leaderElection": {"enabled": False},
    "scheduler": {"replicas": 2, "resources": {"requests": {"cpu": "1"}}},
    "podgrouper": {
        "replicas": 1,
        "resources": {},
        "extraOwnerGroups": ["ray.io"],
    },
    "gpuSharing": {"runtimeClassName": "nvidia"},
    "webhooks": {"failurePolicy": "Fail", "excludeNamespaces": ["kube-system", "monitoring"]},
    "metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}}},
    "nodeAgent": {"enabled": False},
    "rbac": {"viewerRole": True},
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


#: Objects `kai-py dev` already made: applying the chart must find them equal.
SHARED_KINDS = ("PriorityClass", "Queue", "Namespace", "ServiceAccount")
#: KAI's configuration objects `kai-py dev` made with its own defaults (its namespace,
#: kai-scheduler): the chart's, made from its values, take their place.
REPLACED_KINDS = ("Config", "SchedulingShard")


class Applier:
    """Creates manifests by kind through discovery, as kubectl would."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self._plurals: dict[str, dict[str, tuple[str, bool]]] = {}

    def path(self, obj: Json, with_name: bool = False) -> str:
        api_version = obj["apiVersion"]
        if api_version not in self._plurals:
            base = f"/apis/{api_version}" if "/" in api_version else f"/api/{api_version}"
            found = self.kube.get(base)["resources"]
            self._plurals[api_version] = {
                r["kind"]: (r["name"], r["namespaced"]) for r in found if "/" not in r["name"]
            }
        plural, namespaced = self._plurals[api_version][obj["kind"]]
        group, _, version = api_version.rpartition("/")
        meta = obj["metadata"]
        return path_of(
            group,
            version,
            plural,
            meta.get("namespace") if namespaced else None,
            meta["name"] if with_name else None,
        )

    def apply(self, obj: Json) -> None:
        try:
            self.kube.create(self.path(obj), obj)
        except KubeError as exc:
            if exc.code == 409 and obj["kind"] in REPLACED_KINDS:
                there = self.kube.get(self.path(obj, with_name=True))
                version = there["metadata"]["resourceVersion"]
                body = {**obj, "metadata": {**obj["metadata"], "resourceVersion": version}}
                self.kube.request("PUT", self.path(obj, with_name=True), body)
                return
            if exc.code != 409 or obj["kind"] not in SHARED_KINDS:
                raise
            there = self.kube.get(self.path(obj, with_name=True))
            for field in ("spec", "value"):
                if field in obj:  # what the manifest says (the server adds defaults)
                    mine = obj[field]
                    theirs = there.get(field)
                    if isinstance(mine, dict) and isinstance(theirs, dict):
                        theirs = {k: theirs.get(k) for k in mine}
                    assert theirs == mine, (obj["kind"], obj["metadata"]["name"])

    def delete(self, obj: Json) -> None:
        try:
            self.kube.delete(self.path(obj, with_name=True))
        except KubeError as exc:
            if exc.code != 404:
                raise
