"""Groupers of the built-in kinds and of the kinds KAI groups by their top owner
alone: the default grouper, bare pods (and Spark's), batch Jobs and CronJobs,
Deployments, and Azure ML's AmlJob."""

from __future__ import annotations

from typing import Final

from kai_py.api import keys
from kai_py.podgrouper.kinds.common import (
    Obj,
    Plan,
    Workload,
    annotation_path,
    mapping,
    needs_manifest,
    non_negative_int,
)

#: Labels the Spark driver and executors carry (set by spark-submit); the
#: selector is the application's id, the same on every pod of one run.
SPARK_APP_LABEL: Final = "spark-app-name"
SPARK_APP_SELECTOR_LABEL: Final = "spark-app-selector"


def default(workload: Workload) -> Plan:
    """KAI's default grouper: one group per top owner, minMember 1."""
    return Plan(owner=workload.top)


def pod(workload: Workload) -> Plan:
    """A pod is its own top owner (a bare pod, or a Spark executor whose owner is
    its driver pod). Spark pods of one application share the group named by the
    application's selector label, as KAI's Spark grouper names it."""
    labels = workload.pod.labels
    selector = labels.get(SPARK_APP_SELECTOR_LABEL)
    if selector and SPARK_APP_LABEL in labels:
        return Plan(owner=workload.top, name=selector)
    return Plan(owner=workload.top)


def spark_application(workload: Workload) -> Plan:
    """A SparkApplication's driver: grouped with its executors under the application's
    selector (the executors' top owner is the driver pod, grouped by ``pod``)."""
    plan = pod(workload)
    return plan if plan.name else default(workload)


def batch_min_member(job: Obj) -> int:
    raw = job.annotations.get(keys.BATCH_MIN_MEMBER_ANNOTATION)
    if raw is None:
        return 1
    return non_negative_int(raw, job, annotation_path(keys.BATCH_MIN_MEMBER_ANNOTATION))


def job(workload: Workload) -> Plan:
    """A batch Job: one group, minMember from the batch-min-member annotation."""
    top = workload.top
    needs_manifest(top)
    return Plan(owner=top, min_member=batch_min_member(top))


def cron_job(workload: Workload) -> Plan:
    """A CronJob's pods are grouped by the Job of their run (one group per run,
    not one for every run the CronJob ever makes)."""
    chain = workload.chain
    if len(chain) >= 2 and chain[-2].is_kind("batch", "Job"):
        run = chain[-2]
        needs_manifest(run)
        return Plan(owner=run, min_member=batch_min_member(run))
    return default(workload)


def deployment(workload: Workload) -> Plan:
    """Serving replicas come and go one by one: each pod is its own group."""
    return Plan(owner=workload.pod, default_priority_class=keys.INFERENCE_PRIORITY_CLASS)


#: Where an AmlJob says how many nodes it runs on.
AML_NODE_COUNT: Final = ("job", "options", "envs", "AZUREML_NODE_COUNT")


def aml_job(workload: Workload) -> Plan:
    """Azure ML's AmlJob: all its nodes start together."""
    top = workload.top
    needs_manifest(top)
    value = mapping(mapping(mapping(top.spec().get("job")).get("options")).get("envs")).get(
        AML_NODE_COUNT[-1]
    )
    path = "spec." + ".".join(AML_NODE_COUNT)
    return Plan(owner=top, min_member=non_negative_int(value, top, path, minimum=1))
