"""Choosing a node (and GPU cards) for one task: binpack or spread.

Whole-GPU tasks use the NodeIndex buckets; CPU-only and shared-GPU tasks scan
the nodes, which is fine because they are few in GPU clusters and their
per-node checks are cheap.

A node marked ``avoided`` (a bind there timed out recently) is tried only after
every other node, releasing ones included: the search runs once without such
nodes and, only if that finds nothing, again with them. When a task lands
elsewhere while an avoided node would have taken it, or on an avoided node as
nothing else fits, the session notes why (``Session.passed_over``) for the
task's Event.
"""

from __future__ import annotations

import math
import operator
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from kai_py.scheduler import pinning, preferences
from kai_py.scheduler.gpumodels.limits import GpuModelCache, model_usage
from kai_py.scheduler.model import Node, Task
from kai_py.scheduler.podaffinity import PodAffinity
from kai_py.scheduler.predicates import PredicateCache, RoleRestrictedCache
from kai_py.scheduler.preferences import has_preferences
from kai_py.scheduler.reasons import TOO_MANY_PODS, insufficient
from kai_py.scheduler.resources import EPS
from kai_py.scheduler.session import Session
from kai_py.scheduler.tenancy.cards import OwnedCardsCheck, Ownership

# The sort key of ``_domain_order``'s entries: all but the node itself (names are unique).
_BY_KEY = operator.itemgetter(slice(0, 5))


@dataclass(slots=True)
class Placement:  # not frozen: a frozen dataclass's __init__ costs three object.__setattr__
    node: Node
    groups: tuple[str, ...]
    pipelined: bool


