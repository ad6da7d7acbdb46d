"""HAMi v2.10's rules without a HAMi test row of their own: per-pod node and card
policies beside KAI's cluster-wide card placement, unhealthy cards for unpinned pods,
the Events about ignored and refused annotations."""

from __future__ import annotations

from typing import Any

import pytest

from kai_py.conf.schedconfig import parse_config
from kai_py.scheduler.model import Config
from kai_py.state.builder import build
from kai_py.state.documents import Document, InputError
from tests.conformance.test_hami_cards import Asks, Gpu, _node, run_pods

SPREAD_NODES_BINPACK_CARDS = {
    "hami.io/node-scheduler-policy": "spread",
    "hami.io/gpu-scheduler-policy": "binpack",
}


def _cluster() -> dict[str, list[Gpu]]:
    return {
        "n1": [Gpu(f"GPU-a{i}", 8000) for i in range(4)],
        "n2": [Gpu(f"GPU-b{i}", 8000) for i in range(4)],
    }


def _before() -> list[Asks]:
    # n1 holds two shared cards (50 % and 10 %), n2 one (50 %): n1 is the fuller node.
    return [
        Asks("a-half", percent=50, annotations={"nvidia.com/use-gpuuuid": "GPU-a0"}),
        Asks("a-tenth", percent=10, annotations={"nvidia.com/use-gpuuuid": "GPU-a1"}),
        Asks("b-half", percent=50, annotations={"nvidia.com/use-gpuuuid": "GPU-b0"}),
    ]


def _groups(result: dict[str, Any], pod: str) -> list[str]:
    got = result["pods"][f"ml/{pod}"]
    assert got["status"] == "Bound", got
    return list(got["gpus"]["groups"])


def test_spread_nodes_and_binpack_cards_per_pod() -> None:
    pod = Asks("p", percent=20, annotations=SPREAD_NODES_BINPACK_CARDS)
    result = run_pods(_cluster(), [*_before(), pod])
    # The emptier node (spread), and there the fullest card that fits (binpack).
    assert result["pods"]["ml/p"]["node"] == "n2"
    assert _groups(result, "p") == _groups(result, "b-half")


def test_hami_defaults_binpack_nodes_and_spread_cards() -> None:
    result = run_pods(_cluster(), [*_before(), Asks("p", percent=20)])
    assert result["pods"]["ml/p"]["node"] == "n1"
    taken = set(_groups(result, "a-half")) | set(_groups(result, "a-tenth"))
    assert not set(_groups(result, "p")) & taken  # a card of its own


def test_a_kai_pod_follows_the_cluster_card_placement() -> None:
    # KAI's own sharing annotation, no HAMi key: the cluster's placement decides. With
    # binpack for both it joins the fullest card of the fuller node.
    pods = [*_before(), Asks("p", gpus=0, annotations={"gpu-fraction": "0.2"})]
    result = run_pods(_cluster(), pods)
    assert result["pods"]["ml/p"]["node"] == "n1"
    assert _groups(result, "p") == _groups(result, "a-half")
    # gpuspread in the scheduler configuration: still the fuller node, but a fresh card.
    spread = run_pods(_cluster(), pods, Config(card_placement="spread"))
    assert spread["pods"]["ml/p"]["node"] == "n1"
    taken = set(_groups(spread, "a-half")) | set(_groups(spread, "a-tenth"))
    assert not set(_groups(spread, "p")) & taken


def test_gpupack_and_gpuspread_set_the_cluster_card_placement() -> None:
    def tiers(*names: str) -> dict[str, Any]:
        return {"tiers": [{"plugins": [{"name": n} for n in names]}]}

    assert parse_config(tiers("gpuspread"), "f").config.card_placement == "spread"
    assert parse_config(tiers("gpupack"), "f").config.card_placement == "binpack"
    assert parse_config(tiers("proportion"), "f").config.card_placement == ""
    with pytest.raises(InputError, match="gpupack and gpuspread together"):
        parse_config(tiers("gpupack", "gpuspread"), "f")


def test_a_bad_policy_leaves_only_that_pod_pending_naming_pod_key_and_value() -> None:
    bad = Asks("bad", percent=20, annotations={"hami.io/node-scheduler-policy": "pack"})
    result = run_pods(_cluster(), [bad, Asks("good", percent=20)])
    assert result["pods"]["ml/bad"]["status"] == "Pending"
    assert result["pods"]["ml/good"]["status"] == "Bound"
    assert any(
        e["reason"] == "InvalidPod"
        and e["type"] == "Warning"
        and "Pod ml/bad: metadata.annotations[hami.io/node-scheduler-policy]: 'pack' is not a "
        "policy kai-py applies: expected binpack or spread"
        in e["message"]
        for e in result["events"]
    ), result["events"]


