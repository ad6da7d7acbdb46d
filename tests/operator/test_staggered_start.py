"""Staggered start: the binder binds a pod on a shared card only once the pod before it
on that card is Ready, or after the timeout (kai_py.binder.stagger), over a fake API."""

from __future__ import annotations

from typing import Any

import pytest
from test_binder_units import BR, POD, RES, FakeKube, events, setup

from kai_py.api import keys
from kai_py.binder import stagger
from kai_py.binder.binding import Binder, BinderConfig

Json = dict[str, Any]

T0 = 1_800_000_000.0  # when the pod already on the card was bound
OTHER = "/api/v1/namespaces/ns/pods/a"
QUEUE = "/apis/scheduling.run.ai/v2/queues/q"


def _time(t: float) -> str:
    import datetime

    return datetime.datetime.fromtimestamp(t, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def on_card(name: str = "a", group: str = "g1", ready: bool = False) -> Json:
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"u-{name}",
            "labels": {keys.GPU_GROUP_LABEL: group},
        },
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "x"}]},
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": _time(T0)},
                {"type": "Ready", "status": "True" if ready else "False"},
            ],
        },
    }


def staggered(pod_setting: str | None = "true", other: Json | None = None) -> tuple[FakeKube, Json]:
    kube, br = setup()
    if pod_setting is not None:
        kube.objects[POD]["metadata"]["annotations"] = {
            keys.STAGGERED_START_ANNOTATION: pod_setting
        }
    kube.add(OTHER, other if other is not None else on_card())

    def report(pod: Json) -> None:
        pod["metadata"]["annotations"][keys.RESERVED_GPU_INDEX_ANNOTATION] = "GPU-abc"

    kube.on_reservation = report
    return kube, br


def binder(kube: FakeKube, now: float, **config: Any) -> Binder:
    ticks = iter(range(10_000))
    return Binder(
        kube,  # type: ignore[arg-type]
        BinderConfig(**config),
        sleep=lambda _s: None,
        clock=lambda: float(next(ticks)),
        wall=lambda: now,
    )


def test_a_pod_waits_for_the_pod_before_it_on_the_card_to_be_ready() -> None:
    kube, br = staggered()
    outcome = binder(kube, T0 + 10).reconcile(br)
    assert (outcome.phase, outcome.waiting, outcome.failed_attempts) == ("Pending", True, 0)
    assert "ns/a" in outcome.reason and "to be Ready" in outcome.reason
    assert not kube.objects[POD]["spec"].get("nodeName")  # not bound
    assert RES not in kube.objects  # nothing made for it while it waits
    status = kube.objects[BR]["status"]
    assert status["phase"] == "Pending" and status["reason"] == outcome.reason
    assert "failedAttempts" not in status
    # A restart (a new binder) reads the same state and keeps waiting.
    assert binder(kube, T0 + 20).reconcile(kube.objects[BR]).waiting
    # The pod before it is Ready: its turn.
    kube.objects[OTHER] = on_card(ready=True)
    outcome = binder(kube, T0 + 30).reconcile(kube.objects[BR])
    assert outcome.phase == "Succeeded", outcome.reason
    assert kube.objects[POD]["spec"]["nodeName"] == "n1"
    assert not events(kube, stagger.TIMEOUT_REASON)


def test_after_the_timeout_the_pod_binds_and_an_event_names_the_one_it_waited_for() -> None:
    kube, br = staggered()
    outcome = binder(kube, T0 + 400, staggered_start_timeout=300.0).reconcile(br)
    assert outcome.phase == "Succeeded", outcome.reason
    (event,) = events(kube, stagger.TIMEOUT_REASON)
    assert event["type"] == "Warning"
    assert "ns/a" in event["message"] and "400s" in event["message"]
    assert "300s" in event["message"]


@pytest.mark.parametrize(
    ("pod_setting", "other", "cluster"),
    [
        (None, None, False),  # not asked for
        ("false", None, True),  # the pod's "false" wins over the cluster's setting
        ("true", on_card(group="g2"), False),  # the pod not Ready is on another card
        ("true", on_card(ready=True), False),  # the pod before it is Ready
    ],
)
def test_no_wait(pod_setting: str | None, other: Json | None, cluster: bool) -> None:
    kube, br = staggered(pod_setting, other)
    outcome = binder(kube, T0 + 10, staggered_start=cluster).reconcile(br)
    assert outcome.phase == "Succeeded", outcome.reason


def test_cluster_wide_and_per_queue() -> None:
    kube, br = staggered(None)
    assert binder(kube, T0 + 10, staggered_start=True).reconcile(br).waiting
    kube, br = staggered(None)
    kube.objects[POD]["metadata"]["labels"] = {keys.QUEUE_LABEL: "q"}
    kube.add(
        QUEUE, {"metadata": {"name": "q", "annotations": {keys.STAGGERED_START_ANNOTATION: "true"}}}
    )
    assert binder(kube, T0 + 10).reconcile(br).waiting
    # The pod's own "false" wins over its queue's "true".
    kube.objects[POD]["metadata"]["annotations"] = {keys.STAGGERED_START_ANNOTATION: "false"}
    assert binder(kube, T0 + 10).reconcile(kube.objects[BR]).phase == "Succeeded"


def test_an_invalid_setting_is_said_and_not_applied() -> None:
    kube, br = staggered("yes please")
    b = binder(kube, T0 + 10)
    outcome = b.reconcile(br)
    assert outcome.phase == "Succeeded", outcome.reason
    (event,) = events(kube, stagger.INVALID_REASON)
    assert event["type"] == "Warning"
    assert "Pod ns/p" in event["message"]
    assert (
        f"metadata.annotations[{keys.STAGGERED_START_ANNOTATION}]='yes please'" in event["message"]
    )


def test_the_settings_come_from_the_environment() -> None:
    config = BinderConfig.from_env(
        {"KAI_PY_STAGGERED_START": "true", "KAI_PY_STAGGERED_START_TIMEOUT": "90"}
    )
    assert (config.staggered_start, config.staggered_start_timeout) == (True, 90.0)
    assert not BinderConfig.from_env({}).staggered_start
