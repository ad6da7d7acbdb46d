"""Pinned pods on the emulated cluster, whose device plugin hands out the lowest free
card whatever the pin says: the binder's blockers make the named cards the only free
ones (kai_py.binder.pinned_binding)."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from operator_helpers import Operator, start_operator, stop_operator, wait_for

from kai_py.api import keys
from kai_py.binder.pinned_binding import BLOCKER_LABEL
from kai_py.emulator.cluster_spec import gpu_uuid, parse_cluster
from kai_py.emulator.dev_cluster import ThreadedDevCluster
from kai_py.gpu import hami

NS = "team-a"
BIG = "big-0"
VISIBLE = "kai-py.dev/visible-devices"
CLUSTER = {
    "nodes": [
        {"name": "big", "count": 1, "gpus": 8, "cpu": "64", "memory": "512Gi"},
        {"name": "gpu", "count": 1, "gpus": 4, "cpu": "32", "memory": "256Gi"},
    ],
    "namespaces": [NS],
}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ThreadedDevCluster]:
    with ThreadedDevCluster(
        parse_cluster(CLUSTER, "test"),
        kubeconfig_path=tmp_path / "kubeconfig",
        bookmark_interval=1.0,
    ) as running:
        yield running


def _queue(name: str, gpu_quota: float = -1, gpu_limit: float = -1) -> dict[str, Any]:
    resources = {
        "gpu": {"quota": gpu_quota, "limit": gpu_limit, "overQuotaWeight": 1},
        "cpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
        "memory": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
    }
    return {
        "apiVersion": "scheduling.run.ai/v2",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": {"resources": resources},
    }


def _pod(
    name: str,
    cards: list[str],
    *,
    limits: dict[str, str] | None = None,
    queue: str = "team-a",
    priority: str | None = None,
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "busybox"}
    container["resources"] = {"limits": limits if limits is not None else {keys.GPU_RESOURCE: "1"}}
    spec: dict[str, Any] = {"schedulerName": "kai-scheduler", "containers": [container]}
    if priority:
        spec["priorityClassName"] = priority
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {keys.QUEUE_LABEL: queue},
            "annotations": {keys.USE_GPU_UUID_ANNOTATION: ",".join(cards)} if cards else {},
        },
        "spec": spec,
    }
    # What kai-py's HAMi webhook stores for HAMi's resources (tested on its own).
    translated = hami.translate(pod)
    if translated is None:
        return pod
    shared = translated[0]
    shared["spec"]["containers"][0]["env"] = [
        {
            "name": "NVIDIA_VISIBLE_DEVICES",
            "valueFrom": {
                "configMapKeyRef": {"name": f"{name}-gpu", "key": "NVIDIA_VISIBLE_DEVICES"}
            },
        }
    ]
    return shared


class Cluster:
    def __init__(self, cluster: ThreadedDevCluster) -> None:
        self.cluster = cluster
        self.store = cluster.store

    def create(self, kind: str, body: dict[str, Any]) -> None:
        self.cluster.call(self.store.create(kind, body))

    def pod(self, name: str) -> dict[str, Any]:
        return dict(self.cluster.call(self.store.get("pods", NS, name)))

    def running(self, name: str) -> dict[str, Any] | None:
        pod = self.pod(name)
        ok = (pod.get("status") or {}).get("phase") == "Running" and VISIBLE in (
            pod["metadata"].get("annotations") or {}
        )
        return pod if ok else None

    def blockers(self) -> list[dict[str, Any]]:
        pods, _ = self.cluster.call(self.store.list("pods", keys.RESERVATION_NAMESPACE))
        return [p for p in pods if (p["metadata"].get("labels") or {}).get(BLOCKER_LABEL)]

    def events(self, name: str) -> list[str]:
        events, _ = self.cluster.call(self.store.list("events", NS))
        return [
            f"{e.get('reason')}: {e.get('message')}"
            for e in events
            if (e.get("involvedObject") or {}).get("name") == name
        ]

    def delete(self, name: str) -> None:
        self.cluster.call(self.store.delete("pods", NS, name))

        def gone() -> bool:
            try:
                self.pod(name)
            except Exception:
                return True
            return False

        wait_for(gone, 15, f"pod {name} gone")


def _seen(pod: dict[str, Any]) -> list[str]:
    return str(pod["metadata"]["annotations"][VISIBLE]).split(",")


def test_pinned_pods_get_their_cards(cluster: ThreadedDevCluster, operator: Operator) -> None:
    c = Cluster(cluster)
    c.create("queues", _queue("team-a"))
    card = [gpu_uuid(BIG, i) for i in range(8)]

    # A whole-GPU pod pinned to the node's highest-index card (the plugin would give card 0).
    c.create("pods", _pod("pinned", [card[7]]))
    pod = wait_for(lambda: c.running("pinned"), 30, "the pinned pod Running")
    assert pod["spec"]["nodeName"] == BIG
    assert _seen(pod) == [card[7]]
    recorded = wait_for(
        lambda: c.pod("pinned")["metadata"]["annotations"].get(keys.GPU_UUIDS_ANNOTATION),
        10,
        "the binder's record of the card",
    )
    assert recorded == card[7]
    wait_for(lambda: not c.blockers(), 10, "no blocker left")
    wait_for(
        lambda: any(e.startswith("Bound") and f"on {card[7]}" in e for e in c.events("pinned")),
        10,
        "the Bound event naming the card",
    )

    # The article's two engines: the same two cards at 45 % each (HAMi's resources).
    hami_limits = {keys.GPU_RESOURCE: "2", keys.HAMI_GPUMEM_PERCENTAGE_RESOURCE: "45"}
    for name in ("engine-a", "engine-b"):
        c.create("pods", _pod(name, [card[5], card[6]], limits=hami_limits))
        engine = wait_for(lambda n=name: c.running(n), 30, f"{name} Running")
        assert sorted(_seen(engine)) == sorted([card[5], card[6]])
    wait_for(lambda: not c.blockers(), 10, "no blocker left")

    # 20 % more on the same cards would take them to 110 %: it waits, naming the cards.
    one_card = {keys.GPU_RESOURCE: "1", keys.HAMI_GPUMEM_PERCENTAGE_RESOURCE: "20"}
    c.create("pods", _pod("small", [card[5], card[6]], limits=one_card))
    wanted = f"{card[5]} 10% free, {card[6]} 10% free"
    wait_for(lambda: any(wanted in e for e in c.events("small")), 15, "small's explanation")
    assert (c.pod("small").get("status") or {}).get("phase") == "Pending"

    # With one engine gone, 20 % fits beside the other (65 %) and 60 % does not (105 %).
    c.delete("engine-b")
    small = wait_for(lambda: c.running("small"), 30, "small Running")
    assert _seen(small)[0] in (card[5], card[6])
    big = {keys.GPU_RESOURCE: "1", keys.HAMI_GPUMEM_PERCENTAGE_RESOURCE: "60"}
    c.create("pods", _pod("big", [card[5], card[6]], limits=big))
    wait_for(
        lambda: any("with 60% free" in e and card[5] in e for e in c.events("big")),
        15,
        "big's explanation",
    )

    # Restart the pinned pod: it lands on the same card, though lower ones are free.
    c.delete("pinned")
    c.create("pods", _pod("pinned", [card[7]]))
    pod = wait_for(lambda: c.running("pinned"), 30, "the recreated pinned pod Running")
    assert _seen(pod) == [card[7]]
    wait_for(lambda: not c.blockers(), 10, "no blocker left")
    # The emulated device plugin's own table: card 7 is the recreated pod's.
    allocations = cluster.cluster.kubelet(BIG).plugin.allocations()
    assert allocations[card[7]] == pod["metadata"]["uid"]


def test_bad_pins_are_explained(cluster: ThreadedDevCluster, operator: Operator) -> None:
    c = Cluster(cluster)
    c.create("queues", _queue("team-a"))
    other = gpu_uuid("gpu-0", 1)
    c.create("pods", _pod("unknown", ["GPU-0000ffff"]))
    c.create("pods", _pod("malformed", ["GPU-0000ffff", "card-3"]))
    elsewhere = _pod("elsewhere", [other])
    elsewhere["spec"]["nodeSelector"] = {"kubernetes.io/hostname": BIG}
    c.create("pods", elsewhere)
    empty = _pod("empty", [])
    empty["metadata"]["annotations"] = {keys.USE_GPU_UUID_ANNOTATION: ""}
    c.create("pods", empty)
    both = _pod("both", [other])
    both["metadata"]["annotations"][keys.NOUSE_GPU_UUID_ANNOTATION] = other
    c.create("pods", both)

    def said(name: str, *words: str) -> bool:
        return any(all(w in e for w in words) for e in c.events(name))

    wait_for(lambda: said("unknown", "GPU-0000ffff, which no node reports"), 20, "unknown")
    wait_for(
        lambda: said("malformed", "Pod team-a/malformed", keys.USE_GPU_UUID_ANNOTATION, "'card-3'"),
        20,
        "malformed",
    )
    wait_for(
        lambda: said("elsewhere", f'no GPU allowed by {keys.USE_GPU_UUID_ANNOTATION}="{other}"'),
        20,
        "elsewhere",
    )
    # An empty pin is no constraint (HAMi v2.10): the pod runs, and is told it was ignored.
    wait_for(
        lambda: said(
            "empty", "GpuPinIgnored: Pod team-a/empty", keys.USE_GPU_UUID_ANNOTATION, "ignored"
        ),
        20,
        "empty",
    )
    wait_for(lambda: c.running("empty"), 30, "empty Running")
    # Allow and deny lists both apply (HAMi v2.10): a card in both is excluded.
    wait_for(
        lambda: said("both", keys.NOUSE_GPU_UUID_ANNOTATION, "a card in both lists is excluded"),
        20,
        "both",
    )
    for name in ("unknown", "malformed", "elsewhere", "both"):
        assert (c.pod(name).get("status") or {}).get("phase") == "Pending"


@pytest.mark.slow
def test_operator_killed_mid_bind_leaves_no_blocker(
    cluster: ThreadedDevCluster, tmp_path: Path
) -> None:
    c = Cluster(cluster)
    c.create("queues", _queue("team-a"))
    card = gpu_uuid(BIG, 6)
    first = start_operator(cluster.kubeconfig_path, tmp_path / "first.log")
    try:
        # Hold the binder between "blockers hold every free card" and the bind: the
        # deletion of the blocker on the wanted card is slow, and the operator dies then.
        slow = cluster.cluster.faults.add(verb="delete", resource="pods", latency=3.0)
        c.create("pods", _pod("pinned", [card]))
        wait_for(lambda: len(c.blockers()) == 8 and slow.fired > 0, 30, "blockers in place")
        first.process.send_signal(signal.SIGKILL)
        first.process.wait(10)
    finally:
        stop_operator(first)
    cluster.cluster.faults.clear()
    assert c.blockers(), "the killed operator left its blockers (the case under test)"
    assert not c.pod("pinned")["spec"].get("nodeName")
    second: Operator = start_operator(cluster.kubeconfig_path, tmp_path / "second.log")
    try:
        pod = wait_for(lambda: c.running("pinned"), 40, "the pinned pod Running after restart")
        assert _seen(pod) == [card]
        wait_for(lambda: not c.blockers(), 10, "no blocker left")
        assert "deleted blocker pods left by an earlier binder" in second.log
    finally:
        stop_operator(second)
    assert "Traceback" not in second.log, second.log


def _group(name: str, min_member: int, priority: str) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"minMember": min_member, "queue": "team-a", "priorityClassName": priority},
    }


def test_pinned_gang_and_preemption_for_a_pinned_card(
    cluster: ThreadedDevCluster, operator: Operator
) -> None:
    c = Cluster(cluster)
    c.create("queues", _queue("team-a", gpu_quota=8, gpu_limit=8))
    card = [gpu_uuid(BIG, i) for i in range(8)]

    # A gang of two pinned to cards 2 and 3: both run, on exactly those cards.
    c.create("podgroups", _group("gang", 2, "train"))
    for i in range(2):
        member = _pod(f"gang-{i}", [card[2], card[3]])
        member["metadata"]["annotations"]["pod-group-name"] = "gang"
        c.create("pods", member)
    seen = [_seen(wait_for(lambda i=i: c.running(f"gang-{i}"), 30, f"gang-{i}")) for i in range(2)]
    assert sorted(s[0] for s in seen) == sorted([card[2], card[3]])

    # Low-priority work fills the rest of the queue's 8 GPUs on big-0 ...
    for i in range(6):
        low = _pod(f"low-{i}", [])
        low["spec"]["nodeSelector"] = {"kubernetes.io/hostname": BIG}
        c.create("pods", low)
    lows = [wait_for(lambda i=i: c.running(f"low-{i}"), 30, f"low-{i}") for i in range(6)]
    on_card7 = next(p["metadata"]["name"] for p in lows if _seen(p) == [card[7]])
    # ... and a high-priority pod pinned to card 7 preempts exactly the pod on card 7.
    c.create("podgroups", _group("urgent", 1, "inference"))
    urgent = _pod("urgent", [card[7]])
    urgent["metadata"]["annotations"]["pod-group-name"] = "urgent"
    c.create("pods", urgent)
    got = wait_for(lambda: c.running("urgent"), 40, "the urgent pinned pod Running")
    assert _seen(got) == [card[7]]
    def lows_left() -> set[str]:
        pods, _ = cluster.call(cluster.store.list("pods", NS))
        return {p["metadata"]["name"] for p in pods if p["metadata"]["name"].startswith("low-")}

    expected = {f"low-{i}" for i in range(6)} - {on_card7}
    wait_for(lambda: lows_left() == expected, 30, f"only {on_card7} preempted")
    wait_for(lambda: not c.blockers(), 10, "no blocker left")