def test_an_unhealthy_card_is_left_out_for_unpinned_whole_gpu_pods() -> None:
    # The device plugin still counts both cards; the inventory says one is unhealthy.
    nodes = {"n1": [Gpu("GPU-a0", 8000), Gpu("GPU-a1", 8000, healthy=False)]}
    result = run_pods(nodes, [Asks("one"), Asks("two")])
    assert result["pods"]["ml/one"]["status"] == "Bound"
    assert result["pods"]["ml/two"]["status"] == "Pending"
    assert any(
        e["reason"] == "Unschedulable"
        and "Insufficient nvidia.com/gpu (unhealthy, left out: GPU-a1)" in e["message"]
        for e in result["events"]
        if e["object"] == "ml/two"
    ), result["events"]


def test_an_unhealthy_pinned_card_is_named_in_the_reason() -> None:
    nodes = {"n1": [Gpu("GPU-a0", 8000), Gpu("GPU-a1", 8000, healthy=False)]}
    pod = Asks("p", annotations={"nvidia.com/use-gpuuuid": "GPU-a1"})
    result = run_pods(nodes, [pod])
    assert result["pods"]["ml/p"]["status"] == "Pending"
    assert any(
        "unhealthy, left out: GPU-a1" in e["message"]
        for e in result["events"]
        if e["object"] == "ml/p"
    ), result["events"]


def test_a_blank_pin_is_ignored_with_a_normal_event() -> None:
    pod = Asks("p", annotations={"nvidia.com/use-gputype": "  ", "nvidia.com/nouse-gpuuuid": ""})
    result = run_pods({"n1": [Gpu("GPU-a0", 8000)]}, [pod])
    assert result["pods"]["ml/p"]["status"] == "Bound"
    notes = [e for e in result["events"] if e["reason"] == "GpuPinIgnored"]
    assert {e["type"] for e in notes} == {"Normal"}
    assert sorted(n["message"].split(": ", 1)[1] for n in notes) == [
        "Pod ml/p: metadata.annotations[nvidia.com/nouse-gpuuuid]='' is empty, so it is "
        "ignored (no constraint, as in HAMi v2.10)",
        "Pod ml/p: metadata.annotations[nvidia.com/use-gputype]='  ' is empty, so it is "
        "ignored (no constraint, as in HAMi v2.10)",
    ]


def _not_applied(result: dict[str, Any], obj: str) -> list[str]:
    return [
        e["message"]
        for e in result["events"]
        if e["object"] == obj and e["reason"] == "NotApplied" and e["type"] == "Warning"
    ]


@pytest.mark.parametrize(
    ("key", "value", "why"),
    [
        ("nvidia.com/numa-bind", "true", "cards are not kept on one NUMA node"),
        ("nvidia.com/vgpu-mode", "mig", "not chosen by their sharing mode"),
        ("hami.io/device-scoring-weights", "slot=1,core=1,memory=3", "scored by the pod's"),
    ],
)
def test_hami_pod_keys_kai_py_does_not_apply_are_said_on_the_pod(
    key: str, value: str, why: str
) -> None:
    # A single card: the pod still runs (placed without the key), and says so.
    pod = Asks("p", annotations={key: value})
    result = run_pods({"n1": [Gpu("GPU-a0", 8000)]}, [pod, Asks("other", gpus=2)])
    assert result["pods"]["ml/p"]["status"] == "Bound"
    (message,) = _not_applied(result, "ml/p")
    assert f"Pod ml/p: metadata.annotations[{key}] is not applied by kai-py" in message
    assert repr(value) in message and why in message
    assert not _not_applied(result, "ml/other")  # a pending pod without the keys


def test_numa_bind_false_asks_for_nothing_and_is_not_warned_about() -> None:
    result = run_pods(
        {"n1": [Gpu("GPU-a0", 8000)]}, [Asks("p", annotations={"nvidia.com/numa-bind": "false"})]
    )
    assert not _not_applied(result, "ml/p")


def _cordoned_node(value: str) -> dict[str, Any]:
    node = _node("n1", [Gpu("GPU-a0", 8000), Gpu("GPU-a1", 8000)])
    node["metadata"]["annotations"]["hami.io/device-cordon"] = value
    return node


def test_a_hami_card_cordon_is_said_not_applied_on_the_node() -> None:
    docs = [Document("nodes.yaml", _cordoned_node("GPU-a1"))]
    built = build(docs, 0.0)
    (event,) = [e for e in built.events if e.reason == "NotApplied"]
    assert (event.kind, event.name, event.type) == ("Node", "n1", "Warning")
    assert "Node n1: metadata.annotations[hami.io/device-cordon] is not applied" in event.message
    assert "'GPU-a1'" in event.message
    # HAMi v2.10 reads an empty or blank value as nothing cordoned: nothing to say.
    assert not [e for e in build([Document("n", _cordoned_node(" "))], 0.0).events]
