"""The binder's API work: carry out one BindRequest, roll back on error, clean up.

``Binder.reconcile(bindrequest, retry)`` makes one attempt and writes the
outcome into the BindRequest's status:

- ``Regular``: bind the pod to ``selectedNode`` (Binding subresource);
- ``Fraction``: for each selected GPU group make sure its reservation pod
  exists on the node, wait for the card UUID it reports, label the pod
  ``runai-gpu-group``, check the cards again, bind, then write the pod's GPU
  ConfigMaps (KAI's ``<prefix>-<index>`` and ``...-evar``, named by the pod's
  ``runai/shared-gpu-configmap`` annotation) with the cards held after the Binding (its containers wait for
  them, so a card lost during the Binding is replaced before any is shown).

No pod is ever deleted here: not to undo a race of ours, nor when a reservation
pod is deleted under bound shared pods (it is made again, ``reservation_gone``).

An attempt that fails is rolled back (group label, ConfigMaps it created, a
reservation pod nobody else uses) and counted in ``status.failedAttempts``;
while that stays below ``backoffLimit`` the phase stays ``Pending`` and the
outcome says when to try again (``base * 2**failedAttempts`` s), after that
the phase is ``Failed`` (the scheduler then deletes the request and decides
again). Events go to the pod: ``BindingError`` for a failed attempt, ``Bound``
for a bind that put the pod on named cards (a Fraction's, a pinned pod's); a
plain bind's outcome is the request's status (the scheduler's ``Scheduled``
Event already named the pod's node). A Regular request whose pod the watch
shows unbound and not pinned binds without reading the pod first
(``kai_py.binder.podhints``).

The calls are synchronous (Kopf runs the handlers in worker threads); a lock
per (node, GPU group) keeps creating, using and deleting one reservation pod
in order within the process.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any, Final

from kai_py.api import keys
from kai_py.api.bindrequest import (
    RESERVATION_TIMEOUT_REASON,
    SIGNATURE_ANNOTATION,
    bind_key,
    signed,
)
from kai_py.api.objects import parse_time
from kai_py.apiclient.eventpost import EventPoster, involved
from kai_py.apiclient.kube import Kube, KubeError, list_all, path_of
from kai_py.binder import reservation as rsv
from kai_py.binder import stagger
from kai_py.binder.pinned_binding import Held, PinnedBinder, PinnedBindError
from kai_py.binder.podhints import PodHints
from kai_py.gpu import groups, inventory
from kai_py.state.convert import pod_claims

Json = dict[str, Any]
log = logging.getLogger(__name__)

COMPONENT: Final = "kai-py-binder"
#: Why a BindRequest without the scheduler's signature is not acted on.
UNSIGNED: Final = (
    f"not made by kai-py's scheduler (metadata.annotations[{SIGNATURE_ANNOTATION}] is missing "
    "or does not match the request): ignored, nothing bound"
)
#: The Warning on a shared pod whose card's reservation pod was deleted under it.
RESERVATION_LOST: Final = "GPUReservationLost"
BINDREQUESTS: Final = "bindrequests"
_PENDING_PHASES: Final = (None, "", "Pending")
#: A node a GET found is taken as there for this long (no GET per pod of a burst).
NODE_SEEN_SECONDS: Final = 30.0


@dataclass(slots=True)
class BinderConfig:
    """How the binder works; ``from_env`` reads ``KAI_PY_BINDER_*`` overrides."""

    reservation_image: str = rsv.DEFAULT_RESERVATION_IMAGE
    reservation_namespace: str = keys.RESERVATION_NAMESPACE
    reservation_service_account: str | None = None
    reservation_timeout: float = 40.0  # seconds to wait for the card's UUID
    poll_interval: float = 0.2
    retry_base_delay: float = 1.0  # retry after base * 2**failedAttempts seconds
    default_backoff_limit: int = rsv.DEFAULT_BACKOFF_LIMIT
    sweep_period: float = 5.0  # seconds between clean-up passes over reservation pods
    sweep_min_age: float = 10.0  # a reservation pod younger than this is left to its binder
    #: HAMi-core is on the nodes (``KAI_PY_HAMI_CORE``): a shared pod's container gets
    #: its per-card cap in MiB through its GPU ConfigMap.
    hami_core: bool = False
    #: Staggered start for every shared pod that does not say otherwise (``binder.stagger``).
    staggered_start: bool = False
    #: Seconds a pod waits, at most, for the pod before it on its card to be Ready.
    staggered_start_timeout: float = 300.0
    #: Seconds between looks at the card while a pod waits (a Ready pod event wakes it too).
    staggered_start_poll: float = 1.0
    #: The scheduler signs its BindRequests with this key; None: no signature checked.
    bind_key: bytes | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> BinderConfig:
        env = os.environ if env is None else env
        config = cls()
        if env.get("KAI_PY_RESERVATION_IMAGE"):
            config.reservation_image = env["KAI_PY_RESERVATION_IMAGE"]
        if env.get("KAI_PY_RESERVATION_SERVICE_ACCOUNT"):
            config.reservation_service_account = env["KAI_PY_RESERVATION_SERVICE_ACCOUNT"]
        config.hami_core = env.get("KAI_PY_HAMI_CORE", "").strip().lower() in (
            "1",
            "true",
            "yes",
            "on",
        )
        config.staggered_start = env.get("KAI_PY_STAGGERED_START", "").strip().lower() in (
            "1",
            "true",
            "yes",
            "on",
        )
        config.bind_key = bind_key(env)
        for var, attr in (
            ("KAI_PY_STAGGERED_START_TIMEOUT", "staggered_start_timeout"),
            ("KAI_PY_BINDER_RESERVATION_TIMEOUT", "reservation_timeout"),
            ("KAI_PY_BINDER_RETRY_BASE_DELAY", "retry_base_delay"),
            ("KAI_PY_BINDER_SWEEP_PERIOD", "sweep_period"),
            ("KAI_PY_BINDER_SWEEP_MIN_AGE", "sweep_min_age"),
        ):
            if env.get(var):
                try:
                    setattr(config, attr, float(env[var]))
                except ValueError:
                    raise ValueError(f"{var}: must be a number, got {env[var]!r}") from None
        return config


class BindError(Exception):
    """An attempt failed; ``final`` when retrying cannot help (the pod is gone)."""

    def __init__(self, reason: str, *, final: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.final = final


@dataclass(slots=True)
class Outcome:
    phase: str  # Succeeded, Pending (will retry) or Failed
    reason: str
    failed_attempts: int
    retry_in: float | None = None
    #: Waiting for its turn on a shared card (staggered start), not a failure.
    waiting: bool = False


class _Waiting(Exception):
    """The pod's turn on its card has not come (staggered start): nothing was done."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(slots=True)
