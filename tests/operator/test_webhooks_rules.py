"""The webhooks' rules, as pure functions: device access, Queue, PodGroup and pod checks,
the scheduler's evictions."""

from __future__ import annotations

from typing import Any

from kai_py.api.queue import MAX_QUEUE_DEPTH
from kai_py.binder import reservation as rsv
from kai_py.controllers.webhooks import deviceaccess, evictions, validation
from kai_py.controllers.webhooks.validation import Verdict

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


def _ref(name: str, key: str) -> Json:
    return {"configMapKeyRef": {"name": name, "key": key}}


def test_a_fraction_container_reads_kais_two_configmaps() -> None:
    """KAI's wiring: the annotation ``runai/shared-gpu-configmap`` names the prefix;
    the container reads the card, ``RUNAI_NUM_OF_GPUS`` and ``GPU_PORTION`` from
    ``<prefix>-0`` and takes ``<prefix>-0-evar`` whole; the pod gets a volume of the first."""
    pod = _pod({"gpu-fraction": "0.5"}, name="notebook")
    mutation = deviceaccess.mutate(
        pod, "kai-scheduler", runtime_class="nvidia", token=lambda: "x7b2kq9"
    )
    assert mutation is not None
    prefix = "notebook-x7b2kq9-shared-gpu"
    assert mutation.annotations == {"runai/shared-gpu-configmap": prefix}
    spec = mutation.spec
    assert _env(spec) == {
        "NVIDIA_VISIBLE_DEVICES": _ref(f"{prefix}-0", "NVIDIA_VISIBLE_DEVICES"),
        "RUNAI_NUM_OF_GPUS": _ref(f"{prefix}-0", "RUNAI_NUM_OF_GPUS"),
        "GPU_PORTION": _ref(f"{prefix}-0", "GPU_PORTION"),
    }
    assert spec["containers"][0]["envFrom"] == [
        {"configMapRef": {"name": f"{prefix}-0-evar", "optional": False}}
    ]
    assert spec["volumes"] == [{"name": f"{prefix}-0-vol", "configMap": {"name": f"{prefix}-0"}}]
    assert spec["runtimeClassName"] == "nvidia"
    # The binder writes exactly what the pod reads.
    admitted = {**pod, "spec": spec}
    admitted["metadata"] = {**pod["metadata"], "annotations": mutation.annotations}
    assert rsv.gpu_configmap_names(admitted) == [f"{prefix}-0", f"{prefix}-0-evar"]
    assert rsv.unwired_reason(admitted) is None


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
        ownerReferences=[{"apiVersion": "batch/v1", "kind": "Job", "name": "job", "uid": "j"}],
    )
    mutation = deviceaccess.mutate(pod, "kai-scheduler", token=lambda: "x7b2kq9")
    assert mutation is not None
    spec = mutation.spec
    assert _env(spec, 0) == {"NVIDIA_VISIBLE_DEVICES": "void"}
    ref = _env(spec, 1)["NVIDIA_VISIBLE_DEVICES"]["configMapKeyRef"]
    # Named after the owner (a pod made from generateName has no name yet) and container 1.
    assert ref == {"name": "job-x7b2kq9-shared-gpu-1", "key": "NVIDIA_VISIBLE_DEVICES"}
    assert "runtimeClassName" not in spec


def test_whole_gpu_containers_keep_their_cards_and_other_schedulers_are_left_alone() -> None:
    gpu = [{"name": "main", "image": "x", "resources": {"limits": {"nvidia.com/gpu": 2}}}]
    assert deviceaccess.mutate(_pod(containers=gpu, name="p"), "kai-scheduler") is None
    other = _pod({"gpu-fraction": "0.5"}, name="p")
    other["spec"]["schedulerName"] = "default-scheduler"
    assert deviceaccess.mutate(other, "kai-scheduler") is None


def test_a_container_may_not_choose_the_cards_it_sees() -> None:
    """As KAI: NVIDIA_VISIBLE_DEVICES other than void/none, or read from elsewhere, is
    refused in every container but the one that shares a card (after the mutation)."""
    gpu = {"limits": {"nvidia.com/gpu": 1}}
    everything = {"name": rsv.VISIBLE_DEVICES_KEY, "value": "all"}
    pod = _pod(
        containers=[{"name": "main", "image": "x", "resources": gpu, "env": [everything]}],
        name="p",
    )
    assert deviceaccess.validate(pod) == [
        'pod team-a/p: spec.containers[0] (main) env NVIDIA_VISIBLE_DEVICES is "all": a '
        "container may not choose the cards it sees; only void or none may be set"
    ]
    pod["spec"]["initContainers"] = [
        {
            "name": "init",
            "image": "x",
            "env": [{"name": rsv.VISIBLE_DEVICES_KEY, "valueFrom": _ref("cm", "k")}],
        }
    ]
    errors = deviceaccess.validate(pod)
    assert len(errors) == 2 and "spec.initContainers[0] (init)" in errors[0]
    assert "is read from valueFrom" in errors[0]
    # void / none / unset are fine; so is what the mutation wires in a shared pod.
    for value in ("void", "none", ""):
        pod = _pod(
            containers=[
                {
                    "name": "main",
                    "image": "x",
                    "env": [{"name": rsv.VISIBLE_DEVICES_KEY, "value": value}],
                }
            ],
            name="p",
        )
        assert deviceaccess.validate(pod) == []
    shared = _pod(
        {"gpu-fraction": "0.5"},
        containers=[
            {"name": "main", "image": "x", "env": [everything]},
            {"name": "side", "image": "x"},
        ],
        name="p",
    )
    mutation = deviceaccess.mutate(shared, "kai-scheduler", token=lambda: "bcdfghj")
    assert mutation is not None
    assert deviceaccess.validate({**shared, "spec": mutation.spec}) == []
    # Any container but the sharing one is checked.
    side = deviceaccess.validate(
        {
            **shared,
            "spec": {
                **shared["spec"],
                "containers": [{"name": "side", "image": "x"}, shared["spec"]["containers"][0]],
            },
        }
    )
    assert side and "spec.containers[1] (main)" in side[0]


