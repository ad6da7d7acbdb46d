"""``kubectl kai queues`` and ``kubectl kai why``: the figures, from listed objects (pure).

Every figure is one kai-py wrote in the API: a Queue's ``status`` (allocated,
requested and, kai-py's own, ``fairShare``), a PodGroup's ``status`` (its
conditions, ``resourcesStatus`` and, kai-py's own, ``queuePosition``), the pods'
conditions and the Events. Resources are in KAI's units: GPUs in devices, CPU in
millicores, memory in MB.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kai_py.api import keys
from kai_py.api.quantities import from_resource_map, parse_quantity
from kai_py.gpu.cards import whole_gpus

Json = dict[str, Any]
RESOURCES = ("gpu", "cpu", "memory")
_STATUS_KEY = {"gpu": keys.GPU_RESOURCE, "cpu": "cpu", "memory": "memory"}
UNITS = {"gpu": "GPUs", "cpu": "millicores", "memory": "MB"}


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    value = obj.get("metadata")
    return value if isinstance(value, Mapping) else {}


def _name(obj: Mapping[str, Any]) -> str:
    return str(_meta(obj).get("name") or "")


def amounts(values: object) -> dict[str, float]:
    """A status resource map (strings or numbers) -> {"gpu", "cpu", "memory"}: 0 where
    it is missing or unreadable (a status not yet written)."""
    if not isinstance(values, Mapping):
        return dict.fromkeys(RESOURCES, 0.0)
    try:
        read = from_resource_map(dict(values))
    except (TypeError, ValueError):
        return dict.fromkeys(RESOURCES, 0.0)
    return {"gpu": read.gpu, "cpu": read.cpu, "memory": read.memory}


def show(value: float) -> str:
    """A figure as short as it is exact to three places: 4, 0.5, 1.333."""
    if value == float("inf"):
        return "inf"
    rounded = round(value, 3)
    return str(int(rounded)) if rounded == int(rounded) else f"{rounded:g}"


@dataclass(slots=True, frozen=True)
class Limits:
    quota: float  # -1: unlimited
    limit: float  # -1: none
    limit_set: bool
    weight: float

    def json(self) -> Json:
        return {
            "quota": self.quota,
            "limit": self.limit,
            "limitSet": self.limit_set,
            "overQuotaWeight": self.weight,
        }


def queue_limits(queue: Mapping[str, Any]) -> dict[str, Limits]:
    resources = (queue.get("spec") or {}).get("resources") or {}
    found = {}
    for r in RESOURCES:
        spec = resources.get(r) or {}
        found[r] = Limits(
            float(spec.get("quota", 0) or 0),
            float(spec.get("limit", 0) or 0),
            "limit" in spec,
            float(spec.get("overQuotaWeight", 1) if "overQuotaWeight" in spec else 1),
        )
    return found


def position(podgroup: Mapping[str, Any]) -> Mapping[str, Any] | None:
    found = (podgroup.get("status") or {}).get("queuePosition")
    return found if isinstance(found, Mapping) else None


def waiting(podgroup: Mapping[str, Any]) -> bool:
    """Pending: in line (a position), or told so by its phase."""
    status = podgroup.get("status") or {}
    return position(podgroup) is not None or status.get("phase") == "Pending"


# ------------------------------------------------------------------ queues
def queue_rows(
    queues: Sequence[Mapping[str, Any]], podgroups: Iterable[Mapping[str, Any]]
) -> list[Json]:
    """The queue tree, parents before their children (depth-first by name), each with
    its spec's quota and limit, its status's fair share, allocated and requested, the
    PodGroups waiting in its subtree and the head of its line."""
    by_name = {_name(q): q for q in queues}
    children: dict[str | None, list[str]] = {}
    for name, q in by_name.items():
        parent = (q.get("spec") or {}).get("parentQueue") or None
        if parent is not None and parent not in by_name:
            parent = None  # an orphan is shown at the top, with its parent named
        children.setdefault(parent, []).append(name)
    pending: dict[str, int] = {}
    head: dict[str, tuple[int, str]] = {}
    for pg in podgroups:
        queue = (pg.get("spec") or {}).get("queue")
        if not queue or not waiting(pg):
            continue
        pending[queue] = pending.get(queue, 0) + 1
        where = position(pg)
        at = where.get("inQueue") if where is not None else None
        if isinstance(at, int):
            ref = f"{_meta(pg).get('namespace')}/{_name(pg)}"
            if queue not in head or (at, ref) < head[queue]:
                head[queue] = (at, ref)
    rows: list[Json] = []
    stack = [(name, 0) for name in sorted(children.get(None, []), reverse=True)]
    while stack:
        name, depth = stack.pop()
        q = by_name[name]
        status = q.get("status") or {}
        row: Json = {
            "name": name,
            "depth": depth,
            "parent": (q.get("spec") or {}).get("parentQueue"),
            "priority": (q.get("spec") or {}).get("priority"),
            "limits": {r: lim.json() for r, lim in queue_limits(q).items()},
            "fairShare": amounts(status.get("fairShare")),
            "allocated": amounts(status.get("allocated")),
            "requested": amounts(status.get("requested")),
            "pending": pending.get(name, 0),
            "headOfLine": head[name][1] if name in head else None,
            "leaf": not children.get(name),
        }
        rows.append(row)
        stack.extend((child, depth + 1) for child in sorted(children.get(name, []), reverse=True))
    # Parents count their subtree's waiting jobs (rows run parents first: add bottom up).
    index = {row["name"]: row for row in rows}
    for row in reversed(rows):
        parent = row["parent"]
        if parent in index:
            index[parent]["pending"] += row["pending"]
    return rows


def _limit_text(limits: Json) -> str:
    if limits["limit"] == -1:
        return "none"
    return show(limits["limit"]) if limits["limitSet"] else "0 unset"


def queues_table(rows: Sequence[Json], resource: str = "gpu") -> list[str]:
    """The tree as a table of at most 120 columns, figures of one resource."""
    head = (
        f"{'QUEUE':<26} {'PRIO':>4} {'QUOTA':>9} {'LIMIT':>9} {'FAIR SHARE':>10} "
        f"{'ALLOCATED':>10} {'REQUESTED':>10} {'PENDING':>7}  HEAD OF LINE"
    )
    lines = [f"{resource} in {UNITS[resource]}", head]
    for row in rows:
        limits = row["limits"][resource]
        quota = "unlimited" if limits["quota"] == -1 else show(limits["quota"])
        name = ("  " * row["depth"] + row["name"])[:26]
        first = row["headOfLine"] or ""
        line = (
            f"{name:<26} {row['priority'] if row['priority'] is not None else '':>4} "
            f"{quota:>9} {_limit_text(limits):>9} {show(row['fairShare'][resource]):>10} "
            f"{show(row['allocated'][resource]):>10} {show(row['requested'][resource]):>10} "
            f"{row['pending']:>7}  {first}"
        )
        lines.append(line[:120])
    return lines


# ------------------------------------------------------------------ why
def _pod_gpus(pod: Mapping[str, Any], shares: bool = True) -> float:
    """GPUs a pod asks for: whole ones, and its shares (``shares``) as fractions."""
    total = whole_gpus(pod)
    ann = _meta(pod).get("annotations") or {}
    fraction = ann.get(keys.GPU_FRACTION_ANNOTATION)
    if fraction and shares:
        try:
            devices = int(ann.get(keys.GPU_FRACTION_NUM_DEVICES_ANNOTATION) or 1)
            total += float(fraction) * devices
        except ValueError:
            pass
    return total


def _running(pod: Mapping[str, Any]) -> bool:
    phase = (pod.get("status") or {}).get("phase")
    return bool((pod.get("spec") or {}).get("nodeName")) and phase not in ("Succeeded", "Failed")


def _condition(pod: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if isinstance(c, Mapping) and c.get("type") == kind:
            return c
    return None


def node_room(
    nodes: Sequence[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]
) -> list[tuple[str, float, float]]:
    """(node, GPUs it has, GPUs its pods do not hold), most free first."""
    held: dict[str, float] = {}
    for pod in pods:
        if _running(pod):
            on = str((pod.get("spec") or {}).get("nodeName"))
            # A shared card is held by its reservation pod (a whole GPU), not its sharers.
            held[on] = held.get(on, 0.0) + _pod_gpus(pod, shares=False)
    room = []
    for node in nodes:
        status = node.get("status") or {}
        raw = (status.get("allocatable") or {}).get(keys.GPU_RESOURCE)
        try:
            has = parse_quantity(raw) if raw is not None else 0.0
        except ValueError:
            has = 0.0
        if has > 0:
            room.append((_name(node), has, max(0.0, has - held.get(_name(node), 0.0))))
    return sorted(room, key=lambda r: (-r[2], -r[1], r[0]))


@dataclass(slots=True)
class WhyInput:
    """What ``why`` reads; ``queues``, ``nodes`` and ``all_pods`` are None where the user
    may not list them."""

    pod: Mapping[str, Any]
    podgroup: Mapping[str, Any] | None
    group_pods: Sequence[Mapping[str, Any]]
    queues: Sequence[Mapping[str, Any]] | None
    events: Sequence[Mapping[str, Any]]
    nodes: Sequence[Mapping[str, Any]] | None = None
    all_pods: Sequence[Mapping[str, Any]] | None = None


def _queue_view(name: str, queues: Sequence[Mapping[str, Any]]) -> Json | None:
    by_name = {_name(q): q for q in queues}
    q = by_name.get(name)
    if q is None:
        return None
    status = q.get("status") or {}
    chain, parent, seen = [], (q.get("spec") or {}).get("parentQueue"), {name}
    while parent and parent not in seen:
        chain.append(parent)
        seen.add(parent)
        parent = ((by_name.get(parent) or {}).get("spec") or {}).get("parentQueue")
    fair, allocated = amounts(status.get("fairShare")), amounts(status.get("allocated"))
    return {
        "name": name,
        "parents": chain,
        "limits": {r: lim.json() for r, lim in queue_limits(q).items()},
        "fairShare": fair,
        "allocated": allocated,
        "requested": amounts(status.get("requested")),
        "freeOfFairShare": {r: max(0.0, fair[r] - allocated[r]) for r in RESOURCES},
    }


def why(data: WhyInput) -> Json:
    """The pod's reason with its figures, its gang's and its queue's view, its place in
    line and what would make it fit."""
    pod, pg = data.pod, data.podgroup
    m = _meta(pod)
    scheduled = _condition(pod, "PodScheduled")
    out: Json = {
        "pod": f"{m.get('namespace')}/{m.get('name')}",
        "phase": (pod.get("status") or {}).get("phase"),
        "node": (pod.get("spec") or {}).get("nodeName"),
        "podScheduled": dict(scheduled) if scheduled is not None else None,
        "gates": [g.get("name") for g in (pod.get("spec") or {}).get("schedulingGates") or []],
        "podGroup": None,
        "queue": None,
        "position": None,
        "fit": [],
        "events": [
            {
                "object": f"{(e.get('involvedObject') or {}).get('kind')}/"
                f"{(e.get('involvedObject') or {}).get('name')}",
                "type": e.get("type"),
                "reason": e.get("reason"),
                "message": e.get("message"),
                "from": (e.get("source") or {}).get("component") or e.get("reportingComponent"),
                "last": e.get("lastTimestamp") or e.get("eventTime"),
                "count": e.get("count"),
            }
            for e in sorted(
                data.events, key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or "")
            )
        ],
    }
    hints: list[str] = out["fit"]
    per_pod = _pod_gpus(pod)
    if pg is None:
        name = (m.get("annotations") or {}).get(keys.POD_GROUP_ANNOTATION)
        hints.append(
            f"no PodGroup {name} found: the pod-grouper makes it; see its Events"
            if name
            else "the pod names no PodGroup (pod-group-name annotation) yet: the pod-grouper "
            "has not grouped it; check schedulerName and the queue label"
        )
        return out
    spec, status = pg.get("spec") or {}, pg.get("status") or {}
    members = list(data.group_pods)
    placed = sum(1 for p in members if _running(p))
    gated = sum(1 for p in members if (p.get("spec") or {}).get("schedulingGates"))
    min_member = int(spec.get("minMember", 1) or 0)
    resources = status.get("resourcesStatus") or {}
    requested = amounts(resources.get("requested"))
    allocated = amounts(resources.get("allocated"))
    needs = {r: max(0.0, requested[r] - allocated[r]) for r in RESOURCES}
    out["podGroup"] = {
        "name": f"{_meta(pg).get('namespace')}/{_name(pg)}",
        "queue": spec.get("queue"),
        "minMember": min_member,
        "pods": len(members),
        "placed": placed,
        "pending": len(members) - placed,
        "gated": gated,
        "phase": status.get("phase"),
        "needs": needs,
        "conditions": [
            {"reason": r.get("reason"), "message": r.get("message")}
            for c in status.get("schedulingConditions") or []
            for r in c.get("reasons") or [c]
        ],
    }
    where = position(pg)
    if where is not None:
        out["position"] = dict(where)
    if data.queues is None:
        # Not "does not exist": the user may not list the Queues, which are cluster-scoped,
        # so a RoleBinding in the pod's namespace never reaches them.
        hints.append(
            f"Queue {spec.get('queue')!r} cannot be read with your rights (Queues are "
            "cluster-scoped: list on queues needs a ClusterRoleBinding)"
        )
        return out
    queue = _queue_view(str(spec.get("queue") or ""), data.queues)
    out["queue"] = queue
    if queue is None:
        hints.append(
            f"Queue {spec.get('queue')!r} does not exist: create it, or set the PodGroup's "
            "spec.queue (the pod's kai.scheduler/queue label) to an existing leaf queue"
        )
        return out
    if len(members) < min_member:
        hints.append(
            f"the gang needs minMember {min_member} pods and {len(members)} exist: create "
            f"{min_member - len(members)} more, or lower minMember"
        )
    if gated:
        hints.append(f"{gated} pods are held by scheduling gates: they start when the gates go")
    gpu = queue["limits"]["gpu"]
    if needs["gpu"] > 0:
        free = queue["freeOfFairShare"]["gpu"]
        if gpu["limit"] != -1 and queue["allocated"]["gpu"] + needs["gpu"] > gpu["limit"]:
            hints.append(
                f"the queue's GPU limit is {show(gpu['limit'])} and it holds "
                f"{show(queue['allocated']['gpu'])}: {show(needs['gpu'])} more would exceed "
                f"it; raise spec.resources.gpu.limit of Queue {queue['name']} to "
                f"{show(queue['allocated']['gpu'] + needs['gpu'])} or more"
            )
        elif needs["gpu"] > free:
            hints.append(
                f"needs {show(needs['gpu'])} GPUs, queue {queue['name']} has {show(free)} free "
                f"of its fair share ({show(queue['fairShare']['gpu'])}): it waits for GPUs "
                "in the cluster to be freed (jobs ahead of it finishing) or for the queue's "
                "quota to be raised"
            )
    if data.nodes is not None and data.all_pods is not None and per_pod > 0:
        room = node_room(data.nodes, data.all_pods)
        largest = max(room, key=lambda r: r[1]) if room else None
        if largest is None or largest[1] < per_pod:
            biggest = (
                f"the largest has {show(largest[1])} ({largest[0]})" if largest else "none has GPUs"
            )
            hints.append(
                f"no node can ever hold this pod: it asks for {show(per_pod)} GPUs and {biggest}"
            )
        elif not _running(pod):
            # The gang's pods still to place, each of this pod's size, on the free GPUs.
            wanted = max(1, min_member - placed)
            fit = sum(int(free // per_pod) for _, _, free in room)
            if fit < wanted:
                free_text = ", ".join(f"{n} {show(free)}" for n, _, free in room[:4])
                hints.append(
                    f"the nodes' free GPUs now hold {fit} of the {wanted} pods of "
                    f"{show(per_pod)} GPUs it needs together (free: {free_text})"
                )
    return out


def _wrap(text: str, indent: str, width: int = 120) -> list[str]:
    return textwrap.wrap(
        text, width=width, initial_indent=indent, subsequent_indent=indent + "  "
    ) or [indent]


def _jobs(count: object) -> str:
    return "1 job" if count == 1 else f"{count} jobs"


def why_text(view: Json) -> list[str]:
    lines = [
        f"Pod {view['pod']}: {view['phase']}" + (f" on {view['node']}" if view["node"] else "")
    ]
    scheduled = view["podScheduled"]
    if scheduled is not None and scheduled.get("status") == "False":
        lines += _wrap(
            f"PodScheduled=False ({scheduled.get('reason')}): {scheduled.get('message') or ''}",
            "  ",
        )
    if view["gates"]:
        lines.append(f"  held by scheduling gates: {', '.join(map(str, view['gates']))}")
    pg = view["podGroup"]
    if pg is not None:
        lines.append(
            f"PodGroup {pg['name']} (queue {pg['queue']}): minMember {pg['minMember']}; "
            f"{pg['pods']} pods, {pg['placed']} placed, {pg['pending']} pending"
            + (f", {pg['gated']} gated" if pg["gated"] else "")
            + f"; needs {show(pg['needs']['gpu'])} GPUs, {show(pg['needs']['cpu'])} millicores, "
            f"{show(pg['needs']['memory'])} MB more"
        )
        where, queue = view["position"], view["queue"]
        if where is not None:
            line = (
                f"  Position {where.get('inQueue')} in {pg['queue']} "
                f"({where.get('inCluster')} in the cluster); "
                f"{_jobs(where.get('higherPriorityAhead', 0))} of higher priority ahead"
            )
            if queue is not None:
                line += (
                    f"; needs {show(pg['needs']['gpu'])} GPUs, queue has "
                    f"{show(queue['freeOfFairShare']['gpu'])} free of its fair share"
                )
            lines += _wrap(line, "")
        for c in pg["conditions"]:
            lines += _wrap(f"{c['reason']}: {c['message']}", "  ")
    queue = view["queue"]
    if queue is not None:
        parents = f" (under {' > '.join(queue['parents'])})" if queue["parents"] else ""
        lines.append(f"Queue {queue['name']}{parents}:")
        for r in RESOURCES:
            lim = queue["limits"][r]
            quota = "unlimited" if lim["quota"] == -1 else show(lim["quota"])
            lines.append(
                f"  {r:<6} quota {quota}, limit {_limit_text(lim)}, fair share "
                f"{show(queue['fairShare'][r])}, allocated {show(queue['allocated'][r])}, "
                f"free of fair share {show(queue['freeOfFairShare'][r])} ({UNITS[r]})"
            )
    if view["fit"]:
        lines.append("What would make it fit:")
        for hint in view["fit"]:
            lines += _wrap(f"- {hint}", "  ")
    if view["events"]:
        lines.append("Events:")
        for e in view["events"][-8:]:
            lines += _wrap(
                f"{e['last'] or '':<20} {e['type'] or '':<7} {e['reason'] or ''} "
                f"({e['object']}, {e['from'] or '?'}, x{e['count'] or 1}): {e['message'] or ''}",
                "  ",
            )
    # Any line still over 120 columns (long names) is wrapped at its own indentation.
    fitted: list[str] = []
    for line in lines:
        indent = line[: len(line) - len(line.lstrip())]
        fitted += _wrap(line.strip(), indent) if len(line) > 120 else [line]
    return fitted