class _Attempt:
    """What one attempt changed, so that a failure can undo exactly that."""

    node: str = ""
    groups: list[str] = field(default_factory=list)
    uuids: list[str] = field(default_factory=list)
    configmaps_created: list[tuple[str, str]] = field(default_factory=list)
    labelled: Json | None = None  # the pod as it was before labelling
    #: (path, uid) of each reservation pod whose card this attempt uses.
    reservations: list[tuple[str, str]] = field(default_factory=list)
    pinned: Held | None = None  # a pinned pod's freed cards and blockers
    #: The Binding was accepted: from here on nothing of the pod is rolled back.
    bound: bool = False
    #: The outcome names the cards the pod got (a Fraction's, a pinned pod's): more
    #: than the scheduler's ``Scheduled`` event said.
    names_cards: bool = False
    #: Staggered start: the pod before it on the card that was waited for until the
    #: timeout, with the seconds it had had since its bind.
    waited_out: tuple[str, float] | None = None


@dataclass(frozen=True, slots=True)
class _Request:
    namespace: str
    name: str
    uid: str
    pod_name: str
    node: str
    kind: str
    groups: tuple[str, ...]
    portion: float
    backoff_limit: int | None
    failed_attempts: int
    pod_uid: str | None  # from the ownerReference to the pod, when there is one
    #: The resourceVersion of the request as offered (its status write names it first).
    resource_version: str | None = None
    reason: str | None = None  # status.reason as offered

    @classmethod
    def of(cls, br: Mapping[str, Any]) -> _Request:
        m = br.get("metadata") or {}
        spec = br.get("spec") or {}
        status = br.get("status") or {}
        gpu = spec.get("receivedGPU") or {}
        try:
            portion = float(gpu.get("portion") or 0)
        except (TypeError, ValueError):
            portion = 0.0
        limit = spec.get("backoffLimit")
        owner = next(
            (r for r in m.get("ownerReferences") or [] if r.get("kind") == "Pod" and r.get("uid")),
            None,
        )
        return cls(
            namespace=str(m.get("namespace") or "default"),
            name=str(m.get("name") or ""),
            uid=str(m.get("uid") or ""),
            pod_name=str(spec.get("podName") or ""),
            node=str(spec.get("selectedNode") or ""),
            kind=str(spec.get("receivedResourceType") or "Regular"),
            groups=tuple(str(g) for g in spec.get("selectedGPUGroups") or []),
            portion=portion,
            backoff_limit=int(limit) if isinstance(limit, int) else None,
            failed_attempts=int(status.get("failedAttempts") or 0),
            pod_uid=str(owner["uid"]) if owner else None,
            resource_version=str(m["resourceVersion"]) if m.get("resourceVersion") else None,
            reason=str(status["reason"]) if status.get("reason") else None,
        )


def is_pending(br: Mapping[str, Any]) -> bool:
    return (br.get("status") or {}).get("phase") in _PENDING_PHASES