def test_a_container_that_already_reads_a_configmap_keeps_it() -> None:
    """A variable read from a ConfigMap stays (the binder writes that one too); the
    rest of KAI's wiring is added, and a prefix the pod already names is kept."""
    env = [
        {
            "name": "NVIDIA_VISIBLE_DEVICES",
            "valueFrom": {"configMapKeyRef": {"name": "mine", "key": "NVIDIA_VISIBLE_DEVICES"}},
        }
    ]
    annotations = {"gpu-fraction": "0.25", "runai/shared-gpu-configmap": "given-shared-gpu"}
    pod = _pod(annotations, [{"name": "main", "image": "x", "env": env}], name="p")
    mutation = deviceaccess.mutate(pod, "kai-scheduler")
    assert mutation is not None and mutation.annotations == {}
    assert _env(mutation.spec)["NVIDIA_VISIBLE_DEVICES"] == _ref("mine", "NVIDIA_VISIBLE_DEVICES")
    assert _env(mutation.spec)["GPU_PORTION"] == _ref("given-shared-gpu-0", "GPU_PORTION")
    admitted = {**pod, "spec": mutation.spec}
    assert rsv.gpu_configmap_names(admitted) == [
        "given-shared-gpu-0",
        "given-shared-gpu-0-evar",
        "mine",
    ]
    # Admitted twice (a retried request): nothing more to change.
    assert deviceaccess.mutate(admitted, "kai-scheduler") is None


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
        f"Queue \"deeper\": spec.parentQueue: 'level-{limit}' makes Queue deeper level "
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


def _subgrouped(
    min_sub_group: int | None, subgroups: list[dict[str, Any]], min_member: int | None = None
) -> dict[str, Any]:
    spec: dict[str, Any] = {"queue": "q", "subGroups": subgroups}
    if min_sub_group is not None:
        spec["minSubGroup"] = min_sub_group
    if min_member is not None:
        spec["minMember"] = min_member
    return {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": "g", "namespace": "team-a"},
        "spec": spec,
    }


def _leaves(*names: str, parent: str | None = None, min_member: int = 8) -> list[dict[str, Any]]:
    return [
        {"name": n, "minMember": min_member, **({"parent": parent} if parent else {})}
        for n in names
    ]


def test_podgroup_min_member_and_min_sub_group_are_mutually_exclusive() -> None:
    both = _subgrouped(3, _leaves("a", "b", "c"), min_member=24)
    [error] = validation.validate_podgroup(both, lambda q: True).errors
    assert "spec.minSubGroup" in error and "mutually exclusive" in error and "(24)" in error
    # Also on update: a structural fault, not a rule only new groups follow.
    assert validation.validate_podgroup(both, lambda q: True, update=True).errors
    mid = _subgrouped(
        1,
        [{"name": "decode", "minMember": 5, "minSubGroup": 2}, *_leaves("l", "w", parent="decode")],
    )
    [error] = validation.validate_podgroup(mid, lambda q: True).errors
    assert "'decode': minMember and minSubGroup are mutually exclusive" in error


