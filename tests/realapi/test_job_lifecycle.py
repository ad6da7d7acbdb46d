"""The emulator's Job controller and the job-tracking finalizer, on both backends.

Pods of a Job carry ``batch.kubernetes.io/job-tracking``; only the Job
controller removes it. A pod whose Job is deleted must not stay Terminating
for ever, and a Job being deleted in the foreground must not make new pods.
"""

from __future__ import annotations

from typing import Any

from kubernetes import client as k8s
from operator_helpers import wait_for
from realapi_backends import Backend

NS = "team-a"
TRACKING = "batch.kubernetes.io/job-tracking"


def _job(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "parallelism": 2,
            "completions": 2,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "main",
                            "image": "busybox",
                            # The simulated kubelet runs it until deleted.
                            "resources": {"requests": {"cpu": "1"}},
                        }
                    ],
                }
            },
        },
    }


def _pods(core: k8s.CoreV1Api, job: str) -> list[Any]:
    return list(core.list_namespaced_pod(NS, label_selector=f"job-name={job}").items)


def test_pods_of_a_deleted_job_do_not_stay_terminating(
    backend: Backend, core: k8s.CoreV1Api, batch: k8s.BatchV1Api
) -> None:
    batch.create_namespaced_job(NS, _job("gone"))
    pods = wait_for(
        lambda: (lambda ps: ps if len(ps) == 2 and all(p.spec.node_name for p in ps) else None)(
            _pods(core, "gone")
        ),
        timeout=30,
        what="two pods scheduled",
    )
    assert all(TRACKING in (p.metadata.finalizers or []) for p in pods)
    batch.delete_namespaced_job("gone", NS, propagation_policy="Background")
    # The garbage collector deletes the pods; the Job controller must let them go.
    wait_for(lambda: not _pods(core, "gone"), timeout=30, what="the Job's pods gone")


def test_a_job_deleted_in_the_foreground_makes_no_new_pods_and_goes(
    backend: Backend, core: k8s.CoreV1Api, batch: k8s.BatchV1Api
) -> None:
    batch.create_namespaced_job(NS, _job("fg"))
    first = wait_for(
        lambda: (lambda ps: ps if len(ps) == 2 and all(p.spec.node_name for p in ps) else None)(
            _pods(core, "fg")
        ),
        timeout=30,
        what="two pods scheduled",
    )
    names = {p.metadata.name for p in first}
    batch.delete_namespaced_job("fg", NS, propagation_policy="Foreground")
    seen: set[str] = set()

    def job_gone() -> bool:
        seen.update(p.metadata.name for p in _pods(core, "fg"))
        try:
            batch.read_namespaced_job("fg", NS)
        except k8s.ApiException as exc:
            if exc.status == 404:
                return True
            raise
        return False

    wait_for(job_gone, timeout=40, what="the Job gone")
    assert seen <= names, f"new pods while the Job was being deleted: {seen - names}"
    assert not _pods(core, "fg")
