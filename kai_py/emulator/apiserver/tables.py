"""Server-side ``Table`` output (``Accept: ...;as=Table;g=meta.k8s.io;v=v1``).

kubectl prints what the server puts in the Table, so these columns are what
``kubectl get`` shows: the real columns for pods, nodes, a few workload
kinds, and a CRD's additionalPrinterColumns.
"""

from __future__ import annotations

import calendar
import json
import re
import time
from collections.abc import Callable
from typing import Any

from kai_py.emulator.storage.resources import PrinterColumn, ResourceType

JSON = dict[str, Any]
Column = tuple[str, str, int, str]  # name, type, priority, description
Row = Callable[[JSON, float], list[Any]]


def human_duration(seconds: float) -> str:
    """Age as apimachinery's duration.HumanDuration prints it."""
    s = int(seconds)
    if s < 0:
        s = 0
    if s < 120:
        return f"{s}s"
    m = s // 60
    if m < 10:
        return f"{m}m{s % 60}s" if s % 60 else f"{m}m"
    if m < 180:
        return f"{m}m"
    h = m // 60
    if h < 8:
        return f"{h}h{m % 60}m" if m % 60 else f"{h}h"
    if h < 48:
        return f"{h}h"
    if h < 24 * 8:
        return f"{h // 24}d{h % 24}h" if h % 24 else f"{h // 24}d"
    if h < 24 * 365 * 2:
        return f"{h // 24}d"
    if h < 24 * 365 * 8:
        d = h // 24
        return f"{d // 365}y{d % 365}d" if d % 365 else f"{d // 365}y"
    return f"{h // 24 // 365}y"


