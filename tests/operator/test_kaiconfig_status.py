"""The status conditions kai-py writes on KAI's Config and SchedulingShard
(kai_py.controllers.kaiconfig.conditions): KAI's three for the generation read,
and NotApplied naming what is not applied."""

from __future__ import annotations

from kai_py.conf.kaiconfig import NotApplied
from kai_py.controllers.kaiconfig import conditions


def _by_type(conds: list[dict[str, object]]) -> dict[object, dict[str, object]]:
    return {c["type"]: c for c in conds}


def test_the_generation_read_and_what_is_not_applied() -> None:
    body = {"metadata": {"name": "default", "generation": 3}}
    got = _by_type(conditions(body, [NotApplied("spec.kValue", "2", "no kValue")]))
    for kind in ("Deployed", "Available", "DependenciesFulfilled"):
        assert got[kind]["status"] == "True" and got[kind]["observedGeneration"] == 3
    assert got["NotApplied"]["status"] == "True"
    assert got["NotApplied"]["message"] == "spec.kValue=2: no kValue"


def test_an_unchanged_condition_keeps_its_transition_time() -> None:
    before = {
        "type": "NotApplied",
        "status": "False",
        "lastTransitionTime": "2020-01-01T00:00:00Z",
        "observedGeneration": 1,
    }
    body = {"metadata": {"generation": 2}, "status": {"conditions": [before]}}
    got = _by_type(conditions(body, []))
    assert got["NotApplied"]["lastTransitionTime"] == "2020-01-01T00:00:00Z"
    assert got["NotApplied"]["observedGeneration"] == 2
    flipped = _by_type(conditions(body, [NotApplied("spec.kValue", "2", "no kValue")]))
    assert flipped["NotApplied"]["lastTransitionTime"] != "2020-01-01T00:00:00Z"


def test_an_invalid_object_is_not_available() -> None:
    body = {"metadata": {"generation": 1}}
    got = _by_type(conditions(body, [], invalid='SchedulingShard "x": spec.kValue: bad'))
    assert got["Deployed"]["status"] == got["Available"]["status"] == "False"
    assert got["NotApplied"]["reason"] == "Invalid"
    assert "spec.kValue" in str(got["NotApplied"]["message"])


def test_a_pool_shared_with_another_shard_is_named() -> None:
    body = {"metadata": {"generation": 1}, "spec": {"partitionLabelValue": "a100"}}
    got = _by_type(conditions(body, [], None, ["other"]))
    assert got["PoolShared"]["status"] == "True"
    assert str(got["PoolShared"]["message"]).startswith(
        "spec.partitionLabelValue=a100: SchedulingShard other serves this pool too"
    )
    assert _by_type(conditions(body, [], None, []))["PoolShared"]["status"] == "False"
    assert "PoolShared" not in _by_type(conditions(body, []))  # the Config has no pool