class Binder:
    def __init__(
        self,
        kube: Kube,
        config: BinderConfig | None = None,
        *,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        events: EventPoster | None = None,
        hints: PodHints | None = None,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.kube = kube
        self.config = config or BinderConfig()
        self.events = events or EventPoster(kube, COMPONENT)
        #: Unbound pods as the pod watch shows them: a Regular bind of one needs no GET.
        self.hints = hints
        self._sleep = sleep
        self._clock = clock
        self._wall = wall  # the cluster's times (a pod's bind) are epoch seconds
        self._locks: dict[tuple[str, str], threading.Lock] = {}
        self._locks_guard = threading.Lock()
        self._nodes_seen: dict[str, float] = {}  # node -> when a GET last found it
        self._node_locks: dict[str, threading.Lock] = {}
        #: (node, group) -> the lock one staggered bind on that card holds from its look
        #: at the card to its Binding, so that two waiting pods never both go.
        self._stagger_locks: dict[tuple[str, str], threading.Lock] = {}
        #: queue name -> (when read, its staggered-start setting, a message if invalid).
        self._queue_settings: dict[str, tuple[float, bool | None, str | None]] = {}
        #: (pod uid, message) of the invalid settings already told (one Warning each).
        self._told: set[tuple[str, str]] = set()
        self.pinned = PinnedBinder(
            kube,
            image=self.config.reservation_image,
            namespace=self.config.reservation_namespace,
            timeout=self.config.reservation_timeout,
            poll=self.config.poll_interval,
            service_account=self.config.reservation_service_account,
            sleep=sleep,
            clock=clock,
        )

    # ---- one BindRequest -------------------------------------------------------------

    def reconcile(self, br: Mapping[str, Any], retry: int = 0) -> Outcome:
        """One attempt at the request; writes its status and the pod's event."""
        req = _Request.of(br)
        # Kopf's retry count stands in if our own status write was lost.
        attempts_before = max(req.failed_attempts, retry)
        attempt = _Attempt(node=req.node, groups=list(req.groups))
        pod: Json | None = None
        if self.config.bind_key is not None and not signed(self.config.bind_key, br):
            # Not the scheduler's decision (made by whoever may create BindRequests):
            # nothing is done for it; Failed, so that the scheduler deletes it and decides
            # the pod itself, with a Warning on the pod.
            return self._failed(req, None, attempt, BindError(UNSIGNED, final=True), 1)
        try:
            pod, message = self._attempt(req, attempt)
        except _Waiting as wait:
            # Nothing was done: no failed attempt. The reason is written once, so that
            # ``kubectl get bindrequest`` shows what the pod waits for.
            if req.reason != wait.reason:
                self._write_status(req, {"phase": "Pending", "reason": wait.reason})
            return Outcome(
                "Pending",
                wait.reason,
                attempts_before,
                self.config.staggered_start_poll,
                waiting=True,
            )
        except Exception as exc:
            if isinstance(exc, PinnedBindError):
                exc = BindError(exc.reason, final=exc.final)
            error = exc if isinstance(exc, BindError) else BindError(_describe(exc))
            self._rollback(req, attempt)
            return self._failed(req, pod, attempt, error, attempts_before + 1)
        try:
            written = self._write_status(req, {"phase": "Succeeded", "reason": None})
        except KubeError as exc:
            # The pod is bound; only the status write was lost. The next attempt finds the
            # pod on its node, counts that as done and writes Succeeded again.
            log.warning(
                "BindRequest: Succeeded not written",
                extra={"bindrequest": f"{req.namespace}/{req.name}", "error": str(exc)},
            )
            return Outcome("Pending", f"status write failed: {exc}", attempts_before, 1.0)
        if attempt.names_cards and written:
            # A plain bind posts no Event of its own: the scheduler's ``Scheduled`` Event
            # (pod and node) says it all and the BindRequest's status records the outcome;
            # failures post ``BindingError``. Nor one whose status was left as it is:
            # another attempt at the same request finished it and told the pod.
            self.events.post(_pod_ref(req, pod), "Normal", "Bound", message)
        if attempt.waited_out is not None and written:
            other, seconds = attempt.waited_out
            self.events.post(
                _pod_ref(req, pod),
                "Warning",
                stagger.TIMEOUT_REASON,
                f"Staggered start: pod {req.namespace}/{req.pod_name} bound to node "
                f"{req.node} without waiting longer for pod {other} on the same card, not "
                f"Ready {seconds:.0f}s after its bind (timeout "
                f"{self.config.staggered_start_timeout:g}s)",
            )
        return Outcome("Succeeded", message, attempts_before)

    def _failed(
        self, req: _Request, pod: Json | None, attempt: _Attempt, error: BindError, attempts: int
    ) -> Outcome:
        limit = req.backoff_limit
        if limit is None:
            limit = self.config.default_backoff_limit
        retry = not error.final and rsv.should_retry(attempts, limit)
        delay = rsv.retry_delay(attempts, self.config.retry_base_delay) if retry else None
        where = f"pod {req.namespace}/{req.pod_name} to node {req.node}"
        if req.kind == "Fraction":
            where += f" with {rsv.gpus_text(req.groups, attempt.uuids, req.portion)}"
        message = f"Failed to bind {where}: {error.reason}"
        if delay is not None:
            message += f" (attempt {attempts} of {limit}; retrying in {delay:g}s)"
        else:
            message += f" (attempt {attempts}; giving up)"
        phase = "Pending" if delay is not None else "Failed"
        if not self._write_status(
            req, {"phase": phase, "reason": error.reason, "failedAttempts": attempts}
        ):
            delay = None  # decided (or deleted) by someone else meanwhile: stop here
        self.events.post(_pod_ref(req, pod), "Warning", "BindingError", message)
        log.info(
            "bind failed",
            extra={
                "pod": f"{req.namespace}/{req.pod_name}",
                "node": req.node,
                "reason": error.reason,
                "attempt": attempts,
                "retry_in_s": delay,
            },
        )
        return Outcome(phase, error.reason, attempts, delay)

    def _attempt(self, req: _Request, attempt: _Attempt) -> tuple[Json, str]:
        if not req.pod_name or not req.node:
            raise BindError("spec.podName and spec.selectedNode are required", final=True)
        pod = self._hinted_pod(req) or self._get_pod(req)
        self._check_uid(req, pod)
        bound = (pod.get("spec") or {}).get("nodeName")
        if bound:
            if bound == req.node:
                if req.kind == "Fraction" and req.groups:
                    self._complete_bound_fraction(req, pod, attempt)
                return (
                    pod,
                    f"Pod {req.namespace}/{req.pod_name} is already bound to node {req.node}",
                )
            raise BindError(f'pod is already bound to node "{bound}"', final=True)
        if req.kind == "Fraction":
            # Before anything is made for it: a shared pod whose container does not read
            # its card from the ConfigMap would see every card of the node. It stays
            # Pending; retrying cannot help (a pod's env cannot change).
            unwired = rsv.unwired_reason(pod)
            if unwired:
                raise BindError(unwired, final=True)
            if req.groups and self._staggered(req, pod):
                with self._card_turn(req):
                    attempt.waited_out = self._wait_turn(req)
                    return self._place(req, pod, attempt)
        return self._place(req, pod, attempt)

    def _place(self, req: _Request, pod: Json, attempt: _Attempt) -> tuple[Json, str]:
        """The attempt from the node check on: cards held, pod labelled, bound, told."""
        self._check_node(req.node)
        attempt.pinned = self.pinned.hold(req.node, pod, req.kind, req.groups)
        if req.kind == "Fraction":
            if not req.groups:
                raise BindError("a Fraction request must name its GPU groups", final=True)
            for group in req.groups:
                attempt.uuids.append(self._reserve(req, group, attempt))
            self.pinned.check_groups(attempt.pinned, attempt.uuids)
            pod = self._label(req, pod, attempt)
            # The card may have gone since it reported its UUID (reservation pod deleted):
            # a fresh read right before the Binding, which cannot be undone. A card gone
            # fails the attempt unbound; the retry makes a new reservation pod.
            self._check_cards(req, attempt)
        self._select_node_for_claims(req, pod)
        already = self._bind(req, pod)
        attempt.bound = True
        if already and attempt.pinned is None and req.kind == "Regular":
            # Bound already (a pod not read first: the watch had not shown it bound).
            return pod, f"Pod {req.namespace}/{req.pod_name} is already bound to node {req.node}"
        if req.kind == "Fraction":
            # The ConfigMaps come only now: until they exist the pod's containers cannot
            # start, so a card lost while the Binding was under way is replaced before
            # any container is shown it.
            self._cards_after_binding(req, attempt)
            self._write_configmaps(req, pod, attempt)
        cards = self.pinned.settle(
            attempt.pinned,
            req.namespace,
            req.pod_name,
            req.kind,
            attempt.uuids,
            str((pod.get("metadata") or {}).get("uid") or "") or None,
        )
        self.pinned.release(attempt.pinned)
        message = f"Pod {req.namespace}/{req.pod_name} bound to node {req.node}"
        if req.kind == "Fraction":
            message += f" on {rsv.gpus_text(req.groups, attempt.uuids, req.portion)}"
            attempt.names_cards = True
        elif cards:
            message += f" on {', '.join(cards)}"
            attempt.names_cards = True
        return pod, message

    # ---- staggered start (kai_py.binder.stagger) -------------------------------------

    def _staggered(self, req: _Request, pod: Mapping[str, Any]) -> bool:
        """Whether the pod starts in turn on its cards: its annotation, else its queue's,
        else the cluster's setting. An invalid value is told once (a Warning on the pod)
        and not applied."""
        m = pod.get("metadata") or {}
        own, bad = stagger.setting(
            m.get("annotations") or {}, f"Pod {req.namespace}/{req.pod_name}"
        )
        self._tell(req, pod, bad)
        if own is not None:
            return own
        queue, bad = self._queue_setting(req, pod)
        self._tell(req, pod, bad)
        return stagger.wanted(None, queue, self.config.staggered_start)

    def _tell(self, req: _Request, pod: Mapping[str, Any], message: str | None) -> None:
        uid = str((pod.get("metadata") or {}).get("uid") or "")
        if message is None or (uid, message) in self._told:
            return
        if len(self._told) > 4096:
            self._told.clear()
        self._told.add((uid, message))
        self.events.post(_pod_ref(req, pod), "Warning", stagger.INVALID_REASON, message)

    def _queue_setting(
        self, req: _Request, pod: Mapping[str, Any]
    ) -> tuple[bool | None, str | None]:
        """The staggered-start annotation of the pod's Queue (its label, else its
        PodGroup's ``spec.queue``); read at most once per ``NODE_SEEN_SECONDS``."""
        m = pod.get("metadata") or {}
        name = (m.get("labels") or {}).get(keys.QUEUE_LABEL)
        group = (m.get("annotations") or {}).get(keys.POD_GROUP_ANNOTATION)
        if not name and group:
            try:
                pg = self.kube.get(
                    path_of(keys.GROUP, keys.PODGROUP_VERSION, "podgroups", req.namespace, group)
                )
            except KubeError as exc:
                if exc.code != 404:
                    raise
                pg = {}
            name = (pg.get("spec") or {}).get("queue")
        if not name:
            return None, None
        now = self._clock()
        seen = self._queue_settings.get(str(name))
        if seen is not None and now - seen[0] < NODE_SEEN_SECONDS:
            return seen[1], seen[2]
        try:
            queue = self.kube.get(path_of(keys.GROUP, keys.QUEUE_VERSION, "queues", None, name))
        except KubeError as exc:
            if exc.code != 404:
                raise
            queue = {}
        value, bad = stagger.setting(
            (queue.get("metadata") or {}).get("annotations") or {}, f"Queue {name}"
        )
        self._queue_settings[str(name)] = (now, value, bad)
        return value, bad

    @contextmanager
    def _card_turn(self, req: _Request) -> Iterator[None]:
        """Hold the staggered-start lock of each of the request's cards (in one order)."""
        with self._locks_guard:
            locks = [
                self._stagger_locks.setdefault((req.node, g), threading.Lock())
                for g in sorted(set(req.groups))
            ]
        with ExitStack() as stack:
            for lock in locks:
                stack.enter_context(lock)
            yield

    def _wait_turn(self, req: _Request) -> tuple[str, float] | None:
        """Raise ``_Waiting`` while another pod bound to one of the request's cards is
        not Ready and within the timeout. Read from the cluster each time, so a restart
        continues the same wait. Returns the pod waited for up to the timeout, if any."""
        found = stagger.blockers(
            self._shared_pods_on(req.node),
            req.node,
            req.groups,
            f"{req.namespace}/{req.pod_name}",
        )
        now = self._wall()
        timeout = self.config.staggered_start_timeout
        for blocker in found:
            if not stagger.overdue(blocker, now, timeout):
                raise _Waiting(
                    f"staggered start: waiting for pod {blocker.key} on the same card "
                    f"(node {req.node}, GPU group {', '.join(req.groups)}) to be Ready, "
                    f"{timeout:g}s after its bind at most"
                )
        if not found:
            return None
        first = found[0]
        return first.key, now - first.since if first.since is not None else timeout

    def _hinted_pod(self, req: _Request) -> Json | None:
        """The pod of a Regular bind as the watch showed it, unbound and not pinned: its
        uid is all the bind needs (``kai_py.binder.podhints`` says why that is safe).
        None: read the pod."""
        if self.hints is None or req.kind != "Regular" or not req.pod_uid:
            return None
        hint = self.hints.get(req.namespace, req.pod_name)
        if hint is None or hint.pinned or hint.claims or hint.uid != req.pod_uid:
            return None
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": req.pod_name, "namespace": req.namespace, "uid": req.pod_uid},
        }

    @staticmethod
    def _check_uid(req: _Request, pod: Mapping[str, Any]) -> None:
        uid = (pod.get("metadata") or {}).get("uid")
        if req.pod_uid and uid and uid != req.pod_uid:
            raise BindError("the BindRequest is for an earlier pod of that name", final=True)

    def _get_pod(self, req: _Request) -> Json:
        try:
            pod = self.kube.get(path_of("", "v1", "pods", req.namespace, req.pod_name))
        except KubeError as exc:
            if exc.code == 404:
                raise BindError(
                    f"pod {req.namespace}/{req.pod_name} not found", final=True
                ) from None
            raise
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            raise BindError("the pod is being deleted", final=True)
        return pod

    def _check_node(self, node: str) -> None:
        # A node seen within NODE_SEEN_SECONDS counts as there: one GET per node and
        # burst, not one per pod (the scheduler chose it from its watch moments ago).
        # The binds of one cycle to one node run at once: the first reads, the others
        # wait for its answer (a lock per node).
        with self._locks_guard:
            lock = self._node_locks.setdefault(node, threading.Lock())
        with lock:
            now = self._clock()
            if now - self._nodes_seen.get(node, -NODE_SEEN_SECONDS) < NODE_SEEN_SECONDS:
                return
            try:
                self.kube.get(path_of("", "v1", "nodes", None, node))
            except KubeError as exc:
                if exc.code == 404:
                    self._nodes_seen.pop(node, None)
                    raise BindError(f'node "{node}" not found') from None
                raise
            self._nodes_seen[node] = self._clock()

    def _bind(self, req: _Request, pod: Mapping[str, Any]) -> bool:
        """Bind the pod; True if it was bound to that node already."""
        uid = (pod.get("metadata") or {}).get("uid")
        body = rsv.binding_body(req.pod_name, req.namespace, req.node, str(uid) if uid else None)
        try:
            self.kube.create(
                path_of("", "v1", "pods", req.namespace, req.pod_name, "binding"), body
            )
        except KubeError as exc:
            if exc.code not in (404, 409, 500):
                raise
            # Refused: read the pod and judge. 409 "already assigned": bound, by us
            # before a restart or by someone else; or (a pod not read first) the uid
            # precondition failed. 404: gone. 500: kube-apiserver's answer for a pod
            # being deleted. Each of these is final; a 500 for another cause is not.
            now = self._get_pod(req)
            self._check_uid(req, now)
            bound = (now.get("spec") or {}).get("nodeName")
            if bound != req.node:
                if exc.code == 500 and not bound:
                    raise
                raise BindError(f"binding refused: {exc.message}", final=bool(bound)) from None
            return True
        return False

    def _select_node_for_claims(self, req: _Request, pod: Mapping[str, Any]) -> None:
        """Tell each unbound PersistentVolumeClaim of the pod the node chosen for it, as
        kube-scheduler's VolumeBinding does (``volume.kubernetes.io/selected-node``):
        the external provisioner makes the volume there. The scheduler placed the pod
        with an unbound claim only if its class waits for the first consumer. Unlike
        kube-scheduler the bind does not wait for the volume: the kubelet does."""
        if not (pod.get("spec") or {}).get("volumes"):
            return
        for claim, _ in pod_claims(pod, req.pod_name):
            path = path_of("", "v1", "persistentvolumeclaims", req.namespace, claim)
            try:
                pvc = self.kube.get(path)
            except KubeError as exc:
                if exc.code == 404:
                    raise BindError(
                        f"persistentvolumeclaim {req.namespace}/{claim} does not exist"
                    ) from None
                raise
            if (pvc.get("spec") or {}).get("volumeName"):
                continue
            chosen = ((pvc.get("metadata") or {}).get("annotations") or {}).get(
                keys.SELECTED_NODE_ANNOTATION
            )
            if chosen == req.node:
                continue
            if chosen:
                raise BindError(
                    f"persistentvolumeclaim {req.namespace}/{claim} is being provisioned "
                    f"for node {chosen}"
                )
            self.kube.patch(
                path, {"metadata": {"annotations": {keys.SELECTED_NODE_ANNOTATION: req.node}}}
            )

    # ---- GPU sharing -----------------------------------------------------------------

    @contextmanager
    def _group_lock(self, node: str, group: str) -> Iterator[None]:
        with self._locks_guard:
            lock = self._locks.setdefault((node, group), threading.Lock())
        with lock:
            yield

    def _create_reservation_pod(self, manifest: Json) -> Json:
        """Create a pod in the reservation namespace. The binder may not create
        namespaces (docs/deploy.md, "Security"): a missing one is said plainly."""
        ns = self.config.reservation_namespace
        try:
            return self.kube.create(path_of("", "v1", "pods", ns), manifest)
        except KubeError as exc:
            if exc.code == 404:
                raise KubeError(404, "NotFound", rsv.missing_namespace(ns)) from None
            raise

    def _complete_bound_fraction(self, req: _Request, pod: Json, attempt: _Attempt) -> None:
        """A shared pod found bound (an earlier attempt bound it, then failed or was cut
        short): make sure its label and GPU ConfigMaps are there while its containers
        have not started. Nothing is undone on failure: the pod stays bound."""
        if (pod.get("status") or {}).get("phase") not in (None, "", "Pending"):
            return
        labels = (pod.get("metadata") or {}).get("labels") or {}
        if labels.get(keys.GPU_GROUP_LABEL) and all(
            self._configmap_exists(req.namespace, name) for name in rsv.gpu_configmap_names(pod)
        ):
            return
        done = _Attempt(node=req.node, groups=list(req.groups))
        for group in req.groups:
            done.uuids.append(self._reserve(req, group, done))
        pod = self._label(req, pod, done)
        self._write_configmaps(req, pod, done)
        attempt.uuids = done.uuids

    def _configmap_exists(self, namespace: str, name: str) -> bool:
        try:
            self.kube.get(path_of("", "v1", "configmaps", namespace, name))
        except KubeError as exc:
            if exc.code == 404:
                return False
            raise
        return True

    def _check_cards(self, req: _Request, attempt: _Attempt) -> None:
        """Each reservation pod the attempt uses is still there, the same one, not leaving."""
        for path, uid in attempt.reservations:
            try:
                now = self.kube.get(path)
            except KubeError as exc:
                if exc.code == 404:
                    raise BindError(
                        f"reservation pod {path.rsplit('/', 1)[-1]} disappeared"
                    ) from None
                raise
            m = now.get("metadata") or {}
            replaced = str(m.get("uid") or "") != uid
            if replaced or m.get("deletionTimestamp") or rsv.reservation_failure(now):
                raise BindError(f"reservation pod {m.get('name')} was replaced or is leaving")

    def _cards_after_binding(self, req: _Request, attempt: _Attempt) -> None:
        """The pod is bound and its GPU ConfigMaps are not written yet: read each group's
        reservation pod again (made anew if it went while the Binding was under way) and
        give the pod the cards held now. A failure here leaves the pod bound without its
        ConfigMaps (its containers wait); the retry completes it
        (``_complete_bound_fraction``). The pod is never deleted for a race of ours."""
        before = list(attempt.reservations)
        attempt.reservations.clear()
        uuids = [self._reserve(req, group, attempt) for group in req.groups]
        if attempt.reservations != before:
            log.warning(
                "a reservation pod went while it was being bound: the pod gets the cards held now",
                extra={
                    "pod": f"{req.namespace}/{req.pod_name}",
                    "node": req.node,
                    "cards": uuids,
                    "previous_cards": list(attempt.uuids),
                },
            )
            self.pinned.check_groups(attempt.pinned, uuids)
            attempt.uuids = uuids

    def _reserve(self, req: _Request, group: str, attempt: _Attempt | None = None) -> str:
        """The UUID of the card held for ``group`` on the node; creates its pod if needed."""
        ns = self.config.reservation_namespace
        name = rsv.reservation_pod_name(req.node, group)
        path = path_of("", "v1", "pods", ns, name)
        with self._group_lock(req.node, group):
            try:
                current = self.kube.get(path)
            except KubeError as exc:
                if exc.code != 404:
                    raise
                manifest = rsv.reservation_pod_manifest(
                    req.node,
                    group,
                    image=self.config.reservation_image,
                    namespace=ns,
                    service_account=self.config.reservation_service_account,
                )
                try:
                    current = self._create_reservation_pod(manifest)
                    log.info(
                        "created reservation pod",
                        extra={"pod": f"{ns}/{name}", "node": req.node, "gpu_group": group},
                    )
                except KubeError as exc2:
                    if exc2.code != 409:
                        raise
                    current = self.kube.get(path)
        if (current.get("spec") or {}).get("nodeName") != req.node:
            raise BindError(f"reservation pod {ns}/{name} is not on node {req.node}")
        deadline = self._clock() + self.config.reservation_timeout
        while True:
            uuid = rsv.reserved_uuid(current)
            if uuid:
                if attempt is not None:
                    attempt.reservations.append(
                        (path, str((current.get("metadata") or {}).get("uid") or ""))
                    )
                return uuid
            failure = rsv.reservation_failure(current)
            if failure:
                raise BindError(f"reservation pod {ns}/{name} for GPU group {group}: {failure}")
            if self._clock() >= deadline:
                raise BindError(
                    f"{RESERVATION_TIMEOUT_REASON} reservation pod {ns}/{name} did not "
                    f"report its GPU within {self.config.reservation_timeout:g}s"
                )
            self._sleep(self.config.poll_interval)
            try:
                current = self.kube.get(path)
            except KubeError as exc:
                if exc.code == 404:
                    raise BindError(f"reservation pod {ns}/{name} disappeared") from None
                raise

    def _card_memories(self, node: str, uuids: list[str]) -> list[float]:
        """Each card's memory in MiB (0 when unknown): the node's inventory by UUID, else
        the node's ``nvidia.com/gpu.memory`` label (all its cards alike)."""
        try:
            obj = self.kube.get(path_of("", "v1", "nodes", None, node))
        except KubeError as exc:
            if exc.code == 404:
                return []
            raise
        m = obj.get("metadata") or {}
        try:
            cards = {c.uuid: c.memory_mib for c in inventory.node_cards(m.get("annotations") or {})}
        except inventory.InventoryError:
            cards = {}
        try:
            label = float(str((m.get("labels") or {}).get(keys.GPU_MEMORY_NODE_LABEL) or 0))
        except ValueError:
            label = 0.0
        return [cards.get(uuid) or label for uuid in uuids]

    def _write_configmaps(self, req: _Request, pod: Mapping[str, Any], attempt: _Attempt) -> None:
        caps: dict[str, str] = {}
        if self.config.hami_core:
            caps = rsv.hami_core_limits(
                pod, self._card_memories(req.node, attempt.uuids), req.portion
            )
        for name, data in rsv.gpu_configmaps(pod, attempt.uuids, req.portion, caps):
            manifest = rsv.gpu_configmap_manifest(pod, name, data)
            try:
                self.kube.create(path_of("", "v1", "configmaps", req.namespace), manifest)
                attempt.configmaps_created.append((req.namespace, name))
            except KubeError as exc:
                if exc.code != 409:
                    raise
                # Left by an earlier attempt (or an earlier pod of that name): now this
                # pod's, with this decision.
                self.kube.patch(
                    path_of("", "v1", "configmaps", req.namespace, name),
                    {
                        "data": data,
                        "metadata": {
                            "ownerReferences": manifest["metadata"].get("ownerReferences")
                        },
                    },
                )

    def _label(self, req: _Request, pod: Json, attempt: _Attempt) -> Json:
        """Label the pod with its groups, only if it is still the pod that was read: the
        patch names its uid and resourceVersion (a pod made again under the same name, or
        changed meanwhile, answers 409; a changed one is read again and tried once more)."""
        path = path_of("", "v1", "pods", req.namespace, req.pod_name)
        uid = (pod.get("metadata") or {}).get("uid")
        for _ in range(3):
            patch = rsv.group_label_patch(list(req.groups))
            version = (pod.get("metadata") or {}).get("resourceVersion")
            if version:
                patch["metadata"]["resourceVersion"] = version
            if uid:
                patch["metadata"]["uid"] = uid
            try:
                labelled = self.kube.patch(path, patch)
            except KubeError as exc:
                if exc.code != 409:
                    raise
                pod = self._get_pod(req)
                if uid and (pod.get("metadata") or {}).get("uid") != uid:
                    raise BindError(
                        "the pod was made again under the same name", final=True
                    ) from None
                continue
            attempt.labelled = pod
            return labelled if (labelled.get("metadata") or {}).get("name") else pod
        raise BindError("the pod kept changing while being labelled")

    def _rollback(self, req: _Request, attempt: _Attempt) -> None:
        """Undo what the failed attempt did; every step is tried, failures only logged."""
        self.pinned.release(attempt.pinned)
        if attempt.bound:
            # Bound: its label and ConfigMaps stay (the retry completes what is missing)
            # and so does its group's reservation pod, which the bound pod uses.
            return
        if attempt.labelled is not None:
            self._quietly(
                self.kube.patch,
                path_of("", "v1", "pods", req.namespace, req.pod_name),
                rsv.group_label_rollback(attempt.labelled),
            )
        for ns, name in attempt.configmaps_created:
            self._quietly(self.kube.delete, path_of("", "v1", "configmaps", ns, name))
        if req.kind == "Fraction" and req.node:
            for group in req.groups:
                self._quietly(self.release_if_unused, req.node, group, req.uid)

    def _quietly(self, step: Callable[..., object], *args: Any) -> None:
        try:
            step(*args)
        except KubeError as exc:
            if exc.code != 404:
                log.warning("binder rollback step failed", extra={"error": str(exc)})

    def _write_status(self, req: _Request, status: Json) -> bool:
        """Write the outcome, but only over a phase that is still Pending (or unset).

        The write names the resourceVersion it read, so a phase someone else set
        meanwhile (e.g. Failed by hand, or the request deleted) is never
        overwritten. False when the status was left as it is.
        """
        path = path_of(keys.GROUP, keys.BINDREQUEST_VERSION, BINDREQUESTS, req.namespace, req.name)
        if req.resource_version:
            # The request as offered was pending: write over exactly that version, with
            # no GET first. Anything newer (409) is read and judged below.
            try:
                self.kube.patch(
                    f"{path}/status",
                    {"metadata": {"resourceVersion": req.resource_version}, "status": status},
                )
                return True
            except KubeError as exc:
                if exc.code == 404:
                    return False
                if exc.code != 409:
                    raise
        for _ in range(5):
            try:
                current = self.kube.get(path)
                if not is_pending(current):
                    log.info(
                        "BindRequest decided already: its status is left as it is",
                        extra={
                            "bindrequest": f"{req.namespace}/{req.name}",
                            "phase": (current.get("status") or {}).get("phase"),
                        },
                    )
                    return False
                version = (current.get("metadata") or {}).get("resourceVersion")
                body: Json = {"status": status}
                if version:
                    body["metadata"] = {"resourceVersion": version}
                self.kube.patch(f"{path}/status", body)
                return True
            except KubeError as exc:
                if exc.code == 404:  # a deleted request needs no status
                    return False
                if exc.code != 409:
                    raise
        raise KubeError(409, "Conflict", f"BindRequest {req.namespace}/{req.name} kept changing")

    # ---- clean-up --------------------------------------------------------------------

    def _shared_pods_on(self, node: str) -> list[Json]:
        """The pods on ``node`` that carry a GPU group (shared pods, reservation pods)."""
        pods = list_all(
            self.kube,
            path_of("", "v1", "pods"),
            query=[
                ("labelSelector", keys.GPU_GROUP_LABEL),
                ("fieldSelector", f"spec.nodeName={node}"),
            ],
        )
        return list(pods.get("items") or [])

    def group_in_use(self, node: str, group: str, ignore_request: str | None = None) -> bool:
        """Does a shared pod on ``node``, or a pending BindRequest, use ``group``'s card?"""
        for pod in self._shared_pods_on(node):
            if (pod.get("metadata") or {}).get("namespace") == self.config.reservation_namespace:
                continue
            if rsv.holds_card(pod) and groups.uses_group(pod, group):
                return True
        requests = list_all(self.kube, path_of(keys.GROUP, keys.BINDREQUEST_VERSION, BINDREQUESTS))
        for br in requests.get("items") or []:
            m = br.get("metadata") or {}
            spec = br.get("spec") or {}
            if ignore_request and m.get("uid") == ignore_request:
                continue
            if m.get("deletionTimestamp") or not is_pending(br):
                continue
            if spec.get("selectedNode") == node and group in (spec.get("selectedGPUGroups") or []):
                return True
        return False

    def release_if_unused(self, node: str, group: str, ignore_request: str | None = None) -> bool:
        """Delete the group's reservation pod when nothing uses its card. True if deleted."""
        ns = self.config.reservation_namespace
        name = rsv.reservation_pod_name(node, group)
        with self._group_lock(node, group):
            if self.group_in_use(node, group, ignore_request):
                return False
            try:
                self.kube.delete(path_of("", "v1", "pods", ns, name))
            except KubeError as exc:
                if exc.code == 404:
                    return False
                raise
        log.info(
            "deleted reservation pod: no shared pod left on its GPU group",
            extra={"pod": f"{ns}/{name}", "gpu_group": group},
        )
        return True

    def pod_gone(self, pod: Mapping[str, Any]) -> list[str]:
        """A shared pod ended or was deleted: release the groups it leaves unused."""
        m = pod.get("metadata") or {}
        node = (pod.get("spec") or {}).get("nodeName")
        if not node or m.get("namespace") == self.config.reservation_namespace:
            return []
        released = []
        for group in groups.shared_pod_groups(pod):
            if self.release_if_unused(str(node), group):
                released.append(rsv.reservation_pod_name(str(node), group))
        return released

    def reservation_gone(self, reservation: Mapping[str, Any]) -> list[str]:
        """A reservation pod went: if shared pods are bound to its card, hold that card for
        the group again and warn them (see ``_hold_again``). The shared pods warned."""
        node = (reservation.get("spec") or {}).get("nodeName")
        group = groups.reservation_group(reservation)
        if not node or not group:
            return []
        gone_uid = str((reservation.get("metadata") or {}).get("uid") or "")
        return self._hold_again(
            str(node), group, self._shared_pods(str(node)), gone_uid, rsv.reserved_uuid(reservation)
        )

    def _shared_pods(self, node: str | None = None) -> list[Json]:
        """Live shared pods (group label, bound, not finished, not terminating)."""
        query = [("labelSelector", keys.GPU_GROUP_LABEL)]
        if node:
            query.append(("fieldSelector", f"spec.nodeName={node}"))
        pods = list_all(self.kube, path_of("", "v1", "pods"), query=query)
        out = []
        for pod in pods.get("items") or []:
            m = pod.get("metadata") or {}
            if m.get("namespace") == self.config.reservation_namespace or m.get(
                "deletionTimestamp"
            ):
                continue
            if not (pod.get("spec") or {}).get("nodeName") or not rsv.holds_card(pod):
                continue
            out.append(pod)
        return out

    def _hold_again(
        self,
        node: str,
        group: str,
        pods: list[Json],
        gone_uid: str | None = None,
        card: str | None = None,
    ) -> list[str]:
        """The group's reservation pod on ``node`` is gone (``gone_uid``: that one went;
        ``card``: the card it held) while shared pods are bound to its card: make a new
        one, onto that same card when it is still free (the other free cards are held by
        blocker pods meanwhile, as for a pinned pod), so that the device plugin does not
        hand the card to another pod; post a Warning on each shared pod.

        No pod is deleted: a bare pod deleted is lost for good, and a pod bound while its
        card went has not been shown any card yet (the bind writes its ConfigMap after
        the Binding, with the card held then). If the card was taken meanwhile, the new
        reservation pod holds another one (the node's count of free cards is right again)
        and the Warning tells the pod's owner to re-create the pod."""
        users = [
            pod
            for pod in pods
            if (pod.get("spec") or {}).get("nodeName") == node and groups.uses_group(pod, group)
        ]
        if not users:
            return []
        ns = self.config.reservation_namespace
        name = rsv.reservation_pod_name(node, group)
        path = path_of("", "v1", "pods", ns, name)
        card = card or self._card_shown(users[0], group)
        if not self._make_reservation_again(node, group, path, gone_uid):
            return []
        held: Held | None = None
        if card:
            try:
                held = self.pinned.hold_card(node, card, f"{ns}/{name}")
            except (PinnedBindError, KubeError) as exc:
                log.warning(
                    "reservation pod: card not held again",
                    extra={"pod": f"{ns}/{name}", "card": card, "error": str(exc)},
                )
        try:
            with self._group_lock(node, group):
                try:
                    self._create_reservation_pod(
                        rsv.reservation_pod_manifest(
                            node,
                            group,
                            image=self.config.reservation_image,
                            namespace=ns,
                            service_account=self.config.reservation_service_account,
                        )
                    )
                except KubeError as exc:
                    if exc.code != 409:  # made meanwhile (a bind of the group): that one
                        raise
            now = self._wait_card(path)
        finally:
            self.pinned.release(held)
        if card and now == card:
            what = f"a new reservation pod holds its card {card} again"
        else:
            what = (
                f"a new reservation pod holds card {now or '(not reported yet)'} for the "
                f"group; if the pod's containers had started they still see card "
                f"{card or '(unknown)'}, which nothing holds for them now: delete the pod "
                "(its owner makes a new one) to run it on a card that is held"
            )
        warned = []
        for pod in users:
            m = pod.get("metadata") or {}
            key = f"{m.get('namespace')}/{m.get('name')}"
            self.events.post(
                involved(pod),
                "Warning",
                RESERVATION_LOST,
                f"Reservation pod {ns}/{name} of GPU group {group} on node {node} was "
                f"deleted while pod {key} was bound to its card; {what}.",
            )
            warned.append(key)
        log.warning(
            "reservation pod was gone while shared pods used its card: made again",
            extra={
                "pod": f"{ns}/{name}",
                "node": node,
                "shared_pods": warned,
                "card": now,
                **({"previous_card": card} if now != card else {}),  # onto another card
            },
        )
        return warned

    def _make_reservation_again(
        self, node: str, group: str, path: str, gone_uid: str | None
    ) -> bool:
        """Whether the group's reservation pod is to be made again: it is not there."""
        with self._group_lock(node, group):
            try:
                now = self.kube.get(path)
            except KubeError as exc:
                if exc.code != 404:
                    raise
                return True
        m = now.get("metadata") or {}
        if gone_uid is not None and str(m.get("uid") or "") != gone_uid:
            return False  # made again since: its card is the one the shared pods use
        if not m.get("deletionTimestamp") and rsv.reservation_failure(now):
            # Failed for good (e.g. rejected by the kubelet): made anew by the next
            # clean-up pass once this one is gone.
            self._quietly(self.kube.delete, path)
        return False  # still going away: the next clean-up pass makes the new one

    def _card_shown(self, pod: Mapping[str, Any], group: str) -> str | None:
        """The card of ``group`` the shared pod's GPU ConfigMap names, if it can be read
        (KAI's ConfigMap or, for a pod wired before, ``<pod>-gpu``)."""
        m = pod.get("metadata") or {}
        names = rsv.visible_devices_configmaps(pod)
        if not names:
            return None
        try:
            cm = self.kube.get(path_of("", "v1", "configmaps", str(m.get("namespace")), names[0]))
        except KubeError:
            return None
        cards = str((cm.get("data") or {}).get(rsv.VISIBLE_DEVICES_KEY) or "").split(",")
        shared = groups.shared_pod_groups(pod)
        index = shared.index(group) if group in shared else 0
        return cards[index].strip() or None if index < len(cards) else None

    def _wait_card(self, path: str) -> str | None:
        """The card the reservation pod at ``path`` reports, waited for; None if none."""
        deadline = self._clock() + self.config.reservation_timeout
        while True:
            try:
                pod = self.kube.get(path)
            except KubeError as exc:
                if exc.code != 404:
                    raise
                return None
            uuid = rsv.reserved_uuid(pod)
            if uuid or rsv.reservation_failure(pod) or self._clock() >= deadline:
                return uuid
            self._sleep(self.config.poll_interval)

    def orphaned_shared_pods(self) -> list[str]:
        """Shared pods bound to a card whose reservation pod is gone (a deletion the
        operator missed, e.g. while it was down): handled as ``reservation_gone`` does."""
        pods = self._shared_pods()  # first: a reservation made after this list is seen below
        if not pods:
            return []
        ns = self.config.reservation_namespace
        try:
            listing = list_all(
                self.kube,
                path_of("", "v1", "pods", ns),
                query=[("labelSelector", f"{rsv.MANAGED_BY_LABEL}={rsv.MANAGED_BY}")],
            )
        except KubeError as exc:
            if exc.code != 404:
                raise
            listing = {}
        held = set()
        for r in listing.get("items") or []:
            if not (r.get("metadata") or {}).get(
                "deletionTimestamp"
            ) and not rsv.reservation_failure(r):
                held.add(str((r.get("metadata") or {}).get("name")))
        warned: list[str] = []
        lost: set[tuple[str, str]] = set()
        for pod in pods:
            node = str((pod.get("spec") or {}).get("nodeName"))
            for group in groups.shared_pod_groups(pod):
                # Not excused by a pending BindRequest of the group: a new reservation
                # pod may hold another card than the one this pod was given.
                if rsv.reservation_pod_name(node, group) in held:
                    continue
                lost.add((node, group))
        for node, group in sorted(lost):
            warned += self._hold_again(node, group, pods)
        return warned

    def sweep(self, now: float | None = None) -> list[str]:
        """Delete every reservation pod whose card no shared pod uses any more.

        Driven from state, not from events: what a missed pod event (operator down,
        a failed delete) left behind goes on the next pass. Candidates come from one
        listing of shared pods and BindRequests; each is checked again under its lock
        before it is deleted.
        """
        ns = self.config.reservation_namespace
        try:
            pods = list_all(
                self.kube,
                path_of("", "v1", "pods", ns),
                query=[("labelSelector", f"{rsv.MANAGED_BY_LABEL}={rsv.MANAGED_BY}")],
            )
        except KubeError as exc:
            if exc.code == 404:
                return []
            raise
        items = pods.get("items") or []
        if not items:
            return []
        used = self._groups_in_use()
        now = time.time() if now is None else now
        released = []
        for pod in items:
            m = pod.get("metadata") or {}
            created = parse_time(m.get("creationTimestamp"))
            if created is not None and now - created < self.config.sweep_min_age:
                continue
            node = (pod.get("spec") or {}).get("nodeName")
            group = groups.reservation_group(pod)
            if not node or not group or m.get("deletionTimestamp"):
                continue
            if (str(node), group) in used or (str(node), groups.label_value(group)) in used:
                continue
            if self.release_if_unused(str(node), group):
                released.append(str(m.get("name")))
        return released

    def _groups_in_use(self) -> set[tuple[str, str]]:
        """(node, group) of every unfinished shared pod and every pending BindRequest."""
        used: set[tuple[str, str]] = set()
        pods = list_all(
            self.kube, path_of("", "v1", "pods"), query=[("labelSelector", keys.GPU_GROUP_LABEL)]
        )
        for pod in pods.get("items") or []:
            node = (pod.get("spec") or {}).get("nodeName")
            if (pod.get("metadata") or {}).get("namespace") == self.config.reservation_namespace:
                continue
            if node and rsv.holds_card(pod):
                labels = (pod.get("metadata") or {}).get("labels") or {}
                for group in [*groups.shared_pod_groups(pod), labels.get(keys.GPU_GROUP_LABEL)]:
                    if group:
                        used.add((str(node), str(group)))
        requests = list_all(self.kube, path_of(keys.GROUP, keys.BINDREQUEST_VERSION, BINDREQUESTS))
        for br in requests.get("items") or []:
            if not is_pending(br):
                continue
            spec = br.get("spec") or {}
            for group in spec.get("selectedGPUGroups") or []:
                used.add((str(spec.get("selectedNode")), str(group)))
        return used


def _pod_ref(req: _Request, pod: Mapping[str, Any] | None) -> Json:
    if pod:
        return involved(pod)
    return {"apiVersion": "v1", "kind": "Pod", "name": req.pod_name, "namespace": req.namespace}


def _describe(exc: Exception) -> str:
    if isinstance(exc, KubeError):
        return f"API error {exc.code} {exc.reason}: {exc.message}" if exc.code else exc.message
    return f"{type(exc).__name__}: {exc}"
