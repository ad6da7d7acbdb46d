"""The operator under the chart's RBAC, enforced by a real kube-apiserver.

Each part of the operator (``--controllers scheduler|binder|podgrouper``)
runs as its own process under its own ServiceAccount with a TokenRequest
token, as the chart deploys it. Two tests:

- derive: every part bound to ``cluster-admin``, a scenario that exercises
  them all (grouping a Job, a gang, GPU fractions through a reservation
  pod, a preemption, a failed bind), and the apiserver's audit log gives
  each part's (apiGroup, resource, verb) triples. They must equal the rules
  of the chart's ClusterRoles (``charts/kai-py``, rendered by Helm's
  engine): every permission needed is granted, and nothing is granted that
  is neither used nor explained in ``ALSO_NEEDED``.
- enforce: the same scenario with each part bound to the chart's
  ClusterRole of its role must succeed with not one request forbidden.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from chart_helpers import RELEASE, render
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from operator_helpers import (
    Operator,
    bindrequests,
    create_pod,
    create_podgroup,
    create_queues,
    events_of,
    pod,
    podgroup,
    queue,
    shared,
    start_operator,
    stop_operator,
    wait_for,
)
from realapi_backends import backend_cluster
from realapi_server import RealApiServer

from kai_py.api import keys
from kai_py.api.bindrequest import BIND_KEY_ENV, SIGNATURE_ANNOTATION, signature
from kai_py.controllers.settings import CONTROLLER_NAMES
from kai_py.podgrouper.kinds import READS as OWNER_READS

pytestmark = pytest.mark.slow

NS = "team-a"
SYSTEM_NS = "kai-system"
#: The scheduler signs its BindRequests with it and the binder checks them, as the
#: chart sets them up: the signature must survive the real API server's round trip.
BIND_KEY = "a-key-the-chart-would-make"
Rules = dict[str, set[tuple[str, str, str]]]  # part -> {(apiGroup, resource, verb)}


def service_account(part: str) -> str:
    return f"kai-py-{part}"


def user_of(part: str) -> str:
    return f"system:serviceaccount:{SYSTEM_NS}:{service_account(part)}"


def bind(server: RealApiServer, part: str, cluster_role: str) -> None:
    server.apply_yaml(
        yaml.safe_dump(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": f"{service_account(part)}-{cluster_role}"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": cluster_role,
                },
                "subjects": [
                    {
                        "kind": "ServiceAccount",
                        "name": service_account(part),
                        "namespace": SYSTEM_NS,
                    }
                ],
            }
        )
    )


def start_parts(server: RealApiServer, tmp_path: Path) -> list[Operator]:
    server.namespace(SYSTEM_NS)
    parts = []
    for part in CONTROLLER_NAMES:
        token = server.token_for(SYSTEM_NS, service_account(part))
        config = server.write_kubeconfig(str(tmp_path / f"{part}.kubeconfig"), token, part)
        parts.append(
            start_operator(
                config,
                tmp_path / f"{part}.log",
                "--controllers",
                part,
                extra_env={BIND_KEY_ENV: BIND_KEY},
            )
        )
    return parts


def stop_parts(parts: list[Operator]) -> str:
    logs = []
    for running in parts:
        stop_operator(running)
        logs.append(running.log)
    return "\n".join(logs)


def scenario(api: k8s.ApiClient, logs: Any, as_scheduler: k8s.ApiClient) -> None:
    """What the operator does in a working day, each step awaited (``as_scheduler``:
    the scheduler's own token, the one identity that may make BindRequests)."""
    core, custom, batch = k8s.CoreV1Api(api), k8s.CustomObjectsApi(api), k8s.BatchV1Api(api)
    create_queues(custom, queue("root"), queue("team-a", parent="root"))

    def running(name: str) -> Any:
        p = core.read_namespaced_pod(name, NS)
        return p if p.status.phase == "Running" else None

    # A Job grouped by the pod-grouper, scheduled as a gang, bound.
    container = {
        "name": "main",
        "image": "busybox",
        "resources": {"limits": {keys.GPU_RESOURCE: "2"}},
    }
    batch.create_namespaced_job(
        NS,
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": "train",
                "annotations": {keys.BATCH_MIN_MEMBER_ANNOTATION: "2"},
                "labels": {keys.QUEUE_LABEL: "team-a"},
            },
            "spec": {
                "parallelism": 2,
                "completions": 2,
                "template": {
                    "spec": {
                        "schedulerName": "kai-scheduler",
                        "restartPolicy": "Never",
                        "containers": [container],
                    }
                },
            },
        },
    )

    def job_running() -> bool:
        pods = core.list_namespaced_pod(NS, label_selector="job-name=train").items
        return len(pods) == 2 and all(p.status.phase == "Running" for p in pods)

    wait_for(job_running, timeout=40, what=f"the Job's pods Running\n{logs()}")
    # A gang that cannot fit: an Unschedulable event, repeated (its count patched).
    create_podgroup(custom, podgroup("huge", NS, "team-a", min_member=2))
    for i in range(2):
        create_pod(core, pod(f"huge-{i}", NS, "huge", gpus=8))

    def repeated() -> bool:
        found = [e for e in events_of(core, NS, "huge") if e.reason == "Unschedulable"]
        return bool(found) and max(e.count or 1 for e in found) > 1

    wait_for(repeated, timeout=30, what=f"a repeated Unschedulable event\n{logs()}")
    for i in range(2):
        core.delete_namespaced_pod(f"huge-{i}", NS)
    # Two halves of one GPU, through a reservation pod.
    for name in ("half-a", "half-b"):
        body = shared(pod(name, NS, name, gpus=0), "0.5")
        create_podgroup(custom, podgroup(name, NS, "team-a"))
        create_pod(core, body)
    for name in ("half-a", "half-b"):
        wait_for(lambda n=name: running(n), timeout=40, what=f"{name} Running\n{logs()}")
    # A higher priority job preempts the Job's pods (gpu-0 and gpu-1 hold 4+1 and 4).
    create_podgroup(custom, podgroup("urgent", NS, "team-a", priority_class="inference"))
    create_pod(core, pod("urgent-0", NS, "urgent", gpus=4))
    wait_for(lambda: running("urgent-0"), timeout=60, what=f"urgent-0 Running\n{logs()}")
    evicted = [e for e in core.list_namespaced_event(NS).items if e.reason == "Evict"]
    assert evicted, logs()
    # A failed bind, rolled back (the pod asks more CPU than any node has, so the
    # scheduler never makes a BindRequest of its own to race this one).
    create_pod(core, pod("lost", NS, "pg-lost", gpus=1, cpu="1000"))
    uid = core.read_namespaced_pod("lost", NS).metadata.uid
    manual = {
        "apiVersion": "scheduling.run.ai/v1alpha2",
        "kind": "BindRequest",
        "metadata": {
            "name": "lost-manual",
            "namespace": NS,
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "lost", "uid": uid}],
        },
        "spec": {
            "podName": "lost",
            "selectedNode": "no-such-node",
            "receivedResourceType": "Regular",
            "receivedGPU": {"count": 1, "portion": "1"},
            "backoffLimit": 1,
        },
    }
    manual["metadata"]["annotations"] = {SIGNATURE_ANNOTATION: signature(BIND_KEY.encode(), manual)}
    k8s.CustomObjectsApi(as_scheduler).create_namespaced_custom_object(
        "scheduling.run.ai", "v1alpha2", NS, "bindrequests", manual
    )

    def failed() -> bool:
        # Failed, or already deleted by the scheduler, which decides a failed pod again.
        br = bindrequests(custom, NS).get("lost-manual")
        if br is not None:
            return (br.get("status") or {}).get("phase") == "Failed"
        return any("giving up" in (e.message or "") for e in events_of(core, NS, "lost"))

    wait_for(failed, timeout=30, what=f"the bad BindRequest Failed\n{logs()}")
    # Failed as a bind to a node that is not there, not as a request without signature.
    assert not [e for e in events_of(core, NS, "lost") if "not made by" in (e.message or "")]
    # The binder posts its Events from a background thread, after the status write.
    wait_for(
        lambda: [e for e in events_of(core, NS, "lost") if e.reason == "BindingError"],
        timeout=10,
        what=f"the BindingError Event\n{logs()}",
    )
    # Pods going away: the reservation pod follows the last of its sharers.
    for name in ("half-a", "half-b"):  # (unless the preemption took them already)
        try:
            core.delete_namespaced_pod(name, NS)
        except k8s.ApiException as exc:
            if exc.status != 404:
                raise
    wait_for(
        lambda: not core.list_namespaced_pod(keys.RESERVATION_NAMESPACE).items,
        timeout=40,
        what=f"the reservation pod deleted\n{logs()}",
    )


