"""The CronJob controller in process, on a fake clock: runs, policies, deadlines, history.

The store stamps objects with the wall clock, so the fake clock starts at
the wall clock's time and the tests only move it forward.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from kai_py.emulator import annotations as ann
from kai_py.emulator.cluster_spec import parse_cluster
from kai_py.emulator.controllers.cronjob import SCHEDULED_AT
from kai_py.emulator.dev_cluster import DevCluster
from kai_py.emulator.storage.errors import ApiError
from kai_py.emulator.timesource import ManualClock, parse_rfc3339

Json = dict[str, Any]
SPEC = parse_cluster({"nodes": [{"name": "cpu", "count": 1, "cpu": "64", "memory": "64Gi"}]})


def run(test: Callable[[DevCluster, ManualClock], Awaitable[None]]) -> None:
    async def main() -> None:
        clock = ManualClock(start=time.time())
        async with DevCluster(SPEC, clock=clock, events=False, job_failure_backoff=0.0) as cluster:
            await test(cluster, clock)

    asyncio.run(asyncio.wait_for(main(), 60))


def cronjob(name: str, schedule: str = "* * * * *", seconds: str = "1", **spec: Any) -> Json:
    template = {
        "metadata": {"annotations": {ann.RUN_SECONDS: seconds}, "labels": {"app": name}},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "busybox:1.36"}],
        },
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "schedule": schedule,
            "jobTemplate": {
                "metadata": {"labels": {"team": "a"}, "annotations": {"note": "x"}},
                "spec": {"backoffLimit": 0, "template": template},
            },
            **spec,
        },
    }


async def jobs_of(cluster: DevCluster, name: str) -> list[Json]:
    jobs, _ = await cluster.store.list("jobs", "default")
    return sorted(
        (
            j
            for j in jobs
            if any(r["name"] == name for r in j["metadata"].get("ownerReferences") or [])
            and not j["metadata"].get("deletionTimestamp")
        ),
        key=lambda j: str(j["metadata"]["name"]),
    )


async def advance(clock: ManualClock, seconds: float, step: float = 5.0) -> None:
    """Move the fake clock on in steps, letting the controllers act at each."""
    moved = 0.0
    while moved < seconds:
        clock.advance(min(step, seconds - moved))
        moved += step
        await asyncio.sleep(0.02)


async def until(clock: ManualClock, check: Callable[[], Awaitable[Any]], limit: float = 200) -> Any:
    moved = 0.0
    while True:
        result = await check()
        if result:
            return result
        if moved > limit:
            raise TimeoutError("condition not met")
        clock.advance(5)
        moved += 5
        await asyncio.sleep(0.02)


def finished(job: Json, kind: str = "Complete") -> bool:
    return any(
        c["type"] == kind and c["status"] == "True"
        for c in (job.get("status") or {}).get("conditions") or []
    )


def test_a_cronjob_makes_a_job_at_each_scheduled_time() -> None:
    async def check(cluster: DevCluster, clock: ManualClock) -> None:
        made = await cluster.store.create("cronjobs", cronjob("tick"))
        assert made["spec"]["concurrencyPolicy"] == "Allow"

        async def one() -> list[Json]:
            return await jobs_of(cluster, "tick")

        (job,) = await until(clock, one, limit=70)
        m = job["metadata"]
        scheduled = parse_rfc3339(m["annotations"][SCHEDULED_AT])
        assert scheduled is not None and scheduled % 60 == 0
        assert scheduled <= clock.time() < scheduled + 10
        assert m["name"] == f"tick-{int(scheduled) // 60}"
        assert m["labels"]["team"] == "a" and m["annotations"]["note"] == "x"
        (owner,) = m["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["uid"]) == (
            "CronJob",
            "tick",
            made["metadata"]["uid"],
        )
        assert owner["controller"] and owner["blockOwnerDeletion"]
        cj = await cluster.store.get("cronjobs", "default", "tick")
        assert [a["name"] for a in cj["status"]["active"]] == [m["name"]]
        assert cj["status"]["lastScheduleTime"] == m["annotations"][SCHEDULED_AT]
        pods, _ = await cluster.store.list("pods", "default", label_selector="app=tick")
        assert len(pods) == 1

        async def succeeded() -> Json | None:
            got = await cluster.store.get("cronjobs", "default", "tick")
            status = got.get("status") or {}
            return got if status.get("lastSuccessfulTime") and not status.get("active") else None

        await until(clock, succeeded, limit=50)

        # The next minute makes the next run.
        async def two() -> bool:
            return len(await jobs_of(cluster, "tick")) == 2

        await until(clock, two, limit=70)

    run(check)


@pytest.mark.parametrize("policy", ["Allow", "Forbid", "Replace"])
def test_concurrency_policy(policy: str) -> None:
    async def check(cluster: DevCluster, clock: ManualClock) -> None:
        await cluster.store.create(
            "cronjobs", cronjob("long", seconds="100000", concurrencyPolicy=policy)
        )

        async def first() -> list[Json]:
            return await jobs_of(cluster, "long")

        (job,) = await until(clock, first, limit=70)
        await advance(clock, 20)
        before = await cluster.store.get("cronjobs", "default", "long")
        await advance(clock, 160)
        jobs = await jobs_of(cluster, "long")
        cj = await cluster.store.get("cronjobs", "default", "long")
        active = [a["name"] for a in cj["status"]["active"]]
        if policy == "Allow":
            assert len(jobs) == 4 and active == [j["metadata"]["name"] for j in jobs]
        elif policy == "Forbid":
            assert [j["metadata"]["name"] for j in jobs] == [job["metadata"]["name"]]
            assert active == [job["metadata"]["name"]]
            # Skipped runs change nothing: no status write for each look.
            assert cj["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
        else:
            (latest,) = jobs
            assert latest["metadata"]["name"] != job["metadata"]["name"]
            assert active == [latest["metadata"]["name"]]

    run(check)


def test_suspended_then_resumed_starts_only_the_latest_missed_run() -> None:
    async def check(cluster: DevCluster, clock: ManualClock) -> None:
        await cluster.store.create("cronjobs", cronjob("sleepy", suspend=True))
        await advance(clock, 300)
        assert await jobs_of(cluster, "sleepy") == []
        await cluster.store.patch("cronjobs", "default", "sleepy", {"spec": {"suspend": False}})
        await asyncio.sleep(0.1)
        (job,) = await jobs_of(cluster, "sleepy")
        scheduled = parse_rfc3339(job["metadata"]["annotations"][SCHEDULED_AT])
        assert scheduled is not None and clock.time() - 60 < scheduled <= clock.time()

    run(check)


def test_a_starting_deadline_skips_a_run_missed_by_more_than_it() -> None:
    async def check(cluster: DevCluster, clock: ManualClock) -> None:
        await cluster.store.create(
            "cronjobs", cronjob("strict", suspend=True, startingDeadlineSeconds=10)
        )
        await advance(clock, 120)
        # Resume 30 s past a minute: that minute's run is 30 s late, past the deadline.
        clock.advance(30 - clock.time() % 60 if clock.time() % 60 < 30 else 90 - clock.time() % 60)
        await cluster.store.patch("cronjobs", "default", "strict", {"spec": {"suspend": False}})
        await asyncio.sleep(0.1)
        assert await jobs_of(cluster, "strict") == []

        async def started() -> list[Json]:
            return await jobs_of(cluster, "strict")

        (job,) = await until(clock, started, limit=40)
        scheduled = parse_rfc3339(job["metadata"]["annotations"][SCHEDULED_AT])
        assert scheduled is not None and scheduled % 60 == 0 and scheduled > clock.time() - 10

    run(check)


def test_history_limits_keep_the_newest_finished_jobs() -> None:
    async def check(cluster: DevCluster, clock: ManualClock) -> None:
        await cluster.store.create(
            "cronjobs",
            cronjob("hist", successfulJobsHistoryLimit=1, failedJobsHistoryLimit=0),
        )
        seen: set[str] = set()
        for _ in range(50):  # 250 s: four or five runs
            seen.update(j["metadata"]["name"] for j in await jobs_of(cluster, "hist"))
            await advance(clock, 5)
        assert len(seen) >= 4
        jobs = await jobs_of(cluster, "hist")
        done = [j for j in jobs if finished(j)]
        running = {j["metadata"]["name"] for j in jobs if not finished(j)}
        newest_done = max(seen - running, key=lambda n: int(n.rsplit("-", 1)[1]))
        assert [j["metadata"]["name"] for j in done] == [newest_done]
        cj = await cluster.store.get("cronjobs", "default", "hist")
        assert cj["status"]["lastSuccessfulTime"]

    run(check)


def test_an_invalid_schedule_is_refused_naming_spec_schedule() -> None:
    async def check(cluster: DevCluster, clock: ManualClock) -> None:
        with pytest.raises(ApiError) as caught:
            await cluster.store.create("cronjobs", cronjob("bad", schedule="61 * * * *"))
        assert caught.value.code == 422
        assert caught.value.message == (
            'CronJob.batch "bad" is invalid: spec.schedule: Invalid value: "61 * * * *": '
            "end of range (61) above maximum (59): 61"
        )

    run(check)
