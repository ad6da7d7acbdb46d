"""Pod status documents as a kubelet writes them.

Only the shape matters to clients (kubectl columns, Kopf handlers, the
kubernetes client's models), so each builder returns a whole ``status``
that replaces the previous one, the way the kubelet's status manager does.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from kai_py.api import keys
from kai_py.emulator.nodes.resources import Rejection


def _container_id(pod_uid: str, name: str, restart: int) -> str:
    digest = hashlib.sha256(f"{pod_uid}/{name}/{restart}".encode()).hexdigest()
    return f"containerd://{digest}"


def _image_id(image: str) -> str:
    digest = hashlib.sha256(image.encode()).hexdigest()
    ref = image.split("@", 1)[0]
    last = ref.rsplit("/", 1)[-1]
    if ":" in last:
        ref = ref[: len(ref) - len(last)] + last.split(":", 1)[0]
    if "/" not in ref:
        ref = f"docker.io/library/{ref}"
    return f"{ref}@sha256:{digest}"


def _condition(kind: str, status: bool, now: str, **extra: str) -> dict[str, Any]:
    condition: dict[str, Any] = {
        "type": kind,
        "status": "True" if status else "False",
        "lastProbeTime": None,
        "lastTransitionTime": now,
    }
    condition.update(extra)
    return condition


def _gpu_resource_status(uuids: Sequence[str]) -> list[dict[str, Any]]:
    # KEP-4680's allocatedResourcesStatus: the kubelet's own record of which
    # device IDs a container got. The real field; kubectl shows it with -o yaml.
    return [
        {
            "name": keys.GPU_RESOURCE,
            "resources": [{"resourceID": uuid, "health": "Healthy"} for uuid in uuids],
        }
    ]


def _base_container_status(
    pod_uid: str, container: Mapping[str, Any], restart_count: int, devices: Sequence[str]
) -> dict[str, Any]:
    name = str(container.get("name", ""))
    image = str(container.get("image", ""))
    status: dict[str, Any] = {
        "name": name,
        "image": image,
        "imageID": _image_id(image),
        "containerID": _container_id(pod_uid, name, restart_count),
        "restartCount": restart_count,
        "lastState": {},
    }
    if devices:
        status["allocatedResourcesStatus"] = _gpu_resource_status(devices)
    return status


def running_status(
    pod: Mapping[str, Any],
    *,
    host_ip: str,
    pod_ip: str,
    start_time: str,
    now: str,
    devices: Mapping[str, Sequence[str]],
    restart_counts: Mapping[str, int] | None = None,
    ready: bool = True,
) -> dict[str, Any]:
    """Every container started, and ready unless ``ready`` is False (a readiness delay;
    there are no probes to fail)."""
    spec = pod.get("spec") or {}
    uid = str((pod.get("metadata") or {}).get("uid", ""))
    restarts = restart_counts or {}
    statuses = []
    for container in spec.get("containers") or []:
        name = str(container.get("name", ""))
        count = restarts.get(name, 0)
        one = _base_container_status(uid, container, count, devices.get(name, ()))
        started_at = now if count else start_time
        one.update(
            {"ready": ready, "started": True, "state": {"running": {"startedAt": started_at}}}
        )
        if count:
            one["lastState"] = {
                "terminated": {
                    "exitCode": 0,
                    "reason": "Completed",
                    "startedAt": start_time,
                    "finishedAt": now,
                    "containerID": _container_id(uid, name, count - 1),
                }
            }
        statuses.append(one)
    init_statuses = [
        {
            **_base_container_status(uid, container, 0, ()),
            "ready": True,
            "started": False,
            "state": {
                "terminated": {
                    "exitCode": 0,
                    "reason": "Completed",
                    "startedAt": start_time,
                    "finishedAt": start_time,
                }
            },
        }
        for container in spec.get("initContainers") or []
    ]
    status: dict[str, Any] = {
        "phase": "Running",
        "conditions": [
            _condition("PodReadyToStartContainers", True, start_time),
            _condition("Initialized", True, start_time),
            _condition("Ready", ready, now),
            _condition("ContainersReady", ready, now),
            _condition("PodScheduled", True, start_time),
        ],
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
        "podIP": pod_ip,
        "podIPs": [{"ip": pod_ip}],
        "startTime": start_time,
        "qosClass": qos_class(pod),
        "containerStatuses": statuses,
    }
    if init_statuses:
        status["initContainerStatuses"] = init_statuses
    return status


def terminated_status(
    pod: Mapping[str, Any],
    previous: Mapping[str, Any],
    *,
    exit_code: int,
    reason: str,
    now: str,
    phase: str | None = None,
) -> dict[str, Any]:
    """Every container exited with ``exit_code``; phase Succeeded or Failed."""
    spec = pod.get("spec") or {}
    uid = str((pod.get("metadata") or {}).get("uid", ""))
    start_time = str(previous.get("startTime") or now)
    old = {str(s.get("name")): s for s in previous.get("containerStatuses") or []}
    statuses = []
    for container in spec.get("containers") or []:
        name = str(container.get("name", ""))
        before = old.get(name, {})
        count = int(before.get("restartCount", 0))
        status = _base_container_status(uid, container, count, ())
        if "allocatedResourcesStatus" in before:
            status["allocatedResourcesStatus"] = before["allocatedResourcesStatus"]
        started = ((before.get("state") or {}).get("running") or {}).get("startedAt", start_time)
        status.update(
            {
                "ready": False,
                "started": False,
                "state": {
                    "terminated": {
                        "exitCode": exit_code,
                        "reason": reason,
                        "startedAt": started,
                        "finishedAt": now,
                        "containerID": status["containerID"],
                    }
                },
            }
        )
        statuses.append(status)
    final_phase = phase or ("Succeeded" if exit_code == 0 else "Failed")
    status = dict(previous)
    status.update(
        {
            "phase": final_phase,
            "conditions": [
                _condition("PodReadyToStartContainers", False, now),
                _condition("Initialized", True, start_time),
                _condition("Ready", False, now, reason="PodCompleted"),
                _condition("ContainersReady", False, now, reason="PodCompleted"),
                _condition("PodScheduled", True, start_time),
            ],
            "startTime": start_time,
            "containerStatuses": statuses,
        }
    )
    return status


def backoff_status(
    pod: Mapping[str, Any],
    previous: Mapping[str, Any],
    *,
    exit_code: int,
    delay: float,
    now: str,
) -> dict[str, Any]:
    """Containers exited and wait to restart (CrashLoopBackOff); the pod stays Running."""
    meta = pod.get("metadata") or {}
    uid = str(meta.get("uid", ""))
    old = {str(s.get("name")): s for s in previous.get("containerStatuses") or []}
    statuses = []
    for container in (pod.get("spec") or {}).get("containers") or []:
        name = str(container.get("name", ""))
        before = old.get(name, {})
        count = int(before.get("restartCount", 0))
        one = _base_container_status(uid, container, count, ())
        if "allocatedResourcesStatus" in before:
            one["allocatedResourcesStatus"] = before["allocatedResourcesStatus"]
        started = ((before.get("state") or {}).get("running") or {}).get("startedAt", now)
        one.update(
            {
                "ready": False,
                "started": False,
                "state": {
                    "waiting": {
                        "reason": "CrashLoopBackOff",
                        "message": f"back-off {int(delay)}s restarting failed container={name} "
                        f"pod={meta.get('name')}_{meta.get('namespace')}({uid})",
                    }
                },
                "lastState": {
                    "terminated": {
                        "exitCode": exit_code,
                        "reason": "Completed" if exit_code == 0 else "Error",
                        "startedAt": started,
                        "finishedAt": now,
                        "containerID": one["containerID"],
                    }
                },
            }
        )
        statuses.append(one)
    status = dict(previous)
    conditions = [
        c
        for c in previous.get("conditions") or []
        if c.get("type") not in ("Ready", "ContainersReady")
    ]
    for kind in ("Ready", "ContainersReady"):
        conditions.append(_condition(kind, False, now, reason="ContainersNotReady"))
    status.update({"phase": "Running", "conditions": conditions, "containerStatuses": statuses})
    return status


def rejected_status(pod: Mapping[str, Any], rejection: Rejection, now: str) -> dict[str, Any]:
    """What kubelet admission writes for a pod it will not run."""
    return {
        "phase": "Failed",
        "reason": rejection.reason,
        "message": rejection.message,
        "startTime": now,
        "qosClass": qos_class(pod),
    }


def qos_class(pod: Mapping[str, Any]) -> str:
    """Guaranteed, Burstable or BestEffort, by the API's rules for cpu and memory."""
    containers = [
        *((pod.get("spec") or {}).get("containers") or []),
        *((pod.get("spec") or {}).get("initContainers") or []),
    ]
    any_set = False
    guaranteed = True
    for container in containers:
        resources = container.get("resources") or {}
        requests = resources.get("requests") or {}
        limits = resources.get("limits") or {}
        for name in ("cpu", "memory"):
            if name in requests or name in limits:
                any_set = True
            limit = limits.get(name)
            if limit is None or str(requests.get(name, limit)) != str(limit):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"
