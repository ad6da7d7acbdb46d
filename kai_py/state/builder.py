"""Manifests -> a scheduler Snapshot, sorting problems into fatal and per-workload.

Fatal (the input as a whole is unusable, ``InputError``): unknown kinds,
objects without a name, unreadable Nodes and PriorityClasses, invalid Queues
and a broken queue tree. Per workload (``Job.errors`` plus a Warning event;
everything else is still scheduled): bad pod annotations and quantities,
invalid PodGroups, pods that name a missing PodGroup, unknown priority classes.

``kai-py simulate`` refuses a file with a fatal problem as a whole (the file is
to be fixed). The operator builds with ``strict=False``: an object with such a
problem is left out of the snapshot with a Warning event on it (``Built.left_out``)
and everything else is scheduled, since one bad object in a cluster must not
stop every cycle (its queues are sorted out before, by ``cache.usable_queues``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from kai_py.api import jsoncodec, keys
from kai_py.api.common import ManifestError
from kai_py.api.objects import WorkloadError, meta, parse_time
from kai_py.api.podgroup import PodGroup, PodGroupSpec
from kai_py.api.podgroup import TopologyConstraint as ApiTopologyConstraint
from kai_py.api.queue import MAX_QUEUE_DEPTH, queue_warnings, quota_above_limit
from kai_py.api.queue import Queue as QueueModel
from kai_py.api.topology import Topology as TopologyModel
from kai_py.emulator.cluster_spec import ClusterSpecError, node_manifest, parse_cluster
from kai_py.gpu import hami, inventory, pins
from kai_py.podgrouper.grouping import Grouped, group_for_pod
from kai_py.scheduler.model import (
    PENDING,
    RELEASING,
    RUNNING,
    Config,
    Job,
    Node,
    Queue,
    Snapshot,
    Storage,
    SubGroup,
    SubGroups,
    Task,
    TaskStatus,
    Topology,
    TopologyConstraint,
)
from kai_py.scheduler.resources import Res
from kai_py.scheduler.session import Event
from kai_py.scheduler.subgroups import tree
from kai_py.scheduler.tenancy import access
from kai_py.scheduler.topology.constraint import resolve as resolve_topology
from kai_py.state.convert import (
    claim_from_manifest,
    node_from_manifest,
    pod_status,
    queue_amount,
    requests_by_name,
    split_requests,
    storage_class_from_manifest,
    take_extended,
    task_from_pod,
    volume_node_affinity,
)
from kai_py.state.documents import Document, InputError
from kai_py.state.operators import OPERATOR_KINDS, expand, is_operator_owner
from kai_py.state.passmemo import PassMemo
from kai_py.state.queuetree import level_text, levels, loop_text, parent_loops

OWNER_KINDS = frozenset(
    {
        "Job",
        "Deployment",
        "ReplicaSet",
        "StatefulSet",
        "CronJob",
        "PyTorchJob",
        "TFJob",
        "MPIJob",
        "XGBoostJob",
        "JAXJob",
        "PaddleJob",
    }
)
IGNORED_KINDS = frozenset({"Namespace"})


@dataclass(slots=True)
class Built:
    snapshot: Snapshot
    events: list[Event] = field(default_factory=list)
    job_of_task: dict[str, str] = field(default_factory=dict)
    other_scheduler_pods: int = 0
    #: Objects left out of the snapshot (``strict=False``): (kind, namespace, name).
    left_out: list[tuple[str, str, str]] = field(default_factory=list)


@dataclass(slots=True)
class PodFacts:
    """What a build reads from a pod's manifest before its Task (read once per version).

    Read-only once made, except ``parsed``: the pod's Task as parsed for its job, kept
    with the facts so that a build finds it without making and hashing a version key.
    The operator's cache makes them when it first reads a manifest and hands them to
    the build with it (``build``'s ``pods``); other callers' are made by the build.
    """

    namespace: str
    name: str
    status: TaskStatus | None  # None: finished
    phase: Any  # the manifest's status.phase, whatever it holds
    ours: bool  # its schedulerName is ours
    group: str | None  # its PodGroup annotation
    version: tuple[object, ...] | None  # the memo's key of its parsed Task, without the job
    manifest: Mapping[str, Any]  # what these facts were read from (held: its id stays its own)
    # (the memo that parsed it, job uid, its parsed Task)
    parsed: tuple[ParseMemo, str, KeptTask] | None = None

    @staticmethod
    def of(body: Mapping[str, Any]) -> PodFacts:
        m = meta(body)
        spec = body.get("spec") or {}
        group = (m.get("annotations") or {}).get(keys.POD_GROUP_ANNOTATION)
        return PodFacts(
            namespace=str(m.get("namespace") or "default"),
            name=str(m["name"]),
            status=pod_status(body),
            phase=(body.get("status") or {}).get("phase"),
            ours=(spec.get("schedulerName") or "default-scheduler") == keys.DEFAULT_SCHEDULER_NAME,
            group=str(group) if group else None,
            version=ParseMemo.key(body),
            manifest=body,
        )


@dataclass(slots=True, eq=False)
class KeptTask:
    """A parsed Task, its pin notes, and what a session may change in it as parsed
    (put back each time a build hands the Task out)."""

    task: Task
    notes: tuple[str, ...]
    # status, node_name, gpu_groups, gpu_uuids, claim_now, nominated_node
    state: tuple[TaskStatus, str | None, tuple[str, ...], tuple[str, ...], bool, str | None]
    build: int = -1  # the build it was last handed to

    @staticmethod
    def of(task: Task, notes: tuple[str, ...]) -> KeptTask:
        return KeptTask(
            task,
            notes,
            (
                task.status,
                task.node_name,
                task.gpu_groups,
                task.gpu_uuids,
                task.claim_now,
                task.nominated_node,
            ),
        )


class ParseMemo:
    """Pods and PodGroups parsed in earlier builds, by object version, so a build parses
    only what changed.

    The operator's cache keeps one across cycles (``kai-py simulate`` builds once and
    needs none; other schedulers' pods are kept parsed by the cache itself). A pod is
    known by its uid, resourceVersion and the node it counts on (a BindRequest may
    place it before the pod says so). A build hands out the parsed Task itself, with
    what a session changes in a Task (status, node, cards, claim) put back as parsed
    (``KeptTask``): so the Tasks of one build are good until the next build from the
    same memo, which is how the operator uses them (build, decide, plan, then the
    next cycle). Copying every Task instead cost a third of a build at 41,000 pods.
    A pod's ``PodFacts`` are kept by the identity of its manifest (the operator's
    cache keeps them itself and hands them to ``build``; this memo keeps those of
    pods given as plain documents): the cache hands out the same object until the
    pod changes, so an unchanged pod is not even read again. A PodGroup's Job and a
    Node are kept by version, and a copy is handed out (few, and changed in more
    ways). Entries a build did not use are dropped at its end, so the memo holds no
    more than the cluster.
    """

    def __init__(self) -> None:
        self._tasks: PassMemo[tuple[object, ...], KeptTask] = PassMemo()
        self._builds = 0  # builds done: the one a Task was last handed to is stamped
        # (PodGroup version, its source, the priority classes) -> its Job and the events.
        self._jobs: PassMemo[tuple[object, ...], tuple[Job, tuple[Event, ...]]] = PassMemo()
        self._nodes: PassMemo[tuple[object, ...], Node] = PassMemo()
        # id(manifest) -> its facts (which hold the manifest, so its id stays its own).
        self._facts: PassMemo[int, PodFacts] = PassMemo()
        # id(PodGroup manifest) -> (the manifest, its podgroup_key): the key is JSON of
        # its metadata and spec, made again only for a manifest a watch event replaced.
        self._podgroup_keys: PassMemo[int, tuple[Mapping[str, Any], tuple[object, ...] | None]] = (
            PassMemo()
        )

    @staticmethod
    def key(body: Mapping[str, Any], *extra: object) -> tuple[object, ...] | None:
        m = meta(body)
        uid, rv = m.get("uid"), m.get("resourceVersion")
        if not uid or not rv:
            return None
        # Where it counts and on which cards: a BindRequest may place it before it says so.
        group = (m.get("labels") or {}).get(keys.GPU_GROUP_LABEL)
        return (uid, rv, (body.get("spec") or {}).get("nodeName"), group, *extra)

    def facts(self, body: Mapping[str, Any]) -> PodFacts:
        found = self._facts.get(id(body))
        if found is None or found.manifest is not body:
            found = PodFacts.of(body)
        self._facts.keep(id(body), found)
        return found

    def task(
        self, body: Mapping[str, Any], facts: PodFacts, job_uid: str, now: float
    ) -> tuple[Task, tuple[str, ...]]:
        """The pod's Task, as parsed, and its pin notes; raises WorkloadError."""
        parsed = facts.parsed
        if parsed is not None and parsed[0] is self and parsed[1] == job_uid:
            kept = parsed[2]  # the same manifest as the last build's
            return self._hand_out(kept), kept.notes
        status = facts.status
        assert status is not None, "a finished pod has no Task"
        if facts.version is None:
            return _parse_task(body, job_uid, status, now)  # no version to know it by
        key = (*facts.version, job_uid, status)
        found = self._tasks.get(key)
        if found is None:
            task, notes = _parse_task(body, job_uid, status, now)
            if task.stuck or status is RELEASING:
                return task, notes  # a releasing pod's deadline depends on the clock
            found = KeptTask.of(task, notes)
        self._tasks.keep(key, found)
        facts.parsed = (self, job_uid, found)
        return self._hand_out(found), found.notes

    def _hand_out(self, kept: KeptTask) -> Task:
        if kept.build == self._builds:
            # The same pod twice in one build (two documents of it): a copy for the
            # second, as parsed (no session has run on this build yet).
            return kept.task.clone()
        kept.build = self._builds
        task = kept.task
        (
            task.status,
            task.node_name,
            task.gpu_groups,
            task.gpu_uuids,
            task.claim_now,
            task.nominated_node,
        ) = kept.state
        return task

    @staticmethod
    def podgroup_key(body: Mapping[str, Any]) -> tuple[object, ...] | None:
        """A PodGroup known by what its Job is made of: its metadata (without the
        version) and spec. The scheduler writes the status of thousands of PodGroups in
        one cycle; each write is a new version, and parsing them all again made the cycle
        after a big allocation half again as long at 4,000 nodes (2.2 s against 1.4 s)."""
        m = meta(body)
        if not m.get("uid"):
            return None
        kept = {k: v for k, v in m.items() if k not in _VOLATILE_METADATA}
        try:
            return (m["uid"], jsoncodec.key([kept, body.get("spec")]))
        except TypeError:  # what JSON cannot hold: known by its version, as a pod
            return ParseMemo.key(body)

    def _podgroup_key_of(self, body: Mapping[str, Any]) -> tuple[object, ...] | None:
        """``podgroup_key``, kept by the identity of the manifest (as a pod's facts are)."""
        found = self._podgroup_keys.seen(id(body))  # a build asks twice on a miss
        if found is None or found[0] is not body:
            found = (body, self.podgroup_key(body))
        self._podgroup_keys.keep(id(body), found)
        return found[1]

    def job(
        self, doc: Document, classes: dict[str, int], classes_key: object, events: list[Event]
    ) -> Job:
        """The PodGroup's Job (a fresh copy); its problems are added to ``events``.

        ``classes_key`` stands for the priority classes, which the Job's priority comes from.
        """
        key = self._podgroup_key_of(doc.body)
        if key is not None:
            key = (*key, doc.source, classes_key)

        def make() -> tuple[Job, tuple[Event, ...]]:
            made: list[Event] = []
            return _job_from_podgroup(doc, classes, made), tuple(made)

        job, problems = self._jobs.find(key, make)
        events.extend(problems)
        return job.clone()

    def node(self, body: Mapping[str, Any]) -> Node:
        """The Node (a fresh copy); raises WorkloadError."""
        m = meta(body)
        uid, rv = m.get("uid"), m.get("resourceVersion")
        key: tuple[object, ...] | None = None
        if uid and rv:
            # The cards of its GPU groups are added by the operator's view, not the API.
            cards = (m.get("annotations") or {}).get(keys.GPU_GROUP_CARDS_ANNOTATION)
            key = (uid, rv, cards)
        return self._nodes.find(key, lambda: node_from_manifest(body)).clone()

    def done(self) -> None:
        """The end of a build: keep what it used."""
        self._builds += 1
        self._tasks.done()
        self._facts.done()
        self._podgroup_keys.done()
        self._jobs.done()
        self._nodes.done()


