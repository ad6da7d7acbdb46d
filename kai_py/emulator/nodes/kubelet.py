"""The kubelet of one simulated node: admits, starts, runs, stops and removes pods.

What it does, and why it matters to a scheduler under test:

- Admission: a pod bound to the node is checked against allocatable minus
  the pods already admitted, exactly as a real kubelet re-checks what the
  scheduler decided. A pod that does not fit fails with ``OutOf<resource>``;
  a scheduler that double-books a node sees that, as it would for real.
- Devices: the node's ``DevicePlugin`` picks the cards (lowest free
  indices); the kubelet records them in the pod's annotation
  ``kai-py.dev/visible-devices`` (what NVIDIA_VISIBLE_DEVICES holds) and in
  ``status.containerStatuses[].allocatedResourcesStatus``, both in the
  pods/status write that reports the pod Running.
- The reservation program: a pod in ``kai-resource-reservation`` with a
  card reports its UUID in ``run.ai/reserve_for_gpu_index`` after it starts.
- Shared pods read NVIDIA_VISIBLE_DEVICES from a ConfigMap (the binder
  writes it); the kubelet resolves ``env``/``envFrom`` ConfigMap references
  and, like a real one, holds the container in CreateContainerConfigError
  while the ConfigMap is missing.
- Lifetimes: ``kai-py.dev/run-seconds`` ends the containers after N seconds
  (exit code ``kai-py.dev/exit-code``, default 0) and the restartPolicy
  decides whether they restart or the pod Succeeds/Fails;
  ``kai-py.dev/ready-seconds`` keeps them not Ready for N seconds after they start.
- Deletion: a pod with deletionTimestamp is stopped (after
  ``kai-py.dev/termination-seconds``, at most its grace period), its cards
  are freed, and the deletion is confirmed with a grace-0 delete.

State lives in the API objects; the in-memory records are rebuilt from them
on start (``restore``), so a restarted emulator never gives a card twice.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from kai_py.api import keys
from kai_py.emulator import annotations as ann
from kai_py.emulator.clientgo.client import (
    PODS,
    ClusterClient,
    Json,
    Kind,
    obj_key,
)
from kai_py.emulator.clientgo.events import EventRecorder
from kai_py.emulator.cluster_spec import NodeGroup, node_allocatable, node_subnet
from kai_py.emulator.nodes.devices import DeviceAllocationError, DevicePlugin
from kai_py.emulator.nodes.pod_status import (
    backoff_status,
    rejected_status,
    running_status,
    terminated_status,
)
from kai_py.emulator.nodes.resources import (
    NODE_AFFINITY_REJECTION,
    Rejection,
    Resources,
    check_fit,
    container_gpu_requests,
    node_selector_matches,
    parse_resource_map,
    pod_requests,
    sum_requests,
)
from kai_py.emulator.storage.errors import ApiError
from kai_py.emulator.timesource import Clock, parse_rfc3339, rfc3339

log = logging.getLogger(__name__)

CONFIGMAPS = Kind("", "v1", "configmaps")
TERMINAL = ("Succeeded", "Failed")
# What a container killed by SIGTERM exits with (128 + 15).
SIGTERM_EXIT = 143
CONFIG_RETRY_SECONDS = 1.0
# The kubelet's container restart backoff: 10 s doubling, at most 5 min.
CRASH_LOOP_BASE_SECONDS = 10.0
CRASH_LOOP_MAX_SECONDS = 300.0


def crash_loop_delay(restart: int) -> float:
    """Wait before restart number ``restart`` (1-based): the first is immediate."""
    if restart <= 1:
        return 0.0
    return min(CRASH_LOOP_MAX_SECONDS, CRASH_LOOP_BASE_SECONDS * 2.0 ** (restart - 2))


@dataclass
class PodRecord:
    """What the kubelet knows of one pod it admitted."""

    uid: str
    key: str
    requests: Resources
    # starting: admitted, not yet reported Running; running; stopping: deleted,
    # containers still shutting down; done: containers exited, nothing held.
    state: str
    devices: dict[str, list[str]] = field(default_factory=dict)
    pod_ip: str = ""
    started: float = 0.0  # when the current containers started (epoch seconds)
    start_time: str = ""  # status.startTime
    restarts: dict[str, int] = field(default_factory=dict)
    stop_at: float | None = None
    restart_at: float | None = None  # in CrashLoopBackOff until then
    ready: bool = True  # False while a readiness delay (``kai-py.dev/ready-seconds``) runs
    timer: asyncio.Task[None] | None = None

    def holds_resources(self) -> bool:
        return self.state in ("starting", "running", "stopping")

    def visible_devices(self) -> str:
        return ",".join(uuid for uuids in self.devices.values() for uuid in uuids)


def _meta(pod: Json) -> Json:
    value = pod.get("metadata")
    return value if isinstance(value, dict) else {}


def _annotations(pod: Json) -> dict[str, str]:
    value = _meta(pod).get("annotations")
    return value if isinstance(value, dict) else {}


def _float_annotation(pod: Json, name: str) -> float | None:
    raw = _annotations(pod).get(name)
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        return None
    return value if value >= 0 else None


class Kubelet:
    def __init__(
        self,
        name: str,
        group: NodeGroup,
        index: int,
        client: ClusterClient,
        clock: Clock,
        get_pod: Callable[[str], Json | None],
        wake: Callable[[str], None],
        remember: Callable[[Json], None],
        *,
        host_ip: str,
        events: bool = True,
    ) -> None:
        self.name = name
        self.group = group
        self.index = index
        self.client = client
        self.clock = clock
        self._get_pod = get_pod
        self._wake = wake
        self._remember = remember
        self.host_ip = host_ip
        self.plugin = DevicePlugin(name, group.gpus, keys.GPU_RESOURCE)
        self.allocatable = parse_resource_map(node_allocatable(group))
        self.labels: dict[str, str] = {}
        self.records: dict[str, PodRecord] = {}
        #: A wedged node: it stays Ready but admits no new pod (they stay Pending with no
        #: status), as when the container runtime hangs. Pods it runs carry on.
        self.starts_nothing = False
        self.recorder = EventRecorder(client, clock, "kubelet", host=name, enabled=events)

    # ---- accounting ------------------------------------------------------------------------

    def used(self) -> tuple[Resources, int]:
        active = [r for r in self.records.values() if r.holds_resources()]
        return sum_requests(r.requests for r in active), len(active)

    def _pod_ip(self) -> str:
        taken = {r.pod_ip for r in self.records.values() if r.holds_resources()}
        subnet = node_subnet(self.index)
        for host in range(2, 255):
            ip = f"{subnet}.{host}"
            if ip not in taken:
                return ip
        return f"{subnet}.255"

    def _release(self, record: PodRecord) -> None:
        self.plugin.release(record.uid)
        if record.timer is not None:
            record.timer.cancel()
            record.timer = None
        if record.state != "done":
            record.state = "done"

    def drop(self, key: str) -> None:
        record = self.records.pop(key, None)
        if record is not None:
            self._release(record)

    def close(self) -> None:
        for record in self.records.values():
            if record.timer is not None:
                record.timer.cancel()
                record.timer = None

    # ---- restart ---------------------------------------------------------------------------

    def restore(self, pods: list[Json]) -> list[str]:
        """Take back the pods this node was running before a restart.

        Must run before any new pod is admitted, so that the cards and the
        room held by running pods are not given away. Returns the keys of
        pods whose recorded cards could not be restored (they will fail).
        """
        broken: list[str] = []
        ordered = sorted(pods, key=lambda p: str(_meta(p).get("creationTimestamp", "")))
        for pod in ordered:
            phase = (pod.get("status") or {}).get("phase")
            recorded = _annotations(pod).get(ann.VISIBLE_DEVICES)
            if phase in TERMINAL or (phase != "Running" and recorded is None):
                continue
            record = self._new_record(pod, "running" if phase == "Running" else "starting")
            status = pod.get("status") or {}
            record.pod_ip = str(status.get("podIP") or record.pod_ip)
            record.start_time = str(status.get("startTime") or "")
            for cs in status.get("containerStatuses") or []:
                record.restarts[str(cs.get("name"))] = int(cs.get("restartCount") or 0)
                started = ((cs.get("state") or {}).get("running") or {}).get("startedAt")
                if started:
                    record.started = max(record.started, parse_rfc3339(str(started)) or 0.0)
            if recorded:
                uuids = [u for u in recorded.split(",") if u]
                by_container: dict[str, list[str]] = {}
                for name, count in container_gpu_requests(pod, keys.GPU_RESOURCE):
                    by_container[name], uuids = uuids[:count], uuids[count:]
                conflicts = [
                    c
                    for name, mine in by_container.items()
                    for c in self.plugin.restore(record.uid, name, mine)
                ]
                record.devices = by_container
                if conflicts:
                    log.error("%s: cards %s of %s are held twice", self.name, conflicts, record.key)
                    broken.append(record.key)
                    record.state = "broken"
            self.records[record.key] = record
        return broken

    def _new_record(self, pod: Json, state: str) -> PodRecord:
        return PodRecord(
            uid=str(_meta(pod).get("uid", "")),
            key=obj_key(pod),
            requests=pod_requests(pod),
            state=state,
            pod_ip=self._pod_ip(),
        )

    # ---- the reconcile ---------------------------------------------------------------------

    async def reconcile(self, key: str) -> None:
        pod = self._get_pod(key)
        record = self.records.get(key)
        if record is not None and (pod is None or _meta(pod).get("uid") != record.uid):
            self.drop(key)  # the pod we ran is gone (or replaced by a namesake)
            record = None
        if pod is None or (pod.get("spec") or {}).get("nodeName") != self.name:
            return
        phase = (pod.get("status") or {}).get("phase")
        if _meta(pod).get("deletionTimestamp"):
            await self._stop_deleted(pod, record)
            return
        if record is not None and record.state == "broken":
            await self._fail(
                pod,
                record,
                Rejection(
                    "UnexpectedAdmissionError",
                    "Pod was "
                    "rejected: Allocate failed: devices recorded for this pod are held "
                    "by another pod",
                ),
            )
            return
        if phase in TERMINAL:
            if record is not None:
                self._release(record)
            return
        if record is None:
            if self.starts_nothing:
                return
            record = await self._admit(pod)
            if record is None:
                return
        if record.state == "starting":
            await self._start(pod, record)
        elif record.state == "running":
            await self._keep_running(pod, record)

    async def _admit(self, pod: Json) -> PodRecord | None:
        requests = pod_requests(pod)
        used, count = self.used()
        if not node_selector_matches(pod, self.labels or self.group.labels):
            rejection: Rejection | None = NODE_AFFINITY_REJECTION
        else:
            rejection = check_fit(requests, used, self.allocatable, count)
        record = self._new_record(pod, "starting")
        if rejection is None:
            try:
                for name, devices in container_gpu_requests(pod, keys.GPU_RESOURCE):
                    record.devices[name] = self.plugin.allocate(record.uid, name, devices)
            except DeviceAllocationError as exc:
                self.plugin.release(record.uid)
                rejection = Rejection("UnexpectedAdmissionError", f"Pod was rejected: {exc}")
        if rejection is not None:
            await self._reject(pod, rejection)
            return None
        self.records[record.key] = record
        return record

    async def _reject(self, pod: Json, rejection: Rejection) -> None:
        now = rfc3339(self.clock.time())
        status = rejected_status(pod, rejection, now)
        # Clear what the scheduler or an earlier attempt left, keep PodScheduled.
        patch: Json = {"status": {**status, "containerStatuses": None}}
        await self._patch_status(pod, patch)
        await self.recorder.record(
            pod,
            rejection.reason,
            rejection.message.removeprefix("Pod was rejected: "),
            type="Warning",
        )

    async def _fail(self, pod: Json, record: PodRecord, rejection: Rejection) -> None:
        await self._reject(pod, rejection)
        self._release(record)

    async def _patch_status(self, pod: Json, patch: Json) -> Json:
        m = _meta(pod)
        updated = await self.client.patch(
            PODS, str(m.get("name")), patch, namespace=m.get("namespace"), subresource="status"
        )
        self._remember(updated)
        return updated

    async def _patch_meta(self, pod: Json, annotations: dict[str, str]) -> Json:
        m = _meta(pod)
        updated = await self.client.patch(
            PODS,
            str(m.get("name")),
            {"metadata": {"annotations": annotations}},
            namespace=m.get("namespace"),
        )
        self._remember(updated)
        return updated

    async def _resolve_env(self, pod: Json) -> tuple[dict[str, dict[str, str]], str | None]:
        """Each container's environment from ConfigMaps; or the error that stops it.

        Only what the emulator needs: literal values, configMapKeyRef and
        envFrom configMapRef. Secrets and fieldRefs are not looked up.
        """
        spec = pod.get("spec") or {}
        namespace = _meta(pod).get("namespace")
        cache: dict[str, Json | None] = {}

        async def config_map(name: str) -> Json | None:
            if name not in cache:
                try:
                    cache[name] = await self.client.get(CONFIGMAPS, name, namespace)
                except ApiError as exc:
                    if exc.code != 404:
                        raise
                    cache[name] = None
            return cache[name]

        out: dict[str, dict[str, str]] = {}
        for container in spec.get("containers") or []:
            env: dict[str, str] = {}
            for source in container.get("envFrom") or []:
                ref = source.get("configMapRef")
                if not ref:
                    continue
                cm = await config_map(str(ref.get("name")))
                if cm is None:
                    if ref.get("optional"):
                        continue
                    return out, f'configmap "{ref.get("name")}" not found'
                prefix = str(source.get("prefix") or "")
                for k, v in (cm.get("data") or {}).items():
                    env[prefix + k] = str(v)
            for var in container.get("env") or []:
                name = str(var.get("name"))
                if "value" in var:
                    env[name] = str(var.get("value") or "")
                    continue
                ref = (var.get("valueFrom") or {}).get("configMapKeyRef")
                if not ref:
                    continue
                cm = await config_map(str(ref.get("name")))
                data = (cm or {}).get("data") or {}
                if cm is None or ref.get("key") not in data:
                    if ref.get("optional"):
                        continue
                    if cm is None:
                        return out, f'configmap "{ref.get("name")}" not found'
                    return out, (
                        f"couldn't find key {ref.get('key')} in ConfigMap "
                        f"{namespace}/{ref.get('name')}"
                    )
                env[name] = str(data[ref.get("key")])
            out[str(container.get("name"))] = env
        return out, None

    async def _start(self, pod: Json, record: PodRecord) -> None:
        env, error = await self._resolve_env(pod)
        if error is not None:
            await self._hold_config_error(pod, record, error)
            return
        visible = record.visible_devices()
        if not visible:
            # A shared pod: it sees the card the binder put in its ConfigMap.
            visible = ",".join(
                v for v in (e.get("NVIDIA_VISIBLE_DEVICES") for e in env.values()) if v
            )
        now = self.clock.time()
        if not record.start_time:
            record.start_time = rfc3339(now)
        record.started = now
        record.ready = not (_float_annotation(pod, ann.READY_SECONDS) or 0.0) > 0
        status = self._running_status(pod, record, now, ready=record.ready)
        patch: Json = {"status": {**status, "reason": None, "message": None}}
        if visible and _annotations(pod).get(ann.VISIBLE_DEVICES) != visible:
            # In the same pods/status write (which takes metadata too, as on a real
            # API server): the cards show no later than Running, for one pod event.
            patch["metadata"] = {"annotations": {ann.VISIBLE_DEVICES: visible}}
        pod = await self._patch_status(pod, patch)
        record.state = "running"
        for container in (pod.get("spec") or {}).get("containers") or []:
            cname = str(container.get("name"))
            path = f"spec.containers{{{cname}}}"
            image = container.get("image", "")
            await self.recorder.record(
                pod,
                "Pulled",
                f'Container image "{image}" already present on machine',
                field_path=path,
            )
            await self.recorder.record(
                pod, "Created", f"Created container: {cname}", field_path=path
            )
            await self.recorder.record(
                pod, "Started", f"Started container {cname}", field_path=path
            )
        await self._keep_running(pod, record)

    async def _hold_config_error(self, pod: Json, record: PodRecord, error: str) -> None:
        """A missing ConfigMap: the pod stays Pending and the kubelet keeps trying."""
        statuses = [
            {
                "name": str(c.get("name")),
                "image": str(c.get("image", "")),
                "imageID": "",
                "ready": False,
                "started": False,
                "restartCount": 0,
                "lastState": {},
                "state": {"waiting": {"reason": "CreateContainerConfigError", "message": error}},
            }
            for c in (pod.get("spec") or {}).get("containers") or []
        ]
        current = (pod.get("status") or {}).get("containerStatuses") or []
        if current != statuses:
            await self._patch_status(
                pod,
                {
                    "status": {
                        "phase": "Pending",
                        "hostIP": self.host_ip,
                        "podIP": record.pod_ip,
                        "startTime": record.start_time or rfc3339(self.clock.time()),
                        "containerStatuses": statuses,
                    }
                },
            )
            await self.recorder.record(pod, "Failed", f"Error: {error}", type="Warning")
        self._set_timer(record, CONFIG_RETRY_SECONDS)

    async def _keep_running(self, pod: Json, record: PodRecord) -> None:
        if (
            _meta(pod).get("namespace") == keys.RESERVATION_NAMESPACE
            and record.devices
            and _annotations(pod).get(keys.RESERVED_GPU_INDEX_ANNOTATION)
            != record.visible_devices().split(",")[0]
        ):
            # The reservation program reads the card it was given and reports it.
            await self._patch_meta(
                pod, {keys.RESERVED_GPU_INDEX_ANNOTATION: record.visible_devices().split(",")[0]}
            )
        now = self.clock.time()
        waits: list[float] = []
        deadline = (pod.get("spec") or {}).get("activeDeadlineSeconds")
        started = parse_rfc3339(record.start_time) if record.start_time else None
        if deadline is not None and started is not None:
            left = started + float(deadline) - now
            if left <= 0:
                await self._deadline_exceeded(pod, record)
                return
            waits.append(left)
        if record.restart_at is not None:
            if now >= record.restart_at:
                await self._restart_containers(pod, record)
            else:
                self._set_timer(record, min([record.restart_at - now, *waits]))
            return
        run_for = _float_annotation(pod, ann.RUN_SECONDS)
        if run_for is not None:
            left = record.started + run_for - now
            if left <= 0:
                await self._containers_exited(pod, record)
                return
            waits.append(left)
        if not record.ready:
            left = record.started + (_float_annotation(pod, ann.READY_SECONDS) or 0.0) - now
            if left <= 0:
                record.ready = True
                pod = await self._patch_status(
                    pod, {"status": self._running_status(pod, record, now)}
                )
            else:
                waits.append(left)
        if waits:
            self._set_timer(record, min(waits))

    def _running_status(self, pod: Json, record: PodRecord, now: float, ready: bool = True) -> Json:
        """The pod's running status from what this kubelet keeps of it."""
        return running_status(
            pod,
            host_ip=self.host_ip,
            pod_ip=record.pod_ip,
            start_time=record.start_time,
            now=rfc3339(now),
            devices=record.devices,
            restart_counts=record.restarts,
            ready=ready,
        )

    async def _restart_containers(self, pod: Json, record: PodRecord) -> None:
        now = self.clock.time()
        for container in (pod.get("spec") or {}).get("containers") or []:
            name = str(container.get("name"))
            record.restarts[name] = record.restarts.get(name, 0) + 1
        record.started = now
        record.restart_at = None
        status = self._running_status(pod, record, now)
        await self._patch_status(pod, {"status": status})
        run_for = _float_annotation(pod, ann.RUN_SECONDS)
        if run_for is not None:
            self._set_timer(record, run_for)

    async def _deadline_exceeded(self, pod: Json, record: PodRecord) -> None:
        """spec.activeDeadlineSeconds passed: the kubelet kills the pod and fails it."""
        message = "Pod was active on the node longer than the specified deadline"
        status = terminated_status(
            pod,
            pod.get("status") or {},
            exit_code=SIGTERM_EXIT,
            reason="Error",
            now=rfc3339(self.clock.time()),
            phase="Failed",
        )
        status.update({"reason": "DeadlineExceeded", "message": message})
        await self._patch_status(pod, {"status": status})
        self._release(record)
        await self.recorder.record(pod, "DeadlineExceeded", message, type="Warning")

    async def _containers_exited(self, pod: Json, record: PodRecord) -> None:
        exit_code = int(_float_annotation(pod, ann.EXIT_CODE) or 0)
        policy = (pod.get("spec") or {}).get("restartPolicy") or "Always"
        restart = policy == "Always" or (policy == "OnFailure" and exit_code != 0)
        now = self.clock.time()
        if restart:
            restarts = 1 + max(record.restarts.values(), default=0)
            delay = crash_loop_delay(restarts)
            if delay <= 0:
                await self._restart_containers(pod, record)
                return
            # CrashLoopBackOff: the containers wait before they start again.
            record.restart_at = now + delay
            status = backoff_status(
                pod, pod.get("status") or {}, exit_code=exit_code, delay=delay, now=rfc3339(now)
            )
            await self._patch_status(pod, {"status": status})
            self._set_timer(record, delay)
            return
        reason = "Completed" if exit_code == 0 else "Error"
        status = terminated_status(
            pod, pod.get("status") or {}, exit_code=exit_code, reason=reason, now=rfc3339(now)
        )
        await self._patch_status(pod, {"status": status})
        self._release(record)

    async def _stop_deleted(self, pod: Json, record: PodRecord | None) -> None:
        if record is not None and record.holds_resources():
            if record.stop_at is None:
                delay = _float_annotation(pod, ann.TERMINATION_SECONDS) or 0.0
                grace = float(_meta(pod).get("deletionGracePeriodSeconds") or 0)
                record.stop_at = self.clock.time() + min(delay, grace)
                record.state = "stopping" if record.state == "running" else record.state
                for container in (pod.get("spec") or {}).get("containers") or []:
                    cname = str(container.get("name"))
                    await self.recorder.record(
                        pod,
                        "Killing",
                        f"Stopping container {cname}",
                        field_path=f"spec.containers{{{cname}}}",
                    )
            left = record.stop_at - self.clock.time()
            if left > 0:
                self._set_timer(record, left)
                return
            phase = (pod.get("status") or {}).get("phase")
            if phase not in TERMINAL and (pod.get("status") or {}).get("containerStatuses"):
                status = terminated_status(
                    pod,
                    pod.get("status") or {},
                    exit_code=SIGTERM_EXIT,
                    reason="Error",
                    now=rfc3339(self.clock.time()),
                )
                pod = await self._patch_status(pod, {"status": status})
            self._release(record)
        m = _meta(pod)
        try:
            await self.client.delete(
                PODS,
                str(m.get("name")),
                namespace=m.get("namespace"),
                grace_period_seconds=0,
                uid=str(m.get("uid")),
            )
        except ApiError as exc:
            if exc.code not in (404, 409):  # gone already, or a namesake: nothing to confirm
                raise

    def _set_timer(self, record: PodRecord, seconds: float) -> None:
        if record.timer is not None and not record.timer.done():
            record.timer.cancel()
        key = record.key

        async def fire() -> None:
            await self.clock.sleep(seconds)
            self._wake(key)

        record.timer = asyncio.get_running_loop().create_task(fire())