class Placer:
    def __init__(self, session: Session) -> None:
        self.session = session
        anti = any(t.pod_anti_affinity for j in session.jobs.values() for t in j.tasks)
        self.pod_affinity = PodAffinity(session.nodes.values(), any_anti_affinity=anti)
        config = session.snapshot.config
        self.predicates: PredicateCache = (
            RoleRestrictedCache(
                session.framework,
                config,
                self.pod_affinity,
                session.snapshot.config_maps,
                session.snapshot.storage,
            )
            if config.restrict_node_scheduling
            else PredicateCache(
                session.framework,
                self.pod_affinity,
                session.snapshot.config_maps,
                session.snapshot.storage,
            )
        )
        # Cards owned by queues (kai_py/scheduler/tenancy/cards.py): checked after the
        # predicates, and only when some queue owns one.
        self.owned = (
            Ownership.of(
                session.queues.values(), session.nodes.values(), session.jobs, session.ancestors
            )
            if session.tenancy
            else None
        )
        if self.owned is not None:
            self.predicates = OwnedCardsCheck(self.predicates, self.owned)
        usage = model_usage(session)
        # Per-model limits (docs/quota-per-model.md) make where a task fits depend on its
        # queue: failed demands and reasons are then remembered per queue.
        self._per_queue = usage is not None or self.owned is not None
        if usage is not None:
            self.predicates = GpuModelCache(self.predicates, usage)
        self.model_usage = usage  # reclaim per model asks it too (gpumodels/reclaim.py)
        self.spread = session.framework.placement == "spread"
        self.card_spread = session.framework.card_placement == "spread"
        self._no_fit: dict[tuple[object, ...], str] = {}
        # Demands that found no node, with the session's release generation then: a
        # search is repeated only once something was freed (victim searches ask the
        # same of many scenarios).
        self._failed: dict[int, int] = {}
        # Each demand key once per task uid, as a small number: building the key and
        # hashing it cost more than the rest of a search that finds a node at once.
        self._demand_of: dict[str, int] = {}
        self._demand_ids: dict[tuple[object, ...], int] = {}
        self._avoided = [n for n in session.nodes.values() if n.avoided is not None]
        # A topology domain the current gang is held to (``within``), else None: the
        # nodes to look at and their order (see kai_py/scheduler/topology).
        self._within: list[Node] | None = None
        self._rank: dict[str, int] = {}

    def within(self, nodes: list[Node] | None, rank: dict[str, int] | None = None) -> None:
        """Hold the next searches to ``nodes``, tried by ``rank`` (smaller first) and then
        as usual; None lifts the hold."""
        self._within = nodes
        self._rank = rank or {}

    def _node_spread(self, task: Task) -> bool:
        """Spread nodes for this task: its own HAMi node policy, else the cluster's."""
        policy = task.policy
        return self.spread if policy is None else policy.node == "spread"

    def _card_spread(self, task: Task) -> bool:
        """Spread cards for this task: its own HAMi card policy, else the cluster's."""
        policy = task.policy
        return self.card_spread if policy is None else policy.card == "spread"

    # --------------------------------------------------------------- fit
    @staticmethod
    def _fits_plain(task: Task, node: Node, future: bool) -> bool:
        # A pod slot first (every path checks here). Node.pod_slots written out, with a
        # short way for the usual node: a slot left even if every promise is kept.
        slots = node.max_pods - node.pods
        if slots - node.pods_pipelined < 1:
            later = slots + node.pods_releasing - node.pods_pipelined
            if later < 1 or (not future and slots < 1):
                return False
        if task.extended is not None and node.extended_shortfall(task.extended, future):
            return False
        req = task.request
        idle_cpu = node.allocatable.cpu - node.used.cpu
        idle_mem = node.allocatable.memory - node.used.memory
        fut_cpu = idle_cpu + node.releasing.cpu - node.pipelined.cpu
        fut_mem = idle_mem + node.releasing.memory - node.pipelined.memory
        if future:
            return req.cpu <= fut_cpu + EPS and req.memory <= fut_mem + EPS
        return (
            req.cpu <= idle_cpu + EPS
            and req.memory <= idle_mem + EPS
            and req.cpu <= fut_cpu + EPS
            and req.memory <= fut_mem + EPS
        )

    def _fits_whole(self, task: Task, node: Node, future: bool) -> bool:
        # Node.free_gpus_now / free_gpus_future written out: this runs for every node
        # a whole-GPU task looks at.
        now = node.allocatable.gpu - node.used.gpu
        free = now + node.releasing.gpu - node.pipelined.gpu
        if not future and now < free:
            free = now  # min(now, future)
        if task.pin is not None and not pinning.whole_fits(task, node, future):
            return False
        return task.request.gpu <= free + EPS and self._fits_plain(task, node, future)

    def _shared_groups(self, task: Task, node: Node, future: bool) -> tuple[str, ...] | None:
        """The cards a shared task would take on ``node``, best first, or None."""
        portion = task.portion_on(node)
        if portion > 1 + EPS or not self._fits_plain(task, node, future):
            return None
        options: list[tuple[float, str]] = []
        # Every card whose holders are all leaving counts once in free_gpus_future;
        # so does each whole card being released. Offer no more of them than that.
        future_cards = math.floor(node.free_gpus_future() + EPS)
        free_later = 0
        pinned = task.pin is not None
        for group in node.groups.values():
            if pinned and not pinning.group_allowed(task, node, group.id):
                continue
            held_later = group.used - group.releasing + group.pipelined
            if held_later + portion > 1 + EPS:
                continue
            if not future and (group.used <= EPS or group.used + portion > 1 + EPS):
                # Now: only a card somebody holds now is there; a card that is only
                # promised to a pipelined pod is still some leaving pod's.
                continue
            if group.free_later:
                # Joining a card that was about to be free takes one of the future cards.
                if free_later >= future_cards:
                    continue
                free_later += 1
            options.append((held_later if future else group.used, group.id))
        if future:
            free_cards = future_cards - free_later
        else:
            free_cards = math.floor(min(node.free_gpus_now(), node.free_gpus_future()) + EPS)
        if pinned:
            free_cards = min(free_cards, len(pinning.free_for_new_group(task, node, future)))
        # A fresh card brings its reservation pod: a pod slot besides the task's own.
        free_cards = min(free_cards, node.pod_slots(future) - 1)
        new_ids: list[str] = []
        index = 0
        while len(new_ids) < min(free_cards, task.gpu_devices):
            if str(index) not in node.groups:
                new_ids.append(str(index))
            index += 1
        options.extend((0.0, gid) for gid in new_ids)
        if len(options) < task.gpu_devices:
            return None
        # Binpack: the fullest card that fits; spread: the emptiest. A fresh card is the emptiest.
        spread = self._card_spread(task)
        options.sort(key=lambda o: (o[0] if spread else -o[0], o[1] not in node.groups, o[1]))
        return tuple(gid for _, gid in options[: task.gpu_devices])

    # ------------------------------------------------------------ choose
    def find(self, task: Task) -> Placement | None:
        if self._within is not None:
            return self._find_within(task, self._within)
        if task.nominated_node is not None:
            nominated = self._on_nominated(task)
            if nominated is not None:
                if self._avoided:
                    self.session.passed_over.pop(task.uid, None)  # no choice was made
                return nominated
        key = self._demand_of.get(task.uid)  # most tasks are looked for once: no try
        if key is None:
            key = self._demand_of[task.uid] = self._demand_id(task)
        generation = self.session.release_generation
        if key >= 0 and self._failed.get(key) == generation:
            return None  # the same demand found no node, and nothing was freed since
        avoiding = bool(self._avoided)
        found = self._search(task, avoiding)
        if avoiding:
            note: str | None
            if found is None:
                found = self._search(task, False)  # an avoided node is better than none
                why = found.node.avoided if found is not None else None
                note = f"{why}; no other node fits" if why else None
            else:
                note = self._passed_over(task)
            if note:
                self.session.passed_over[task.uid] = note
            else:
                self.session.passed_over.pop(task.uid, None)
        if found is None and key >= 0:
            self._failed[key] = generation
        return found

    def _search(self, task: Task, skip_avoided: bool) -> Placement | None:
        if (
            task.is_shared
            or task.request.gpu <= EPS
            or task.preferred_affinity
            or task.preferred_pod_affinity
        ):
            return self._find_scan(task, skip_avoided)
        return self._find_whole(task, skip_avoided)

    def _passed_over(self, task: Task) -> str | None:
        """Why an avoided node that would have taken the task now was not chosen."""
        for node in self._avoided:
            fits = (
                self._shared_groups(task, node, False) is not None
                if task.is_shared
                else self._fits_whole(task, node, False)
            )
            if fits and self.predicates.check(task, node) is None:
                return node.avoided
        return None

    def _demand_id(self, task: Task) -> int:
        """What decides whether a task fits anywhere, when that can only get worse while
        nothing is freed (as a number, the same for the same demand): not for pinned
        tasks (their cards are chosen one by one) nor for pod affinity (a pod placed
        may be the one it wants beside it), which get -1."""
        if task.pin is not None or task.pod_affinity:
            return -1
        key = fit_key(task)
        if self._per_queue:
            # Owned cards and a model's limit are the queue's: same demand, other answer.
            job = self.session.jobs.get(task.job_uid)
            key = (*key, job.queue if job is not None else "")
        return self._demand_ids.setdefault(key, len(self._demand_ids))

    def _on_nominated(self, task: Task) -> Placement | None:
        """The nominated node, when the task fits there now."""
        node = self.session.nodes.get(task.nominated_node or "")
        if node is None or self.predicates.check(task, node) is not None:
            return None
        if task.is_shared:
            groups = self._shared_groups(task, node, False)
            return Placement(node, groups, False) if groups is not None else None
        return Placement(node, (), False) if self._fits_whole(task, node, False) else None

    def _find_whole(self, task: Task, skip_avoided: bool) -> Placement | None:
        s = self.session
        need = math.ceil(task.request.gpu - EPS)
        # Resources first: arithmetic that rules out a full node before the predicates'
        # cache lookup (which hashes the task's shape) is paid for it. Nothing changes
        # while the index is walked: the caller allocates once this returns.
        nodes = s.nodes
        spread = self.spread if task.policy is None else task.policy.node == "spread"
        for bucket in s.index.free_gpu_buckets(need, spread):
            for name in bucket:
                node = nodes[name]
                if skip_avoided and node.avoided is not None:
                    continue
                if (
                    self._fits_whole(task, node, False)
                    and self.predicates.check(task, node) is None
                ):
                    return Placement(node, (), False)
        # The best releasing node: fewest GPUs free once released (most for spread),
        # then by name. Buckets of whole free GPUs are in that order, so the best
        # of the first bucket with a fit is the best of all.
        for bucket in s.index.releasing_by_future_gpus(need, spread):
            best: tuple[float, str] | None = None
            for name in bucket:
                node = s.nodes[name]
                if skip_avoided and node.avoided is not None:
                    continue
                if self._fits_whole(task, node, True) and self.predicates.check(task, node) is None:
                    free = node.free_gpus_future()
                    key = (-free if spread else free, name)
                    if best is None or key < best:
                        best = key
            if best is not None:
                return Placement(s.nodes[best[1]], (), True)
        return None

    @staticmethod
    def _score(task: Task, node: Node, future: bool, spread: bool) -> tuple[float, ...]:
        free_gpu = node.free_gpus_future() if future else node.free_gpus_now()
        idle_cpu = node.allocatable.cpu - node.used.cpu
        key = (free_gpu, idle_cpu) if task.is_shared or task.request.gpu > EPS else (idle_cpu,)
        return tuple(-k for k in key) if spread else key

    def _find_scan(self, task: Task, skip_avoided: bool) -> Placement | None:
        s = self.session
        # A task with preferred terms: every node that fits is scored (preferences.py).
        scored: list[tuple[tuple[object, ...], Placement]] | None = (
            [] if has_preferences(task) else None
        )
        spread, card_spread = self._node_spread(task), self._card_spread(task)
        for future in (False, True):
            best: tuple[tuple[object, ...], Placement] | None = None
            nodes = s.nodes.values() if not future else [s.nodes[n] for n in s.index.releasing]
            for node in nodes:
                if skip_avoided and node.avoided is not None:
                    continue
                if task.is_shared:
                    if not self._fits_plain(task, node, future):
                        continue  # resources first, as in _find_whole
                    if self.predicates.check(task, node) is not None:
                        continue
                    groups = self._shared_groups(task, node, future)
                    if groups is None:
                        continue
                    held = sum(node.groups[g].used if g in node.groups else 0.0 for g in groups)
                    fill = -held if card_spread else held
                    order = self._score(task, node, future, spread)
                    key: tuple[object, ...] = (-fill, *order, node.name)
                    if task.policy is not None:
                        # A pod's own policies (HAMi's): its node policy chooses the node,
                        # its card policy only the cards on it.
                        key = (*order, -fill, node.name)
                    placement = Placement(node, groups, future)
                else:
                    if not self._fits_whole(task, node, future):
                        continue
                    if self.predicates.check(task, node) is not None:
                        continue
                    key = (*self._score(task, node, future, spread), node.name)
                    placement = Placement(node, (), future)
                if scored is not None:
                    scored.append((key, placement))
                elif best is None or key < best[0]:
                    best = (key, placement)
            if scored:
                score = preferences.scores(task, [p.node for _, p in scored], self.pod_affinity)
                return min(zip(score, scored, strict=True), key=lambda o: (-o[0], o[1][0]))[1][1]
            if best is not None:
                return best[1]
        return None

    def _find_within(self, task: Task, nodes: list[Node]) -> Placement | None:
        """The best node of a topology domain: by rank, then avoided nodes last, then
        as binpack or spread would choose; now first, else once releases are done. The
        nodes are put in that order first (arithmetic only) and checked in it, so the
        predicates usually run for one node."""
        rank = self._rank
        if task.nominated_node in rank:
            nominated = self._on_nominated(task)
            if nominated is not None:
                return nominated
        shared = task.is_shared
        spread, card_spread = self._node_spread(task), self._card_spread(task)
        for future in (False, True):
            ordered = self._domain_order(task, nodes, future)
            best: tuple[tuple[object, ...], Placement] | None = None
            for node in ordered:
                if shared:
                    # A shared task prefers the fullest card among equal nodes: every
                    # node that fits is weighed, as _find_scan does.
                    if not self._fits_plain(task, node, future):
                        continue
                    if self.predicates.check(task, node) is not None:
                        continue
                    groups = self._shared_groups(task, node, future)
                    if groups is None:
                        continue
                    held = sum(node.groups[g].used if g in node.groups else 0.0 for g in groups)
                    key = (
                        rank.get(node.name, 0),
                        node.avoided is not None,
                        -(-held if card_spread else held),
                        *self._score(task, node, future, spread),
                        node.name,
                    )
                    if best is None or key < best[0]:
                        best = (key, Placement(node, groups, future))
                    continue
                if (
                    self._fits_whole(task, node, future)
                    and self.predicates.check(task, node) is None
                ):
                    return Placement(node, (), future)
            if best is not None:
                return best[1]
        return None

    def _domain_order(self, task: Task, nodes: list[Node], future: bool) -> list[Node]:
        """``nodes`` by (rank, avoided last, ``_score``, name), with _score written out:
        this sorts a domain's nodes for each task of a constrained gang."""
        rank, sign = self._rank, -1.0 if self._node_spread(task) else 1.0
        gpu_key = task.is_shared or task.request.gpu > EPS
        decorated: list[tuple[int, bool, float, float, str, Node]] = []
        for n in nodes:
            alloc, used = n.allocatable, n.used
            idle_cpu = alloc.cpu - used.cpu
            if gpu_key:
                free = alloc.gpu - used.gpu
                if future:
                    free += n.releasing.gpu - n.pipelined.gpu
                first, second = sign * free, sign * idle_cpu
            else:
                first, second = sign * idle_cpu, 0.0
            decorated.append((rank.get(n.name, 0), n.avoided is not None, first, second, n.name, n))
        decorated.sort(key=_BY_KEY)
        return [entry[5] for entry in decorated]

    # ------------------------------------------------------------ explain
    def explain(self, task: Task) -> str:
        """Why no node fits ``task``, counted per cause, as kube-scheduler words it."""
        s = self.session
        key: tuple[object, ...] = (*fit_key(task), s.release_generation)
        if self._per_queue:  # owned cards, the queue's use of a model: per its figures
            job = s.jobs.get(task.job_uid)
            if job is not None:
                key = (*key, *((q.name, q.version) for q in s.ancestors(job.queue)))
        cached = self._no_fit.get(key)
        if cached is not None:
            return cached
        causes: Counter[str] = Counter()
        for node in s.nodes.values():
            reason = self.predicates.check(task, node)
            if reason is None:
                reason = self._resource_shortfall(task, node)
            causes[reason] += 1
        parts = ", ".join(f"{count} {cause}" for cause, count in sorted(causes.items()))
        text = f"0/{len(s.nodes)} nodes are available: {parts}."
        beyond = beyond_every_node(task, s.nodes.values())
        if beyond:
            # First, before any reclaim or preempt sentence that suggests waiting helps.
            text = f"no node can ever hold it: {beyond}. {text}"
        never = pinning.never_satisfiable(task, s.nodes.values())
        if never:
            text += f" The GPU pin cannot be satisfied: {never}."
        self._no_fit[key] = text
        return text

    def _resource_shortfall(self, task: Task, node: Node) -> str:
        if node.pod_slots(True) < 1:
            return TOO_MANY_PODS
        if task.extended is not None:
            short = node.extended_shortfall(task.extended, True)
            if short is not None:
                name, wanted, free, allocatable = short
                return insufficient(name, wanted, free, allocatable)
        idle = node.idle
        if task.pin is not None and self._fits_plain(task, node, True):
            portion = task.portion_on(node) if task.is_shared else 0.0
            if portion <= 1 + EPS and task.request.gpu <= node.free_gpus_future() + EPS:
                why = pinning.shortfall(task, node)
                if why is not None:
                    return why
        if task.is_shared:
            portion = task.portion_on(node)
            if portion > 1 + EPS:
                return (
                    f"node(s) had GPUs of {node.gpu_memory_mib:g} MiB, "
                    f"less than the {task.gpu_memory_mib:g} MiB requested"
                )
            if self._shared_groups(task, node, True) is None and self._fits_plain(task, node, True):
                if node.pod_slots(True) < 2:
                    return TOO_MANY_PODS  # no slot for a fresh card's reservation pod
                return f"node(s) had no GPU with {portion:g} free to share"
        elif task.request.gpu > node.free_gpus_future() + EPS:
            sick = [card.uuid for card in node.cards if not card.healthy]
            if sick:
                return f"Insufficient nvidia.com/gpu (unhealthy, left out: {', '.join(sick)})"
            return "Insufficient nvidia.com/gpu"
        if task.request.cpu > idle.cpu + node.releasing.cpu + EPS:
            return "Insufficient cpu"
        if task.request.memory > idle.memory + node.releasing.memory + EPS:
            return "Insufficient memory"
        return "node(s) had resources only after other pods finish"