#: What reading one object raises: a bad value (``WorkloadError``, a ValueError), or a
#: field of the wrong shape (a string where a map or a list belongs), which a real API
#: server refuses but which must not stop every cycle when one gets in anyway.
UNREADABLE: Final = (ValueError, TypeError, AttributeError, KeyError)


def unreadable(who: str, exc: Exception) -> str:
    """The message of an ``UNREADABLE`` error of ``who`` ("Node n1", "Pod ns/p")."""
    if isinstance(exc, WorkloadError):
        return str(exc)
    return f"{who}: cannot be read, a field has the wrong type ({type(exc).__name__}: {exc})"


#: What changes in a PodGroup's metadata with every write, and is not read by its Job.
_VOLATILE_METADATA: Final = frozenset({"resourceVersion", "managedFields"})


def _parse_podgroup(body: Mapping[str, Any]) -> PodGroup | ManifestError:
    """The PodGroup without its status: the status is what the scheduler writes, not
    what it reads, so a status it cannot read does not stop the workload."""
    try:
        return PodGroup.from_manifest({k: v for k, v in body.items() if k != "status"})
    except ManifestError as exc:
        return exc


def _parse_task(
    body: Mapping[str, Any], job_uid: str, status: TaskStatus, now: float
) -> tuple[Task, tuple[str, ...]]:
    body = hami_as_translated(body)
    task = task_from_pod(body, job_uid, status, now)
    task.pin = pins.pin_of(body)
    task.policy = pins.policy_of(body)
    if status is not TaskStatus.PENDING:
        task.gpu_uuids = pins.reported_uuids(body)
    return task, tuple(pins.pin_notes(body))


