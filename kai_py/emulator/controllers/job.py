"""The batch/v1 Job controller.

Faithful where a scheduler can tell the difference:
- ``parallelism`` active pods at a time, up to ``completions`` successes;
  with no ``completions``, a work queue: done when one pod succeeds and no
  pod runs.
- Pods carry the template's labels (``job-name``, ``controller-uid``...),
  an ownerReference to the Job, and the ``batch.kubernetes.io/job-tracking``
  finalizer. As in Kubernetes 1.26+, a finished pod is first listed in
  ``status.uncountedTerminatedPods``, then its finalizer is removed, then it
  is counted: a restart in between never counts a pod twice or loses it.
- A pod that fails (also a preempted or deleted one) counts against
  ``backoffLimit`` and is replaced after a backoff (10 s doubling, as
  upstream; configurable for tests). Past the limit the Job fails with
  ``BackoffLimitExceeded``.
- ``completionMode: Indexed``: one pod per index, with the
  ``batch.kubernetes.io/job-completion-index`` annotation and label,
  ``JOB_COMPLETION_INDEX`` and the hostname ``<job>-<index>``.
- ``suspend: true`` deletes the active pods and stops making new ones.
"""

from __future__ import annotations

import logging
from typing import Any

from kai_py.emulator.clientgo.client import (
    JOBS,
    PODS,
    ClusterClient,
    Json,
    controller_ref,
    obj_key,
)
from kai_py.emulator.clientgo.events import EventRecorder
from kai_py.emulator.clientgo.runtime import (
    Informer,
    WorkQueue,
    enqueue_owner,
    enqueue_self,
)
from kai_py.emulator.controllers.pods import (
    TERMINAL,
    deletion_rank,
    is_active,
    is_deleting,
    is_ready,
    phase,
    pod_from_template,
)
from kai_py.emulator.storage.errors import ApiError
from kai_py.emulator.timesource import Clock, parse_rfc3339, rfc3339

log = logging.getLogger(__name__)

TRACKING_FINALIZER = "batch.kubernetes.io/job-tracking"
INDEX_KEY = "batch.kubernetes.io/job-completion-index"
DEFAULT_FAILURE_BACKOFF = 10.0
MAX_FAILURE_BACKOFF = 360.0


def _spec(job: Json) -> Json:
    value = job.get("spec")
    return value if isinstance(value, dict) else {}


def _status(job: Json) -> Json:
    value = job.get("status")
    return value if isinstance(value, dict) else {}


def _condition(job: Json, kind: str) -> bool:
    return any(
        c.get("type") == kind and c.get("status") == "True"
        for c in _status(job).get("conditions") or []
    )


def is_finished(job: Json) -> bool:
    return _condition(job, "Complete") or _condition(job, "Failed")


def parse_indexes(text: str | None) -> set[int]:
    """'0-2,5' -> {0, 1, 2, 5} (status.completedIndexes)."""
    out: set[int] = set()
    for part in (text or "").split(","):
        if not part:
            continue
        if "-" in part:
            lo, hi = part.split("-", 1)
            out.update(range(int(lo), int(hi) + 1))
        else:
            out.add(int(part))
    return out


def format_indexes(indexes: set[int]) -> str:
    ordered = sorted(indexes)
    parts: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)


def pod_index(pod: Json) -> int | None:
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(INDEX_KEY)
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


def _finished(pod: Json) -> bool:
    """A pod the Job counts as done: terminal, or deleted before it was ever bound."""
    return phase(pod) in TERMINAL or (
        is_deleting(pod) and not (pod.get("spec") or {}).get("nodeName")
    )


def _pending_counts(status: Json, pods: list[Json]) -> tuple[set[str], set[str], set[int]]:
    """Uids finished but not yet counted (succeeded, failed), and the completed indexes.

    Step 1 of the tracking protocol: the uncounted lists plus every finished
    pod that still holds our finalizer.
    """
    uncounted = status.get("uncountedTerminatedPods") or {}
    ok: set[str] = set(uncounted.get("succeeded") or [])
    failed: set[str] = set(uncounted.get("failed") or [])
    completed = parse_indexes(status.get("completedIndexes"))
    for pod in pods:
        m = pod.get("metadata") or {}
        uid = str(m.get("uid"))
        if TRACKING_FINALIZER not in (m.get("finalizers") or []) or uid in ok | failed:
            continue
        if not _finished(pod):
            continue
        if phase(pod) == "Succeeded":
            ok.add(uid)
            index = pod_index(pod)
            if index is not None:
                completed.add(index)
        else:
            failed.add(uid)
    return ok, failed, completed


