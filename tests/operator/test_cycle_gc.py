"""The collector stays off for a whole scheduling cycle, the wait for its binds' writes
included, and is on again once the cycle has returned."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import pytest

from kai_py.controllers.scheduling import LoopState, run_one_cycle
from kai_py.controllers.settings import OperatorSettings
from kai_py.state.cache import NODES, PODGROUPS, PODS, QUEUES, ClusterCache

Json = dict[str, Any]


class RecordingApi:
    """Answers every request at once and notes whether the collector was on then."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, bool]] = []

    def request(self, method: str, path: str, body: Any = None, **_: Any) -> Json:
        self.seen.append((method, path, gc.isenabled()))
        if method == "POST" and isinstance(body, dict):
            meta = {**(body.get("metadata") or {}), "uid": f"u{len(self.seen)}"}
            return {**body, "metadata": {**meta, "resourceVersion": "1"}}
        return {}


def one_pending_pod() -> ClusterCache:
    c = ClusterCache()
    c.observe(
        NODES,
        None,
        {
            "metadata": {"name": "n0", "uid": "n0", "resourceVersion": "1"},
            "status": {"allocatable": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "1"}},
        },
    )
    c.observe(
        QUEUES,
        None,
        {
            "apiVersion": "scheduling.run.ai/v2",
            "kind": "Queue",
            "metadata": {"name": "q", "uid": "q", "resourceVersion": "1"},
            "spec": {"resources": {"gpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1}}},
        },
    )
    created = "2026-01-01T00:00:00Z"
    c.observe(
        PODGROUPS,
        None,
        {
            "apiVersion": "scheduling.run.ai/v2alpha2",
            "kind": "PodGroup",
            "metadata": {
                **{"name": "g", "namespace": "ns", "uid": "g", "resourceVersion": "1"},
                "creationTimestamp": created,
            },
            "spec": {"minMember": 1, "queue": "q"},
        },
    )
    c.observe(
        PODS,
        "ADDED",
        {
            "metadata": {
                **{"name": "p", "namespace": "ns", "uid": "p", "resourceVersion": "1"},
                "annotations": {"pod-group-name": "g"},
                "creationTimestamp": created,
            },
            "spec": {
                "schedulerName": "kai-scheduler",
                "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
            },
            "status": {"phase": "Pending"},
        },
    )
    return c


def test_the_collector_is_off_while_the_cycle_writes_and_on_after_it() -> None:
    api = RecordingApi()
    state = LoopState(settings=OperatorSettings(), cache=one_pending_pod(), kube=api)  # type: ignore[arg-type]
    assert gc.isenabled()
    outcome = asyncio.run(run_one_cycle(state))
    assert gc.isenabled()
    binds = [(path, on) for method, path, on in api.seen if path.endswith("/bindrequests")]
    assert binds == [("/apis/scheduling.run.ai/v1alpha2/namespaces/ns/bindrequests", False)]
    assert outcome.failed == 0 and outcome.done >= 1


def test_a_failing_cycle_turns_the_collector_on_again() -> None:
    state = LoopState(settings=OperatorSettings(), cache=one_pending_pod(), kube=None)
    with pytest.raises(AssertionError):  # no API client: the cycle cannot run
        asyncio.run(run_one_cycle(state))
    assert gc.isenabled()
