"""The generated CRDs: checked in without drift, structural, and accepting KAI's
own example manifests (validated against the schema in the files, the way the
API server would, not only against the pydantic models)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from openapi_subset import structural_problems, validate

from kai_py.api.crdgen import (
    CRDS,
    NotStructuralError,
    crd_documents,
    render_crds,
    structural,
    write_crds,
)
from kai_py.api.podgroup import PodGroup
from kai_py.api.queue import Queue

REPO = Path(__file__).resolve().parents[2]
CRD_DIR = REPO / "crds"


def _checked_in(filename: str) -> dict[str, Any]:
    docs = list(yaml.safe_load_all((CRD_DIR / filename).read_text(encoding="utf-8")))
    assert len(docs) == 1, f"{filename} should hold exactly one CRD"
    doc: dict[str, Any] = docs[0]
    return doc


def _schema(filename: str) -> dict[str, Any]:
    schema: dict[str, Any] = _checked_in(filename)["spec"]["versions"][0]["schema"][
        "openAPIV3Schema"
    ]
    return schema


@pytest.mark.parametrize("filename", [info.filename for info in CRDS])
def test_checked_in_crds_match_the_models(filename: str) -> None:
    expected = render_crds()[filename]
    actual = (CRD_DIR / filename).read_text(encoding="utf-8")
    assert actual == expected, f"crds/{filename} is stale: run `kai-py crds` and commit the result"


def test_write_crds_writes_one_file_per_crd(tmp_path: Path) -> None:
    paths = write_crds(tmp_path / "out")
    assert [p.name for p in paths] == [
        "queues.yaml",
        "podgroups.yaml",
        "bindrequests.yaml",
        "topologies.yaml",
        "configs.yaml",
        "schedulingshards.yaml",
    ]
    for path in paths:
        assert path.read_text(encoding="utf-8") == render_crds()[path.name]


def test_crd_identity() -> None:
    queue, podgroup, bindrequest, topology, config, shard = crd_documents()
    # KAI's Topology lives in its own group, cluster-scoped, without a status.
    assert topology["metadata"]["name"] == "topologies.kai.scheduler"
    assert topology["spec"]["group"] == "kai.scheduler"
    assert topology["spec"]["scope"] == "Cluster"
    assert topology["spec"]["versions"][0]["name"] == "v1alpha1"
    assert "subresources" not in topology["spec"]["versions"][0]
    assert queue["metadata"]["name"] == "queues.scheduling.run.ai"
    assert queue["spec"]["scope"] == "Cluster"
    assert queue["spec"]["versions"][0]["name"] == "v2"
    assert podgroup["metadata"]["name"] == "podgroups.scheduling.run.ai"
    assert podgroup["spec"]["scope"] == "Namespaced"
    assert podgroup["spec"]["names"]["shortNames"] == ["pg"]
    assert podgroup["spec"]["versions"][0]["name"] == "v2alpha2"
    assert bindrequest["metadata"]["name"] == "bindrequests.scheduling.run.ai"
    assert bindrequest["spec"]["scope"] == "Namespaced"
    assert bindrequest["spec"]["versions"][0]["name"] == "v1alpha2"
    for doc in (queue, podgroup, bindrequest):
        assert doc["apiVersion"] == "apiextensions.k8s.io/v1"
        assert doc["spec"]["group"] == "scheduling.run.ai"
        assert doc["spec"]["names"]["categories"] == ["kai"]
        version = doc["spec"]["versions"][0]
        assert version["served"] and version["storage"]
        assert version["subresources"] == {"status": {}}
    # KAI's configuration objects keep KAI's group, version and scope.
    assert config["metadata"]["name"] == "configs.kai.scheduler"
    assert shard["metadata"]["name"] == "schedulingshards.kai.scheduler"
    for doc in (config, shard):
        assert doc["spec"]["group"] == "kai.scheduler"
        assert doc["spec"]["scope"] == "Cluster"
        assert doc["spec"]["versions"][0]["name"] == "v1"


@pytest.mark.parametrize("filename", [info.filename for info in CRDS])
def test_schemas_are_structural(filename: str) -> None:
    schema = _schema(filename)
    assert structural_problems(schema) == []
    assert schema["properties"]["metadata"] == {"type": "object"}


@pytest.mark.parametrize("filename", [info.filename for info in CRDS])
def test_printer_columns_point_at_schema_fields(filename: str) -> None:
    version = _checked_in(filename)["spec"]["versions"][0]
    schema = version["schema"]["openAPIV3Schema"]
    names = [c["name"] for c in version["additionalPrinterColumns"]]
    assert names[-1] == "Age"
    for column in version["additionalPrinterColumns"]:
        path = column["jsonPath"]
        if path.startswith(".metadata."):
            continue
        node = schema
        # Split on unescaped dots; `[0]` steps into an array's items.
        for part in [p.replace("\\.", ".") for p in _split_path(path)]:
            if part.endswith(("[0]", "[*]")):
                node = node["properties"][part[:-3]]["items"]
            elif "properties" in node:
                node = node["properties"][part]
            else:
                node = node["additionalProperties"]
        assert "type" in node or node.get("x-kubernetes-int-or-string"), path


def _split_path(path: str) -> list[str]:
    parts, current, escaped = [], "", False
    for char in path.lstrip("."):
        if escaped:
            current += "\\" + char
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == ".":
            parts.append(current)
            current = ""
        else:
            current += char
    return [*parts, current]


def test_queue_printer_columns() -> None:
    columns = {
        c["name"]: c["jsonPath"]
        for c in crd_documents()[0]["spec"]["versions"][0]["additionalPrinterColumns"]
    }
    assert columns["Parent"] == ".spec.parentQueue"
    assert columns["Priority"] == ".spec.priority"
    assert columns["GPU-Quota"] == ".spec.resources.gpu.quota"
    assert columns["GPU-Limit"] == ".spec.resources.gpu.limit"
    assert columns["GPUs-Allocated"] == ".status.allocated.nvidia\\.com/gpu"


# The default queues KAI installs, as its documentation shows them.
KAI_QUEUES = """
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata:
  name: default-parent-queue