def _dev_cluster_nodes(doc: Document, first_index: int) -> list[Node]:
    spec = parse_cluster(dict(doc.body), doc.source)
    made: list[Node] = []
    for group in spec.nodes:
        for name in group.node_names():
            manifest = node_manifest(name, group, first_index + len(made), "1970-01-01T00:00:00Z")
            made.append(node_from_manifest(manifest))
    return made


def inventory_warning(doc: Document, name: str, events: list[Event]) -> None:
    """A Warning on a Node whose GPU inventory cannot be read (it gets no pinned pods),
    and one for each of HAMi's Node annotations kai-py does not apply."""
    try:
        inventory.node_cards(meta(doc.body).get("annotations") or {})
    except inventory.InventoryError as exc:
        message = f"{doc.source}: Node {name}: {exc}; pinned pods will not be placed on it"
        events.append(Event("Node", "", name, "Warning", "InvalidGpuInventory", message))
    for key, why in hami.unapplied_node_annotations(meta(doc.body).get("annotations") or {}):
        message = (
            f"{doc.source}: Node {name}: metadata.annotations[{key}] is not applied by kai-py "
            f"({why})"
        )
        events.append(_not_applied("Node", "", name, message))


def hami_as_translated(body: Mapping[str, Any]) -> Mapping[str, Any]:
    """A pod with HAMi's GPU resources, as kai-py's webhook would have rewritten it.

    In a cluster the webhook rewrites such pods when they are created; one stored
    with HAMi's resources (the webhook is not installed) can never start, since no
    node advertises them, and is reported instead.
    """
    if (meta(body).get("annotations") or {}).get(hami.UNTRANSLATED_ANNOTATION):
        raise WorkloadError(
            pins_ref(body),
            "spec.containers[].resources",
            f"asks for HAMi's GPU resources ({keys.HAMI_GPUMEM_RESOURCE}, "
            f"{keys.HAMI_GPUMEM_PERCENTAGE_RESOURCE} or {hami.GPUCORES_RESOURCE}), which no "
            "node advertises; install kai-py's HAMi webhook so that they are translated "
            "when the pod is created",
        )
    try:
        translated = hami.translate(body)
    except hami.HamiError as exc:
        who = pins_ref(body)
        raise WorkloadError(who, "HAMi resources", str(exc).removeprefix(f"{who}: ")) from None
    return body if translated is None else translated[0]


def pins_ref(body: Mapping[str, Any]) -> str:
    m = meta(body)
    return f"Pod {m.get('namespace') or 'default'}/{m.get('name')}"


def _name(doc: Document) -> str:
    if doc.body.get("kind") == "DevCluster":
        return str(meta(doc.body).get("name") or "dev-cluster")
    name = meta(doc.body).get("name")
    if not name:
        raise InputError(
            [f"{doc.source}: {doc.body.get('kind')}: metadata.name: required field is missing"]
        )
    return str(name)


