"""``kubectl kai why`` and ``queues`` from objects alone: the hints and the tree's counts."""

from __future__ import annotations

from typing import Any

from kai_py.api import keys
from kai_py.kubectl.views import WhyInput, queue_rows, queues_table, why, why_text


def _queue(name: str, parent: str | None = None, **gpu: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"resources": {"gpu": {"quota": 4, **gpu}}}
    if parent:
        spec["parentQueue"] = parent
    return {
        "metadata": {"name": name},
        "spec": spec,
        "status": {
            "allocated": {keys.GPU_RESOURCE: "6", "cpu": "0", "memory": "0"},
            "fairShare": {keys.GPU_RESOURCE: "8", "cpu": "0", "memory": "0"},
        },
    }


def _group(name: str, queue: str, at: int | None, **status: Any) -> dict[str, Any]:
    if at is not None:
        status["queuePosition"] = {"inQueue": at, "inCluster": at + 1, "higherPriorityAhead": 1}
    return {
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"queue": queue, "minMember": 2},
        "status": status,
    }


def _pod(name: str, group: str, gpus: int = 2) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns", "annotations": {"pod-group-name": group}},
        "spec": {"containers": [{"resources": {"limits": {keys.GPU_RESOURCE: str(gpus)}}}]},
        "status": {"phase": "Pending"},
    }


def test_why_names_the_limit_to_set_and_the_place_in_line() -> None:
    pg = _group(
        "g",
        "team-a",
        3,
        resourcesStatus={"requested": {keys.GPU_RESOURCE: "4"}, "allocated": {}},
    )
    view = why(
        WhyInput(
            pod=_pod("g-0", "g"),
            podgroup=pg,
            group_pods=[_pod("g-0", "g")],
            queues=[_queue("root"), _queue("team-a", "root", limit=8)],
            events=[],
            nodes=[
                {"metadata": {"name": "n"}, "status": {"allocatable": {keys.GPU_RESOURCE: "1"}}}
            ],
            all_pods=[],
        )
    )
    assert view["podGroup"]["needs"]["gpu"] == 4
    assert view["queue"]["parents"] == ["root"]
    fit = view["fit"]
    assert any("minMember 2 pods and 1 exist: create 1 more" in h for h in fit), fit
    assert any(
        "GPU limit is 8 and it holds 6: 4 more would exceed it; raise "
        "spec.resources.gpu.limit of Queue team-a to 10 or more" in h
        for h in fit
    ), fit
    assert any("it asks for 2 GPUs and the largest has 1 (n)" in h for h in fit), fit
    lines = why_text(view)
    assert max(len(line) for line in lines) <= 120
    text = " ".join(" ".join(lines).split())  # the wrapped lines as one
    assert "Position 3 in team-a (4 in the cluster); 1 job of higher priority ahead" in text
    assert "queue has 2 free of its fair share" in text


def test_why_a_pod_whose_queue_does_not_exist() -> None:
    view = why(
        WhyInput(
            pod=_pod("g-0", "g"),
            podgroup=_group("g", "nowhere", None),
            group_pods=[],
            queues=[_queue("root")],
            events=[],
        )
    )
    assert view["queue"] is None
    assert view["fit"][0].startswith("Queue 'nowhere' does not exist")


def test_why_says_the_queues_are_not_readable_rather_than_missing() -> None:
    view = why(
        WhyInput(
            pod=_pod("g-0", "g"),
            podgroup=_group("g", "team-a", None),
            group_pods=[],
            queues=None,  # the user may not list them
            events=[],
        )
    )
    assert view["queue"] is None
    assert view["fit"][0].startswith("Queue 'team-a' cannot be read with your rights"), view
    assert not any("does not exist" in hint for hint in view["fit"])


def test_queues_count_waiting_groups_per_subtree_and_name_the_head() -> None:
    queues = [_queue("root"), _queue("team-a", "root"), _queue("team-b", "root", limit=-1)]
    groups = [
        _group("late", "team-a", 2),
        _group("first", "team-a", 1),
        _group("running", "team-a", None, phase="Running"),
        _group("waits", "team-b", None, phase="Pending"),
    ]
    rows = {r["name"]: r for r in queue_rows(queues, groups)}
    assert [(n, rows[n]["pending"]) for n in ("root", "team-a", "team-b")] == [
        ("root", 3),
        ("team-a", 2),
        ("team-b", 1),
    ]
    assert rows["team-a"]["headOfLine"] == "ns/first"
    table = queues_table(list(rows.values()))
    assert "0 unset" in table[3] and "none" in table[4]