def audited(server: RealApiServer) -> tuple[Rules, list[str]]:
    """Per part: the (apiGroup, resource, verb) triples it used, and its forbidden requests."""
    used: Rules = defaultdict(set)
    forbidden: list[str] = []
    users = {user_of(part): part for part in CONTROLLER_NAMES}
    for event in server.audit_events():
        part = users.get((event.get("user") or {}).get("username", ""))
        ref = event.get("objectRef")
        if part is None or ref is None:
            continue
        resource = ref.get("resource", "")
        if ref.get("subresource"):
            resource += "/" + ref["subresource"]
        used[part].add((ref.get("apiGroup", ""), resource, event["verb"]))
        if (event.get("responseStatus") or {}).get("code") == 403:
            forbidden.append(f"{part}: {event['verb']} {event.get('requestURI')}")
    return dict(used), forbidden


#: The parts' Roles besides their ClusterRoles: the binder's pods, in the reservation
#: namespace only.
NAMESPACED_ROLES = {f"{RELEASE}-binder-reservations": "binder"}


def chart_cluster_roles() -> list[dict[str, Any]]:
    """The ClusterRoles of the operator's parts, as the chart renders them by default."""
    names = {f"{RELEASE}-{part}" for part in CONTROLLER_NAMES}
    return [o for o in render() if o["kind"] == "ClusterRole" and o["metadata"]["name"] in names]