def _at(source: str, text: str) -> str:
    """``source: text``, unless the text already starts with the source.

    In the operator a document's source is the object itself ("Pod ns/name"),
    which the text names already: "Pod a/b: Pod a/b: ..." says nothing twice.
    """
    return text if text.startswith(f"{source}:") or text == source else f"{source}: {text}"


def _ns(doc: Document) -> str:
    return str(meta(doc.body).get("namespace") or "default")


def default_queues() -> list[Queue]:
    """What KAI's default install creates: default-parent-queue / default-queue."""
    unlimited = Res(float("inf"), float("inf"), float("inf"))
    return [
        Queue(
            keys.DEFAULT_PARENT_QUEUE,
            None,
            quota=Res(),
            limit=unlimited.copy(),
            weight=Res(1, 1, 1),
        ),
        Queue(
            keys.DEFAULT_QUEUE,
            keys.DEFAULT_PARENT_QUEUE,
            quota=Res(),
            limit=unlimited.copy(),
            weight=Res(1, 1, 1),
        ),
    ]


def queue_from_model(q: QueueModel) -> Queue:
    quota, limit, weight = Res(), Res(), Res()
    for res, spec in q.spec.resources.items():
        setattr(quota, res, queue_amount(spec.quota, res))
        setattr(limit, res, queue_amount(spec.limit, res))
        setattr(weight, res, spec.over_quota_weight)
    return Queue(
        name=q.metadata.name,
        parent=q.spec.parent_queue or None,
        quota=quota,
        limit=limit,
        weight=weight,
        priority=q.spec.priority,
        created=parse_time(q.metadata.creation_timestamp) or 0.0,
        preempt_min_runtime=q.spec.preempt_min_runtime_seconds
        if q.spec.preempt_min_runtime
        else None,
        reclaim_min_runtime=q.spec.reclaim_min_runtime_seconds
        if q.spec.reclaim_min_runtime
        else None,
        tenancy=access.of_spec(q.spec),
        admission_gating=q.spec.admission_gating,
        gpu_models={
            m.model: (queue_amount(m.quota, "gpu"), queue_amount(m.limit, "gpu"))
            for m in q.spec.gpu_models
        }
        if q.spec.gpu_models
        else None,
    )


def check_queue_tree(queues: dict[str, Queue], sources: dict[str, str]) -> None:
    problems = [
        f"{sources[q.name]}: Queue {q.name}: spec.parentQueue: queue {q.parent!r} does not exist"
        for q in queues.values()
        if q.parent is not None and q.parent not in queues
    ]
    parents = {q.name: q.parent for q in queues.values()}
    for loop in parent_loops(parents):
        problems.append(
            f"{sources[loop[0]]}: Queue {loop[0]}: spec.parentQueue: parents form a cycle: "
            f"{loop_text(loop)}"
        )
    if problems:
        raise InputError(problems)
    # The first queue too deep on each branch says so (not every queue under it).
    problems = [
        _at(
            sources[name],
            f"Queue {name}: spec.parentQueue: "
            + level_text(name, parents[name], level, MAX_QUEUE_DEPTH),
        )
        for name, level in levels(parents).items()
        if level == MAX_QUEUE_DEPTH + 1
    ]
    if problems:
        raise InputError(problems)


