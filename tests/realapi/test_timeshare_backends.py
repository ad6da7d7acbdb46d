"""Time-based fair share's embedded usage in a running operator, on both backends: the
usage history is written to the Queues' status (the CRD keeps the field) and a new
scheduler reads the usage back from it."""

from __future__ import annotations

from typing import Any

from kubernetes import client as k8s
from operator_helpers import (
    Operator,
    create_pod,
    create_podgroup,
    create_queues,
    pod,
    podgroup,
    wait_for,
)
from operator_helpers import queue as make_queue
from realapi_backends import Backend
from test_kaiconfig_backends import GROUP, VERSION, _applied, _put

from kai_py.api import keys
from kai_py.controllers.usage import UsageSource
from kai_py.scheduler.model import Queue, Snapshot
from kai_py.scheduler.resources import Res
from kai_py.scheduler.timeshare.settings import parse_usage_db

NS = "team-a"
USAGE_DB = {"usageParams": {"windowSize": "10m", "fetchInterval": "1s"}}


def _queue(custom: k8s.CustomObjectsApi, name: str) -> dict[str, Any]:
    got: dict[str, Any] = custom.get_cluster_custom_object(
        keys.GROUP, keys.QUEUE_VERSION, "queues", name
    )
    return got


def test_usage_history_is_kept_in_queue_status_and_read_back(
    backend: Backend, operator: Operator, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi
) -> None:
    create_queues(custom, make_queue("root"), make_queue("team-a", parent="root"))
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "SchedulingShard",
        "metadata": {"name": "default"},
        "spec": {"kValue": 1, "usageDBConfig": USAGE_DB},
    }
    _put(custom, "schedulingshards", body)
    _applied(custom, operator)
    create_podgroup(custom, podgroup("a", NS, "team-a"))
    create_pod(core, pod("a", NS, "a", gpus=1))

    def history() -> dict[str, Any] | None:
        kept = (_queue(custom, "team-a").get("status") or {}).get("usageHistory")
        used = (kept or {}).get("used") or []
        return kept if any(row[1] > 0 for row in used) else None

    kept = wait_for(history, timeout=60, what=f"team-a's usageHistory with GPU use\n{operator.log}")
    # A scheduler that starts (or takes over) now goes on from what is kept there.
    source = UsageSource.make(parse_usage_db(USAGE_DB, "usageDBConfig"))
    source.load({name: _queue(custom, name) for name in ("root", "team-a")})
    snapshot = Snapshot([], [Queue(n, None, Res(), Res(), Res()) for n in ("root", "team-a")], [])
    source.apply(snapshot, float(kept["until"]))
    usage = {q.name: q.usage for q in snapshot.queues}
    assert usage["team-a"] is not None and usage["team-a"].gpu > 0
    assert usage["root"] is not None and usage["root"].gpu == usage["team-a"].gpu