spec:
  resources:
    cpu: {quota: -1, limit: -1, overQuotaWeight: 1}
    gpu: {quota: -1, limit: -1, overQuotaWeight: 1}
    memory: {quota: -1, limit: -1, overQuotaWeight: 1}
---
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata:
  name: default-queue
spec:
  parentQueue: default-parent-queue
  priority: 100
  preemptMinRuntime: 5m
  reclaimMinRuntime: 1h30m
  resources:
    cpu: {quota: 0, limit: -1, overQuotaWeight: 1}
    gpu: {quota: 2.5, limit: 8, overQuotaWeight: 2}
    memory: {quota: 0, limit: -1, overQuotaWeight: 1}
status:
  childQueues: []
  allocated: {nvidia.com/gpu: "1.5", cpu: 2000, memory: 4096}
  requested: {nvidia.com/gpu: 3}
"""

KAI_PODGROUP = """
apiVersion: scheduling.run.ai/v2alpha2
kind: PodGroup
metadata:
  name: distributed-training
  namespace: team-a
spec:
  minMember: 3
  queue: default-queue
  priorityClassName: train
  preemptibility: preemptible
  markUnschedulable: true
  schedulingBackoff: -1
  stalenessGracePeriod: 2m
  topologyConstraint: {requiredTopologyLevel: rack, topology: cluster-topology}
  subGroups:
  - {name: workers, minMember: 2}
  - {name: leader, minMember: 1, parent: workers}
status:
  phase: Pending
  schedulingConditions:
  - type: UnschedulableOnNodePool
    nodePool: default
    status: "True"
    lastTransitionTime: "2026-12-02T14:00:00Z"
    transitionID: "3"
    reasons:
    - reason: OverLimit
      message: "queue default-queue would use 10 GPUs, over its limit of 8"
      details:
        queueDetails:
          name: default-queue
          queueDeservedResources: {nvidia.com/gpu: "2.5"}
          queueAllocatedResources: {nvidia.com/gpu: 6}
          queueResourceLimits: {nvidia.com/gpu: 8}
          queueRequestedResources: {nvidia.com/gpu: 10}
  resourcesStatus:
    requested: {nvidia.com/gpu: 4, cpu: "4000", memory: 16000}