def build(
    docs: list[Document],
    now: float,
    config: Config | None = None,
    memo: ParseMemo | None = None,
    workloads: bool = True,
    pods: Iterable[tuple[Document, PodFacts]] = (),
    strict: bool = True,
) -> Built:
    """The Snapshot of ``docs``. ``workloads``: make the pods of owners (Jobs, Deployments,
    ...) given without them, as ``kai-py simulate`` does; the operator's view holds
    only pods that exist, so it saves the look at every document. ``pods``: pods
    already read, with their facts (the operator's cache reads each manifest once),
    taken before the pods of ``docs``; the build then does not look at each again.
    ``strict=False`` (the operator): an unreadable Node or PriorityClass is left out
    with a Warning event instead of refusing the whole input (see the module's doc)."""
    events: list[Event] = []
    if workloads:
        docs = expand(docs, events)
    memo = memo if memo is not None else ParseMemo()
    fatal: list[str] = []
    nodes: list[Node] = []
    queues: dict[str, Queue] = {}
    queue_sources: dict[str, str] = {}
    priority_classes = dict(keys.STANDARD_PRIORITY_CLASSES)
    podgroups: list[Document] = []
    pod_docs: list[Document] = []
    owners: dict[tuple[str, str], Mapping[str, Any]] = {}  # (namespace, uid or kind/name)
    left_out: list[tuple[str, str, str]] = []
    config_maps: set[tuple[str, str]] = set()
    storage = Storage()
    topologies: dict[str, Topology] = {}
    invalid_topologies: set[str] = set()

    def refuse(kind: str, name: str, reason: str, message: str) -> None:
        """One cluster-scoped object's fatal problem: the input's, or (not strict) its own."""
        if strict:
            fatal.append(message)
            return
        left_out.append((kind, "", name))
        events.append(Event(kind, "", name, "Warning", reason, f"{message}; it is left out"))

    for doc in docs:
        kind = doc.body.get("kind")
        if kind == "Pod" and meta(doc.body).get("name"):
            pod_docs.append(doc)  # most documents are pods: one check and on (without a
            continue  # name, _name below reports it)
        try:
            name = _name(doc)
        except InputError as exc:
            fatal.extend(exc.problems)
            continue
        if kind == "Node":
            try:
                nodes.append(memo.node(doc.body))
            except UNREADABLE as exc:
                refuse(
                    "Node", name, "InvalidNode", _at(doc.source, unreadable(f"Node {name}", exc))
                )
                continue
            inventory_warning(doc, name, events)
        elif kind == "Queue":
            try:
                model = QueueModel.from_manifest(doc.body)
            except ManifestError as exc:
                fatal.extend(f"{doc.source}: {line}" for line in str(exc).splitlines())
                continue
            if name in queues:
                fatal.append(
                    f"{doc.source}: Queue {name}: defined twice (also in {queue_sources[name]})"
                )
            queues[name] = queue_from_model(model)
            queue_sources[name] = doc.source
            events.extend(
                Event("Queue", "", name, "Warning", "QueueLimitTrap", w)
                for w in queue_warnings(model)
            )
            events.extend(
                Event("Queue", "", name, "Warning", "QuotaAboveLimit", w)
                for w in quota_above_limit(model)
            )
        elif kind == "PriorityClass":
            value = doc.body.get("value")
            if not isinstance(value, int) or isinstance(value, bool):
                refuse(
                    "PriorityClass",
                    name,
                    "InvalidPriorityClass",
                    _at(
                        doc.source,
                        f"PriorityClass {name}: value: must be an integer, got {value!r}",
                    ),
                )
            else:
                priority_classes[name] = value
        elif kind == "PodGroup":
            podgroups.append(doc)
        elif kind == "Topology":
            try:
                topologies[name] = topology_from_model(TopologyModel.from_manifest(doc.body))
            except ManifestError as exc:
                invalid_topologies.add(name)
                refuse(
                    "Topology",
                    name,
                    "InvalidTopology",
                    "; ".join(_at(doc.source, line) for line in str(exc).splitlines()),
                )
        elif kind == "ConfigMap":
            config_maps.add((_ns(doc), name))  # only that it exists: pods may need it
        elif kind == "PersistentVolumeClaim":
            storage.claims[(_ns(doc), name)] = claim_from_manifest(doc.body)
        elif kind == "PersistentVolume":
            storage.volumes[name] = volume_node_affinity(doc.body)
        elif kind == "StorageClass":
            try:
                storage.classes[name] = storage_class_from_manifest(doc.body)
            except WorkloadError as exc:
                refuse("StorageClass", name, "InvalidStorageClass", _at(doc.source, str(exc)))
        elif kind in OWNER_KINDS or is_operator_owner(doc.body):
            uid = str(meta(doc.body).get("uid") or f"{kind}/{name}")
            owners[(_ns(doc), uid)] = doc.body
            owners[(_ns(doc), f"{kind}/{name}")] = doc.body
        elif kind == "DevCluster":
            # The `kai-py dev` cluster description works here too: its nodes are added.
            try:
                nodes.extend(_dev_cluster_nodes(doc, len(nodes)))
            except (ClusterSpecError, WorkloadError) as exc:
                fatal.append(f"{doc.source}: {exc}")
        elif kind in IGNORED_KINDS:
            continue
        elif kind == "BindRequest":
            # A snapshot of a live cluster holds them; the pods they name count as they are.
            events.append(
                Event(
                    "BindRequest",
                    _ns(doc),
                    name,
                    "Normal",
                    "Ignored",
                    f"{doc.source}: BindRequest {_ns(doc)}/{name} is ignored: kai-py simulate "
                    "decides from the pods as they are (bound or pending)",
                )
            )
        else:
            fatal.append(
                f"{doc.source}: {kind or '(no kind)'} {name}: kind: unknown kind {kind!r}; kai-py simulate "
                f"reads Node, Pod, Queue, PodGroup, Topology, PriorityClass, ConfigMap, PersistentVolumeClaim, "
                f"PersistentVolume, StorageClass and workload owners "
                f"({', '.join(sorted(OWNER_KINDS | {k for _, k in OPERATOR_KINDS}))}; custom kinds "
                "with their API group, see docs/simulate.md)"
            )
    if fatal:
        raise InputError(fatal)
    check_queue_tree(queues, queue_sources)
    if workloads:
        # A pod can own pods (a LeaderWorkerSet's leader, a Spark driver): the owner
        # walk goes through it. Only simulate's input needs this (the operator's
        # pod-grouper reads owners from the API server).
        for doc in pod_docs:
            ns, pod_uid = _ns(doc), meta(doc.body).get("uid")
            if pod_uid:
                owners[(ns, str(pod_uid))] = doc.body
            owners[(ns, f"Pod/{meta(doc.body).get('name')}")] = doc.body

    jobs: dict[tuple[str, str], Job] = {}
    classes_key = frozenset(priority_classes.items())
    for doc in podgroups:
        job = memo.job(doc, priority_classes, classes_key, events)
        jobs[(job.namespace, job.name)] = job

    built = Built(
        Snapshot(
            nodes=nodes,
            queues=[],
            jobs=[],
            now=now,
            config=config or Config(),
            config_maps=frozenset(config_maps),
            storage=storage,
            topologies=topologies,
        ),
        events,
        left_out=left_out,
    )
    nodes_by_name: dict[str, Node] = {}
    for n in nodes:
        nodes_by_name.setdefault(n.name, n)  # a name given twice: the first counts
    for doc, facts in pods:
        _add_pod(doc, facts, jobs, owners, priority_classes, nodes_by_name, built, memo)
    for doc in pod_docs:
        _add_pod(
            doc, memo.facts(doc.body), jobs, owners, priority_classes, nodes_by_name, built, memo
        )
    memo.done()
    built.snapshot.jobs = list(jobs.values())
    for job in built.snapshot.jobs:
        if job.topology is not None:
            _check_topology(job, topologies, invalid_topologies, events)
        if job.subgroups is not None and job.subgroups.constrained:
            for group in job.subgroups.groups.values():
                if group.topology is not None:
                    _check_topology(
                        job, topologies, invalid_topologies, events, group.topology, group.index
                    )
    for job in built.snapshot.jobs:
        if job.stale_since is None:
            job.stale_since = _stale_since(job)
    if keys.DEFAULT_QUEUE not in queues and any(
        j.queue == keys.DEFAULT_QUEUE for j in jobs.values()
    ):
        # Workloads without a queue label land in default-queue, which KAI's install creates.
        for q in default_queues():
            queues.setdefault(q.name, q)
    built.snapshot.queues = list(queues.values())
    return built


