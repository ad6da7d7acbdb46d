"""The webhooks' rules, as pure functions: device access, Queue, PodGroup and pod checks."""

from __future__ import annotations

from typing import Any

from kai_py.api.queue import MAX_QUEUE_DEPTH
from kai_py.controllers.webhooks import deviceaccess, validation

Json = dict[str, Any]


def _pod(
    annotations: Json | None = None, containers: list[Json] | None = None, **meta: Any
) -> Json:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"namespace": "team-a", "annotations": annotations or {}, **meta},
        "spec": {
            "schedulerName": "kai-scheduler",
            "containers": containers or [{"name": "main", "image": "x"}],
        },
    }


def _env(spec: Json, container: int = 0) -> dict[str, Any]:
    return {
        e["name"]: e.get("value", e.get("valueFrom"))
        for e in spec["containers"][container].get("env", [])
    }


def test_a_fraction_container_reads_the_binders_configmap() -> None:
    pod = _pod({"gpu-fraction": "0.5"}, name="notebook")
    spec = deviceaccess.mutate(pod, "kai-scheduler", runtime_class="nvidia")
    assert spec is not None
    assert _env(spec) == {
        "NVIDIA_VISIBLE_DEVICES": {
            "configMapKeyRef": {"name": "notebook-gpu", "key": "NVIDIA_VISIBLE_DEVICES"}
        },
        "GPU_PORTION": {"configMapKeyRef": {"name": "notebook-gpu", "key": "GPU_PORTION"}},
    }
    assert spec["runtimeClassName"] == "nvidia"


def test_the_named_container_shares_and_the_others_see_no_card() -> None:
    containers = [
        {
            "name": "sidecar",
            "image": "x",
            "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}],
        },
        {"name": "main", "image": "x"},
    ]
    pod = _pod(
        {"gpu-memory": "4096", "gpu-fraction-container-name": "main"},
        containers,
        generateName="job-",
    )
    spec = deviceaccess.mutate(pod, "kai-scheduler", token=lambda: "abc123")
    assert spec is not None
    assert _env(spec, 0) == {"NVIDIA_VISIBLE_DEVICES": "void"}
    ref = _env(spec, 1)["NVIDIA_VISIBLE_DEVICES"]["configMapKeyRef"]
    assert ref == {"name": "job-abc123-gpu", "key": "NVIDIA_VISIBLE_DEVICES"}
    assert "runtimeClassName" not in spec


def test_whole_gpu_containers_keep_their_cards_and_other_schedulers_are_left_alone() -> None:
    gpu = [{"name": "main", "image": "x", "resources": {"limits": {"nvidia.com/gpu": 2}}}]
    assert deviceaccess.mutate(_pod(containers=gpu, name="p"), "kai-scheduler") is None
    other = _pod({"gpu-fraction": "0.5"}, name="p")
    other["spec"]["schedulerName"] = "default-scheduler"
    assert deviceaccess.mutate(other, "kai-scheduler") is None


def test_a_container_that_already_reads_a_configmap_keeps_it() -> None:
    env = [
        {
            "name": "NVIDIA_VISIBLE_DEVICES",
            "valueFrom": {"configMapKeyRef": {"name": "mine", "key": "NVIDIA_VISIBLE_DEVICES"}},
        }
    ]
    pod = _pod({"gpu-fraction": "0.25"}, [{"name": "main", "image": "x", "env": env}], name="p")
    assert deviceaccess.mutate(pod, "kai-scheduler") is None


def _queue(name: str, parent: str | None = None, **gpu: Any) -> Json:
    spec: Json = {"resources": {"gpu": gpu or {"quota": 0, "limit": -1}}}
    spec["resources"]["cpu"] = {"limit": -1}
    spec["resources"]["memory"] = {"limit": -1}
    if parent:
        spec["parentQueue"] = parent
    return {
        "apiVersion": "scheduling.run.ai/v2",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": spec,
    }


def test_queue_parent_may_come_later_and_must_form_no_cycle() -> None:
    known = {"root": _queue("root"), "a": _queue("a", "root"), "b": _queue("b", "a")}
    assert validation.validate_queue(_queue("c", "b"), known).errors == []
    # A child before its parent (GitOps order) is admitted, with a warning.
    early = validation.validate_queue(_queue("c", "nope"), known)
    assert early.errors == []
    assert early.warnings[0] == (
        'Queue "c": spec.parentQueue: queue "nope" does not exist yet; this queue\'s jobs '
        "wait until it is created"
    )
    # The parent that would close a loop through the waiting child is refused.
    known["c"] = _queue("c", "nope")
    assert validation.validate_queue(_queue("nope", "c"), known).errors == [
        'Queue "nope": spec.parentQueue: "c" makes the parents a cycle: nope -> c -> nope'
    ]
    # root moved under b: b -> a -> root -> b
    assert validation.validate_queue(_queue("root", "b"), known).errors == [
        'Queue "root": spec.parentQueue: "b" makes the parents a cycle: root -> b -> a -> root'
    ]
    assert validation.validate_queue(_queue("a", "a"), known).errors == [
        'Queue "a": spec.parentQueue: "a" is the queue itself'
    ]
    # The queues could not be read: the parent is not checked.
    assert validation.validate_queue(_queue("c", "nope"), None).errors == []