def _ts(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return float(calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%SZ")))
    except ValueError:
        return None


def _age(obj: JSON, now: float) -> str:
    created = _ts((obj.get("metadata") or {}).get("creationTimestamp"))
    return "<unknown>" if created is None else human_duration(now - created)


def _pod_status(pod: JSON) -> str:
    status = pod.get("status") or {}
    meta = pod.get("metadata") or {}
    reason = status.get("reason") or status.get("phase") or "Pending"
    if (pod.get("spec") or {}).get("schedulingGates"):
        reason = "SchedulingGated"
    for cs in reversed(status.get("containerStatuses") or []):
        state = cs.get("state") or {}
        if state.get("waiting", {}).get("reason"):
            reason = state["waiting"]["reason"]
        elif state.get("terminated"):
            term = state["terminated"]
            reason = term.get("reason") or (
                f"Signal:{term['signal']}"
                if term.get("signal")
                else f"ExitCode:{term.get('exitCode', 0)}"
            )
    if meta.get("deletionTimestamp"):
        reason = "Unknown" if status.get("reason") == "NodeLost" else "Terminating"
    return str(reason)


def _pod_row(pod: JSON, now: float) -> list[Any]:
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    statuses = status.get("containerStatuses") or []
    ready = sum(1 for c in statuses if c.get("ready"))
    restarts = sum(int(c.get("restartCount", 0)) for c in statuses)
    gates = spec.get("readinessGates") or []
    return [
        pod["metadata"]["name"],
        f"{ready}/{len(spec.get('containers') or [])}",
        _pod_status(pod),
        restarts,
        _age(pod, now),
        status.get("podIP") or "<none>",
        spec.get("nodeName") or "<none>",
        status.get("nominatedNodeName") or "<none>",
        f"{len(gates)}" if gates else "<none>",
    ]


def _node_row(node: JSON, now: float) -> list[Any]:
    status = node.get("status") or {}
    ready = "Unknown"
    for c in status.get("conditions") or []:
        if c.get("type") == "Ready":
            ready = "Ready" if c.get("status") == "True" else "NotReady"
    if (node.get("spec") or {}).get("unschedulable"):
        ready += ",SchedulingDisabled"
    labels = (node.get("metadata") or {}).get("labels") or {}
    roles = sorted(
        k.split("/", 1)[1] for k in labels if k.startswith("node-role.kubernetes.io/") and "/" in k
    )
    info = status.get("nodeInfo") or {}
    addresses = {a.get("type"): a.get("address") for a in status.get("addresses") or []}
    return [
        node["metadata"]["name"],
        ready,
        ",".join(roles) or "<none>",
        _age(node, now),
        info.get("kubeletVersion", ""),
        addresses.get("InternalIP", "<none>"),
        addresses.get("ExternalIP", "<none>"),
        info.get("osImage", "<unknown>"),
        info.get("kernelVersion", "<unknown>"),
        info.get("containerRuntimeVersion", ""),
    ]


def _job_row(job: JSON, now: float) -> list[Any]:
    spec, status = job.get("spec") or {}, job.get("status") or {}
    conds = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    state = (
        "Complete"
        if conds.get("Complete") == "True"
        else "Failed"
        if conds.get("Failed") == "True"
        else "Suspended"
        if spec.get("suspend")
        else "Running"
    )
    completions = spec.get("completions")
    done = f"{status.get('succeeded', 0)}/{completions if completions is not None else 1}"
    start, end = _ts(status.get("startTime")), _ts(status.get("completionTime"))
    duration = human_duration((end or now) - start) if start else ""
    return [job["metadata"]["name"], state, done, duration, _age(job, now)]


def _deployment_row(d: JSON, now: float) -> list[Any]:
    spec, status = d.get("spec") or {}, d.get("status") or {}
    return [
        d["metadata"]["name"],
        f"{status.get('readyReplicas', 0)}/{spec.get('replicas', 0)}",
        status.get("updatedReplicas", 0),
        status.get("availableReplicas", 0),
        _age(d, now),
    ]


def _replicaset_row(rs: JSON, now: float) -> list[Any]:
    spec, status = rs.get("spec") or {}, rs.get("status") or {}
    return [
        rs["metadata"]["name"],
        spec.get("replicas", 0),
        status.get("replicas", 0),
        status.get("readyReplicas", 0),
        _age(rs, now),
    ]


def _namespace_row(ns: JSON, now: float) -> list[Any]:
    return [ns["metadata"]["name"], (ns.get("status") or {}).get("phase", "Active"), _age(ns, now)]


def _configmap_row(cm: JSON, now: float) -> list[Any]:
    return [
        cm["metadata"]["name"],
        len(cm.get("data") or {}) + len(cm.get("binaryData") or {}),
        _age(cm, now),
    ]


def _priorityclass_row(pc: JSON, now: float) -> list[Any]:
    return [
        pc["metadata"]["name"],
        pc.get("value", 0),
        bool(pc.get("globalDefault", False)),
        _age(pc, now),
        pc.get("preemptionPolicy", ""),
    ]


def _event_row(ev: JSON, now: float) -> list[Any]:
    last = _ts(ev.get("lastTimestamp")) or _ts(
        ev.get("eventTime", "")[:19] + "Z" if ev.get("eventTime") else None
    )
    seen = human_duration(now - last) if last else "<unknown>"
    obj = ev.get("involvedObject") or ev.get("regarding") or {}
    return [
        seen,
        ev.get("type", ""),
        ev.get("reason", ""),
        f"{str(obj.get('kind', '')).lower()}/{obj.get('name', '')}",
        ev.get("message") or ev.get("note") or "",
    ]


def _crd_row(crd: JSON, now: float) -> list[Any]:
    return [crd["metadata"]["name"], crd["metadata"].get("creationTimestamp", "")]


def _secret_row(obj: JSON, now: float) -> list[Any]:
    return [
        obj["metadata"]["name"],
        obj.get("type", "Opaque"),
        len(obj.get("data") or {}),
        _age(obj, now),
    ]


def _serviceaccount_row(obj: JSON, now: float) -> list[Any]:
    return [obj["metadata"]["name"], len(obj.get("secrets") or []), _age(obj, now)]


def _service_row(obj: JSON, now: float) -> list[Any]:
    spec = obj.get("spec") or {}
    ports = ",".join(f"{p.get('port')}/{p.get('protocol', 'TCP')}" for p in spec.get("ports") or [])
    selector = ",".join(f"{k}={v}" for k, v in sorted((spec.get("selector") or {}).items()))
    return [
        obj["metadata"]["name"],
        spec.get("type", "ClusterIP"),
        spec.get("clusterIP") or "<none>",
        ",".join(spec.get("externalIPs") or []) or "<none>",
        ports or "<none>",
        _age(obj, now),
        selector or "<none>",
    ]


def _lease_row(obj: JSON, now: float) -> list[Any]:
    return [
        obj["metadata"]["name"],
        (obj.get("spec") or {}).get("holderIdentity", ""),
        _age(obj, now),
    ]


_ACCESS_MODES = {
    "ReadWriteOnce": "RWO",
    "ReadOnlyMany": "ROX",
    "ReadWriteMany": "RWX",
    "ReadWriteOncePod": "RWOP",
}


def _storageclass_row(obj: JSON, now: float) -> list[Any]:
    return [
        obj["metadata"]["name"],  # kubectl itself adds " (default)"
        obj.get("provisioner", ""),
        obj.get("reclaimPolicy", ""),
        obj.get("volumeBindingMode", ""),
        bool(obj.get("allowVolumeExpansion", False)),
        _age(obj, now),
    ]


def _persistentvolumeclaim_row(obj: JSON, now: float) -> list[Any]:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    return [
        obj["metadata"]["name"],
        status.get("phase", ""),
        spec.get("volumeName", ""),
        (status.get("capacity") or {}).get("storage", ""),
        ",".join(_ACCESS_MODES.get(m, m) for m in status.get("accessModes") or []),
        spec.get("storageClassName", ""),
        spec.get("volumeAttributesClassName") or "<unset>",
        _age(obj, now),
        spec.get("volumeMode", ""),
    ]


def _statefulset_row(obj: JSON, now: float) -> list[Any]:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    containers = ((spec.get("template") or {}).get("spec") or {}).get("containers") or []
    return [
        obj["metadata"]["name"],
        f"{status.get('readyReplicas', 0)}/{spec.get('replicas', 0)}",
        _age(obj, now),
        ",".join(str(c.get("name", "")) for c in containers),
        ",".join(str(c.get("image", "")) for c in containers),
    ]


def _cronjob_row(obj: JSON, now: float) -> list[Any]:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    job_spec = (spec.get("jobTemplate") or {}).get("spec") or {}
    containers = ((job_spec.get("template") or {}).get("spec") or {}).get("containers") or []
    suspend = spec.get("suspend")
    last = _ts(status.get("lastScheduleTime"))
    selector = job_spec.get("selector") or {}
    terms = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for e in selector.get("matchExpressions") or []:
        op = str(e.get("operator", "")).lower()
        values = ",".join(e.get("values") or [])
        if op in ("exists", "doesnotexist"):
            terms.append(f"{'!' if op == 'doesnotexist' else ''}{e.get('key')}")
        else:
            terms.append(f"{e.get('key')} {op} ({values})")
    return [
        obj["metadata"]["name"],
        spec.get("schedule", ""),
        spec.get("timeZone") or "<none>",
        "<unset>" if suspend is None else ("True" if suspend else "False"),
        len(status.get("active") or []),
        "<none>" if last is None else human_duration(now - last),
        _age(obj, now),
        ",".join(str(c.get("name", "")) for c in containers),
        ",".join(str(c.get("image", "")) for c in containers),
        ",".join(terms) or "<none>",
    ]


def _runtimeclass_row(obj: JSON, now: float) -> list[Any]:
    return [obj["metadata"]["name"], obj.get("handler", ""), _age(obj, now)]


def _persistentvolume_row(obj: JSON, now: float) -> list[Any]:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    claim = spec.get("claimRef") or {}
    return [
        obj["metadata"]["name"],
        (spec.get("capacity") or {}).get("storage", ""),
        ",".join(_ACCESS_MODES.get(m, m) for m in spec.get("accessModes") or []),
        spec.get("persistentVolumeReclaimPolicy", ""),
        status.get("phase", ""),
        f"{claim.get('namespace')}/{claim.get('name')}" if claim else "",
        spec.get("storageClassName", ""),
        spec.get("volumeAttributesClassName") or "<unset>",
        status.get("reason", ""),
        _age(obj, now),
        spec.get("volumeMode", ""),
    ]


_NAME = ("Name", "string", 0, "Name must be unique within a namespace.")
_AGE = (
    "Age",
    "string",
    0,
    "CreationTimestamp is a timestamp representing the server time when this object was created.",
)

_BUILTIN: dict[str, tuple[list[Column], Row]] = {
    "pods": (
        [
            _NAME,
            (
                "Ready",
                "string",
                0,
                "The aggregate readiness state of this pod for accepting traffic.",
            ),
            ("Status", "string", 0, "The aggregate status of the containers in this pod."),
            (
                "Restarts",
                "string",
                0,
                "The number of times the containers in this pod have "
                "been restarted and when the last container in this pod has restarted.",
            ),
            _AGE,
            ("IP", "string", 1, "IP address allocated to the pod."),
            ("Node", "string", 1, "Name of the Node this pod is assigned to."),
            ("Nominated Node", "string", 1, "Name of the node nominated for preemption."),
            ("Readiness Gates", "string", 1, "Pod readiness gates."),
        ],
        _pod_row,
    ),
    "nodes": (
        [
            _NAME,
            ("Status", "string", 0, "The status of the node"),
            ("Roles", "string", 0, "The roles of the node"),
            _AGE,
            ("Version", "string", 0, "Kubelet Version reported by the node."),
            ("Internal-IP", "string", 1, "List of internal IPs for the node."),
            ("External-IP", "string", 1, "List of external IPs for the node."),
            ("OS-Image", "string", 1, "OS image reported by the node."),
            ("Kernel-Version", "string", 1, "Kernel version reported by the node."),
            ("Container-Runtime", "string", 1, "Container runtime reported by the node."),
        ],
        _node_row,
    ),
    "jobs.batch": (
        [
            _NAME,
            ("Status", "string", 0, "Status of the job."),
            ("Completions", "string", 0, "The completion status of the job."),
            ("Duration", "string", 0, "Time required to complete the job."),
            _AGE,
        ],
        _job_row,
    ),
    "cronjobs.batch": (
        [
            _NAME,
            ("Schedule", "string", 0, "The schedule in Cron format."),
            ("Timezone", "string", 0, "The time zone name for the given schedule."),
            ("Suspend", "boolean", 0, "Whether to suspend subsequent executions."),
            ("Active", "integer", 0, "A list of pointers to currently running jobs."),
            ("Last Schedule", "string", 0, "When a job was last scheduled."),
            _AGE,
            ("Containers", "string", 1, "Names of each container in the template."),
            ("Images", "string", 1, "Images referenced by each container in the template."),
            ("Selector", "string", 1, "A label query over pods of the jobs."),
        ],
        _cronjob_row,
    ),
    "deployments.apps": (
        [
            _NAME,
            ("Ready", "string", 0, "Number of ready replicas."),
            ("Up-to-date", "integer", 0, "Updated replicas."),
            ("Available", "integer", 0, "Available replicas."),
            _AGE,
        ],
        _deployment_row,
    ),
    "replicasets.apps": (
        [
            _NAME,
            ("Desired", "integer", 0, "Desired replicas."),
            ("Current", "integer", 0, "Current replicas."),
            ("Ready", "integer", 0, "Ready replicas."),
            _AGE,
        ],
        _replicaset_row,
    ),
    "namespaces": (
        [_NAME, ("Status", "string", 0, "The status of the namespace"), _AGE],
        _namespace_row,
    ),
    "configmaps": ([_NAME, ("Data", "string", 0, "Number of keys."), _AGE], _configmap_row),
    "priorityclasses.scheduling.k8s.io": (
        [
            _NAME,
            ("Value", "integer", 0, "The value of this priority class."),
            ("Global-Default", "boolean", 0, "Whether this is the global default."),
            _AGE,
            ("Preemption Policy", "string", 0, "The preemption policy."),
        ],
        _priorityclass_row,
    ),
    "events": (
        [
            ("Last Seen", "string", 0, "Time since last seen."),
            ("Type", "string", 0, "Event type."),
            ("Reason", "string", 0, "Reason."),
            ("Object", "string", 0, "Involved object."),
            ("Message", "string", 0, "Message."),
        ],
        _event_row,
    ),
    "customresourcedefinitions.apiextensions.k8s.io": (
        [_NAME, ("Created At", "date", 0, "Creation time.")],
        _crd_row,
    ),
    "secrets": (
        [
            _NAME,
            ("Type", "string", 0, "The type of the secret."),
            ("Data", "string", 0, "Number of keys."),
            _AGE,
        ],
        _secret_row,
    ),
    "serviceaccounts": (
        [_NAME, ("Secrets", "string", 0, "Number of secrets."), _AGE],
        _serviceaccount_row,
    ),
    "services": (
        [
            _NAME,
            ("Type", "string", 0, "The type of the service."),
            ("Cluster-IP", "string", 0, "The cluster IP."),
            ("External-IP", "string", 0, "External IPs."),
            ("Port(s)", "string", 0, "The ports."),
            _AGE,
            ("Selector", "string", 1, "The selector."),
        ],
        _service_row,
    ),
    "leases.coordination.k8s.io": (
        [_NAME, ("Holder", "string", 0, "The holder identity."), _AGE],
        _lease_row,
    ),
    "storageclasses.storage.k8s.io": (
        [
            _NAME,
            ("Provisioner", "string", 0, "Indicates the type of the provisioner."),
            ("ReclaimPolicy", "string", 0, "Indicates the type of the reclaim policy."),
            ("VolumeBindingMode", "string", 0, "Indicates the mode of the volume binding."),
            (
                "AllowVolumeExpansion",
                "string",
                0,
                "Indicates whether the storage class allow volume expand.",
            ),
            _AGE,
        ],
        _storageclass_row,
    ),
    "persistentvolumeclaims": (
        [
            _NAME,
            ("Status", "string", 0, "The phase of the claim."),
            ("Volume", "string", 0, "The volume bound to the claim."),
            ("Capacity", "string", 0, "The capacity of the bound volume."),
            ("Access Modes", "string", 0, "The access modes of the bound volume."),
            ("StorageClass", "string", 0, "The storage class of the claim."),
            ("VolumeAttributesClass", "string", 0, "The volume attributes class."),
            _AGE,
            ("VolumeMode", "string", 1, "The volume mode."),
        ],
        _persistentvolumeclaim_row,
    ),
    "statefulsets.apps": (
        [
            _NAME,
            ("Ready", "string", 0, "Number of the pod with ready state."),
            _AGE,
            ("Containers", "string", 1, "Names of each container in the template."),
            ("Images", "string", 1, "Images referenced by each container in the template."),
        ],
        _statefulset_row,
    ),
    "runtimeclasses.node.k8s.io": (
        [_NAME, ("Handler", "string", 0, "Handler is the name of the runtime handler."), _AGE],
        _runtimeclass_row,
    ),
    "persistentvolumes": (
        [
            _NAME,
            ("Capacity", "string", 0, "The capacity of the volume."),
            ("Access Modes", "string", 0, "The access modes of the volume."),
            ("Reclaim Policy", "string", 0, "What happens to the volume when released."),
            ("Status", "string", 0, "The phase of the volume."),
            ("Claim", "string", 0, "The claim bound to the volume."),
            ("StorageClass", "string", 0, "The storage class of the volume."),
            ("VolumeAttributesClass", "string", 0, "The volume attributes class."),
            ("Reason", "string", 0, "Why the volume is in this phase."),
            _AGE,
            ("VolumeMode", "string", 1, "The volume mode."),
        ],
        _persistentvolume_row,
    ),
}


def _default_row(obj: JSON, now: float) -> list[Any]:
    return [obj["metadata"]["name"], _age(obj, now)]


# ---- JSONPath (the subset printer columns use) --------------------------------------------

# A field may hold "/" and escaped dots, as in `.status.allocated.nvidia\.com/gpu`.
_TOKEN = re.compile(
    r"\.((?:[A-Za-z0-9_\-$/]|\\\.)+)|\[(\d+|\*)\]|\[\?\(@\.([A-Za-z0-9_.\-]+)\s*==\s*"
    r"['\"]?([^'\")]*)['\"]?\)\]|\['([^']+)'\]"
)


def jsonpath(obj: Any, path: str) -> list[Any]:
    """Evaluate ``.a.b[0].c``, ``[*]``, ``['dotted.key']`` and ``[?(@.k=="v")]``."""
    path = path.strip()
    if path.startswith("{") and path.endswith("}"):
        path = path[1:-1]
    if path.startswith("$"):
        path = path[1:]
    current = [obj]
    pos = 0
    while pos < len(path):
        m = _TOKEN.match(path, pos)
        if not m:
            return []
        pos = m.end()
        field, index, fkey, fval, quoted = m.groups()
        nxt: list[Any] = []
        for c in current:
            if field is not None or quoted is not None:
                key = field.replace("\\.", ".") if field is not None else quoted
                if isinstance(c, dict) and key in c:
                    nxt.append(c[key])
            elif index is not None:
                if isinstance(c, list):
                    if index == "*":
                        nxt.extend(c)
                    elif int(index) < len(c):
                        nxt.append(c[int(index)])
            elif fkey is not None and isinstance(c, list):
                for item in c:
                    got: Any = item
                    for part in fkey.split("."):
                        got = got.get(part) if isinstance(got, dict) else None
                    if got is not None and str(got) == fval:
                        nxt.append(item)
        current = nxt
    return current


def _cell(col: PrinterColumn, obj: JSON, now: float) -> Any:
    values = jsonpath(obj, col.json_path)
    if not values:
        return None
    value = values[0] if len(values) == 1 else values
    if col.type == "date" and isinstance(value, str):
        ts = _ts(value)
        return human_duration(now - ts) if ts is not None else value
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"))
    return value


def columns_for(rt: ResourceType) -> tuple[list[Column], Row]:
    if rt.custom:
        cols = list(rt.printer_columns) or [
            PrinterColumn("Age", "date", ".metadata.creationTimestamp")
        ]
        defs = [_NAME] + [(c.name, c.type, c.priority, c.description) for c in cols]

        def row(obj: JSON, now: float) -> list[Any]:
            return [obj["metadata"]["name"]] + [_cell(c, obj, now) for c in cols]

        return defs, row
    return _BUILTIN.get(rt.storage_key, ([_NAME, _AGE], _default_row))


def _row_object(obj: JSON, include: str) -> JSON | None:
    if include == "None":
        return None
    if include == "Object":
        return obj
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata") or {},
    }


def to_table(
    rt: ResourceType,
    items: list[JSON],
    *,
    resource_version: str = "",
    continue_token: str | None = None,
    include_object: str = "Metadata",
    with_headers: bool = True,
    now: float | None = None,
) -> JSON:
    now = time.time() if now is None else now
    defs, row = columns_for(rt)
    meta: JSON = {"resourceVersion": resource_version} if resource_version else {}
    if continue_token:
        meta["continue"] = continue_token
    rows = []
    for obj in items:
        r: JSON = {"cells": row(obj, now)}
        ro = _row_object(obj, include_object)
        if ro is not None:
            r["object"] = ro
        rows.append(r)
    table: JSON = {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": meta, "rows": rows}
    table["columnDefinitions"] = (
        [
            {
                "name": n,
                "type": t,
                "format": "name" if n == "Name" else "",
                "description": d,
                "priority": p,
            }
            for (n, t, p, d) in defs
        ]
        if with_headers
        else []
    )
    return table