"""


def test_kai_example_queues_validate_against_the_crd_and_the_model() -> None:
    schema = _schema("queues.yaml")
    for manifest in yaml.safe_load_all(KAI_QUEUES):
        assert validate(manifest, schema) == []
        queue = Queue.from_manifest(manifest)
        assert queue.to_manifest()["metadata"]["name"] == manifest["metadata"]["name"]


def test_kai_example_podgroup_validates_against_the_crd_and_the_model() -> None:
    manifest = yaml.safe_load(KAI_PODGROUP)
    assert validate(manifest, _schema("podgroups.yaml")) == []
    group = PodGroup.from_manifest(manifest)
    assert group.spec.min_member == 3
    assert validate(group.to_manifest(), _schema("podgroups.yaml")) == []


def test_bindrequest_written_by_the_model_validates_against_the_crd() -> None:
    from kai_py.api.bindrequest import BindRequest

    request = BindRequest.from_manifest(
        {
            "apiVersion": "scheduling.run.ai/v1alpha2",
            "kind": "BindRequest",
            "metadata": {"name": "p1", "namespace": "ns"},
            "spec": {
                "podName": "p1",
                "selectedNode": "n1",
                "receivedResourceType": "Fraction",
                "receivedGPU": {"count": 1, "portion": "0.5"},
                "selectedGPUGroups": ["g1"],
                "backoffLimit": 3,
            },
            "status": {"phase": "Failed", "reason": "timeout", "failedAttempts": 2},
        }
    )
    assert validate(request.to_manifest(), _schema("bindrequests.yaml")) == []


@pytest.mark.parametrize(
    ("resources", "ok"),
    [
        ({"gpu": {"quota": -1}}, True),
        ({"gpu": {"quota": 0}}, True),
        ({"gpu": {"quota": 0.5}}, True),
        ({"gpu": {"quota": -1.0}}, True),
        ({"gpu": {"quota": -2}}, False),
        ({"gpu": {"quota": -0.5}}, False),
        ({"gpu": {"limit": -3}}, False),
        ({"gpu": {"overQuotaWeight": -1}}, False),
    ],
)
def test_crd_and_model_agree_on_quota_values(resources: dict[str, Any], ok: bool) -> None:
    manifest = {
        "apiVersion": "scheduling.run.ai/v2",
        "kind": "Queue",
        "metadata": {"name": "q"},
        "spec": {"resources": resources},
    }
    assert (validate(manifest, _schema("queues.yaml")) == []) is ok
    try:
        Queue.from_manifest(manifest)
        model_ok = True
    except ValueError:
        model_ok = False
    assert model_ok is ok


@pytest.mark.parametrize("value", ["30s", "5m", "1h30m", "0", "1.5h", "-1s", "300ms"])
def test_crd_duration_pattern_accepts_go_durations(value: str) -> None:
    spec = _schema("podgroups.yaml")["properties"]["spec"]
    assert validate({"stalenessGracePeriod": value}, spec) == []


@pytest.mark.parametrize("value", ["5x", "", "m", "1h 30m", "30"])
def test_crd_duration_pattern_rejects_junk(value: str) -> None:
    spec = _schema("podgroups.yaml")["properties"]["spec"]
    assert validate({"stalenessGracePeriod": value}, spec) != []


def test_server_defaults() -> None:
    queue = _schema("queues.yaml")["properties"]["spec"]["properties"]
    assert queue["priority"]["default"] == 100
    gpu = queue["resources"]["properties"]["gpu"]["properties"]
    assert gpu["quota"]["default"] == 0
    assert gpu["overQuotaWeight"]["default"] == 1
    # The limit trap is reported, not hidden behind a server-side default.
    assert "default" not in gpu["limit"]
    pg = _schema("podgroups.yaml")["properties"]["spec"]["properties"]
    # Not defaulted by the server: minMember and minSubGroup are mutually
    # exclusive, so a stored group must say whether minMember was set.
    assert "default" not in pg["minMember"]
    assert pg["minMember"]["minimum"] == 0
    assert pg["markUnschedulable"]["default"] is True
    assert "default" not in pg["stalenessGracePeriod"]
    assert pg["preemptibility"]["enum"] == ["preemptible", "non-preemptible"]
    br = _schema("bindrequests.yaml")["properties"]["spec"]["properties"]
    assert br["receivedResourceType"]["enum"] == ["Regular", "Fraction"]
    assert br["receivedGPU"]["properties"]["portion"]["type"] == "string"


def test_status_maps_are_int_or_string() -> None:
    allocated = _schema("queues.yaml")["properties"]["status"]["properties"]["allocated"]
    assert allocated["additionalProperties"]["x-kubernetes-int-or-string"] is True


def test_generator_refuses_non_structural_constructs() -> None:
    with pytest.raises(NotStructuralError, match="union of types"):
        structural({"anyOf": [{"type": "string"}, {"type": "integer"}]}, {})
    with pytest.raises(NotStructuralError, match="needs a type"):
        structural({"description": "untyped"}, {})
    with pytest.raises(NotStructuralError, match="not an OpenAPI"):
        structural({"type": "integer", "ge": 0}, {})
    with pytest.raises(NotStructuralError, match="default"):
        structural({"type": "string", "default": 0.5}, {})


def test_generator_inlines_refs_and_drops_null_options() -> None:
    defs = {"Thing": {"type": "object", "title": "Thing", "properties": {"a": {"type": "string"}}}}
    node = {"anyOf": [{"$ref": "#/$defs/Thing"}, {"type": "null"}], "default": None}
    assert structural(node, defs) == {"type": "object", "properties": {"a": {"type": "string"}}}