def test_a_queue_tree_deeper_than_the_limit_is_refused_with_the_level() -> None:
    limit = MAX_QUEUE_DEPTH
    known = {"level-1": _queue("level-1")}
    known |= {f"level-{i}": _queue(f"level-{i}", f"level-{i - 1}") for i in range(2, limit + 1)}
    assert validation.validate_queue(_queue("last", f"level-{limit - 1}"), known).errors == []
    assert validation.validate_queue(_queue("deeper", f"level-{limit}"), known).errors == [
        f'Queue "deeper": spec.parentQueue: \'level-{limit}\' makes Queue deeper level '
        f"{limit + 1} of the queue tree; kai-py takes queue trees at most {limit} levels "
        "deep (a root queue is level 1)"
    ]
    # A chain under a parent still to come counts that parent as a root: already too deep.
    waiting = {"w-1": _queue("w-1", "later")}
    waiting |= {f"w-{i}": _queue(f"w-{i}", f"w-{i - 1}") for i in range(2, limit)}
    assert validation.validate_queue(_queue("w-last", f"w-{limit - 2}"), waiting).errors == []
    assert validation.validate_queue(_queue("w-deeper", f"w-{limit - 1}"), waiting).errors == [
        f"Queue \"w-deeper\": spec.parentQueue: 'w-{limit - 1}' makes Queue w-deeper level "
        f"{limit + 1} of the queue tree; kai-py takes queue trees at most {limit} levels "
        "deep (a root queue is level 1)"
    ]
    # Moving a queue moves the queues under it: level-3 (with 29 levels below it) under
    # other-5 would be level 6 and put level-32 at level 35.
    known |= {"other-1": _queue("other-1")}
    known |= {f"other-{i}": _queue(f"other-{i}", f"other-{i - 1}") for i in range(2, 6)}
    moved = validation.validate_queue(_queue("level-3", "other-5"), known)
    assert moved.errors == [
        "Queue \"level-3\": spec.parentQueue: 'other-5' makes Queue level-32 level 35 of the "
        f"queue tree; kai-py takes queue trees at most {limit} levels deep (a root queue is "
        "level 1)"
    ]


def test_the_webhook_checks_a_5000_deep_tree_without_recursion() -> None:
    # Created while the webhook was down: checking a new queue under it still answers.
    known = {"q0": _queue("q0")} | {f"q{i}": _queue(f"q{i}", f"q{i - 1}") for i in range(1, 5000)}
    errors = validation.validate_queue(_queue("new", "q4999"), known).errors
    assert len(errors) == 1 and "level 5001 of the queue tree" in errors[0]


def test_queue_quotas_are_sane_and_an_unset_limit_is_a_warning() -> None:
    # A quota above its limit is accepted, as KAI does, with a warning that says so.
    over = validation.validate_queue(_queue("q", quota=8, limit=4), {})
    assert over.errors == []
    assert over.warnings == [
        'Queue "q": spec.resources.gpu.quota 8 is above spec.resources.gpu.limit 4: the queue '
        "is never given more than 4 gpu, the rest of its quota does nothing"
    ]
    bad = validation.validate_queue(_queue("q", quota=-3), {})
    assert len(bad.errors) == 1
    assert "spec.resources.gpu.quota" in bad.errors[0] and "-3" in bad.errors[0]
    unset = validation.validate_queue(_queue("q", quota=2), {})
    assert unset.errors == []
    assert (
        unset.warnings and "spec.resources.gpu.limit is not set, which means 0" in unset.warnings[0]
    )


def test_a_podgroup_may_come_before_its_queue_with_a_warning() -> None:
    group = {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": "g", "namespace": "team-a"},
        "spec": {"queue": "ghost", "minMember": 1},
    }
    early = validation.validate_podgroup(group, lambda q: q != "ghost")
    assert early.errors == []
    assert early.warnings == [
        'PodGroup "team-a/g": spec.queue: queue "ghost" does not exist yet; the PodGroup '
        "waits until it is created"
    ]
    assert validation.validate_podgroup(group, lambda q: True).warnings == []


def test_pod_gpu_annotations_are_checked_like_simulate_does() -> None:
    errors = validation.validate_pod_gpu(_pod({"gpu-fraction": "1.5"}, name="p")).errors
    assert errors == [
        "Pod team-a/p: metadata.annotations[gpu-fraction]: must be above 0 and below 1 "
        "(use nvidia.com/gpu for whole GPUs), got '1.5'"
    ]
    assert validation.validate_pod_gpu(_pod({"gpu-memory": "2048"}, name="p")).errors == []
