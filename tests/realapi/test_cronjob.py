"""CronJob on both backends: what the API server keeps and refuses, and a run kai-py schedules.

The first tests compare the bare servers (defaults, the 422 for a bad
schedule, kubectl's table). The last is KAI's k8s_native CronJob case: a
``* * * * *`` CronJob makes a Job within a minute, its pod is grouped and
scheduled by kai-py. On the real tier the Jobs come from the emulator's
CronJob controller running against the real API server (as its Job
controller does), so the controller is checked against real objects, real
validation and the real garbage collector.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client as k8s
from operator_helpers import Operator, create_queues, queue, wait_for
from probes import Target
from realapi_backends import Backend
from test_builtin_kinds import BACKENDS, _table

from kai_py.api import keys

CRONJOBS = "/apis/batch/v1/namespaces/default/cronjobs"
NS = "team-a"
SCHEDULED_AT = "batch.kubernetes.io/cronjob-scheduled-timestamp"


def _cronjob(name: str, schedule: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": name},
        "spec": {
            "schedule": schedule,
            "jobTemplate": {
                "spec": {
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [{"name": "c", "image": "busybox"}],
                        }
                    }
                }
            },
            **spec,
        },
    }


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_cronjob_gets_the_real_defaults_and_table(
    servers: dict[str, Target], backend: str
) -> None:
    target = servers[backend]
    status, created = target.call("POST", CRONJOBS, _cronjob("t-cj", "*/5 * * * *"))
    assert status == 201, created
    spec = created["spec"]
    assert (spec["concurrencyPolicy"], spec["suspend"]) == ("Allow", False)
    assert (spec["successfulJobsHistoryLimit"], spec["failedJobsHistoryLimit"]) == (3, 1)
    assert created["metadata"]["generation"] == 1
    tspec = spec["jobTemplate"]["spec"]["template"]["spec"]
    assert (tspec["dnsPolicy"], tspec["schedulerName"]) == ("ClusterFirst", "default-scheduler")
    names, rows = _table(target, f"{CRONJOBS}/t-cj")
    assert names == [
        "Name",
        "Schedule",
        "Timezone",
        "Suspend",
        "Active",
        "Last Schedule",
        "Containers",
        "Images",
        "Selector",
    ]
    assert rows == [
        ["t-cj", "*/5 * * * *", "<none>", "False", 0, "<none>", "c", "busybox", "<none>"]
    ]
    status, found = target.call("GET", "/apis/batch/v1")
    assert status == 200
    (entry,) = [r for r in found["resources"] if r["name"] == "cronjobs"]
    assert (entry["shortNames"], entry["categories"]) == (["cj"], ["all"])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    ("name", "fields", "message"),
    [
        (
            "t-bad",
            {"schedule": "61 * * * *"},
            'spec.schedule: Invalid value: "61 * * * *": end of range (61) above maximum (59): 61',
        ),
        ("t-empty", {"schedule": ""}, "spec.schedule: Required value"),
        (
            "t-zone",
            {"schedule": "@hourly", "timeZone": "Mars/Olympus"},
            'spec.timeZone: Invalid value: "Mars/Olympus": unknown time zone Mars/Olympus',
        ),
        (
            "t-policy",
            {"schedule": "@daily", "concurrencyPolicy": "Sometimes"},
            'spec.concurrencyPolicy: Unsupported value: "Sometimes": supported values: '
            '"Allow", "Forbid", "Replace"',
        ),
    ],
)
def test_a_bad_cronjob_is_refused_as_the_real_server_does(
    servers: dict[str, Target], backend: str, name: str, fields: dict[str, Any], message: str
) -> None:
    body = _cronjob(name, "")
    body["spec"].update(fields)
    status, answer = servers[backend].call("POST", CRONJOBS, body)
    assert status == 422, answer
    assert answer["message"] == f'CronJob.batch "{name}" is invalid: {message}'


def test_a_cronjob_run_is_grouped_and_scheduled_by_kai_py(
    backend: Backend,
    operator: Operator,
    core: k8s.CoreV1Api,
    custom: k8s.CustomObjectsApi,
    batch: k8s.BatchV1Api,
) -> None:
    create_queues(custom, queue("root"), queue("team-a", parent="root"))
    body = _cronjob("every-minute", "* * * * *")
    body["metadata"] = {"name": "every-minute", "namespace": NS, "labels": {"app": "cj-e2e"}}
    template = body["spec"]["jobTemplate"]["spec"]["template"]
    template["metadata"] = {
        "labels": {"cron-job-app-name": "cj-e2e", "kai.scheduler/queue": "team-a"}
    }
    template["spec"]["schedulerName"] = "kai-scheduler"
    template["spec"]["terminationGracePeriodSeconds"] = 0
    made = batch.create_namespaced_cron_job(NS, body)

    def scheduled_pod() -> Any:
        pods = core.list_namespaced_pod(NS, label_selector="cron-job-app-name=cj-e2e").items
        return next((p for p in pods if p.spec.node_name), None)

    pod = wait_for(scheduled_pod, timeout=90, what=f"a scheduled pod of a run\n{operator.log}")
    (owner,) = pod.metadata.owner_references
    job = batch.read_namespaced_job(owner.name, NS)
    (job_owner,) = job.metadata.owner_references
    assert (job_owner.kind, job_owner.uid, job_owner.controller) == (
        "CronJob",
        made.metadata.uid,
        True,
    )
    scheduled = job.metadata.annotations[SCHEDULED_AT]
    assert job.metadata.name.startswith("every-minute-")
    group = pod.metadata.annotations[keys.POD_GROUP_ANNOTATION]
    pg = custom.get_namespaced_custom_object(
        "scheduling.run.ai", "v2alpha2", NS, "podgroups", group
    )
    # One group per run: the Job owns it, not the CronJob.
    assert pg["metadata"]["ownerReferences"][0]["uid"] == job.metadata.uid
    assert pg["spec"]["queue"] == "team-a"

    def status_listed() -> Any:
        cj = batch.read_namespaced_cron_job("every-minute", NS)
        active = [ref.name for ref in cj.status.active or []]
        return cj if job.metadata.name in active else None

    cj = wait_for(status_listed, timeout=30, what="the run in status.active")
    assert cj.status.last_schedule_time is not None
    assert cj.status.last_schedule_time.strftime("%Y-%m-%dT%H:%M:%SZ") == scheduled
    # Deleting the CronJob (batch/v1's default: in the background) takes its runs along.
    batch.delete_namespaced_cron_job("every-minute", NS)

    def runs_gone() -> bool:
        return not [
            j
            for j in batch.list_namespaced_job(NS).items
            if any(r.uid == made.metadata.uid for r in j.metadata.owner_references or [])
        ]

    wait_for(runs_gone, timeout=60, what="the CronJob's Jobs deleted")
