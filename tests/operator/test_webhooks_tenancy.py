"""The webhook's tenancy rules, as pure functions: queue access by namespace, priority
classes per queue (inherited from the nearest ancestor that sets a list) and pins to
cards that another queue owns."""

from __future__ import annotations

import json
from typing import Any

from kai_py.controllers.webhooks import tenancy

Json = dict[str, Any]


def _queue(name: str, **spec: Any) -> Json:
    return {
        "apiVersion": "scheduling.run.ai/v2",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": spec,
    }


TREE = tenancy.queue_tree(
    [
        _queue("org", namespaces=["team-a", "team-b"], priorityClasses=["train"]),
        _queue("team-a", parentQueue="org", cards=[{"node": "n1", "index": 0}]),
        _queue(
            "team-b",
            parentQueue="org",
            namespaces=["team-b"],
            priorityClasses=["train", "inference"],
        ),
        _queue("open"),
        _queue("lender", cards=[{"model": "H100"}], lendCards=True),
    ]
)


def _pod(queue: str | None, namespace: str = "team-a", **extra: Any) -> Json:
    labels = {"kai.scheduler/queue": queue} if queue else {}
    body: Json = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": namespace, "labels": labels, "annotations": {}},
        "spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "c", "image": "x"}]},
    }
    body["spec"].update(extra)
    return body


def test_a_queue_without_a_list_takes_its_nearest_ancestors() -> None:
    assert tenancy.pod_errors(_pod("team-a"), TREE) == []
    (error,) = tenancy.pod_errors(_pod("team-a", "team-c"), TREE)
    assert error == (
        'Pod "team-c/p": metadata.labels["kai.scheduler/queue"]: queue "team-a" does not take '
        'namespace "team-c": spec.namespaces of queue "org" (an ancestor of "team-a", which '
        "sets none) allows team-a, team-b"
    )
    # A child's own list replaces its parent's, narrower or wider.
    assert tenancy.pod_errors(_pod("team-b", "team-b", priorityClassName="inference"), TREE) == []
    assert tenancy.pod_errors(_pod("team-b"), TREE) != []


def test_queues_without_lists_and_pods_without_a_queue_are_as_before() -> None:
    assert tenancy.pod_errors(_pod("open", "anywhere", priorityClassName="x"), TREE) == []
    assert tenancy.pod_errors(_pod("nosuch", "anywhere"), TREE) == []
    assert not tenancy.needs_queues(_pod(None))
    assert tenancy.pod_errors(_pod(None, "team-c", priorityClassName="x"), TREE) == []


def test_both_priority_class_fields_of_a_pod_are_checked() -> None:
    body = _pod("team-a", priorityClassName="inference")
    body["metadata"]["labels"]["priorityClassName"] = "system-node-critical"
    errors = tenancy.pod_errors(body, TREE)
    assert [e.split(": ")[1] for e in errors] == [
        'metadata.labels["priorityClassName"]',
        "spec.priorityClassName",
    ]
    assert errors[1].endswith(
        'priority class "inference" is not allowed in queue "team-a": spec.priorityClasses of '
        'queue "org" (an ancestor of "team-a", which sets none) allows train'
    )


def test_a_podgroup_without_a_priority_class_is_checked_with_the_default() -> None:
    group = {
        "metadata": {"name": "g", "namespace": "team-a"},
        "spec": {"queue": "team-b", "minMember": 1},
    }
    errors = tenancy.podgroup_errors(group, TREE)
    assert errors == [
        'PodGroup "team-a/g": spec.queue: queue "team-b" does not take namespace "team-a": '
        'spec.namespaces of queue "team-b" allows team-b'
    ]
    # An update that keeps the queue and the class is not checked (a list set after the
    # group was made must not refuse its label or annotation writes); one that moves it is.
    moved = {**group, "metadata": {**group["metadata"], "labels": {"x": "y"}}}
    assert tenancy.podgroup_errors(moved, TREE, old=group) == []
    into = {**group, "spec": {**group["spec"], "queue": "team-a"}}
    assert tenancy.podgroup_errors(group, TREE, old=into) == errors
    group["spec"]["queue"] = "team-a"
    assert tenancy.podgroup_errors(group, TREE) == []
    tree = tenancy.queue_tree([_queue("team-a", priorityClasses=["build"])])
    (error,) = tenancy.podgroup_errors(group, tree)
    assert error.startswith('PodGroup "team-a/g": spec.priorityClassName (unset, so the default): ')
    assert 'priority class "train" is not allowed' in error


def _node(name: str, *cards: tuple[str, str]) -> Json:
    inventory = {
        "version": 1,
        "source": "nvml",
        "cards": [
            {"index": i, "uuid": uuid, "product": product, "memoryMiB": 81920, "health": "Healthy"}
            for i, (uuid, product) in enumerate(cards)
        ],
    }
    return {
        "metadata": {
            "name": name,
            "annotations": {"kai.scheduler/gpu-inventory": json.dumps(inventory)},
        }
    }


NODES = [
    _node("n1", ("GPU-a0", "NVIDIA A100-SXM4-80GB"), ("GPU-a1", "NVIDIA A100-SXM4-80GB")),
    _node("n2", ("GPU-b0", "NVIDIA H100 80GB HBM3")),
]


def _pinned(queue: str, namespace: str, **annotations: str) -> Json:
    body = _pod(queue, namespace)
    body["metadata"]["annotations"].update(annotations)
    return body


def test_a_pin_to_another_queues_card_is_refused_and_to_ones_own_or_a_lent_card_is_not() -> None:
    theirs = _pinned("team-b", "team-b", **{"nvidia.com/use-gpuuuid": "GPU-a0"})
    assert tenancy.needs_nodes(theirs, TREE)
    (error,) = tenancy.pin_errors(theirs, TREE, NODES)
    assert error == (
        'Pod "team-b/p": metadata.annotations: the GPU pin nvidia.com/use-gpuuuid="GPU-a0" '
        'allows card(s) owned by another queue, which queue "team-b" may not use: GPU-a0 on '
        "node n1; pin the pod to its queue's cards or to unowned ones"
    )
    own = _pinned("team-a", "team-a", **{"nvidia.com/use-gpuuuid": "GPU-a0"})
    assert tenancy.pin_errors(own, TREE, NODES) == []
    # A type pin that allows the owned card among others is refused too: the scheduler
    # would not place it on that node either.
    typed = _pinned("team-b", "team-b", **{"nvidia.com/use-gputype": "a100"})
    assert "GPU-a0 on node n1" in tenancy.pin_errors(typed, TREE, NODES)[0]
    spared = _pinned("team-b", "team-b", **{"nvidia.com/use-gpuuuid": "GPU-a1"})
    assert tenancy.pin_errors(spared, TREE, NODES) == []
    lent = _pinned("team-b", "team-b", **{"nvidia.com/use-gpuuuid": "GPU-b0"})
    assert tenancy.pin_errors(lent, TREE, NODES) == []
    assert not tenancy.needs_nodes(theirs, tenancy.queue_tree([_queue("team-b")]))