def test_podgroup_subgroup_minimums_follow_the_tree() -> None:
    def verdict(group: dict[str, Any], update: bool = False) -> Verdict:
        return validation.validate_podgroup(group, lambda q: True, update=update)

    leaf_with_min_sub_group = _subgrouped(
        3, [{"name": "prefill-0", "minSubGroup": 2}, *_leaves("prefill-1", "prefill-2")]
    )
    assert verdict(leaf_with_min_sub_group).errors == [
        "PodGroup \"team-a/g\": spec.subGroups[0] ('prefill-0'): minSubGroup cannot be set on "
        "a leaf SubGroup (it has no child SubGroups)",
        "PodGroup \"team-a/g\": spec.subGroups[0] ('prefill-0'): minMember is required on a "
        "leaf SubGroup",
    ]
    # More than the direct children: never met, but only a warning (as KAI's).
    too_many = verdict(_subgrouped(5, _leaves("p0", "p1", "p2", "p3")))
    assert too_many.errors == []
    assert too_many.warnings == [
        'PodGroup "team-a/g": spec.minSubGroup (5) exceeds the number of direct child '
        "SubGroups (4)"
    ]
    assert verdict(_subgrouped(0, _leaves("p0", "p1"))).errors == []
    assert verdict(_subgrouped(3, _leaves("p0", "p1", "p2", "p3"))) == Verdict()
    # minMember on a SubGroup with children: refused when created, a warning when
    # an existing group is updated, so that groups stored before the rule can change.
    mid_min_member = _subgrouped(
        1, [{"name": "decode", "minMember": 5}, *_leaves("l", "w", parent="decode")]
    )
    [error] = verdict(mid_min_member).errors
    assert "subGroups[0] ('decode'): minMember cannot be set on a SubGroup with child" in error
    updated = verdict(mid_min_member, update=True)
    assert updated.errors == [] and updated.warnings == [error]


def _topology(levels: list[Json], name: str = "network") -> Json:
    return {
        "apiVersion": "kai.scheduler/v1alpha1",
        "kind": "Topology",
        "metadata": {"name": name},
        "spec": {"levels": levels},
    }


def test_topology_levels_and_aliases_are_checked_with_field_and_value() -> None:
    ok = _topology([
        {"nodeLabel": "example.com/block", "alias": "block"},
        {"nodeLabel": "example.com/rack", "alias": "rack"},
        {"nodeLabel": "kubernetes.io/hostname"},
    ])
    assert validation.validate_topology(ok) == Verdict()
    cases = {
        "spec.levels[1].nodeLabel: 'example.com/rack' is also levels[0].nodeLabel": [
            {"nodeLabel": "example.com/rack"},
            {"nodeLabel": "example.com/rack"},
        ],
        "spec.levels[0].nodeLabel: 'kubernetes.io/hostname' may only be the last": [
            {"nodeLabel": "kubernetes.io/hostname"},
            {"nodeLabel": "example.com/rack"},
        ],
        "spec.levels[1].alias: 'rack' is also the alias of levels[0]": [
            {"nodeLabel": "example.com/block", "alias": "rack"},
            {"nodeLabel": "example.com/rack", "alias": "rack"},
        ],
        "spec.levels[0].alias: 'example.com/rack' is the nodeLabel of levels[1]": [
            {"nodeLabel": "example.com/block", "alias": "example.com/rack"},
            {"nodeLabel": "example.com/rack"},
        ],
        "spec.levels[0].nodeLabel: String should match pattern": [{"nodeLabel": "bad label!"}],
        "spec.levels: List should have at least 1 item": [],
    }
    for expected, levels in cases.items():
        errors = validation.validate_topology(_topology(levels)).errors
        assert len(errors) == 1 and errors[0].startswith(f'Topology "network": {expected}'), (
            errors
        )


def test_a_topology_update_may_change_aliases_only() -> None:
    old = _topology([{"nodeLabel": "example.com/rack"}, {"nodeLabel": "kubernetes.io/hostname"}])
    aliased = _topology([
        {"nodeLabel": "example.com/rack", "alias": "rack"},
        {"nodeLabel": "kubernetes.io/hostname", "alias": "node"},
    ])
    assert validation.validate_topology(aliased, old).errors == []
    moved = _topology([{"nodeLabel": "example.com/zone"}, {"nodeLabel": "kubernetes.io/hostname"}])
    errors = validation.validate_topology(moved, old).errors
    assert errors == [
        'Topology "network": spec.levels: the nodeLabels cannot change (only aliases may): '
        "was ['example.com/rack', 'kubernetes.io/hostname'], "
        "got ['example.com/zone', 'kubernetes.io/hostname']"
    ]


def test_the_scheduler_evicts_only_pods_kai_py_schedules() -> None:
    ours = {"kai-scheduler"}
    assert evictions.refusal(_pod(), "team-a", "p", ours) is None
    other = _pod()
    other["spec"]["schedulerName"] = "default-scheduler"
    assert evictions.refusal(other, "kube-system", "coredns", ours) == (
        "pod kube-system/coredns: spec.schedulerName is 'default-scheduler'; kai-py's "
        "scheduler evicts only pods it schedules (spec.schedulerName kai-scheduler)"
    )
    # No schedulerName is the API server's default scheduler, not kai-py's.
    del other["spec"]["schedulerName"]
    assert "spec.schedulerName is 'default-scheduler'" in str(
        evictions.refusal(other, "team-a", "p", ours)
    )
    # A pod that is gone: the eviction answers 404 by itself.
    assert evictions.refusal(None, "team-a", "gone", ours) is None


def test_the_eviction_webhook_checks_the_schedulers_accounts_only() -> None:
    env = {evictions.USERS_ENV: "system:serviceaccount:kai:kai-py-scheduler, ,x"}
    assert evictions.scheduler_users(env) == {"system:serviceaccount:kai:kai-py-scheduler", "x"}
    assert evictions.scheduler_users({}) == frozenset()
