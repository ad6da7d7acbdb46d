"""The batch/v1 CronJob controller: a Job from ``spec.jobTemplate`` at each scheduled time.

As kube-controller-manager's (cronjob-controller v2), where a client can tell:
- the Job is named ``<cronjob>-<scheduled time in minutes since the epoch>``
  (the name is the lock: a restarted controller never makes a run twice),
  is controlled by the CronJob and carries the template's labels and
  annotations plus ``batch.kubernetes.io/cronjob-scheduled-timestamp``;
- of the times missed since ``status.lastScheduleTime`` (or the creation)
  only the latest starts, and none older than ``startingDeadlineSeconds``;
- ``concurrencyPolicy``: Allow runs overlap, Forbid skips a time while a run
  is active, Replace deletes the active runs first; ``suspend`` starts none;
- ``status.active``, ``lastScheduleTime`` and ``lastSuccessfulTime`` follow
  the Jobs; finished Jobs beyond ``successfulJobsHistoryLimit`` /
  ``failedJobsHistoryLimit`` are deleted, oldest first, in the background.
Time is the given clock's, so tests drive it with a fake one.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from email.utils import format_datetime
from typing import Any

from kai_py.emulator import cron
from kai_py.emulator.clientgo.client import (
    CRONJOBS,
    JOBS,
    ClusterClient,
    Json,
    controller_ref,
)
from kai_py.emulator.clientgo.events import EventRecorder
from kai_py.emulator.clientgo.runtime import Informer, WorkQueue, enqueue_owner, enqueue_self
from kai_py.emulator.controllers.job import is_finished
from kai_py.emulator.storage.errors import ApiError
from kai_py.emulator.timesource import Clock, parse_rfc3339, rfc3339

SCHEDULED_AT = "batch.kubernetes.io/cronjob-scheduled-timestamp"
#: Wake this long after a scheduled time, so the clock has surely reached it.
NEXT_DELTA = 0.1
#: More missed times than this get a warning (the controller still starts only the last).
MANY_MISSED = 100


def _meta(obj: Json) -> Json:
    value = obj.get("metadata")
    return value if isinstance(value, dict) else {}


def _condition(job: Json) -> str:
    for c in (job.get("status") or {}).get("conditions") or []:
        if c.get("type") in ("Complete", "Failed") and c.get("status") == "True":
            return str(c["type"])
    return ""


def scheduled_timestamp(at: float, zone: Any) -> str:
    """Go's RFC 3339 in the schedule's zone: 'Z' for a zero offset, else '+01:00'."""
    local = datetime.fromtimestamp(at, zone)
    offset = local.utcoffset()
    if not offset:
        return local.strftime("%Y-%m-%dT%H:%M:%SZ")
    return local.isoformat(timespec="seconds")


class CronJobController:
    def __init__(
        self,
        client: ClusterClient,
        cronjobs: Informer,
        jobs: Informer,
        clock: Clock,
        *,
        events: bool = True,
    ) -> None:
        self.client = client
        self.cronjobs = cronjobs
        self.jobs = jobs
        self.clock = clock
        self.queue = WorkQueue(self.reconcile, name="cronjob-controller")
        self.recorder = EventRecorder(client, clock, "cronjob-controller", enabled=events)
        cronjobs.add_handler(enqueue_self(self.queue))
        jobs.add_handler(enqueue_owner(self.queue, "CronJob"))

    def _owned_jobs(self, cj: Json) -> list[Json]:
        uid, ns = _meta(cj).get("uid"), _meta(cj).get("namespace")
        return [
            job
            for job in self.jobs.values()
            if _meta(job).get("namespace") == ns
            and any(
                r.get("controller") and r.get("uid") == uid
                for r in _meta(job).get("ownerReferences") or []
            )
        ]

    async def reconcile(self, key: str) -> None:
        cached = self.cronjobs.get(key)
        if cached is None:
            return
        cj = copy.deepcopy(cached)
        cj.setdefault("apiVersion", "batch/v1")
        cj.setdefault("kind", "CronJob")
        status: Json = cj.setdefault("status", {})
        # No list and an empty one are the same status: only a real change is written.
        status["active"] = status.get("active") or []
        before = copy.deepcopy(status)
        jobs = self._owned_jobs(cj)
        wake = await self._sync(cj, status, jobs)
        if not _meta(cj).get("deletionTimestamp"):
            await self._cleanup(cj, status, jobs)
        if status != before:
            await self._write_status(cj, status)
        if wake is not None:
            self.queue.wake_after(key, wake, self.clock)

    # ---- following the Jobs ---------------------------------------------------------------

    async def _track(self, cj: Json, status: Json, jobs: list[Json]) -> None:
        active: list[Json] = status.get("active") or []
        children = set()
        for job in jobs:
            uid = _meta(job).get("uid")
            children.add(uid)
            listed = any(ref.get("uid") == uid for ref in active)
            condition = _condition(job)
            if not listed and not condition:
                await self._unexpected(cj, job)
            elif listed and condition:
                active = [ref for ref in active if ref.get("uid") != uid]
                await self.recorder.record(
                    cj,
                    "SawCompletedJob",
                    f"Saw completed job: {_meta(job).get('name')}, condition: {condition}",
                )
            if condition == "Complete":
                done = (job.get("status") or {}).get("completionTime")
                last = status.get("lastSuccessfulTime")
                if done and (not last or (parse_rfc3339(done) or 0) > (parse_rfc3339(last) or 0)):
                    status["lastSuccessfulTime"] = done
        for ref in list(active):
            if ref.get("uid") in children:
                continue
            # Not in the cache: ask the server before calling it gone (the watch may lag).
            try:
                await self.client.get(JOBS, str(ref.get("name")), namespace=ref.get("namespace"))
            except ApiError as exc:
                if exc.code != 404:
                    raise
                active = [r for r in active if r.get("uid") != ref.get("uid")]
                await self.recorder.record(
                    cj, "MissingJob", f"Active job went missing: {ref.get('name')}"
                )
        status["active"] = active

    async def _unexpected(self, cj: Json, job: Json) -> None:
        """A running Job of ours not in status.active: the status may only be stale."""
        m = _meta(cj)
        fresh = await self.client.get(CRONJOBS, str(m.get("name")), namespace=m.get("namespace"))
        uid = _meta(job).get("uid")
        if any(ref.get("uid") == uid for ref in (fresh.get("status") or {}).get("active") or []):
            return
        await self.recorder.record(
            cj,
            "UnexpectedJob",
            f"Saw a job that the controller did not create or forgot: {_meta(job).get('name')}",
            type="Warning",
        )

    # ---- starting runs --------------------------------------------------------------------

    async def _sync(self, cj: Json, status: Json, jobs: list[Json]) -> float | None:
        """Follow the Jobs, start the run that is due; seconds until the next look, or None."""
        await self._track(cj, status, jobs)
        spec = cj.get("spec") or {}
        if _meta(cj).get("deletionTimestamp"):
            return None
        time_zone = spec.get("timeZone")
        if time_zone is not None:
            try:
                cron.load_zone(str(time_zone))
            except cron.CronError as exc:
                await self.recorder.record(
                    cj, "UnknownTimeZone", f'invalid timeZone: "{time_zone}": {exc}', type="Warning"
                )
                return None
        if spec.get("suspend"):
            return None
        text = str(spec.get("schedule") or "")
        if "TZ" in text:
            await self.recorder.record(
                cj,
                "UnsupportedSchedule",
                f'CRON_TZ or TZ used in schedule "{text}" is not officially supported, see '
                "https://kubernetes.io/docs/concepts/workloads/controllers/cron-jobs/ "
                "for more details",
                type="Warning",
            )
        try:
            schedule = cron.parse(text, time_zone)
        except cron.CronError as exc:
            await self.recorder.record(
                cj, "UnparseableSchedule", f'unparseable schedule: "{text}" : {exc}', type="Warning"
            )
            return None
        now = self.clock.time()
        earliest = self._earliest(cj, status)
        deadline = spec.get("startingDeadlineSeconds")
        try:
            since = earliest if deadline is None else max(earliest, now - float(deadline))
            due, missed = schedule.most_recent(since, now)
        except cron.CronError as exc:
            await self.recorder.record(
                cj, "InvalidSchedule", f"invalid schedule: {text} : {exc}", type="Warning"
            )
            return None
        if missed > MANY_MISSED:
            await self.recorder.record(
                cj,
                "TooManyMissedTimes",
                "too many missed start times. Set or decrease .spec.startingDeadlineSeconds "
                "or check clock skew",
                type="Warning",
            )
        if due is None:
            return self._next_wake(cj, status, schedule, now)
        if deadline is not None and due + float(deadline) < now:
            when = format_datetime(datetime.fromtimestamp(due, UTC))
            await self.recorder.record(
                cj, "MissSchedule", f"Missed scheduled time to start a job: {when}", type="Warning"
            )
            return self._next_wake(cj, status, schedule, now)
        name = f"{_meta(cj).get('name')}-{int(due) // 60}"
        active: list[Json] = status["active"]
        if any(ref.get("name") == name for ref in active) or status.get(
            "lastScheduleTime"
        ) == rfc3339(due):
            return self._next_wake(cj, status, schedule, now)
        policy = spec.get("concurrencyPolicy") or "Allow"
        if policy == "Forbid" and active:
            await self.recorder.record(
                cj,
                "JobAlreadyActive",
                "Not starting job because prior execution is running and concurrency policy "
                "is Forbid",
            )
            return self._next_wake(cj, status, schedule, now)
        if policy == "Replace":
            for ref in list(active):
                await self._delete_job(cj, status, str(ref.get("name")), ref.get("uid"))
        job = await self._create_job(cj, name, due, schedule)
        if job is None:
            return None
        status["active"] = [
            *status["active"],
            {
                "kind": "Job",
                "namespace": _meta(job).get("namespace"),
                "name": _meta(job).get("name"),
                "uid": _meta(job).get("uid"),
                "apiVersion": "batch/v1",
                "resourceVersion": _meta(job).get("resourceVersion"),
            },
        ]
        status["lastScheduleTime"] = rfc3339(due)
        return self._next_wake(cj, status, schedule, now)

    def _earliest(self, cj: Json, status: Json) -> float:
        last = status.get("lastScheduleTime")
        parsed = parse_rfc3339(str(last)) if last else None
        if parsed is None:
            parsed = parse_rfc3339(str(_meta(cj).get("creationTimestamp")))
        return parsed if parsed is not None else self.clock.time()

    def _next_wake(
        self, cj: Json, status: Json, schedule: cron.Schedule, now: float
    ) -> float | None:
        """Until just after the next scheduled time (counted, as upstream, from the last one)."""
        earliest = self._earliest(cj, status)
        try:
            recent, missed = schedule.most_recent(earliest, now)
            base = recent if recent is not None else (earliest if missed == 0 else now)
        except cron.CronError:
            base = now
        upcoming = schedule.next(base)
        return None if upcoming is None else max(0.0, upcoming + NEXT_DELTA - now)

    async def _create_job(
        self, cj: Json, name: str, due: float, schedule: cron.Schedule
    ) -> Json | None:
        m = _meta(cj)
        ns = str(m.get("namespace"))
        template: Json = (cj.get("spec") or {}).get("jobTemplate") or {}
        tmeta: Json = template.get("metadata") or {}
        annotations = dict(tmeta.get("annotations") or {})
        annotations[SCHEDULED_AT] = scheduled_timestamp(due, schedule.zone)
        metadata: Json = {
            "name": name,
            "namespace": ns,
            "annotations": annotations,
            "ownerReferences": [controller_ref(cj, "CronJob", "batch/v1")],
        }
        if tmeta.get("labels"):
            metadata["labels"] = dict(tmeta["labels"])
        body: Json = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": metadata,
            "spec": copy.deepcopy(template.get("spec") or {}),
        }
        try:
            job = await self.client.create(JOBS, body, namespace=ns)
        except ApiError as exc:
            if exc.code != 409:
                await self.recorder.record(
                    cj, "FailedCreate", f"Error creating job: {exc.message}", type="Warning"
                )
                raise
            # Made before a status write that was lost: ours, and not yet listed, is adopted.
            job = await self.client.get(JOBS, name, namespace=ns)
            ours = any(
                r.get("controller") and r.get("uid") == m.get("uid")
                for r in _meta(job).get("ownerReferences") or []
            )
            listed = any(
                ref.get("uid") == _meta(job).get("uid")
                for ref in (cj.get("status") or {}).get("active") or []
            )
            return job if ours and not listed else None
        self.jobs.remember(job)
        await self.recorder.record(cj, "SuccessfulCreate", f"Created job {name}")
        return job

    # ---- history --------------------------------------------------------------------------

    async def _cleanup(self, cj: Json, status: Json, jobs: list[Json]) -> None:
        spec = cj.get("spec") or {}
        for kind, field in (
            ("Complete", "successfulJobsHistoryLimit"),
            ("Failed", "failedJobsHistoryLimit"),
        ):
            limit = spec.get(field)
            if limit is None:
                continue
            done = [j for j in jobs if is_finished(j) and _condition(j) == kind]
            if len(done) <= int(limit):
                continue
            # Oldest start first; a Job that never started counts as the newest.
            done.sort(
                key=lambda j: (
                    (j.get("status") or {}).get("startTime") is None,
                    parse_rfc3339(str((j.get("status") or {}).get("startTime"))) or 0.0,
                    str(_meta(j).get("name")),
                )
            )
            for job in done[: len(done) - int(limit)]:
                await self._delete_job(
                    cj, status, str(_meta(job).get("name")), _meta(job).get("uid")
                )

    async def _delete_job(self, cj: Json, status: Json, name: str, uid: Any) -> None:
        try:
            await self.client.delete(
                JOBS,
                name,
                namespace=_meta(cj).get("namespace"),
                uid=str(uid) if uid else None,
                propagation_policy="Background",
            )
        except ApiError as exc:
            if exc.code != 404:
                await self.recorder.record(
                    cj, "FailedDelete", f"Deleted job: {exc.message}", type="Warning"
                )
                raise
        status["active"] = [r for r in status.get("active") or [] if r.get("uid") != uid]
        await self.recorder.record(cj, "SuccessfulDelete", f"Deleted job {name}")

    async def _write_status(self, cj: Json, status: Json) -> None:
        m = _meta(cj)
        fields: Json = {
            # An empty list is left out, as the real controller's (omitempty) writes it.
            "active": status.get("active") or None,
            "lastScheduleTime": status.get("lastScheduleTime"),
            "lastSuccessfulTime": status.get("lastSuccessfulTime"),
        }
        updated = await self.client.patch(
            CRONJOBS,
            str(m.get("name")),
            # Conditional, as upstream's UpdateStatus: a status from a stale cache is refused.
            {"metadata": {"resourceVersion": m.get("resourceVersion")}, "status": fields},
            namespace=m.get("namespace"),
            subresource="status",
        )
        self.cronjobs.remember(updated)


__all__ = ["SCHEDULED_AT", "CronJobController", "scheduled_timestamp"]