def _warn_unapplied(body: Mapping[str, Any], ns: str, name: str, source: str, built: Built) -> None:
    """A pending pod's settings kai-py reads but does not apply: said loudly, never
    silently dropped."""
    affinity = (body.get("spec") or {}).get("affinity") or {}
    unapplied: list[tuple[str, str]] = []
    preferred = (affinity.get("nodeAffinity") or {}).get(
        "preferredDuringSchedulingIgnoredDuringExecution"
    ) or []
    for i, entry in enumerate(preferred):
        if isinstance(entry, Mapping) and (entry.get("preference") or {}).get("matchFields"):
            unapplied.append(
                (
                    "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution"
                    f"[{i}].preference.matchFields",
                    "the term scores no node; use matchExpressions on kubernetes.io/hostname",
                )
            )
    no_selectors = "namespace selectors other than the empty one are not implemented"
    for key in ("podAffinity", "podAntiAffinity"):
        section = affinity.get(key) or {}
        required = section.get("requiredDuringSchedulingIgnoredDuringExecution") or []
        for i, term in enumerate(required):
            if isinstance(term, Mapping) and term.get("namespaceSelector"):
                path = f"spec.affinity.{key}.requiredDuringSchedulingIgnoredDuringExecution[{i}]"
                unapplied.append((f"{path}.namespaceSelector", no_selectors))
        # Preferred terms are scored with the same term reading: same limit.
        weighted = section.get("preferredDuringSchedulingIgnoredDuringExecution") or []
        for i, entry in enumerate(weighted):
            term = entry.get("podAffinityTerm") if isinstance(entry, Mapping) else None
            if isinstance(term, Mapping) and term.get("namespaceSelector"):
                path = f"spec.affinity.{key}.preferredDuringSchedulingIgnoredDuringExecution[{i}]"
                unapplied.append((f"{path}.podAffinityTerm.namespaceSelector", no_selectors))
    annotations = meta(body).get("annotations") or {}
    for key, why in hami.unapplied_pod_annotations(annotations):
        unapplied.append((f"metadata.annotations[{key}]", why))
    for path, why in unapplied:
        built.events.append(
            _not_applied(
                "Pod",
                ns,
                name,
                f"{source}: Pod {ns}/{name}: {path} is not applied by kai-py ({why})",
            )
        )


def _not_applied(kind: str, ns: str, name: str, message: str) -> Event:
    """The Warning on an object a field of which kai-py does not apply (the object is
    used without it): said on the object, never dropped silently."""
    return Event(kind, ns, name, "Warning", "NotApplied", message)


def topology_from_model(model: TopologyModel) -> Topology:
    levels = model.spec.levels
    return Topology(
        model.metadata.name or "",
        tuple(level.node_label for level in levels),
        tuple(level.alias for level in levels),
    )


def _check_topology(
    job: Job,
    topologies: dict[str, Topology],
    invalid: set[str],
    events: list[Event],
    constraint: TopologyConstraint | None = None,
    index: int | None = None,
) -> None:
    """A Warning on the PodGroup whose constraint (its own, or sub-group ``index``'s)
    cannot be applied: the job waits (the scheduler says why in its status too), never
    placed as if it had none."""
    constraint = constraint or job.topology
    assert constraint is not None
    at = "spec.topologyConstraint" if index is None else f"spec.subGroups[{index}].topologyConstraint"
    problem = resolve_topology(constraint, topologies, at)
    if isinstance(problem, str):
        where = f"{job.source}: " if job.source else ""
        name = constraint.topology
        if name in invalid:
            problem = (
                f"{at}.topology: Topology {name!r} is invalid and not used "
                "(its InvalidTopology Event says why); the job waits until it is fixed"
            )
        message = f"{where}PodGroup {job.key}: {problem}"
        events.append(
            Event("PodGroup", job.namespace, job.name, "Warning", "TopologyNotApplied", message)
        )


def _topology_constraint(
    spec: PodGroupSpec | None,
    who: str,
    events: list[Event],
    ns: str,
    name: str,
    constraint: ApiTopologyConstraint | None = None,
    at: str = "spec.topologyConstraint",
) -> TopologyConstraint | None:
    if constraint is None and spec is not None:
        constraint = spec.topology_constraint
    if constraint is None:
        return None
    required, preferred = constraint.required_topology_level, constraint.preferred_topology_level
    if not constraint.topology:
        if required or preferred:
            # KAI applies no constraint without a Topology; said, not dropped silently.
            events.append(
                _not_applied(
                    "PodGroup",
                    ns,
                    name,
                    f"{who}: {at} names a level "
                    f"({required or preferred!r}) but no topology: it is not applied; set "
                    f"{at}.topology to the Topology's name",
                )
            )
        return None
    return TopologyConstraint(constraint.topology, required or None, preferred or None)


def _stale_since(job: Job) -> float | None:
    """When a running gang fell below minMember, as far as the pods tell.

    A replacement pod is created when a member dies, so the newest pending pod
    dates the loss; without one, the gang counts as stale from now on.
    """
    if job.min_member < 2:
        return None  # no gang: never below its minimum while running
    running = sum(1 for t in job.tasks if t.status is RUNNING)
    if not 0 < running < job.min_member:
        return None
    pending = [t.created for t in job.tasks if t.status is TaskStatus.PENDING and t.created]
    return max(pending) if pending else None


