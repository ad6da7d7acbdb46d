"""The inputs of GPU pinning: node inventories, pod pins, HAMi's resources."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kai_py.api.objects import WorkloadError
from kai_py.gpu import hami, inventory, pins
from kai_py.scheduler.model import Card


def _pod(ann: dict[str, str] | None = None, **limits: str) -> dict[str, Any]:
    return {
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ns", "annotations": ann or {}},
        "spec": {"containers": [{"name": "c", "resources": {"limits": dict(limits)}}]},
    }


def test_inventory_round_trips_and_keeps_index_order() -> None:
    cards = (
        Card(1, "GPU-b", "NVIDIA H100", 81559, healthy=False),
        Card(0, "GPU-a", "NVIDIA H100", 81559),
    )
    text = inventory.inventory_json(cards, "nvml")
    assert json.loads(text)["cards"][0] == {
        "index": 0,
        "uuid": "GPU-a",
        "product": "NVIDIA H100",
        "memoryMiB": 81559,
        "health": "Healthy",
    }
    assert inventory.parse_inventory(text) == tuple(sorted(cards, key=lambda c: c.index))


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        ("{not json", "not JSON"),
        ('{"cards": [{"index": 0}]}', "cards[0] needs a uuid"),
        ('{"version": 2, "cards": []}', "unknown version 2"),
        ('{"cards": [{"uuid": "GPU-a"}, {"uuid": "GPU-a"}]}', "GPU-a is listed twice"),
    ],
)
def test_a_bad_inventory_names_annotation_and_value(raw: str, words: str) -> None:
    with pytest.raises(inventory.InventoryError) as caught:
        inventory.parse_inventory(raw)
    assert "kai.scheduler/gpu-inventory" in str(caught.value)
    assert words in str(caught.value)
    assert raw[:20] in str(caught.value)


def test_hami_register_both_formats() -> None:
    old = "GPU-1,10,32768,100,NVIDIA-Tesla V100-PCIE-32GB,0,true:GPU-2,10,32768,100,NVIDIA-Tesla V100-PCIE-32GB,0,false:"
    cards = inventory.parse_hami_register(old)
    assert [(c.index, c.uuid, c.memory_mib, c.healthy) for c in cards] == [
        (0, "GPU-1", 32768, True),
        (1, "GPU-2", 32768, False),
    ]
    assert cards[0].product == "NVIDIA-Tesla V100-PCIE-32GB"
    new = json.dumps(
        [{"id": "GPU-9", "index": 3, "devmem": 40960, "type": "NVIDIA-NVIDIA A100", "health": True}]
    )
    (card,) = inventory.parse_hami_register(new)
    assert (card.index, card.uuid, card.product, card.memory_mib) == (
        3,
        "GPU-9",
        "NVIDIA A100",
        40960,
    )
    # kai-py's own annotation wins over HAMi's.
    ours = inventory.inventory_json([Card(0, "GPU-x")], "nvml")
    both = {"kai.scheduler/gpu-inventory": ours, "hami.io/node-nvidia-register": old}
    assert [c.uuid for c in inventory.node_cards(both)] == ["GPU-x"]


def test_pin_rules_follow_hami() -> None:
    pin = pins.pin_of(
        _pod({"nvidia.com/use-gpuuuid": "GPU-a, GPU-b", "nvidia.com/nouse-gpuuuid": "GPU-a"})
    )
    assert pin is not None
    # Both lists apply (HAMi v2.10): a card in both is excluded, without a note.
    assert not pin.allows(Card(0, "GPU-a")) and not pin.allows(Card(1, "GPU-c"))
    assert pin.allows(Card(2, "GPU-b"))
    assert (
        pins.pin_notes(
            _pod({"nvidia.com/use-gpuuuid": "GPU-a", "nvidia.com/nouse-gpuuuid": "GPU-a"})
        )
        == []
    )
    typed = pins.pin_of(_pod({"nvidia.com/nouse-gputype": "v100"}))
    assert typed is not None
    assert typed.allows(Card(0, "GPU-a", "NVIDIA A100"))
    assert not typed.allows(Card(0, "GPU-a", "Tesla V100-PCIE"))
    assert not typed.allows(Card(0, "GPU-a", "NVIDIA A100", healthy=False))
    assert pins.pin_of(_pod()) is None


@pytest.mark.parametrize(
    ("ann", "words"),
    [
        ({"nvidia.com/use-gpuuuid": " , "}, "names nothing"),
        ({"nvidia.com/use-gpuuuid": "gpu-0"}, "'gpu-0' in 'gpu-0' is not a GPU UUID"),
        ({"nvidia.com/nouse-gputype": ","}, "name at least one"),
        ({"nvidia.com/use-gpuindexes": "0,x"}, "'x' in '0,x' is not a card index"),
        ({"nvidia.com/use-gpuindexes": "-1"}, "'-1' in '-1' is not a card index"),
    ],
)
def test_bad_pins_name_pod_annotation_and_value(ann: dict[str, str], words: str) -> None:
    with pytest.raises(WorkloadError) as caught:
        pins.pin_of(_pod(ann))
    text = str(caught.value)
    assert text.startswith("Pod ns/p: metadata.annotations[")
    assert next(iter(ann)) in text and words in text


def test_hami_percentage_becomes_a_fraction_on_n_cards() -> None:
    done = hami.translate(_pod(**{"nvidia.com/gpu": "2", "nvidia.com/gpumem-percentage": "45"}))
    assert done is not None
    pod, summary = done
    ann = pod["metadata"]["annotations"]
    assert ann["gpu-fraction"] == "0.45" and ann["gpu-fraction-num-devices"] == "2"
    assert pod["spec"]["containers"][0]["resources"] == {}
    assert ann[hami.TRANSLATION_ANNOTATION] == summary
    assert "nvidia.com/gpumem-percentage: 45" in summary


def test_hami_memory_share_and_the_hami_core_cap() -> None:
    base = _pod(**{"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4096", "cpu": "1"})
    done = hami.translate(base, memory_cap=True)
    assert done is not None
    pod = done[0]
    container = pod["spec"]["containers"][0]
    assert pod["metadata"]["annotations"]["gpu-memory"] == "4096"
    assert "gpu-fraction-num-devices" not in pod["metadata"]["annotations"]
    assert container["resources"] == {"limits": {"cpu": "1"}}
    assert {"name": "CUDA_DEVICE_MEMORY_LIMIT", "value": "4096m"} in container["env"]
    # vLLM's case: HAMi-core off for the container, so no cap.
    base["spec"]["containers"][0]["env"] = [{"name": "CUDA_DISABLE_CONTROL", "value": "true"}]
    done = hami.translate(base, memory_cap=True)
    assert done is not None
    assert done[0]["spec"]["containers"][0]["env"] == base["spec"]["containers"][0]["env"]
    # Off by default.
    done = hami.translate(_pod(**{"nvidia.com/gpumem": "10"}))
    assert done is not None and "env" not in done[0]["spec"]["containers"][0]


@pytest.mark.parametrize("percent", ["100", "0"])
def test_hami_full_percentage_is_whole_cards_and_no_hami_is_untouched(percent: str) -> None:
    # 0 as HAMi v2.10 reads it: no share given, so its default, the whole card.
    done = hami.translate(_pod(**{"nvidia.com/gpu": "3", "nvidia.com/gpumem-percentage": percent}))
    assert done is not None
    assert done[0]["spec"]["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu": "3"}}
    assert "gpu-fraction" not in done[0]["metadata"]["annotations"]
    assert hami.translate(_pod(**{"nvidia.com/gpu": "1"})) is None


def test_which_pods_ask_for_hami_resources() -> None:
    def pod(*containers: dict[str, object]) -> dict[str, object]:
        return {
            "spec": {
                "containers": [{"name": f"c{i}", "resources": r} for i, r in enumerate(containers)]
            }
        }

    assert not hami.needs_translation(pod({"limits": {"nvidia.com/gpu": "1", "cpu": "2"}}))
    assert not hami.needs_translation(pod({}, {"limits": {}, "requests": {}}))
    assert not hami.needs_translation(pod({"limits": {"nvidia.com/gpumem": None}}))  # null: unset
    assert not hami.needs_translation({"spec": {}})
    assert hami.needs_translation(pod({}, {"requests": {"nvidia.com/gpucores": "30"}}))
    assert hami.needs_translation(pod({"limits": {"cpu": "1", "nvidia.com/gpumem-percentage": 50}}))


@pytest.mark.parametrize(
    ("limits", "ann", "words"),
    [
        ({"nvidia.com/gpumem-percentage": "101"}, {}, "must be a whole number 0..100, got '101'"),
        ({"nvidia.com/gpumem": "x"}, {}, "nvidia.com/gpumem: must be a whole number"),
        ({"nvidia.com/gpumem": "1", "nvidia.com/gpumem-percentage": "5"}, {}, "together"),
        ({"nvidia.com/gpumem": "1"}, {"gpu-fraction": "0.5"}, "cannot be combined"),
    ],
)
def test_bad_hami_requests_are_named(
    limits: dict[str, str], ann: dict[str, str], words: str
) -> None:
    with pytest.raises(hami.HamiError) as caught:
        hami.translate(_pod(ann, **limits))
    assert str(caught.value).startswith("Pod ns/p: ")
    assert words in str(caught.value)


def test_the_cache_gives_the_scheduler_cards_of_groups_nodes_and_blockers() -> None:
    from kai_py.state.cache import NODES, PODS, ClusterCache

    cache = ClusterCache()
    inv = inventory.inventory_json([Card(0, "GPU-a"), Card(1, "GPU-b")], "nvml")
    node = {
        "metadata": {"name": "n1", "uid": "n", "annotations": {"kai.scheduler/gpu-inventory": inv}},
        "status": {"allocatable": {"nvidia.com/gpu": "2", "cpu": "8", "memory": "8Gi"}},
    }
    reservation = {
        "metadata": {
            "name": "gpu-reservation-n1-g",
            "namespace": "kai-resource-reservation",
            "uid": "r",
            "annotations": {
                "kai.scheduler/gpu-groups": "g",
                "run.ai/reserve_for_gpu_index": "GPU-b",
            },
        },
        "spec": {"nodeName": "n1", "containers": []},
    }
    blocker = {
        "metadata": {
            "name": "gpu-blocker-x-0",
            "namespace": "kai-resource-reservation",
            "uid": "b",
            "labels": {"kai.scheduler/gpu-blocker": "true"},
        },
        "spec": {
            "nodeName": "n1",
            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
        },
        "status": {"phase": "Running"},
    }
    cache.observe(NODES, "ADDED", node)
    cache.observe(PODS, "ADDED", reservation)
    cache.observe(PODS, "ADDED", blocker)
    (built,) = [cache.view(0.0).build(0.0).snapshot.nodes]
    (n1,) = built
    assert [c.uuid for c in n1.cards] == ["GPU-a", "GPU-b"]
    assert n1.group_cards == {"g": "GPU-b"}
    # The blocker holds a card, and so does the reservation pod while no shared pod
    # uses its group (docs/operator.md: reservation pods hold their cards).
    assert n1.allocatable.gpu == 0
    cache.observe(PODS, "DELETED", reservation)
    (n1,) = cache.view(0.0).build(0.0).snapshot.nodes
    assert n1.group_cards == {}
    assert n1.allocatable.gpu == 1  # the blocker holds a card nothing else counts


def test_in_a_cluster_an_untranslated_hami_pod_is_reported_not_placed() -> None:
    from kai_py.state.cache import NODES, PODGROUPS, PODS, ClusterCache

    cache = ClusterCache()
    cache.observe(
        NODES,
        "ADDED",
        {
            "metadata": {"name": "n1", "uid": "n"},
            "status": {"allocatable": {"nvidia.com/gpu": "2", "cpu": "8", "memory": "8Gi"}},
        },
    )
    cache.observe(
        PODGROUPS,
        "ADDED",
        {
            "metadata": {"name": "g", "namespace": "ns", "uid": "g"},
            "spec": {"minMember": 1, "queue": "default-queue"},
        },
    )
    pod = _pod({"pod-group-name": "g"}, **{"nvidia.com/gpu": "1", "nvidia.com/gpumem": "100"})
    pod["metadata"]["uid"] = "p"
    pod["spec"]["schedulerName"] = "kai-scheduler"
    cache.observe(PODS, "ADDED", pod)
    built = cache.view(0.0).build(0.0)
    (event,) = [e for e in built.events if e.reason == "InvalidPod"]
    assert event.name == "p"
    assert "nvidia.com/gpumem" in event.message and "HAMi webhook" in event.message
