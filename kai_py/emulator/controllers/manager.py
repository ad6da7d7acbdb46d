"""kube-controller-manager, in small: shared informers and the built-in controllers."""

from __future__ import annotations

import asyncio

from kai_py.emulator.clientgo.client import (
    CRONJOBS,
    DEPLOYMENTS,
    JOBS,
    NODES,
    PODS,
    PVCS,
    PVS,
    REPLICASETS,
    STATEFULSETS,
    STORAGECLASSES,
    ClusterClient,
)
from kai_py.emulator.clientgo.runtime import Informer, WorkQueue
from kai_py.emulator.controllers.cronjob import CronJobController
from kai_py.emulator.controllers.default_scheduler import DefaultScheduler
from kai_py.emulator.controllers.deployment import DeploymentController
from kai_py.emulator.controllers.job import DEFAULT_FAILURE_BACKOFF, JobController
from kai_py.emulator.controllers.replicaset import ReplicaSetController
from kai_py.emulator.controllers.statefulset import StatefulSetController
from kai_py.emulator.controllers.volumes import PersistentVolumeBinder
from kai_py.emulator.timesource import Clock


class ControllerManager:
    """Runs the Job, CronJob, ReplicaSet, Deployment, StatefulSet, PersistentVolume binder
    controllers and the default scheduler."""

    def __init__(
        self,
        client: ClusterClient,
        clock: Clock,
        *,
        default_scheduler: bool = True,
        job_failure_backoff: float = DEFAULT_FAILURE_BACKOFF,
        events: bool = True,
    ) -> None:
        self.pods = Informer(client, PODS)
        self.nodes = Informer(client, NODES)
        self.jobs = Informer(client, JOBS)
        self.cronjobs = Informer(client, CRONJOBS)
        self.replicasets = Informer(client, REPLICASETS)
        self.deployments = Informer(client, DEPLOYMENTS)
        self.statefulsets = Informer(client, STATEFULSETS)
        self.volumes = Informer(client, PVS)
        self.claims = Informer(client, PVCS)
        self.storageclasses = Informer(client, STORAGECLASSES)
        self.job = JobController(
            client,
            self.jobs,
            self.pods,
            clock,
            failure_backoff=job_failure_backoff,
            events=events,
        )
        self.cronjob = CronJobController(client, self.cronjobs, self.jobs, clock, events=events)
        self.replicaset = ReplicaSetController(
            client, self.replicasets, self.pods, clock, events=events
        )
        self.deployment = DeploymentController(
            client, self.deployments, self.replicasets, clock, events=events
        )
        self.statefulset = StatefulSetController(
            client, self.statefulsets, self.pods, clock, events=events
        )
        self.pvbinder = PersistentVolumeBinder(
            client,
            self.volumes,
            self.claims,
            self.storageclasses,
            self.nodes,
            clock,
            events=events,
        )
        self.scheduler = (
            DefaultScheduler(client, self.pods, self.nodes, clock, events=events)
            if default_scheduler
            else None
        )
        self.ready = asyncio.Event()

    @property
    def informers(self) -> list[Informer]:
        return [
            self.pods,
            self.nodes,
            self.jobs,
            self.cronjobs,
            self.replicasets,
            self.deployments,
            self.statefulsets,
            self.volumes,
            self.claims,
            self.storageclasses,
        ]

    @property
    def queues(self) -> list[WorkQueue]:
        queues = [
            self.job.queue,
            self.cronjob.queue,
            self.replicaset.queue,
            self.deployment.queue,
            self.statefulset.queue,
            *self.pvbinder.queues,
        ]
        if self.scheduler is not None:
            queues.append(self.scheduler.queue)
        return queues

    def idle(self) -> bool:
        return all(q.idle() for q in self.queues)

    async def run(self) -> None:
        async with asyncio.TaskGroup() as group:
            for informer in self.informers:
                group.create_task(informer.run())
            # Workers start once every cache is full: a controller that acts on a
            # half-filled cache would create pods that already exist.
            for informer in self.informers:
                await informer.synced.wait()
            for queue in self.queues:
                group.create_task(queue.run())
            self.ready.set()