def beyond_every_node(task: Task, nodes: Iterable[Node]) -> str:
    """What ``task`` asks beyond the largest node's allocatable (GPUs, CPU, memory),
    with that node's figure; "" when some node could hold it once empty."""
    r = task.request
    most_gpu = most_cpu = most_memory = 0.0
    for n in nodes:
        most_gpu = max(most_gpu, n.allocatable.gpu)
        most_cpu = max(most_cpu, n.allocatable.cpu)
        most_memory = max(most_memory, n.allocatable.memory)
    parts = []
    if r.gpu > most_gpu + EPS:
        parts.append(f"it requests {r.gpu:g} GPUs, the largest node has {most_gpu:g}")
    if r.cpu > most_cpu + EPS:
        parts.append(
            f"it requests {r.cpu / 1000:g} CPU cores, the largest node has {most_cpu / 1000:g}"
        )
    if r.memory > most_memory + EPS:
        parts.append(
            f"it requests {r.memory / 2**30:.3g} GiB of memory, the largest node has "
            f"{most_memory / 2**30:.3g} GiB"
        )
    return "; ".join(parts)


def fit_key(task: Task) -> tuple[object, ...]:
    """What decides where a task fits: its shape (predicates) and what it asks for."""
    r = task.request
    return (
        task.shape,
        r.cpu,
        r.memory,
        r.gpu,
        task.gpu_fraction,
        task.gpu_memory_mib,
        task.gpu_devices,
        None if task.extended is None else tuple(sorted(task.extended.items())),
        # Host ports, ConfigMaps and claims (None for most tasks): not in the shape,
        # which the static predicates' cache is keyed by; the last two are per namespace.
        task.needs,
        task.namespace if task.needs is not None else "",
    )