def chart_namespaced_roles() -> list[dict[str, Any]]:
    """The parts' Roles and their RoleBindings, as the chart renders them."""
    return [
        o
        for o in render()
        if o["kind"] in ("Role", "RoleBinding") and o["metadata"]["name"] in NAMESPACED_ROLES
    ]


def chart_admission_policies() -> list[dict[str, Any]]:
    """The chart's ValidatingAdmissionPolicies and their bindings (security.yaml)."""
    return [o for o in render() if o["kind"].startswith("ValidatingAdmissionPolicy")]


def granted_rules() -> Rules:
    """The (apiGroup, resource, verb) triples each part's ClusterRole and Roles grant."""
    found: Rules = {}
    roles = chart_cluster_roles() + [o for o in chart_namespaced_roles() if o["kind"] == "Role"]
    for role in roles:
        name = role["metadata"]["name"]
        part = NAMESPACED_ROLES.get(name) or name.removeprefix(f"{RELEASE}-")
        triples = found.setdefault(part, set())
        for rule in role.get("rules") or []:
            for group in rule.get("apiGroups", []):
                for resource in rule.get("resources", []):
                    for verb in rule.get("verbs", []):
                        triples.add((group, resource, verb))
    return found


def covers(rule: tuple[str, str, str], used: tuple[str, str, str]) -> bool:
    """A granted rule allows a request (a ``*`` resource: every one of its group)."""
    return rule[0] == used[0] and rule[2] == used[2] and rule[1] in ("*", used[1])