class JobController:
    def __init__(
        self,
        client: ClusterClient,
        jobs: Informer,
        pods: Informer,
        clock: Clock,
        *,
        failure_backoff: float = DEFAULT_FAILURE_BACKOFF,
        events: bool = True,
    ) -> None:
        self.client = client
        self.jobs = jobs
        self.pods = pods
        self.clock = clock
        self.failure_backoff = failure_backoff
        self.queue = WorkQueue(self.reconcile, name="job-controller")
        self.recorder = EventRecorder(client, clock, "job-controller", enabled=events)
        jobs.add_handler(enqueue_self(self.queue))
        pods.add_handler(enqueue_owner(self.queue, "Job"))

    def _owned_pods(self, job: Json) -> list[Json]:
        uid = (job.get("metadata") or {}).get("uid")
        ns = (job.get("metadata") or {}).get("namespace")
        out = []
        for pod in self.pods.values():
            m = pod.get("metadata") or {}
            if m.get("namespace") != ns:
                continue
            for ref in m.get("ownerReferences") or []:
                if ref.get("controller") and ref.get("uid") == uid:
                    out.append(pod)
                    break
        return out

    async def reconcile(self, key: str) -> None:
        job = self.jobs.get(key)
        await self._release_orphans(key, job)
        if job is None:
            return
        pods = self._owned_pods(job)
        if (job.get("metadata") or {}).get("deletionTimestamp"):
            # Being deleted (foreground: the garbage collector waits for the pods):
            # make no new pods, and let go of the ones there, as kube's Job controller does.
            for pod in pods:
                if TRACKING_FINALIZER in ((pod.get("metadata") or {}).get("finalizers") or []):
                    await self._remove_finalizer(pod)
            return
        job = await self._track_finished(job, pods)
        pods = self._owned_pods(job)
        if is_finished(job):
            await self._delete_pods([p for p in pods if is_active(p)], job)
            await self._expire(job, key)
            return
        await self._sync(job, pods)

    async def _expire(self, job: Json, key: str) -> None:
        """The TTL-after-finished controller: delete a finished Job after its TTL."""
        ttl = _spec(job).get("ttlSecondsAfterFinished")
        if ttl is None:
            return
        finished_at = max(
            (
                parse_rfc3339(str(c.get("lastTransitionTime"))) or 0.0
                for c in _status(job).get("conditions") or []
                if c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
            ),
            default=self.clock.time(),
        )
        left = finished_at + float(ttl) - self.clock.time()
        if left > 0:
            self.queue.wake_after(key, left, self.clock)
            return
        m = job.get("metadata") or {}
        try:
            await self.client.delete(
                JOBS,
                str(m.get("name")),
                namespace=m.get("namespace"),
                uid=str(m.get("uid")),
                propagation_policy="Background",
            )
        except ApiError as exc:
            if exc.code != 404:
                raise

    # ---- counting --------------------------------------------------------------------------

    async def _track_finished(self, job: Json, pods: list[Json]) -> Json:
        status = _status(job)
        uncounted = status.get("uncountedTerminatedPods") or {}
        pending_ok, pending_failed, completed = _pending_counts(status, pods)
        changed = pending_ok != set(uncounted.get("succeeded") or []) or pending_failed != set(
            uncounted.get("failed") or []
        )
        if changed:
            job = await self._write_status(
                job,
                {
                    "uncountedTerminatedPods": {
                        "succeeded": sorted(pending_ok),
                        "failed": sorted(pending_failed),
                    },
                    **self._completed_indexes_field(job, completed),
                },
            )
        # 2. take the finalizer off every uncounted pod
        by_uid = {str((p.get("metadata") or {}).get("uid")): p for p in pods}
        for uid in sorted(pending_ok | pending_failed):
            held = by_uid.get(uid)
            if held is not None and TRACKING_FINALIZER in (
                (held.get("metadata") or {}).get("finalizers") or []
            ):
                await self._remove_finalizer(held)
        # 3. count the pods whose finalizer is gone
        still = {
            uid
            for uid, pod in by_uid.items()
            if TRACKING_FINALIZER in ((pod.get("metadata") or {}).get("finalizers") or [])
        }
        done_ok = pending_ok - still
        done_failed = pending_failed - still
        if done_ok or done_failed:
            job = await self._write_status(
                job,
                {
                    "succeeded": int(_status(job).get("succeeded") or 0) + len(done_ok),
                    "failed": int(_status(job).get("failed") or 0) + len(done_failed),
                    "uncountedTerminatedPods": {
                        "succeeded": sorted(pending_ok - done_ok),
                        "failed": sorted(pending_failed - done_failed),
                    },
                },
            )
            if done_failed:
                job = await self._note_failure_time(job)
        return job

    def _completed_indexes_field(self, job: Json, completed: set[int]) -> Json:
        if _spec(job).get("completionMode") != "Indexed":
            return {}
        return {"completedIndexes": format_indexes(completed)}

    async def _note_failure_time(self, job: Json) -> Json:
        # Kept on the Job so a restarted controller still waits out the backoff.
        annotations = {"kai-py.dev/last-pod-failure": rfc3339(self.clock.time())}
        m = job.get("metadata") or {}
        updated = await self.client.patch(
            JOBS,
            str(m.get("name")),
            {"metadata": {"annotations": annotations}},
            namespace=m.get("namespace"),
        )
        self.jobs.remember(updated)
        return updated

    async def _release_orphans(self, key: str, job: Json | None) -> None:
        """Take the tracking finalizer off pods whose Job is gone (or was recreated).

        Without this a pod of a deleted Job would stay Terminating for ever:
        nothing else removes ``batch.kubernetes.io/job-tracking``.
        """
        ns, _, name = key.rpartition("/")
        uid = (job.get("metadata") or {}).get("uid") if job else None
        for pod in self.pods.values():
            m = pod.get("metadata") or {}
            if m.get("namespace") != ns or TRACKING_FINALIZER not in (m.get("finalizers") or []):
                continue
            for ref in m.get("ownerReferences") or []:
                if (
                    ref.get("controller")
                    and ref.get("kind") == "Job"
                    and ref.get("name") == name
                    and ref.get("uid") != uid
                ):
                    await self._remove_finalizer(pod)
                    break

    async def _remove_finalizer(self, pod: Json) -> None:
        m = pod.get("metadata") or {}
        finalizers = [f for f in m.get("finalizers") or [] if f != TRACKING_FINALIZER]
        try:
            updated = await self.client.patch(
                PODS,
                str(m.get("name")),
                # The resourceVersion makes it conditional: another finalizer added
                # meanwhile must not be dropped by our list.
                {
                    "metadata": {
                        "finalizers": finalizers or None,
                        "resourceVersion": m.get("resourceVersion"),
                    }
                },
                namespace=m.get("namespace"),
            )
        except ApiError as exc:
            if exc.code == 404:
                return
            raise
        if updated.get("metadata", {}).get("uid") == m.get("uid"):
            self.pods.remember(updated)

    async def _write_status(self, job: Json, fields: Json) -> Json:
        m = job.get("metadata") or {}
        updated = await self.client.patch(
            JOBS,
            str(m.get("name")),
            {"status": fields},
            namespace=m.get("namespace"),
            subresource="status",
        )
        self.jobs.remember(updated)
        return updated

    # ---- making and removing pods ----------------------------------------------------------

    async def _sync(self, job: Json, pods: list[Json]) -> None:
        spec = _spec(job)
        status = _status(job)
        active = [p for p in pods if is_active(p)]
        terminating = [p for p in pods if is_deleting(p) and phase(p) not in TERMINAL]
        uncounted = status.get("uncountedTerminatedPods") or {}
        # Pods already finished but not yet moved into the counts count too (also
        # those that finished while this reconcile was writing), or a success in
        # flight would be replaced by a surplus pod.
        pending_ok, pending_failed, completed = _pending_counts(status, pods)
        succeeded = int(status.get("succeeded") or 0) + len(pending_ok)
        failed = int(status.get("failed") or 0) + len(pending_failed)
        backoff_limit = int(spec.get("backoffLimit", 6))
        completions = spec.get("completions")
        parallelism = int(spec.get("parallelism", 1))
        indexed = spec.get("completionMode") == "Indexed"
        now = rfc3339(self.clock.time())
        conditions: list[Json] = list(status.get("conditions") or [])

        # The final condition waits until every finished pod is counted and no
        # pod still runs, so a reader of Complete/Failed sees the final counts.
        settled = not (uncounted.get("succeeded") or uncounted.get("failed")) and not (
            pending_ok or pending_failed
        )
        if failed > backoff_limit:
            await self._delete_pods(active, job)
            final = settled and not active and not terminating
            await self._finish(
                job,
                "Failed",
                "BackoffLimitExceeded",
                "Job has reached the specified backoff limit",
                conditions,
                now,
                final=final,
            )
            if not final:
                return
            await self.recorder.record(
                job,
                "BackoffLimitExceeded",
                "Job has reached the specified backoff limit",
                type="Warning",
            )
            return
        deadline = spec.get("activeDeadlineSeconds")
        started = parse_rfc3339(str(status.get("startTime"))) if status.get("startTime") else None
        if deadline is not None and started is not None and not spec.get("suspend"):
            left = started + float(deadline) - self.clock.time()
            if left <= 0:
                await self._delete_pods(active, job)
                final = settled and not active and not terminating
                message = "Job was active longer than specified deadline"
                await self._finish(
                    job, "Failed", "DeadlineExceeded", message, conditions, now, final=final
                )
                if final:
                    await self.recorder.record(job, "DeadlineExceeded", message, type="Warning")
                return
            self.queue.wake_after(obj_key(job), left, self.clock)
        done = (
            (len(completed) if indexed else succeeded) >= int(completions)
            if completions is not None
            else succeeded > 0 and not active
        )
        if done:
            await self._finish(job, "Complete", "", "", conditions, now, final=settled)
            if settled:
                await self.recorder.record(job, "Completed", "Job completed")
            return

        suspended = bool(spec.get("suspend"))
        if suspended:
            wanted = 0
        elif completions is None:
            wanted = 0 if succeeded > 0 else parallelism
        else:
            left = int(completions) - (len(completed) if indexed else succeeded)
            wanted = max(0, min(parallelism, left))

        if len(active) > wanted:
            surplus = sorted(active, key=deletion_rank)[: len(active) - wanted]
            await self._delete_pods(surplus, job)
            active = [p for p in active if p not in surplus]
        elif len(active) < wanted:
            delay = self._backoff_left(job, failed)
            if delay > 0:
                self.queue.wake_after(obj_key(job), delay, self.clock)
            else:
                made = await self._create_pods(job, active, completed, wanted - len(active))
                active = active + made

        fields: Json = {
            "active": len(active),
            "ready": sum(1 for p in active if is_ready(p)),
            "terminating": len(terminating),
        }
        if not status.get("startTime") and not suspended:
            fields["startTime"] = now
        new_conditions = self._suspend_conditions(conditions, suspended, now)
        if new_conditions != conditions:
            fields["conditions"] = new_conditions
        if any(status.get(k) != v for k, v in fields.items()):
            await self._write_status(job, fields)

    def _backoff_left(self, job: Json, failed: int) -> float:
        if failed == 0 or self.failure_backoff <= 0:
            return 0.0
        raw = ((job.get("metadata") or {}).get("annotations") or {}).get(
            "kai-py.dev/last-pod-failure"
        )
        last = parse_rfc3339(raw) if raw else None
        if last is None:
            return 0.0
        wait = min(MAX_FAILURE_BACKOFF, self.failure_backoff * 2.0 ** (failed - 1))
        return max(0.0, last + wait - self.clock.time())

    def _suspend_conditions(self, conditions: list[Json], suspended: bool, now: str) -> list[Json]:
        current = next((c for c in conditions if c.get("type") == "Suspended"), None)
        if suspended and (current is None or current.get("status") != "True"):
            rest = [c for c in conditions if c.get("type") != "Suspended"]
            return [
                *rest,
                {
                    "type": "Suspended",
                    "status": "True",
                    "reason": "JobSuspended",
                    "message": "Job suspended",
                    "lastProbeTime": now,
                    "lastTransitionTime": now,
                },
            ]
        if not suspended and current is not None and current.get("status") == "True":
            rest = [c for c in conditions if c.get("type") != "Suspended"]
            return [
                *rest,
                {
                    "type": "Suspended",
                    "status": "False",
                    "reason": "JobResumed",
                    "message": "Job resumed",
                    "lastProbeTime": now,
                    "lastTransitionTime": now,
                },
            ]
        return conditions

    async def _finish(
        self,
        job: Json,
        kind: str,
        reason: str,
        message: str,
        conditions: list[Json],
        now: str,
        *,
        final: bool,
    ) -> None:
        # Upstream first sets SuccessCriteriaMet / FailureTarget, then the final condition.
        interim = "SuccessCriteriaMet" if kind == "Complete" else "FailureTarget"
        if not final and any(c.get("type") == interim for c in conditions):
            return
        has_interim = any(c.get("type") == interim for c in conditions)
        new = [c for c in conditions if c.get("type") != kind]
        for kind_ in [*([] if has_interim else [interim]), *([kind] if final else [])]:
            condition: Json = {
                "type": kind_,
                "status": "True",
                "lastProbeTime": now,
                "lastTransitionTime": now,
            }
            if reason:
                condition["reason"] = reason
                condition["message"] = message
            elif kind == "Complete":
                condition["reason"] = "CompletionsReached"
                condition["message"] = "Reached expected number of succeeded pods"
            new.append(condition)
        fields: Json = {"conditions": new}
        if final:
            fields.update({"active": 0, "ready": 0, "terminating": 0})
        if final and kind == "Complete":
            fields["completionTime"] = now
        await self._write_status(job, fields)

    async def _create_pods(
        self, job: Json, active: list[Json], completed: set[int], count: int
    ) -> list[Json]:
        spec = _spec(job)
        m = job.get("metadata") or {}
        name, ns = str(m.get("name")), str(m.get("namespace"))
        template: Json = spec.get("template") or {}
        labels = {
            "batch.kubernetes.io/controller-uid": str(m.get("uid")),
            "batch.kubernetes.io/job-name": name,
            "controller-uid": str(m.get("uid")),
            "job-name": name,
        }
        indexes: list[int | None] = [None] * count
        if spec.get("completionMode") == "Indexed":
            running = {pod_index(p) for p in active}
            free = [
                i
                for i in range(int(spec.get("completions") or 0))
                if i not in completed and i not in running
            ]
            indexes = list(free[:count])
        made: list[Json] = []
        for index in indexes:
            extra_labels = dict(labels)
            extra_annotations: dict[str, str] = {}
            generate = f"{name}-"
            if index is not None:
                extra_labels[INDEX_KEY] = str(index)
                extra_annotations[INDEX_KEY] = str(index)
                generate = f"{name}-{index}-"
            pod = pod_from_template(
                template,
                generate_name=generate,
                namespace=ns,
                owner_ref=controller_ref(job, "Job", "batch/v1"),
                extra_labels=extra_labels,
                extra_annotations=extra_annotations,
                finalizers=[TRACKING_FINALIZER],
            )
            if index is not None:
                pspec: dict[str, Any] = pod["spec"]
                pspec.setdefault("hostname", f"{name}-{index}")
                for container in pspec.get("containers") or []:
                    env = container.setdefault("env", [])
                    env.append({"name": "JOB_COMPLETION_INDEX", "value": str(index)})
            created = await self.client.create(PODS, pod, namespace=ns)
            self.pods.remember(created)
            made.append(created)
            await self.recorder.record(
                job, "SuccessfulCreate", f"Created pod: {created['metadata']['name']}"
            )
        return made

    async def _delete_pods(self, pods: list[Json], job: Json) -> None:
        for pod in pods:
            m = pod.get("metadata") or {}
            try:
                await self.client.delete(
                    PODS, str(m.get("name")), namespace=m.get("namespace"), uid=str(m.get("uid"))
                )
            except ApiError as exc:
                if exc.code != 404:
                    raise
            await self.recorder.record(job, "SuccessfulDelete", f"Deleted pod: {m.get('name')}")


__all__ = ["JobController", "format_indexes", "is_finished", "parse_indexes"]