def subgroups_of(
    spec: PodGroupSpec, who: str = "", events: list[Event] | None = None, ns: str = "", name: str = ""
) -> SubGroups:
    """The sub-group tree of a PodGroup (spec.subGroups, spec.minSubGroup); the spec is
    valid (names unique, parents exist, no cycle). A leaf without minMember needs no pod."""
    listed = spec.sub_groups or []
    said: list[Event] = [] if events is None else events
    kids: dict[str | None, list[str]] = {}
    for group in listed:
        kids.setdefault(group.parent, []).append(group.name)
    groups = {
        g.name: SubGroup(
            name=g.name,
            parent=g.parent,
            min_member=g.min_member or 0,
            min_sub_group=g.min_sub_group,
            children=tuple(kids.get(g.name, ())),
            topology=_topology_constraint(
                None, who, said, ns, name, g.topology_constraint, f"spec.subGroups[{i}].topologyConstraint"
            )
            if g.topology_constraint is not None
            else None,
            index=i,
        )
        for i, g in enumerate(listed)
    }
    return SubGroups(groups, tuple(kids.get(None, ())), spec.min_sub_group)


def _stray(job: Job, task: Task, body: Mapping[str, Any], source: str, built: Built) -> None:
    """A pod of a PodGroup with sub-groups whose label names none of its leaves: a pending
    one is never placed (KAI keeps it out of every sub-group); a running one keeps what
    it holds but counts for no sub-group. Said on the pod in every cycle, not dropped."""
    labels = meta(body).get("labels") or {}
    value = labels.get(keys.SUBGROUP_LABEL)
    assert job.subgroups is not None
    leaves = sorted(n for n, g in job.subgroups.groups.items() if not g.children)
    if value is None:
        what = f"metadata.labels[{keys.SUBGROUP_LABEL}] is not set"
    elif value in job.subgroups.groups:
        what = (
            f"metadata.labels[{keys.SUBGROUP_LABEL}]: {value!r} has child sub-groups; "
            "pods belong to a leaf sub-group"
        )
    else:
        what = (
            f"metadata.labels[{keys.SUBGROUP_LABEL}]: sub-group {value!r} does not exist "
            f"in PodGroup {job.key}"
        )
    fate = (
        "it is not scheduled"
        if task.status is PENDING
        else "it keeps its node but counts for no sub-group"
    )
    built.events.append(
        Event(
            "Pod",
            task.namespace,
            task.name,
            "Warning",
            "SubGroupNotFound",
            _at(
                source,
                f"Pod {task.key}: {what}; {fate} (leaf sub-groups: {', '.join(leaves)})",
            ),
        )
    )


def _priority(name: str | None, classes: dict[str, int], errors: list[str], who: str) -> int:
    cls = name or keys.DEFAULT_PRIORITY_CLASS
    if cls not in classes:
        errors.append(f"{who}: spec.priorityClassName: PriorityClass {cls!r} does not exist")
        return 0
    return classes[cls]


def _job_from_podgroup(doc: Document, classes: dict[str, int], events: list[Event]) -> Job:
    m = meta(doc.body)
    ns, name = _ns(doc), str(m["name"])
    who = _at(doc.source, f"PodGroup {ns}/{name}")
    errors: list[str] = []
    # Parsed for the Job alone and not kept: the Job is (by ``ParseMemo.job``). The
    # parsed models of 9,695 PodGroups held 30 MB at the peak of a new leader's first
    # cycle at 4,000 nodes; only a change of PriorityClasses parses them again.
    parsed = _parse_podgroup(doc.body)
    pg = parsed if isinstance(parsed, PodGroup) else None
    if isinstance(parsed, ManifestError):
        errors.extend(_at(doc.source, line) for line in str(parsed).splitlines())
    spec = pg.spec if pg is not None else None
    priority = _priority(spec.priority_class_name if spec else None, classes, errors, who)
    if spec is not None and spec.preemptibility is not None:
        preemptible = spec.preemptibility == keys.PREEMPTIBLE
    else:
        preemptible = priority < keys.PREEMPTIBLE_PRIORITY_THRESHOLD
    annotations = m.get("annotations") or {}
    stale_text = annotations.get(keys.STALE_SINCE_ANNOTATION) or annotations.get(
        keys.KAI_STALE_TIMESTAMP_ANNOTATION
    )
    stale_since = None
    if stale_text:
        try:
            stale_since = parse_time(stale_text)
        except ValueError:
            errors.append(
                f"{who}: metadata.annotations[{keys.STALE_SINCE_ANNOTATION}]: "
                f"not an RFC 3339 time: {stale_text!r}"
            )
    last_evicted = None
    evicted_text = annotations.get(keys.LAST_EVICTION_ANNOTATION)
    if evicted_text:
        try:
            last_evicted = parse_time(evicted_text)
        except ValueError:
            errors.append(
                f"{who}: metadata.annotations[{keys.LAST_EVICTION_ANNOTATION}]: "
                f"not an RFC 3339 time: {evicted_text!r}"
            )
    job = Job(
        uid=str(m.get("uid") or f"{ns}/{name}"),
        source=doc.source,
        stale_since=stale_since,
        namespace=ns,
        name=name,
        queue=(spec.queue if spec and spec.queue else keys.DEFAULT_QUEUE),
        priority=priority,
        preemptible=preemptible,
        min_member=spec.min_member if spec else 1,
        created=parse_time(m.get("creationTimestamp")) or 0.0,
        staleness_grace=spec.staleness_grace_seconds if spec else 60.0,
        staleness_default=spec is None or spec.staleness_grace_period is None,
        preemption_delay=spec.preemption_delay_seconds if spec else 0.0,
        last_evicted=last_evicted,
        mark_unschedulable=spec.mark_unschedulable if spec else True,
        priority_class=(spec.priority_class_name or keys.DEFAULT_PRIORITY_CLASS) if spec else "",
        errors=errors,
        topology=_topology_constraint(spec, who, events, ns, name),
    )
    if spec is not None and spec.sub_groups:
        job.subgroups = subgroups_of(spec, who, events, ns, name)
        job.min_member = tree.min_pods(job.subgroups)  # the fewest pods that can start it
    for message in errors:
        events.append(Event("PodGroup", ns, name, "Warning", "InvalidPodGroup", message))
    if spec is not None and spec.scheduling_backoff is not None:
        events.append(
            _not_applied(
                "PodGroup",
                ns,
                name,
                f"{who}: spec.schedulingBackoff is not applied by kai-py: a job that does not "
                f"fit is tried again in every cycle",
            )
        )
    return job