# Granted though the scenario may not reach them (timing decides): each with its reason.
ALSO_NEEDED: Rules = {
    # A Failed BindRequest is deleted and its pod decided again (only when a bind fails
    # before the pod is gone; the scenario's may lose the race with the pod's deletion).
    # PodGroup annotations: stale-since of a gang below minMember (the scenario's gangs
    # are never stale) and last-eviction-timestamp of an evicted job.
    "scheduler": {
        ("scheduling.run.ai", "bindrequests", "delete"),
        ("scheduling.run.ai", "podgroups", "patch"),
        # The conditions of KAI's Config and of the scheduler's own SchedulingShard
        # (kaiconfig.py); the scenario creates neither.
        ("kai.scheduler", "configs/status", "patch"),
        ("kai.scheduler", "schedulingshards/status", "patch"),
    },
    # A fraction's ConfigMap that is there already is patched; a failed bind deletes
    # the ConfigMaps it created (binding.py); a bound pod's retry reads whether they
    # are there, and a reservation pod made again reads the card the pod was shown.
    # A status write refused with 409 (the request changed since it was offered)
    # reads the request and judges it again.
    "binder": {
        ("", "configmaps", "get"),
        ("", "configmaps", "patch"),
        ("", "configmaps", "delete"),
        # A pod with an unbound PersistentVolumeClaim: its claim is read and told the
        # node (volume.kubernetes.io/selected-node); the scenario's pods have none.
        ("", "persistentvolumeclaims", "get"),
        ("", "persistentvolumeclaims", "patch"),
        ("scheduling.run.ai", "bindrequests", "get"),
        # Staggered start per Queue (binder/stagger.py): a shared pod without a queue
        # label finds its Queue through its PodGroup; the scenario's pods carry the label.
        ("scheduling.run.ai", "podgroups", "get"),
    },
    # The grouper reads a pod it has no cached copy of, and walks owner chains:
    # a Deployment's pods through their ReplicaSet to the Deployment (podgrouping.py).
    "podgrouper": {
        ("", "pods", "get"),
        ("apps", "replicasets", "get"),
        ("apps", "deployments", "get"),
        # A 409 on a PodGroup's create (another pod of the job made it first) is
        # checked by reading the group: it must exist before the pod names it.
        ("scheduling.run.ai", "podgroups", "get"),
        # A pod whose grouping found a problem (a bad annotation, an unreadable owner)
        # gets a PodGrouperWarning Event (podgrouping.py).
        ("", "events", "create"),
        # Kubeflow training jobs own their pods (PyTorchJob, MPIJob, ...).
        ("kubeflow.org", "pytorchjobs", "get"),
        # A workload that scaled (a Ray group's minReplicas, a LeaderReady LWS group once
        # its leader is placed) has its PodGroup's gang fields rewritten (service.py).
        ("scheduling.run.ai", "podgroups", "patch"),
        # Every other workload kind the grouper knows (JobSet, LeaderWorkerSet, Ray, ...):
        # its owners and what its kind reads besides; the scenario runs none of them.
        *(
            (group, resource, "get")
            for group, resources in OWNER_READS.items()
            for resource in resources
        ),
    },
}


@pytest.fixture
def real(tmp_path: Path) -> Iterator[RealApiServer]:
    with backend_cluster("real", tmp_path) as running:
        assert running.server is not None
        yield running.server


def run_scenario_as_parts(server: RealApiServer, tmp_path: Path) -> str:
    parts = start_parts(server, tmp_path)
    api = k8s_config.new_client_from_config(config_file=server.kubeconfig_path)
    as_scheduler = k8s_config.new_client_from_config(
        config_file=str(tmp_path / "scheduler.kubeconfig")
    )
    try:
        scenario(api, lambda: "\n".join(p.log[-3000:] for p in parts), as_scheduler)
    finally:
        api.close()
        as_scheduler.close()
        logs = stop_parts(parts)
    assert "Traceback" not in logs, logs
    return logs


def test_derive_what_each_part_of_the_operator_asks_of_the_api(
    real: RealApiServer, tmp_path: Path
) -> None:
    for part in CONTROLLER_NAMES:
        bind(real, part, "cluster-admin")
    run_scenario_as_parts(real, tmp_path)
    used, forbidden = audited(real)
    assert not forbidden
    report = "\n".join(
        f"{part}: {group or 'core'} {resource} {verb}"
        for part in sorted(used)
        for group, resource, verb in sorted(used[part])
    )
    print(report)
    (tmp_path / "used.txt").write_text(report)
    granted = granted_rules()
    for part in CONTROLLER_NAMES:
        rules = granted.get(part, set())
        needed = used.get(part, set()) | ALSO_NEEDED.get(part, set())
        missing = {u for u in used.get(part, set()) if not any(covers(r, u) for r in rules)}
        unused = {r for r in rules if not any(covers(r, n) for n in needed)}
        assert not missing, f"the chart does not grant {part}: {sorted(missing)}"
        assert not unused, f"the chart grants {part} what it never used: {sorted(unused)}"


def test_the_operator_works_under_its_cluster_roles_with_nothing_forbidden(
    real: RealApiServer, tmp_path: Path
) -> None:
    # The chart's RBAC and its admission policies: kai-py's own work passes them all.
    real.apply_yaml(yaml.safe_dump_all(chart_cluster_roles() + chart_namespaced_roles()))
    real.apply_yaml(yaml.safe_dump_all(chart_admission_policies()))
    for part in CONTROLLER_NAMES:
        bind(real, part, f"{RELEASE}-{part}")
    run_scenario_as_parts(real, tmp_path)
    _, forbidden = audited(real)
    assert not forbidden, forbidden
