"""Queue-admission gating outside the pure scheduler: the pod webhook adds kai-py's gate
(and no other), the operator flag and the scheduler configuration turn it on, and the
writer lifts the gate (only it) from the pods the scheduler let go."""

from __future__ import annotations

import argparse
from typing import Any

import pytest
from prometheus_client import REGISTRY

from kai_py import metrics
from kai_py.api import keys
from kai_py.conf.schedconfig import parse_config
from kai_py.controllers.settings import OperatorSettings
from kai_py.controllers.webhooks.admissiongate import MISSING, gates_to_set
from kai_py.emulator.storage.patches import strategic_merge
from kai_py.scheduler.cycle import run_cycle
from kai_py.state.cache import PODS
from kai_py.state.documents import InputError
from kai_py.writes.writer import EventRecorder, plan, ungate_patch
from tests.operator.test_writer import NOW, _cache, _pod_body

GATE = {"name": keys.QUEUE_ADMISSION_GATE}


def pod(queue: str | None = "team-a", gates: list[Any] | None = None) -> dict[str, Any]:
    labels = {keys.QUEUE_LABEL: queue} if queue else {}
    spec: dict[str, Any] = {"schedulerName": "kai-scheduler", "containers": []}
    if gates is not None:
        spec["schedulingGates"] = gates
    return {"metadata": {"name": "p", "labels": labels}, "spec": spec}


@pytest.mark.parametrize(
    ("mode", "setting", "gated"),
    [
        ("off", True, False),
        ("queues", True, True),
        ("queues", None, False),
        ("queues", False, False),
        ("all", None, True),
        ("all", False, False),
        ("queues", MISSING, True),  # a pod of no queue could never run: hidden too
    ],
)
def test_the_webhook_gates_pods_of_gated_queues(mode: str, setting: object, gated: bool) -> None:
    asked: list[str] = []

    def lookup(name: str) -> Any:
        asked.append(name)
        return setting

    gates = gates_to_set(pod(gates=[{"name": "example.com/x"}]), "kai-scheduler", mode, lookup)
    assert gates == ([{"name": "example.com/x"}, GATE] if gated else None)
    assert asked == ([] if mode == "off" else ["team-a"])


def test_the_webhook_leaves_other_schedulers_bound_and_already_gated_pods_alone() -> None:
    def on(_: str) -> bool:
        return True

    assert gates_to_set(pod(), "other-scheduler", "all", on) is None
    assert gates_to_set(pod(gates=[GATE]), "kai-scheduler", "all", on) is None
    bound = pod()
    bound["spec"]["nodeName"] = "n1"  # the API server refuses gates on a bound pod
    assert gates_to_set(bound, "kai-scheduler", "all", on) is None
    asked: list[str] = []
    gates_to_set(pod(queue=None), "kai-scheduler", "all", lambda n: asked.append(n))
    assert asked == [keys.DEFAULT_QUEUE]


def test_the_flag_and_the_configuration_turn_it_on_and_a_bad_value_is_named() -> None:
    parser = argparse.ArgumentParser()
    OperatorSettings.add_arguments(parser)
    args = parser.parse_args(["--queue-admission-gating=queues"])
    assert OperatorSettings.from_args(args).scheduler.queue_admission_gating == "queues"
    assert (
        OperatorSettings.from_args(parser.parse_args([])).scheduler.queue_admission_gating == "off"
    )
    assert parse_config({"queueAdmissionGating": "all"}, "f").config.queue_admission_gating == "all"
    reservation = {"queueAdmissionReservation": "15m"}
    assert parse_config(reservation, "f").config.admission_reservation == 900.0
    with pytest.raises(InputError) as err:
        parse_config({"queueAdmissionGating": "yes"}, "f.yaml")
    assert err.value.problems == [
        "f.yaml: queueAdmissionGating: expected one of off, queues, all, got 'yes'"
    ]


def test_the_patch_removes_only_kai_py_gate_and_notes_when() -> None:
    body = _pod_body("p1", "u1", schedulingGates=[{"name": "example.com/x"}, GATE])
    patched = strategic_merge(body, ungate_patch(body, NOW))
    assert patched["spec"]["schedulingGates"] == [{"name": "example.com/x"}]
    assert patched["metadata"]["annotations"][keys.QUEUE_ADMITTED_ANNOTATION]
    assert patched["metadata"]["annotations"]["pod-group-name"] == "g"
    assert ungate_patch(body, NOW)["metadata"]["uid"] == "u1"


def test_a_pod_let_go_is_patched_once_and_the_cache_sees_it_at_once() -> None:
    cache = _cache()  # gating off: a pod left at kai-py's gate is let go at once
    cache.observe(PODS, "ADDED", _pod_body("p1", "u1", schedulingGates=[GATE]))
    view = cache.view(NOW)
    built = view.build(NOW)
    decisions = run_cycle(built.snapshot)
    assert decisions.binds == []  # gated at the start of the cycle: not placed in it
    writes = plan(view, built, decisions, NOW, EventRecorder(), cache)
    [admit] = [w for w in writes if w.what.startswith("admit ")]
    assert (admit.method, admit.path) == ("PATCH", "/api/v1/namespaces/ns/pods/p1")
    assert admit.content_type == "application/strategic-merge-patch+json"
    assert admit.done is not None and admit.body is not None
    stored = cache.get(PODS, "ns", "p1") or {}
    admit.done(
        {
            **strategic_merge(stored, admit.body),
            "metadata": {**strategic_merge(stored, admit.body)["metadata"], "resourceVersion": "9"},
        }
    )
    again = cache.view(NOW)
    built = again.build(NOW)
    decisions = run_cycle(built.snapshot)
    assert decisions.ungated == [] and [t.name for t in decisions.binds] == ["p1"]


def test_the_metrics_count_pods_at_the_gate_and_pods_let_go() -> None:
    def value(name: str, queue: str) -> float:
        return REGISTRY.get_sample_value(name, {"queue": queue}) or 0.0

    cache = _cache()
    cache.observe(PODS, "ADDED", _pod_body("p1", "u1", schedulingGates=[GATE]))
    built = cache.view(NOW).build(NOW)
    before = value("kai_py_queue_admission_admitted_pods_total", "q")
    decisions = run_cycle(built.snapshot)
    metrics.record_decisions(decisions, built.snapshot, [])
    assert value("kai_py_queue_admission_gated_pods", "q") == 1
    assert value("kai_py_queue_admission_admitted_pods_total", "q") == before + 1
    built.snapshot.jobs[0].gated = []  # let go: the next cycle finds none at the gate
    metrics.record_decisions(run_cycle(built.snapshot), built.snapshot, [])
    assert value("kai_py_queue_admission_gated_pods", "q") == 0
