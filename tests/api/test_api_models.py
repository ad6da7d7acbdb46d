"""The pydantic models: defaults, validation with messages that name the object
and the field, lenient handling of unknown fields, and manifest round trips."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kai_py.api import keys
from kai_py.api.bindrequest import BindRequest
from kai_py.api.common import ManifestError
from kai_py.api.durations import DURATION_PATTERN, format_duration, parse_duration
from kai_py.api.podgroup import PodGroup, QueueDetails
from kai_py.api.quantities import (
    QUANTITY_PATTERN,
    ResourceAmounts,
    from_resource_map,
    parse_quantity,
    to_resource_map,
)
from kai_py.api.queue import Queue, QueueSpec


def queue(spec: dict[str, Any] | None = None, name: str = "team-a", **top: Any) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.run.ai/v2",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": spec or {},
        **top,
    }


def podgroup(spec: dict[str, Any] | None = None, **top: Any) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": "pg1", "namespace": "ns"},
        "spec": spec or {},
        **top,
    }


def bindrequest(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.run.ai/v1alpha2",
        "kind": "BindRequest",
        "metadata": {"name": "p1", "namespace": "ns"},
        "spec": {"podName": "p1", "selectedNode": "n1", **spec},
    }


def error_of(model: Any, manifest: Any) -> str:
    with pytest.raises(ManifestError) as info:
        model.from_manifest(manifest)
    return str(info.value)


# --- durations -------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30s", 30),
        ("5m", 300),
        ("1h30m", 5400),
        ("0", 0),
        ("1.5h", 5400),
        ("300ms", 0.3),
        ("-1s", -1),
        ("+2m", 120),
        ("1h0m0s", 3600),
        ("2us", 2e-6),
        ("2µs", 2e-6),
    ],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "5x", "m", "1h 30m", "30", "h1", "--1s", "1.2.3s"])
def test_parse_duration_rejects_junk_with_a_hint(text: str) -> None:
    with pytest.raises(ValueError, match=r'e\.g\. "30s"'):
        parse_duration(text)


def test_format_duration() -> None:
    assert format_duration(5400) == "1h30m"
    assert format_duration(0) == "0s"
    assert format_duration(-90) == "-1m30s"
    assert parse_duration(format_duration(3725.5)) == 3725.5


# --- quantities ------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "number"),
    [
        ("500m", 0.5),
        ("2Gi", 2 * 2**30),
        ("1.5", 1.5),
        (3, 3.0),
        ("1e3", 1000.0),
        ("4k", 4000.0),
        ("2E", 2e18),
        ("1E3", 1000.0),
    ],
)
def test_parse_quantity(value: str | int, number: float) -> None:
    assert parse_quantity(value) == number


@pytest.mark.parametrize("value", ["", "abc", "1.5 Gi", "2GB", True])
def test_parse_quantity_rejects_junk(value: Any) -> None:
    with pytest.raises(ValueError, match="quantity"):
        parse_quantity(value)


def test_resource_map_round_trip() -> None:
    amounts = ResourceAmounts(gpu=1.5, cpu=2000, memory=4096)
    as_map = to_resource_map(amounts)
    assert as_map == {"nvidia.com/gpu": "1.5", "cpu": 2000, "memory": 4096}
    assert from_resource_map(as_map) == amounts
    assert from_resource_map(None) == ResourceAmounts()


# --- Queue -----------------------------------------------------------------


def test_queue_defaults_follow_kai() -> None:
    q = Queue.from_manifest(queue())
    assert q.spec.priority == keys.DEFAULT_QUEUE_PRIORITY == 100
    assert q.spec.parent_queue is None
    for _, res in q.spec.resources.items():
        assert (res.quota, res.limit, res.over_quota_weight) == (0, 0, 1)
        assert not res.limit_is_set
    assert q.spec.preempt_min_runtime_seconds == 0


def test_queue_fields_and_units() -> None:
    q = Queue.from_manifest(
        queue(
            {
                "parentQueue": "org",
                "priority": 200,
                "displayName": "Team A",
                "preemptMinRuntime": "5m",
                "reclaimMinRuntime": "1h30m",
                "resources": {
                    "gpu": {"quota": 2.5, "limit": -1, "overQuotaWeight": 3},
                    "cpu": {"quota": 8000, "limit": 16000},
                    "memory": {"quota": -1, "limit": 0},
                },
            }
        )
    )
    assert q.spec.parent_queue == "org"
    assert q.spec.display_name == "Team A"
    assert q.spec.preempt_min_runtime_seconds == 300
    assert q.spec.reclaim_min_runtime_seconds == 5400
    gpu = q.spec.resources.gpu
    assert gpu.quota == 2.5 and not gpu.has_limit and gpu.over_quota_weight == 3
    assert q.spec.resources.memory.unlimited_quota
    assert q.spec.resources.cpu.limit == 16000 and q.spec.resources.cpu.limit_is_set


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            {"resources": {"gpu": {"quota": -2}}},
            'Queue "team-a": spec.resources.gpu.quota: must be -1 or >= 0, got -2',
        ),
        (
            {"resources": {"cpu": {"limit": -0.5}}},
            'Queue "team-a": spec.resources.cpu.limit: must be -1 or >= 0, got -0.5',
        ),
        (
            {"resources": {"memory": {"overQuotaWeight": -1}}},
            'Queue "team-a": spec.resources.memory.overQuotaWeight: ',
        ),
        ({"preemptMinRuntime": "5x"}, 'Queue "team-a": spec.preemptMinRuntime: invalid duration'),
        ({"reclaimMinRuntime": 30}, 'Queue "team-a": spec.reclaimMinRuntime: must be a duration'),
        (
            {"reclaimMinRuntime": "-5m"},
            'Queue "team-a": spec.reclaimMinRuntime: must not be negative',
        ),
        ({"priority": "high"}, 'Queue "team-a": spec.priority: '),
        ({"resources": {"gpu": {"quota": "two"}}}, 'Queue "team-a": spec.resources.gpu.quota: '),
        # Tenancy (kai-py's own fields)
        ({"namespaces": ["team-a", "Team_B"]}, 'Queue "team-a": spec.namespaces[1]: '),
        ({"priorityClasses": [""]}, 'Queue "team-a": spec.priorityClasses[0]: '),
        (
            {"cards": [{"index": 0}]},
            'Queue "team-a": spec.cards[0].index: 0 needs node: an index names a card of one node',
        ),
        (
            {"cards": [{"node": "n1"}, {}]},
            'Queue "team-a": spec.cards[1]: give node, uuid or model (an empty entry owns nothing)',
        ),
        ({"cards": [{"node": "n1", "index": -1}]}, 'Queue "team-a": spec.cards[0].index: '),
        ({"lendCards": "maybe"}, 'Queue "team-a": spec.lendCards: '),
    ],
)
def test_queue_validation_names_object_and_field(spec: dict[str, Any], message: str) -> None:
    assert message in error_of(Queue, queue(spec))


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(ManifestError) as info:
        Queue.from_manifest(queue({"priority": "x", "resources": {"gpu": {"quota": -5}}}))
    paths = [path for path, _ in info.value.problems]
    assert paths == ["spec.priority", "spec.resources.gpu.quota"]
    assert info.value.kind == "Queue" and info.value.name == "team-a"


def test_wrong_kind_api_version_and_name() -> None:
    assert 'Queue "team-a": apiVersion: must be scheduling.run.ai/v2' in error_of(
        Queue, queue(apiVersion="scheduling.run.ai/v1")
    )
    assert 'Queue "team-a": kind: must be Queue' in error_of(Queue, queue(kind="PodGroup"))
    assert 'Queue "?": metadata.name: required' in error_of(Queue, {"kind": "Queue"})
    assert "must be a mapping" in error_of(Queue, ["not", "a", "dict"])


def test_unknown_fields_are_dropped_like_the_api_server_prunes_them() -> None:
    q = Queue.from_manifest(queue({"priority": 5, "futureField": {"x": 1}}, extra=1))
    manifest = q.to_manifest()
    assert "futureField" not in manifest["spec"] and "extra" not in manifest


def test_metadata_is_kept_whole() -> None:
    meta = {"name": "team-a", "labels": {"a": "b"}, "finalizers": ["x"], "uid": "u1"}
    q = Queue.from_manifest({**queue(), "metadata": meta})
    assert q.to_manifest()["metadata"] == meta


def test_queue_round_trip_and_python_construction() -> None:
    manifest = queue({"parentQueue": "p", "resources": {"gpu": {"quota": 1, "limit": 2}}})
    q = Queue.from_manifest(manifest)
    again = Queue.from_manifest(q.to_manifest())
    assert again == q
    assert q.to_manifest()["spec"]["resources"]["gpu"] == {
        "quota": 1,
        "limit": 2,
        "overQuotaWeight": 1,
    }
    built = Queue(metadata={"name": "x"}, spec=QueueSpec(parent_queue="p"))  # type: ignore[arg-type]
    assert built.to_manifest()["apiVersion"] == "scheduling.run.ai/v2"
    assert built.to_manifest()["kind"] == "Queue"


def test_limit_trap_warnings() -> None:
    q = Queue.from_manifest(
        queue(
            {
                "resources": {
                    "gpu": {"quota": 4},
                    "cpu": {"quota": -1, "limit": -1},
                    "memory": {"quota": 0, "limit": 0},
                }
            }
        )
    )
    found = q.warnings()
    assert len(found) == 2
    assert found[0].startswith('Queue "team-a": spec.resources.gpu.limit is not set, which means 0')
    assert "quota 4 does not help" in found[0]
    assert found[1].startswith('Queue "team-a": spec.resources.memory.limit is 0')
    assert all("limit: -1" in w for w in found)
    # A round trip neither invents a limit nor hides the trap.
    again = Queue.from_manifest(q.to_manifest())
    assert "limit" not in q.to_manifest()["spec"]["resources"]["gpu"]
    assert again.warnings() == found


def test_no_warning_when_limits_are_given() -> None:
    res = {r: {"quota": 0, "limit": -1} for r in ("gpu", "cpu", "memory")}
    assert Queue.from_manifest(queue({"resources": res})).warnings() == []


def test_queue_status() -> None:
    q = Queue.from_manifest(
        queue(
            status={
                "childQueues": ["a", "b"],
                "allocated": {"nvidia.com/gpu": "1.5", "cpu": 500},
                "requested": {"nvidia.com/gpu": 2.5},
                "conditions": [{"type": "Ready", "status": "True"}],
            }
        )
    )
    assert q.status is not None
    assert q.status.child_queues == ["a", "b"]
    assert from_resource_map(q.status.allocated).gpu == 1.5
    # A float written into an int-or-string map becomes a string, as the CRD requires.
    assert q.to_manifest()["status"]["requested"] == {"nvidia.com/gpu": "2.5"}
    bad = queue(status={"allocated": {"cpu": "lots"}})
    assert 'Queue "team-a": status.allocated.cpu: must be a quantity' in error_of(Queue, bad)


# --- PodGroup --------------------------------------------------------------


def test_podgroup_defaults() -> None:
    pg = PodGroup.from_manifest(podgroup())
    assert pg.spec.min_member == 1
    assert pg.spec.mark_unschedulable is True
    assert pg.spec.preemptibility is None
    assert pg.spec.staleness_grace_seconds == keys.DEFAULT_STALENESS_GRACE_SECONDS == 60
    assert pg.spec.preemption_delay_seconds == 0
    assert pg.ref == "ns/pg1"


def test_podgroup_fields() -> None:
    pg = PodGroup.from_manifest(
        podgroup(
            {
                "minMember": 0,
                "queue": "team-a",
                "priorityClassName": "inference",
                "preemptibility": "non-preemptible",
                "markUnschedulable": False,
                "schedulingBackoff": 1,
                "stalenessGracePeriod": "-1s",
                "preemptionDelay": "30s",
                "topologyConstraint": {"preferredTopologyLevel": "rack", "topology": "t"},
                "subGroups": [{"name": "a", "minMember": 2}, {"name": "b", "parent": "a"}],
            }
        )
    )
    assert pg.spec.min_member == 0
    assert pg.spec.staleness_grace_seconds is None  # negative: never evict
    assert pg.spec.preemption_delay_seconds == 30
    assert pg.spec.sub_groups is not None and pg.spec.sub_groups[1].parent == "a"
    assert pg.spec.topology_constraint is not None
    assert pg.spec.topology_constraint.preferred_topology_level == "rack"
    assert PodGroup.from_manifest(pg.to_manifest()) == pg


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"minMember": -1}, 'PodGroup "ns/pg1": spec.minMember: '),
        ({"minMember": "two"}, 'PodGroup "ns/pg1": spec.minMember: '),
        ({"minMember": 2**31}, 'PodGroup "ns/pg1": spec.minMember: must fit in 32 bits'),
        ({"preemptibility": "sometimes"}, 'PodGroup "ns/pg1": spec.preemptibility: '),
        ({"stalenessGracePeriod": "soon"}, 'PodGroup "ns/pg1": spec.stalenessGracePeriod: invalid'),
        (
            {"preemptionDelay": "-5s"},
            'PodGroup "ns/pg1": spec.preemptionDelay: must not be negative',
        ),
        ({"subGroups": [{"name": ""}]}, 'PodGroup "ns/pg1": spec.subGroups[0].name: '),
        (
            {"subGroups": [{"name": "a", "minMember": -1}]},
            'PodGroup "ns/pg1": spec.subGroups[0].minMember: ',
        ),
        (
            {"subGroups": [{"name": "a"}, {"name": "a"}]},
            'PodGroup "ns/pg1": spec.subGroups[1].name: duplicate name',
        ),
        (
            {"subGroups": [{"name": "a", "parent": "zz"}]},
            'PodGroup "ns/pg1": spec.subGroups[0].parent: names no SubGroup',
        ),
        (
            {"subGroups": [{"name": "a", "parent": "b"}, {"name": "b", "parent": "a"}]},
            'PodGroup "ns/pg1": spec.subGroups[0].parent: parents form a cycle',
        ),
    ],
)
def test_podgroup_validation_names_object_and_field(spec: dict[str, Any], message: str) -> None:
    assert message in error_of(PodGroup, podgroup(spec))


def test_podgroup_status_with_queue_details_uses_kai_wire_names() -> None:
    status = {
        "phase": "Pending",
        "resourcesStatus": {"allocated": {"nvidia.com/gpu": 1}},
        "conditions": [{"type": "Scheduled", "status": "False", "transitionID": "7"}],
        "schedulingConditions": [
            {
                "type": "UnschedulableOnNodePool",
                "nodePool": "default",
                "lastTransitionTime": "2026-12-02T14:00:00Z",
                "transitionID": "7",
                "reasons": [
                    {
                        "reason": "OverLimit",
                        "message": "over limit",
                        "details": {
                            "queueDetails": {
                                "name": "team-a",
                                "queueDeservedResources": {"nvidia.com/gpu": 2},
                                "queueAllocatedResources": {"nvidia.com/gpu": 2},
                                "queueResourceLimits": {"nvidia.com/gpu": 2},
                                "queueRequestedResources": {"nvidia.com/gpu": 4},
                            }
                        },
                    }
                ],
            }
        ],
    }
    pg = PodGroup.from_manifest(podgroup(status=status))
    assert pg.status is not None and pg.status.scheduling_conditions is not None
    cond = pg.status.scheduling_conditions[0]
    assert cond.node_pool == "default" and cond.transition_id == "7"
    assert cond.reasons is not None and cond.reasons[0].details is not None
    details = cond.reasons[0].details.queue_details
    assert details is not None
    assert details.deserved == {"nvidia.com/gpu": 2} and details.requested == {"nvidia.com/gpu": 4}
    out = pg.to_manifest()["status"]
    assert out["schedulingConditions"][0]["lastTransitionTime"] == "2026-12-02T14:00:00Z"
    assert out == status
    # Built in Python by attribute name, written with KAI's names.
    built = QueueDetails(name="q", deserved={"cpu": 1}, limit={"cpu": 2})
    assert built.model_dump(by_alias=True, exclude_none=True) == {
        "name": "q",
        "queueDeservedResources": {"cpu": 1},
        "queueResourceLimits": {"cpu": 2},
    }


# --- BindRequest -----------------------------------------------------------


def test_bindrequest_fields() -> None:
    br = BindRequest.from_manifest(
        bindrequest(
            {
                "receivedResourceType": "Fraction",
                "receivedGPU": {"count": 2, "portion": "0.25"},
                "selectedGPUGroups": ["g1", "g2"],
                "backoffLimit": 3,
                "resourceClaimAllocations": [{"name": "c", "allocation": {"devices": {}}}],
            }
        )
        | {"status": {"phase": "Failed", "reason": "no card", "failedAttempts": 1}}
    )
    assert br.spec.received_gpu is not None and br.spec.received_gpu.portion == 0.25
    assert br.status is not None and br.status.failed_attempts == 1
    out = br.to_manifest()
    assert out["spec"]["receivedGPU"] == {"count": 2, "portion": "0.25"}
    assert out["spec"]["selectedGPUGroups"] == ["g1", "g2"]
    assert BindRequest.from_manifest(out) == br


def test_bindrequest_defaults() -> None:
    br = BindRequest.from_manifest(bindrequest({}))
    assert br.spec.received_resource_type == "Regular"
    assert br.spec.received_gpu is None and br.status is None


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"podName": ""}, 'BindRequest "ns/p1": spec.podName: '),
        ({"receivedResourceType": "Whole"}, 'BindRequest "ns/p1": spec.receivedResourceType: '),
        (
            {"receivedGPU": {"portion": "1.5"}},
            'BindRequest "ns/p1": spec.receivedGPU.portion: must be',
        ),
        (
            {"receivedGPU": {"portion": "half"}},
            'BindRequest "ns/p1": spec.receivedGPU.portion: must be',
        ),
        ({"receivedGPU": {"count": -1}}, 'BindRequest "ns/p1": spec.receivedGPU.count: '),
        ({"backoffLimit": -1}, 'BindRequest "ns/p1": spec.backoffLimit: '),
        (
            {"receivedResourceType": "Fraction"},
            'BindRequest "ns/p1": spec.selectedGPUGroups: must name',
        ),
    ],
)
def test_bindrequest_validation(spec: dict[str, Any], message: str) -> None:
    assert message in error_of(BindRequest, bindrequest(spec))


def test_bindrequest_requires_spec() -> None:
    manifest = bindrequest({})
    del manifest["spec"]
    assert 'BindRequest "ns/p1": spec: required field is missing' in error_of(BindRequest, manifest)


def test_bad_status_phase() -> None:
    manifest = bindrequest({}) | {"status": {"phase": "Done"}}
    assert 'BindRequest "ns/p1": status.phase: ' in error_of(BindRequest, manifest)


# --- the CRD's duration pattern and the parser agree -------------------------


# Strings made of duration-like tokens, so near misses are common.
_DURATION_ALPHABET = st.lists(
    st.sampled_from(["0", "1", "25", ".", "h", "m", "s", "ms", "us", "µs", "ns", "+", "-", " "]),
    max_size=6,
).map("".join)


@settings(derandomize=True, max_examples=500)
@given(_DURATION_ALPHABET)
def test_pattern_and_parser_accept_the_same_strings(text: str) -> None:
    by_pattern = re.search(DURATION_PATTERN, text) is not None
    try:
        parse_duration(text)
        by_parser = True
    except ValueError:
        by_parser = False
    assert by_pattern == by_parser, text


@given(st.integers(min_value=-(10**6), max_value=10**6))
def test_format_then_parse_is_identity(half_seconds: int) -> None:
    assert parse_duration(format_duration(half_seconds / 2)) == half_seconds / 2


_QUANTITY_TOKENS = st.lists(
    st.sampled_from(
        ["0", "5", ".", "m", "k", "M", "Gi", "Ki", "e", "E", "3", "+", "-", " ", "i", "u"]
    ),
    max_size=6,
).map("".join)


@settings(derandomize=True, max_examples=500)
@given(_QUANTITY_TOKENS)
def test_quantity_pattern_and_parser_accept_the_same_strings(text: str) -> None:
    by_pattern = re.search(QUANTITY_PATTERN, text) is not None
    try:
        parse_quantity(text)
        by_parser = True
    except ValueError:
        by_parser = False
    assert by_pattern == by_parser, text