def _add_pod(
    doc: Document,
    facts: PodFacts,
    jobs: dict[tuple[str, str], Job],
    owners: dict[tuple[str, str], Mapping[str, Any]],
    classes: dict[str, int],
    node_names: dict[str, Node],
    built: Built,
    memo: ParseMemo,
) -> None:
    body = doc.body
    ns, name, status = facts.namespace, facts.name, facts.status
    if status is None:
        group = facts.group
        if facts.phase == "Succeeded" and group and (ns, group) in jobs:
            # It counts towards minMember, and its gang is not stale (it is winding down).
            jobs[(ns, group)].succeeded += 1
        return
    if not facts.ours:
        # Another scheduler's pod: what it holds is not ours to give.
        spec = body.get("spec") or {}
        node = node_names.get(str(spec.get("nodeName") or ""))
        if node is not None and status is not PENDING:
            node.max_pods -= 1  # its slot, even when its requests do not parse
            try:
                used, extended = split_requests(requests_by_name(body))
            except WorkloadError:
                return
            node.allocatable.sub(used)
            if extended is not None:
                take_extended(node, extended)
        built.other_scheduler_pods += 1
        return
    # An annotated pod names its group; only others need the grouper (and its owners).
    group = facts.group
    grouped: Grouped | None = None
    if group is None:
        grouped = group_for_pod(body, owners)
        group = grouped.name
        for warning in grouped.warnings:
            built.events.append(
                Event(
                    "Pod", ns, name, "Warning", "PodGrouperWarning", _at(doc.source, str(warning))
                )
            )
    job = jobs.get((ns, group))
    if job is None:
        grouped = grouped or Grouped(group)
        if grouped.podgroup is not None:
            job = _job_from_podgroup(Document(doc.source, grouped.podgroup), classes, built.events)
        else:
            m = meta(body)
            message = _at(
                doc.source,
                f"Pod {ns}/{name}: metadata.annotations[{keys.POD_GROUP_ANNOTATION}]: "
                f"PodGroup {grouped.name!r} does not exist in namespace {ns}",
            )
            job = Job(
                uid=f"missing:{ns}/{grouped.name}",
                namespace=ns,
                name=grouped.name,
                queue=keys.DEFAULT_QUEUE,
                priority=0,
                preemptible=True,
                min_member=1,
                created=parse_time(m.get("creationTimestamp")) or 0.0,
                errors=[message],
            )
            built.events.append(Event("Pod", ns, name, "Warning", "PodGroupNotFound", message))
        jobs[(ns, grouped.name)] = job
    try:
        task, notes = memo.task(body, facts, job.uid, built.snapshot.now)
        for note in notes:
            built.events.append(
                Event("Pod", ns, name, "Normal", "GpuPinIgnored", f"{doc.source}: {note}")
            )
    except UNREADABLE as exc:
        m, spec = meta(body), body.get("spec") or {}
        message = _at(doc.source, unreadable(f"Pod {ns}/{name}", exc))
        job.errors.append(message)
        built.events.append(Event("Pod", ns, name, "Warning", "InvalidPod", message))
        task = Task(
            uid=str(m.get("uid") or f"{ns}/{name}"),
            namespace=ns,
            name=name,
            job_uid=job.uid,
            request=Res(),
            status=TaskStatus.PENDING,
            created=parse_time(m.get("creationTimestamp")) or 0.0,
        )
        if status is not TaskStatus.PENDING:
            task.status, task.node_name = status, str(spec.get("nodeName"))
    if status is PENDING:
        _warn_unapplied(body, ns, name, doc.source, built)
    if task.node_name is not None and task.node_name not in node_names:
        gone = "is left out (see its events)"
        if ("Node", "", task.node_name) not in built.left_out:
            gone = "does not exist"
        message = _at(doc.source, f"Pod {ns}/{name}: spec.nodeName: node {task.node_name!r} {gone}")
        built.events.append(Event("Pod", ns, name, "Warning", "NodeNotFound", message))
        return
    sub_group = grouped.sub_group if grouped is not None else None
    if sub_group is not None and task.labels.get(keys.SUBGROUP_LABEL) != sub_group:
        # The live pod-grouper labels the pod with its sub-group; offline, say it here.
        task.labels = {**task.labels, keys.SUBGROUP_LABEL: sub_group}
    if job.subgroups is not None and tree.leaf_name(job.subgroups, task) is None:
        _stray(job, task, body, doc.source, built)
        if task.status is PENDING:
            return  # never placed, as KAI: no leaf sub-group would count it
    if task.gates:  # never placed while gated: kept apart, where no action looks
        job.gated.append(task)
        return
    job.tasks.append(task)
    built.job_of_task[task.uid] = job.uid
