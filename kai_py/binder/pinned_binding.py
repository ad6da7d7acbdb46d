"""Binding a pinned pod onto its named cards while the NVIDIA device plugin chooses.

The device plugin gives a container any free card; it cannot be told which.
So for the moment of admission the named cards are made the only free ones:

1. count the node's free cards, and create that many *blocker* pods (one card
   each, ``nodeName`` preset, running the reservation program that reports
   the card's UUID);
2. once every blocker has reported its card (or was refused for lack of
   one), delete the blockers that landed on the cards the pod may use, as
   many as it needs;
3. the caller then binds the pod (a whole-GPU pod) or creates the GPU
   groups' reservation pods (a shared pod): the freed cards are the only
   free ones, whatever order the plugin prefers;
4. ``settle`` checks which cards were given (the kubelet's report, or the
   reservation pods' UUIDs) and records them on the pod
   (``kai.scheduler/gpu-uuids``); ``release`` deletes the other blockers.

Holding every free card first (rather than only the cards that are not
wanted) is what makes this independent of the plugin's preferences: a
blocker may land on a wanted card, and then that blocker is the one
released. Blockers carry who they hold for and an expiry; a restarted
binder deletes every blocker it finds (docs/pinning.md).

Pinned binds on one node are serialised by a lock per node; while blockers
exist the scheduler sees the node's cards as taken and places nothing else
there.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final
from uuid import uuid4

from kai_py.api import keys
from kai_py.api.objects import WorkloadError, parse_time
from kai_py.apiclient.kube import Kube, KubeError, list_all, path_of
from kai_py.binder.reservation import (
    missing_namespace,
    reservation_failure,
    reservation_pod_name,
    reserved_uuid,
)
from kai_py.gpu import inventory, pins
from kai_py.state.convert import pod_requests

log = logging.getLogger(__name__)

Json = dict[str, Any]

BLOCKER_LABEL: Final = keys.GPU_BLOCKER_LABEL
BLOCKER_MANAGED_BY: Final = "kai-py-pinning"
BLOCKER_FOR_ANNOTATION: Final = "kai.scheduler/blocker-for"
BLOCKER_EXPIRES_ANNOTATION: Final = "kai.scheduler/blocker-expires"
BLOCKER_HOLDER_ANNOTATION: Final = "kai.scheduler/blocker-holder"
#: This process: blockers of any other holder are left-overs once it starts.
INSTANCE: Final = uuid4().hex[:12]

_node_locks: dict[str, threading.Lock] = {}
_node_locks_guard = threading.Lock()


class PinnedBindError(Exception):
    def __init__(self, reason: str, *, final: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.final = final


@dataclass(slots=True)
class Held:
    """A pinned bind in flight: the cards freed for it and the blockers still held."""

    node: str
    pod: str  # namespace/name, for messages
    allowed: tuple[str, ...]
    wanted: tuple[str, ...]
    blockers: list[str] = field(default_factory=list)  # names still to delete
    namespace: str = keys.RESERVATION_NAMESPACE
    lock: threading.Lock | None = None


def _lock_of(node: str) -> threading.Lock:
    with _node_locks_guard:
        return _node_locks.setdefault(node, threading.Lock())


def _rfc3339(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def blocker_manifest(
    node: str,
    pod_key: str,
    index: int,
    *,
    image: str,
    namespace: str,
    ttl: float,
    now: float,
    service_account: str | None = None,
) -> Json:
    digest = hashlib.sha256(f"{node}\0{pod_key}".encode()).hexdigest()[:10]
    manifest: Json = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"gpu-blocker-{digest}-{index}",
            "namespace": namespace,
            "labels": {BLOCKER_LABEL: "true", "app.kubernetes.io/managed-by": BLOCKER_MANAGED_BY},
            "annotations": {
                BLOCKER_FOR_ANNOTATION: pod_key,
                BLOCKER_EXPIRES_ANNOTATION: _rfc3339(now + ttl),
                BLOCKER_HOLDER_ANNOTATION: INSTANCE,
            },
        },
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "tolerations": [{"operator": "Exists"}],
            "containers": [
                {
                    "name": "blocker",
                    "image": image,
                    "command": ["kai-py", "reserve"],
                    "env": [
                        {
                            "name": "POD_NAME",
                            "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}},
                        },
                        {
                            "name": "POD_NAMESPACE",
                            "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}},
                        },
                    ],
                    "resources": {
                        "requests": {"cpu": "1m", "memory": "16Mi", keys.GPU_RESOURCE: "1"},
                        "limits": {"memory": "64Mi", keys.GPU_RESOURCE: "1"},
                    },
                }
            ],
        },
    }
    if service_account:
        # The reservation program annotates its own pod: it needs the reservation pods' account.
        manifest["spec"]["serviceAccountName"] = service_account
    return manifest


class PinnedBinder:
    """The steps above, for one binder; ``sleep`` and ``clock`` are injectable for tests."""

    def __init__(
        self,
        kube: Kube,
        *,
        image: str,
        namespace: str,
        timeout: float,
        poll: float,
        service_account: str | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kube = kube
        self.image = image
        self.namespace = namespace
        self.timeout = timeout
        self.poll = poll
        self.service_account = service_account
        self._sleep = sleep
        self._clock = clock

    # ---- 1 and 2: hold every free card, free the wanted ones --------------------------

    def hold(
        self, node: str, pod: Mapping[str, Any], kind: str, groups: Sequence[str]
    ) -> Held | None:
        """Make the pod's allowed cards the only free ones on ``node``; None if not pinned."""
        m = pod.get("metadata") or {}
        pod_key = f"{m.get('namespace')}/{m.get('name')}"
        try:
            pin = pins.pin_of(pod)
        except WorkloadError as exc:
            raise PinnedBindError(str(exc), final=True) from None
        if pin is None:
            return None
        node_obj = self.kube.get(path_of("", "v1", "nodes", None, node))
        try:
            cards = inventory.node_cards((node_obj.get("metadata") or {}).get("annotations") or {})
        except inventory.InventoryError as exc:
            raise PinnedBindError(f"node {node}: {exc}") from None
        allowed = tuple(card.uuid for card in cards if pin.allows(card))
        if not allowed:
            raise PinnedBindError(f"node {node} has no card allowed by {pin.text}")
        if kind == "Fraction":
            need = 0
            for group in groups:
                uuid = self._group_card(node, group)
                if uuid is None:
                    need += 1
                elif uuid not in allowed:
                    raise PinnedBindError(
                        f"GPU group {group} on node {node} is on card {uuid}, "
                        f"which {pin.text} does not allow"
                    )
        else:
            need = round(pod_requests(pod).gpu)
        held = Held(node, pod_key, allowed, (), namespace=self.namespace)
        if need == 0:
            return held
        held.lock = _lock_of(node)
        held.lock.acquire()
        try:
            self._hold_all_free(held, node_obj, need, pod_key, pin.text)
        except BaseException:
            self.release(held)
            raise
        return held

    def hold_card(self, node: str, uuid: str, pod_key: str) -> Held:
        """Make the card ``uuid`` the only free one on ``node``, for a GPU group's
        reservation pod made again onto the card its shared pods were shown; ``release``
        frees the others once that pod has its card."""
        node_obj = self.kube.get(path_of("", "v1", "nodes", None, node))
        held = Held(node, pod_key, (uuid,), (), namespace=self.namespace)
        held.lock = _lock_of(node)
        held.lock.acquire()
        try:
            self._hold_all_free(held, node_obj, 1, pod_key, f"card {uuid}")
        except BaseException:
            self.release(held)
            raise
        return held

    def _group_card(self, node: str, group: str) -> str | None:
        """The card of an existing group's reservation pod; None when the group is new."""
        try:
            res = self.kube.get(
                path_of("", "v1", "pods", self.namespace, reservation_pod_name(node, group))
            )
        except KubeError as exc:
            if exc.code == 404:
                return None
            raise
        uuid = reserved_uuid(res)
        if uuid is None:
            raise PinnedBindError(f"the reservation pod of GPU group {group} has not reported yet")
        return uuid

    def free_cards(self, node_obj: Mapping[str, Any]) -> int:
        """Cards no pod on the node holds, as the kubelet's device manager counts them."""
        name = str((node_obj.get("metadata") or {}).get("name"))
        status = node_obj.get("status") or {}
        total = (status.get("allocatable") or status.get("capacity") or {}).get(keys.GPU_RESOURCE)
        try:
            cards = int(str(total or "0"))
        except ValueError:
            cards = 0
        pods = self.kube.request(
            "GET", path_of("", "v1", "pods"), query=[("fieldSelector", f"spec.nodeName={name}")]
        )
        used = 0.0
        for pod in pods.get("items") or []:
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            try:
                used += pod_requests(pod).gpu
            except WorkloadError:
                continue
        return max(0, cards - round(used))

    def _hold_all_free(
        self, held: Held, node_obj: Mapping[str, Any], need: int, pod_key: str, pin_text: str
    ) -> None:
        free = self.free_cards(node_obj)
        if free < need:
            raise PinnedBindError(f"node {held.node} has {free} free card(s), {need} needed")
        ttl = 2 * self.timeout + 60.0
        for index in range(free):
            manifest = blocker_manifest(
                held.node,
                pod_key,
                index,
                image=self.image,
                namespace=self.namespace,
                ttl=ttl,
                now=time.time(),
                service_account=self.service_account,
            )
            name = manifest["metadata"]["name"]
            try:
                self._create_blocker(manifest)
            except KubeError as exc:
                if exc.code != 409:
                    raise
                # A left-over of an earlier attempt for the same pod: replace it.
                self._delete(name)
                self._create_blocker(manifest)
            held.blockers.append(name)
        cards = self._reported(held)
        wanted = [uuid for uuid in held.allowed if uuid in cards][:need]
        if len(wanted) < need:
            taken = [uuid for uuid in held.allowed if uuid not in cards]
            raise PinnedBindError(
                f"{pin_text}: card(s) {', '.join(taken)} on node {held.node} are held by other "
                f"pods; {need} allowed card(s) needed"
            )
        for uuid in wanted:
            name = cards[uuid]
            self._delete(name)
            held.blockers.remove(name)
        for uuid in wanted:
            self._wait_gone(cards[uuid])
        held.wanted = tuple(wanted)
        log.info(
            "pinned bind",
            extra={"pod": pod_key, "node": held.node, "blockers": len(cards), "freed": wanted},
        )

    def _reported(self, held: Held) -> dict[str, str]:
        """UUID -> blocker name, once every blocker reported or was refused a card."""
        deadline = self._clock() + self.timeout
        cards: dict[str, str] = {}
        pending = list(held.blockers)
        while pending:
            for name in list(pending):
                try:
                    pod = self.kube.get(path_of("", "v1", "pods", self.namespace, name))
                except KubeError as exc:
                    if exc.code != 404:
                        raise
                    raise PinnedBindError(
                        f"blocker pod {self.namespace}/{name} disappeared"
                    ) from None
                uuid = reserved_uuid(pod)
                if uuid:
                    cards[uuid] = name
                    pending.remove(name)
                elif reservation_failure(pod):
                    pending.remove(name)  # no card left for it: the free count was high
            if not pending:
                break
            if self._clock() >= deadline:
                raise PinnedBindError(
                    f"blocker pods on node {held.node} did not report their cards within "
                    f"{self.timeout:g}s"
                )
            self._sleep(self.poll)
        return cards

    # ---- 4: check, record, release ---------------------------------------------------

    def check_groups(self, held: Held | None, uuids: Sequence[str]) -> None:
        """Before a shared pod is bound: every card of its groups must be allowed."""
        if held is None:
            return
        wrong = [uuid for uuid in uuids if uuid not in held.allowed]
        if wrong:
            raise PinnedBindError(
                f"GPU group card(s) {', '.join(wrong)} are not among the allowed "
                f"{', '.join(held.allowed)}"
            )

    def settle(
        self,
        held: Held | None,
        namespace: str,
        name: str,
        kind: str,
        uuids: Sequence[str],
        uid: str | None = None,
    ) -> tuple[str, ...]:
        """After the bind: the cards the pod got, checked and recorded on the pod (only on
        the pod of ``uid``: a pod made again under the name is not given this one's cards)."""
        if held is None:
            return ()
        given = tuple(uuids)
        if kind != "Fraction" and held.wanted:
            given = self._admitted_cards(namespace, name) or held.wanted
            if set(given) != set(held.wanted):
                raise PinnedBindError(
                    f"the pod was given {', '.join(given)} instead of {', '.join(held.wanted)}",
                    final=True,
                )
        elif kind != "Fraction":
            given = ()
        if given:
            patch: dict[str, Any] = {"annotations": {keys.GPU_UUIDS_ANNOTATION: ",".join(given)}}
            if uid:
                patch["uid"] = uid
            self.kube.patch(path_of("", "v1", "pods", namespace, name), {"metadata": patch})
        return given

    def _admitted_cards(self, namespace: str, name: str) -> tuple[str, ...]:
        """Wait for the kubelet to admit the pod (it then holds its cards); its cards if shown."""
        deadline = self._clock() + self.timeout
        path = path_of("", "v1", "pods", namespace, name)
        while True:
            pod = self.kube.get(path)
            status = pod.get("status") or {}
            cards = pins.reported_uuids(pod)
            if cards:
                return cards
            if status.get("phase") == "Failed":
                raise PinnedBindError(
                    f"the kubelet refused the pod: {status.get('reason')} {status.get('message')}",
                    final=True,
                )
            if status.get("phase") == "Running" or status.get("containerStatuses"):
                # Admitted; the kubelet does not show devices (KEP-4680 off). The blockers
                # held every other free card, so it has the freed ones.
                return ()
            if self._clock() >= deadline:
                log.warning(
                    "pod not admitted in time",
                    extra={"pod": f"{namespace}/{name}", "timeout_s": self.timeout},
                )
                return ()
            self._sleep(self.poll)

    def release(self, held: Held | None) -> None:
        if held is None:
            return
        for name in list(held.blockers):
            try:
                self._delete(name)
            except KubeError as exc:
                log.warning(
                    "could not delete blocker",
                    extra={"pod": f"{self.namespace}/{name}", "error": str(exc)},
                )
                continue
            held.blockers.remove(name)
        if held.lock is not None and held.lock.locked():
            held.lock.release()
            held.lock = None

    # ---- helpers ---------------------------------------------------------------------

    def _delete(self, name: str) -> None:
        try:
            self.kube.delete(
                path_of("", "v1", "pods", self.namespace, name), {"gracePeriodSeconds": 0}
            )
        except KubeError as exc:
            if exc.code != 404:
                raise

    def _wait_gone(self, name: str) -> None:
        deadline = self._clock() + self.timeout
        path = path_of("", "v1", "pods", self.namespace, name)
        while True:
            try:
                self.kube.get(path)
            except KubeError as exc:
                if exc.code == 404:
                    return
                raise
            if self._clock() >= deadline:
                raise PinnedBindError(f"blocker pod {self.namespace}/{name} did not go away")
            self._sleep(self.poll)

    def _create_blocker(self, manifest: Json) -> None:
        """The binder may not create namespaces (docs/deploy.md, "Security"): a
        missing reservation namespace is said plainly."""
        try:
            self.kube.create(path_of("", "v1", "pods", self.namespace), manifest)
        except KubeError as exc:
            if exc.code == 404:
                raise PinnedBindError(missing_namespace(self.namespace)) from None
            raise


def sweep_blockers(
    kube: Kube, namespace: str, *, startup: bool, now: float | None = None
) -> list[str]:
    """Delete left-over blockers: at start-up every one of another holder, later the expired."""
    try:
        listing = list_all(
            kube,
            path_of("", "v1", "pods", namespace),
            query=[("labelSelector", f"{BLOCKER_LABEL}=true")],
        )
    except KubeError as exc:
        if exc.code == 404:
            return []
        raise
    now = time.time() if now is None else now
    deleted = []
    for pod in listing.get("items") or []:
        m = pod.get("metadata") or {}
        ann = m.get("annotations") or {}
        expires = parse_time(ann.get(BLOCKER_EXPIRES_ANNOTATION))
        stale = startup and ann.get(BLOCKER_HOLDER_ANNOTATION) != INSTANCE
        if stale or expires is None or expires <= now:
            try:
                kube.delete(
                    path_of("", "v1", "pods", namespace, str(m.get("name"))),
                    {"gracePeriodSeconds": 0},
                )
                deleted.append(str(m.get("name")))
            except KubeError as exc:
                if exc.code != 404:
                    raise
    return deleted
