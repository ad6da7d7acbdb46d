"""The pod-grouper's Kopf handlers against the emulated cluster.

The emulator's Job and Deployment controllers make the pods; the grouper
(KopfRunner in this process, on a registry of its own) fetches their owners
through the API, creates the PodGroups and annotates the pods.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from typing import Any

import kopf
import pytest
from kopf.testing import KopfRunner
from operator_helpers import wait_for

from kai_py.api import keys
from kai_py.controllers import grouper
from kai_py.emulator.cluster_spec import parse_cluster
from kai_py.emulator.dev_cluster import ThreadedDevCluster
from kai_py.emulator.storage.errors import ApiError

NS = "team-g"
CLUSTER = {
    "nodes": [{"name": "gpu", "count": 1, "gpus": 2, "cpu": "16", "memory": "64Gi"}],
    "namespaces": [NS],
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadedDevCluster]:
    path = tmp_path_factory.mktemp("grouper") / "kubeconfig"
    spec = parse_cluster(CLUSTER, "test")
    with ThreadedDevCluster(
        spec, kubeconfig_path=path, bookmark_interval=1.0, job_failure_backoff=0
    ) as running:
        yield running


@pytest.fixture(scope="module")
def operator(cluster: ThreadedDevCluster) -> Iterator[KopfRunner]:
    registry = kopf.OperatorRegistry()
    kopf.on.login(registry=registry)(kopf.login_via_client)
    grouper.register(registry)
    grouper.configure(retry_period=0.3, owner_ttl=0.5)
    settings = kopf.OperatorSettings()
    settings.posting.level = logging.WARNING
    settings.scanning.disabled = True
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KUBECONFIG", cluster.kubeconfig_path)
        from kubernetes.config import kube_config

        mp.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", cluster.kubeconfig_path)
        for var in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):
            mp.delenv(var, raising=False)
        with KopfRunner(
            ["run", "--standalone", "-A"], registry=registry, settings=settings, timeout=30
        ) as runner:
            yield runner
    grouper.configure(retry_period=15.0, owner_ttl=10.0)
    if os.environ.get("KAI_PY_OPERATOR_LOG"):
        print(runner.output)
    assert runner.exception is None, runner.output
    assert "Traceback" not in runner.output, runner.output


def get(cluster: ThreadedDevCluster, plural: str, ns: str, name: str) -> dict[str, Any] | None:
    try:
        return dict(cluster.call(cluster.store.get(plural, ns, name)))
    except ApiError as exc:
        if exc.code == 404:
            return None
        raise


def listed(cluster: ThreadedDevCluster, plural: str, **kw: Any) -> list[dict[str, Any]]:
    items, _ = cluster.call(cluster.store.list(plural, NS, **kw))
    return [dict(i) for i in items]


def template(scheduler: str = "kai-scheduler") -> dict[str, Any]:
    return {
        "metadata": {"labels": {"app": "x"}},
        "spec": {
            "schedulerName": scheduler,
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "busybox"}],
        },
    }


def job(name: str, min_member: str | None, parallelism: int = 2) -> dict[str, Any]:
    annotations = {keys.BATCH_MIN_MEMBER_ANNOTATION: min_member} if min_member else {}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": NS,
            "annotations": annotations,
            "labels": {keys.QUEUE_LABEL: "team-g"},
        },
        "spec": {"parallelism": parallelism, "completions": parallelism, "template": template()},
    }


def pods_of_job(cluster: ThreadedDevCluster, name: str) -> list[dict[str, Any]]:
    return listed(cluster, "pods", label_selector=f"job-name={name}")


def test_a_jobs_pods_get_one_podgroup_with_min_member_from_the_annotation(
    cluster: ThreadedDevCluster, operator: KopfRunner
) -> None:
    cluster.call(cluster.store.create("jobs", job("train", "2")))

    def annotated() -> list[dict[str, Any]] | None:
        pods = pods_of_job(cluster, "train")
        names = {
            (p["metadata"].get("annotations") or {}).get(keys.POD_GROUP_ANNOTATION) for p in pods
        }
        return pods if len(pods) == 2 and None not in names else None

    pods = wait_for(annotated, what="both pods annotated")
    uid = get(cluster, "jobs", NS, "train")["metadata"]["uid"]  # type: ignore[index]
    group = f"pg-train-{uid}"
    assert {p["metadata"]["annotations"][keys.POD_GROUP_ANNOTATION] for p in pods} == {group}
    podgroups = listed(cluster, "podgroups")
    assert [pg["metadata"]["name"] for pg in podgroups] == [group]
    pg = podgroups[0]
    assert pg["spec"]["minMember"] == 2
    assert pg["spec"]["queue"] == "team-g"
    assert pg["spec"]["priorityClassName"] == "train"
    owner = pg["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("Job", "train", uid)
    for p in pods:  # the annotation is the only trace the grouper leaves on a pod
        assert not p["metadata"].get("finalizers") or p["metadata"]["finalizers"] == [
            "batch.kubernetes.io/job-tracking"
        ]
        assert not [k for k in p["metadata"]["annotations"] if "kopf" in k]


def test_a_bad_min_member_is_a_warning_event_and_no_group(
    cluster: ThreadedDevCluster, operator: KopfRunner
) -> None:
    cluster.call(cluster.store.create("jobs", job("broken", "abc", parallelism=1)))

    def warned() -> list[dict[str, Any]] | None:
        events = listed(cluster, "events", field_selector="involvedObject.name=broken")
        found = [e for e in events if e.get("reason") == "PodGrouperWarning"]
        return found or None

    events = wait_for(warned, what="a PodGrouperWarning event on the Job")
    assert events[0]["type"] == "Warning"
    assert events[0]["involvedObject"]["kind"] == "Job"
    assert "batch-min-member" in events[0]["message"] and '"abc"' in events[0]["message"]
    time.sleep(0.3)
    assert len(warned() or []) == 1  # posted once, not per pod event
    pods = pods_of_job(cluster, "broken")
    assert pods
    assert all(
        keys.POD_GROUP_ANNOTATION not in (p["metadata"].get("annotations") or {}) for p in pods
    )
    assert not [pg for pg in listed(cluster, "podgroups") if "broken" in pg["metadata"]["name"]]


def test_a_bad_min_member_tells_each_waiting_pod_why_it_waits(
    cluster: ThreadedDevCluster, operator: KopfRunner
) -> None:
    cluster.call(cluster.store.create("jobs", job("broken-pods", "abc", parallelism=2)))
    pods = wait_for(
        lambda: (lambda p: p if len(p) == 2 else None)(pods_of_job(cluster, "broken-pods")),
        what="the Job's two pods",
    )
    for p in pods:
        name = p["metadata"]["name"]

        def warned(name: str = name) -> list[dict[str, Any]] | None:
            events = listed(cluster, "events", field_selector=f"involvedObject.name={name}")
            return [e for e in events if e.get("reason") == "PodGroupNotCreated"] or None

        events = wait_for(warned, what=f"a PodGroupNotCreated event on {name}")
        assert events[0]["type"] == "Warning"
        assert events[0]["involvedObject"]["kind"] == "Pod"
        assert events[0]["involvedObject"]["uid"] == p["metadata"]["uid"]
        message = events[0]["message"]
        assert message.startswith(
            f'Pod "{NS}/{name}": metadata.annotations["pod-group-name"]: not set, so the pod '
            "is not scheduled, until its PodGroup can be made: "
        )
        assert f'Job "{NS}/broken-pods"' in message
        assert "batch-min-member" in message and '"abc"' in message
    time.sleep(0.3)
    assert all(len(warned(p["metadata"]["name"]) or []) == 1 for p in pods)


def test_deployment_pods_get_a_group_each_owned_by_the_pod(
    cluster: ThreadedDevCluster, operator: KopfRunner
) -> None:
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "serve", "namespace": NS},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "x"}},
            "template": template(),
        },
    }
    cluster.call(cluster.store.create("deployments", deployment))

    def annotated() -> list[dict[str, Any]] | None:
        pods = [p for p in listed(cluster, "pods") if p["metadata"]["name"].startswith("serve-")]
        ok = [
            p for p in pods if keys.POD_GROUP_ANNOTATION in (p["metadata"].get("annotations") or {})
        ]
        return ok if len(ok) == 2 else None

    pods = wait_for(annotated, what="two annotated Deployment pods")
    for p in pods:
        name = p["metadata"]["annotations"][keys.POD_GROUP_ANNOTATION]
        assert name == f"pg-{p['metadata']['name']}-{p['metadata']['uid']}"
        pg = wait_for(lambda n=name: get(cluster, "podgroups", NS, n), what="the pod's group")
        assert pg["spec"]["priorityClassName"] == "inference"
        assert pg["metadata"]["ownerReferences"][0]["uid"] == p["metadata"]["uid"]


def test_pods_of_other_schedulers_are_left_alone(
    cluster: ThreadedDevCluster, operator: KopfRunner
) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "other", "namespace": NS},
        "spec": {"schedulerName": "someone-else", "containers": [{"name": "c", "image": "x"}]},
    }
    cluster.call(cluster.store.create("pods", pod))
    mine = {**pod, "metadata": {"name": "solo", "namespace": NS}, "spec": template()["spec"]}
    cluster.call(cluster.store.create("pods", mine))
    solo = wait_for(
        lambda: (
            lambda p: (
                p if keys.POD_GROUP_ANNOTATION in (p["metadata"].get("annotations") or {}) else None
            )
        )(get(cluster, "pods", NS, "solo") or {"metadata": {}}),
        what="the bare pod grouped",
    )
    assert solo["metadata"]["annotations"][keys.POD_GROUP_ANNOTATION].startswith("pg-solo-")
    other = get(cluster, "pods", NS, "other")
    assert other is not None
    assert keys.POD_GROUP_ANNOTATION not in (other["metadata"].get("annotations") or {})


def test_fixing_the_jobs_annotation_groups_its_waiting_pods(
    cluster: ThreadedDevCluster, operator: KopfRunner
) -> None:
    cluster.call(cluster.store.create("jobs", job("fixme", "-1", parallelism=1)))
    wait_for(
        lambda: [
            e
            for e in listed(cluster, "events", field_selector="involvedObject.name=fixme")
            if e.get("reason") == "PodGrouperWarning"
        ],
        what="the warning",
    )
    patch = {"metadata": {"annotations": {keys.BATCH_MIN_MEMBER_ANNOTATION: "1"}}}
    cluster.call(cluster.store.patch("jobs", NS, "fixme", patch))

    def grouped() -> list[dict[str, Any]] | None:
        pods = pods_of_job(cluster, "fixme")
        ok = [
            p for p in pods if keys.POD_GROUP_ANNOTATION in (p["metadata"].get("annotations") or {})
        ]
        return ok or None

    # No pod event comes (the pod is unchanged): the retry pass picks it up once the
    # owner cache (0.5 s here) lets the fixed Job be read again.
    (pod,) = wait_for(grouped, what="the pod grouped after the fix")
    uid = get(cluster, "jobs", NS, "fixme")["metadata"]["uid"]  # type: ignore[index]
    assert pod["metadata"]["annotations"][keys.POD_GROUP_ANNOTATION] == f"pg-fixme-{uid}"
