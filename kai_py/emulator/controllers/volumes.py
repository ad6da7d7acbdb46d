"""The PersistentVolume binder: claims to volumes, as kube-controller-manager's
persistentvolume-binder-controller does, plus the two parts of a real cluster
that a cluster without storage drivers lacks.

As upstream, where a client can tell:
- a new volume with no ``claimRef`` (or one naming no uid) becomes Available;
- a Pending claim with no ``spec.volumeName`` is bound to the volume pre-bound
  to it (``claimRef`` naming it) if any, else to the smallest Available volume
  of the same class name ("" for none), offering every access mode asked (the
  volumes offering the fewest modes are tried first), at least as large as
  the request, of the same volumeMode and volumeAttributesClassName, whose
  labels match the claim's selector; a claim naming ``spec.volumeName`` is
  bound to that volume if it fits (else a VolumeMismatch Event);
- binding writes the volume first (``claimRef`` with the claim's uid and
  resourceVersion, ``pv.kubernetes.io/bound-by-controller``, phase Bound),
  then the claim (``spec.volumeName``, ``pv.kubernetes.io/bind-completed``
  and ``bound-by-controller``, phase Bound, ``status.capacity`` and
  ``status.accessModes`` from the volume); a claim of a class that waits for
  the first consumer is left to the scheduler (a WaitForFirstConsumer Event);
- a bound claim whose volume is gone, or bound to another claim, is Lost;
- a volume whose claim is deleted is Released and then reclaimed by its
  policy: Retain keeps it, Delete deletes it, Recycle makes it Available again.

What upstream leaves to others:
- kube-scheduler's VolumeBinding binds a waiting claim once its pod has a
  node. kai-py's binder only writes ``volume.kubernetes.io/selected-node`` on
  the claim, so this controller then binds it to a matching volume whose
  ``nodeAffinity`` admits that node;
- an external provisioner makes a volume when none matches. No storage
  driver runs in the emulated cluster, so this controller stands in for any
  class's provisioner (except ``kubernetes.io/no-provisioner``, which makes
  nothing upstream either): a hostPath volume ``pvc-<claim uid>`` of the
  requested size, pre-bound to the claim, with the class's reclaim policy and
  pinned to the selected node if there is one; deleting it deletes only the
  object (there is no data).
"""

from __future__ import annotations

import copy
from fractions import Fraction
from typing import Any

from kai_py.emulator.clientgo.client import (
    PVCS,
    PVS,
    ClusterClient,
    Json,
    obj_key,
)
from kai_py.emulator.clientgo.events import EventRecorder
from kai_py.emulator.clientgo.runtime import Informer, WorkQueue
from kai_py.emulator.quantity import QuantityError, parse_quantity
from kai_py.emulator.storage.errors import ApiError
from kai_py.emulator.storage.selectors import labels_match, selector_from_label_selector
from kai_py.emulator.timesource import Clock

BIND_COMPLETED = "pv.kubernetes.io/bind-completed"
BOUND_BY_CONTROLLER = "pv.kubernetes.io/bound-by-controller"
PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"
STORAGE_PROVISIONER = "volume.kubernetes.io/storage-provisioner"
BETA_STORAGE_PROVISIONER = "volume.beta.kubernetes.io/storage-provisioner"
SELECTED_NODE = "volume.kubernetes.io/selected-node"
BETA_CLASS = "volume.beta.kubernetes.io/storage-class"
NO_PROVISIONER = "kubernetes.io/no-provisioner"
HOSTNAME_LABEL = "kubernetes.io/hostname"
#: Where a provisioned volume would live on its node (the emulated kubelet mounts nothing).
PROVISION_ROOT = "/tmp/kai-py-volumes"

_NODE_OPS = {"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"}


def _meta(obj: Json) -> Json:
    value = obj.get("metadata")
    return value if isinstance(value, dict) else {}


def _spec(obj: Json) -> Json:
    value = obj.get("spec")
    return value if isinstance(value, dict) else {}


def _phase(obj: Json) -> str:
    return str((obj.get("status") or {}).get("phase") or "")


def _annotations(obj: Json) -> dict[str, str]:
    return _meta(obj).get("annotations") or {}


def claim_class(claim: Json) -> str:
    """The claim's class name; the beta annotation wins, as upstream."""
    beta = _annotations(claim).get(BETA_CLASS)
    if beta is not None:
        return str(beta)
    return str(_spec(claim).get("storageClassName") or "")


def volume_class(volume: Json) -> str:
    beta = _annotations(volume).get(BETA_CLASS)
    if beta is not None:
        return str(beta)
    return str(_spec(volume).get("storageClassName") or "")


def _storage(quantities: Any) -> Fraction:
    """The ``storage`` quantity; absent or unreadable counts as zero (as upstream's
    zero Quantity: the API server validated it already)."""
    value = (quantities or {}).get("storage") if isinstance(quantities, dict) else None
    if value is None:
        return Fraction(0)
    try:
        return parse_quantity(value)
    except QuantityError:
        return Fraction(0)


def _request(claim: Json) -> Fraction:
    return _storage((_spec(claim).get("resources") or {}).get("requests"))


def _capacity(volume: Json) -> Fraction:
    return _storage(_spec(volume).get("capacity"))


def _mode(obj: Json) -> str:
    return str(_spec(obj).get("volumeMode") or "Filesystem")


def _modes(obj: Json) -> frozenset[str]:
    return frozenset(str(m) for m in _spec(obj).get("accessModes") or ())


def bound_to(volume: Json, claim: Json) -> bool:
    """The volume's claimRef names the claim (and its uid, if it names one)."""
    ref = _spec(volume).get("claimRef")
    if not isinstance(ref, dict):
        return False
    m = _meta(claim)
    if ref.get("name") != m.get("name") or ref.get("namespace") != m.get("namespace"):
        return False
    return not ref.get("uid") or ref.get("uid") == m.get("uid")


def _node_term_matches(term: Json, node: Json) -> bool:
    labels: dict[str, str] = _meta(node).get("labels") or {}
    exprs = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not exprs and not fields:
        return False  # an empty term selects no node
    name = str(_meta(node).get("name"))
    for expr, source in [(e, labels) for e in exprs] + [
        (f, {"metadata.name": name}) for f in fields
    ]:
        op, key = expr.get("operator"), expr.get("key")
        values = [str(v) for v in expr.get("values") or ()]
        present = key in source
        if op not in _NODE_OPS:
            return False
        if op == "In" and not (present and source[key] in values):
            return False
        if op == "NotIn" and present and source[key] in values:
            return False
        if op == "Exists" and not present:
            return False
        if op == "DoesNotExist" and present:
            return False
        if op in ("Gt", "Lt"):
            try:
                have, want = int(source[key]), int(values[0])
            except (KeyError, IndexError, ValueError):
                return False
            if (op == "Gt" and not have > want) or (op == "Lt" and not have < want):
                return False
    return True


def affinity_admits(volume: Json, node: Json) -> bool:
    required = (_spec(volume).get("nodeAffinity") or {}).get("required")
    if not required:
        return True
    return any(_node_term_matches(t, node) for t in required.get("nodeSelectorTerms") or [])


def mismatch(volume: Json, claim: Json) -> str | None:
    """Why a volume the claim names cannot be bound to it (upstream's wording), or None."""
    if _meta(volume).get("deletionTimestamp"):
        return f'the volume is marked for deletion "{_meta(volume).get("name")}"'
    if _capacity(volume) < _request(claim):
        return "requested PV is too small"
    if volume_class(volume) != claim_class(claim):
        return "storageClassName does not match"
    if _spec(volume).get("volumeAttributesClassName") != _spec(claim).get(
        "volumeAttributesClassName"
    ):
        return "volumeAttributesClassName does not match"
    if _mode(volume) != _mode(claim):
        return "incompatible volumeMode"
    if not _modes(claim) <= _modes(volume):
        return "incompatible accessMode"
    return None


def find_matching(
    claim: Json, volumes: list[Json], node: Json | None, delay_binding: bool
) -> Json | None:
    """The volume for the claim among ``volumes``: the one pre-bound to it, else the
    smallest fitting Available one. With a ``node`` (the scheduler's part) the volume's
    node affinity must admit it; without one a waiting claim gets only a pre-bound
    volume."""
    request = _request(claim)
    wanted_class = claim_class(claim)
    selector = selector_from_label_selector(_spec(claim).get("selector"))
    smallest: Json | None = None
    smallest_size = Fraction(0)
    for volume in volumes:
        spec = _spec(volume)
        mine = bound_to(volume, claim)
        if spec.get("claimRef") and not mine:
            continue
        size = _capacity(volume)
        if size < request or _mode(volume) != _mode(claim):
            continue
        if spec.get("volumeAttributesClassName") != _spec(claim).get("volumeAttributesClassName"):
            continue
        if _meta(volume).get("deletionTimestamp"):
            continue
        admitted = node is None or affinity_admits(volume, node)
        if mine:
            return volume if admitted else None
        if node is None and delay_binding:
            continue
        if _phase(volume) != "Available" or not labels_match(selector, volume):
            continue
        if volume_class(volume) != wanted_class or not admitted:
            continue
        if node is not None and not _modes(claim) <= _modes(volume):
            continue
        if smallest is None or size < smallest_size:
            smallest, smallest_size = volume, size
    return smallest


def best_match(claim: Json, volumes: list[Json], node: Json | None, delay: bool) -> Json | None:
    """As upstream's index: volumes grouped by their access modes, the groups offering
    every mode the claim asks tried fewest modes first."""
    wanted = _modes(claim)
    groups: dict[frozenset[str], list[Json]] = {}
    for volume in sorted(volumes, key=lambda v: str(_meta(v).get("name"))):
        modes = _modes(volume)
        if wanted <= modes:
            groups.setdefault(modes, []).append(volume)
    for modes in sorted(groups, key=lambda m: (len(m), sorted(m))):
        found = find_matching(claim, groups[modes], node, delay)
        if found is not None:
            return found
    return None


def claim_ref(claim: Json) -> Json:
    m = _meta(claim)
    return {
        "kind": "PersistentVolumeClaim",
        "namespace": m.get("namespace"),
        "name": m.get("name"),
        "uid": m.get("uid"),
        "apiVersion": "v1",
        "resourceVersion": m.get("resourceVersion"),
    }


class PersistentVolumeBinder:
    def __init__(
        self,
        client: ClusterClient,
        volumes: Informer,
        claims: Informer,
        classes: Informer,
        nodes: Informer,
        clock: Clock,
        *,
        events: bool = True,
    ) -> None:
        self.client = client
        self.volumes = volumes
        self.claims = claims
        self.classes = classes
        self.nodes = nodes
        self.claim_queue = WorkQueue(
            self.sync_claim, name="persistentvolume-binder-controller/claims"
        )
        self.volume_queue = WorkQueue(
            self.sync_volume, name="persistentvolume-binder-controller/volumes"
        )
        self.recorder = EventRecorder(client, clock, "persistentvolume-controller", enabled=events)
        # The last Event said per claim uid: a claim that keeps waiting is told once,
        # not at every sync.
        self._said: dict[str, tuple[str, str]] = {}
        claims.add_handler(self._claim_changed)
        volumes.add_handler(self._volume_changed)
        # A class made after its claims: they may now be provisioned.
        classes.add_handler(lambda _t, _o, _old: self._enqueue_unbound())

    @property
    def queues(self) -> list[WorkQueue]:
        return [self.claim_queue, self.volume_queue]

    # ---- what to look at again -------------------------------------------------------------

    def _enqueue_unbound(self) -> None:
        for claim in self.claims.values():
            if not _spec(claim).get("volumeName") and _phase(claim) != "Lost":
                self.claim_queue.add(obj_key(claim))

    def _claim_changed(self, kind: str, claim: Json, _old: Json | None) -> None:
        self.claim_queue.add(obj_key(claim))
        if kind == "DELETED":
            self._said.pop(str(_meta(claim).get("uid")), None)
            for volume in self.volumes.values():
                if bound_to(volume, claim):
                    self.volume_queue.add(obj_key(volume))

    def _volume_changed(self, kind: str, volume: Json, _old: Json | None) -> None:
        self.volume_queue.add(obj_key(volume))
        ref = _spec(volume).get("claimRef")
        if isinstance(ref, dict):
            self.claim_queue.add(f"{ref.get('namespace')}/{ref.get('name')}")
        if kind != "DELETED" and not isinstance(ref, dict):
            # Upstream finds a late volume at its periodic resync; here at once.
            self._enqueue_unbound()

    async def _say(self, claim: Json, reason: str, message: str, type: str = "Normal") -> None:
        uid = str(_meta(claim).get("uid"))
        if self._said.get(uid) == (reason, message):
            return
        self._said[uid] = (reason, message)
        await self.recorder.record(claim, reason, message, type=type)

    # ---- claims ----------------------------------------------------------------------------

    async def sync_claim(self, key: str) -> None:
        cached = self.claims.get(key)
        if cached is None:
            return
        claim = copy.deepcopy(cached)
        claim.setdefault("apiVersion", "v1")
        claim.setdefault("kind", "PersistentVolumeClaim")
        if BIND_COMPLETED in _annotations(claim):
            await self._sync_bound_claim(claim)
        else:
            await self._sync_unbound_claim(claim)

    async def _sync_unbound_claim(self, claim: Json) -> None:
        name = _spec(claim).get("volumeName")
        if name:
            await self._sync_named_claim(claim, str(name))
            return
        class_name = claim_class(claim)
        cls = self.classes.get(class_name) if class_name else None
        delay = cls is not None and cls.get("volumeBindingMode") == "WaitForFirstConsumer"
        selected = _annotations(claim).get(SELECTED_NODE)
        node: Json | None = None
        if delay and selected:
            # The scheduler's part: a node the informer has not seen yet still has its name.
            node = self.nodes.get(selected) or {
                "metadata": {"name": selected, "labels": {HOSTNAME_LABEL: selected}}
            }
        volume = best_match(claim, self.volumes.values(), node, delay)
        if volume is not None:
            await self._bind(volume, claim)
            return
        if delay and not selected:
            await self._say(
                claim,
                "WaitForFirstConsumer",
                "waiting for first consumer to be created before binding",
            )
        elif class_name:
            await self._provision(claim, class_name, cls, node)
        else:
            await self._say(
                claim,
                "FailedBinding",
                "no persistent volumes available for this claim and no storage class is set",
            )
        await self._claim_status(claim, "Pending", None)

    async def _sync_named_claim(self, claim: Json, name: str) -> None:
        """The claim asks for one volume by name."""
        volume = self.volumes.get(name)
        if volume is None:
            await self._claim_status(claim, "Pending", None)  # retried when it appears
            return
        if not _spec(volume).get("claimRef"):
            why = mismatch(volume, claim)
            if why is None:
                await self._bind(volume, claim)
                return
            await self._say(
                claim,
                "VolumeMismatch",
                f'Cannot bind to requested volume "{name}": {why}',
                type="Warning",
            )
        elif bound_to(volume, claim):
            await self._bind(volume, claim)
            return
        else:
            await self._say(
                claim,
                "FailedBinding",
                f'volume "{name}" already bound to a different claim.',
                type="Warning",
            )
        await self._claim_status(claim, "Pending", None)

    async def _sync_bound_claim(self, claim: Json) -> None:
        name = _spec(claim).get("volumeName")
        volume = self.volumes.get(str(name)) if name else None
        if not name:
            why = "Bound claim has lost reference to PersistentVolume. Data on the volume is lost!"
            await self._lose(claim, "ClaimLost", why)
        elif volume is None:
            await self._lose(
                claim,
                "ClaimLost",
                "Bound claim has lost its PersistentVolume. Data on the volume is lost!",
            )
        elif not _spec(volume).get("claimRef") or bound_to(volume, claim):
            await self._bind(volume, claim)
        else:
            await self._lose(
                claim,
                "ClaimMisbound",
                "Two claims are bound to the same volume, this one is bound incorrectly",
            )

    async def _lose(self, claim: Json, reason: str, message: str) -> None:
        if _phase(claim) == "Lost":
            return
        await self._claim_status(claim, "Lost", None)
        await self.recorder.record(claim, reason, message, type="Warning")

    async def _claim_status(self, claim: Json, phase: str, volume: Json | None) -> None:
        """Write the claim's phase, and the volume's capacity and access modes (cleared
        without a volume); nothing if nothing changes."""
        status: Json = claim.get("status") or {}
        patch: Json = {}
        if status.get("phase") != phase:
            patch["phase"] = phase
        if volume is None:
            for field in ("accessModes", "capacity", "currentVolumeAttributesClassName"):
                if status.get(field) is not None:
                    patch[field] = None
        else:
            modes = _spec(volume).get("accessModes")
            if status.get("accessModes") != modes:
                patch["accessModes"] = modes
            # Only when becoming Bound: a later difference may be a resize on purpose.
            capacity = _spec(volume).get("capacity")
            if status.get("phase") != phase and status.get("capacity") != capacity:
                patch["capacity"] = capacity
            vac = _spec(volume).get("volumeAttributesClassName")
            if status.get("phase") == "Pending" and phase == "Bound" and vac:
                patch["currentVolumeAttributesClassName"] = vac
        if not patch:
            return
        m = _meta(claim)
        updated = await self.client.patch(
            PVCS, str(m.get("name")), {"status": patch}, m.get("namespace"), subresource="status"
        )
        self.claims.remember(updated)

    # ---- binding ---------------------------------------------------------------------------

    async def _bind(self, volume: Json, claim: Json) -> None:
        """Volume first, then the claim, as upstream: a failure half-way is finished by
        the next sync of either."""
        volume = await self._bind_volume(volume, claim)
        volume = await self._volume_phase(volume, "Bound")
        m = _meta(claim)
        patch: Json = {}
        annotations: Json = {}
        vname = _meta(volume).get("name")
        if _spec(claim).get("volumeName") != vname:
            patch["spec"] = {"volumeName": vname}
            if BOUND_BY_CONTROLLER not in _annotations(claim):
                annotations[BOUND_BY_CONTROLLER] = "yes"
        if BIND_COMPLETED not in _annotations(claim):
            annotations[BIND_COMPLETED] = "yes"
        if patch or annotations:
            # Conditional on the version read, as upstream's Update.
            patch["metadata"] = {"resourceVersion": m.get("resourceVersion")}
            if annotations:
                patch["metadata"]["annotations"] = annotations
            claim = await self.client.patch(PVCS, str(m.get("name")), patch, m.get("namespace"))
            self.claims.remember(claim)
        await self._claim_status(claim, "Bound", volume)
        self._said.pop(str(m.get("uid")), None)

    async def _bind_volume(self, volume: Json, claim: Json) -> Json:
        patch: Json = {}
        ref = _spec(volume).get("claimRef") or {}
        m = _meta(claim)
        if (ref.get("name"), ref.get("namespace"), ref.get("uid")) != (
            m.get("name"),
            m.get("namespace"),
            m.get("uid"),
        ):
            patch["spec"] = {"claimRef": claim_ref(claim)}
        annotations: Json = {}
        if not bound_to(volume, claim) and BOUND_BY_CONTROLLER not in _annotations(volume):
            annotations[BOUND_BY_CONTROLLER] = "yes"
        if not patch and not annotations:
            return volume
        # Conditional: two claims racing for one volume must not both win.
        patch["metadata"] = {"resourceVersion": _meta(volume).get("resourceVersion")}
        if annotations:
            patch["metadata"]["annotations"] = annotations
        updated = await self.client.patch(PVS, str(_meta(volume).get("name")), patch)
        self.volumes.remember(updated)
        return updated

    async def _volume_phase(self, volume: Json, phase: str) -> Json:
        if _phase(volume) == phase:
            return volume
        updated = await self.client.patch(
            PVS,
            str(_meta(volume).get("name")),
            {"status": {"phase": phase, "message": None}},
            subresource="status",
        )
        self.volumes.remember(updated)
        return updated

    # ---- provisioning ----------------------------------------------------------------------

    async def _provision(
        self, claim: Json, class_name: str, cls: Json | None, node: Json | None
    ) -> None:
        if cls is None:
            await self._say(
                claim,
                "ProvisioningFailed",
                f'storageclass.storage.k8s.io "{class_name}" not found',
                type="Warning",
            )
            return
        provisioner = str(cls.get("provisioner") or "")
        m = _meta(claim)
        if _annotations(claim).get(STORAGE_PROVISIONER) != provisioner:
            claim = await self.client.patch(
                PVCS,
                str(m.get("name")),
                {
                    "metadata": {
                        "annotations": {
                            STORAGE_PROVISIONER: provisioner,
                            BETA_STORAGE_PROVISIONER: provisioner,
                        }
                    }
                },
                m.get("namespace"),
            )
            self.claims.remember(claim)
        if provisioner == NO_PROVISIONER:
            await self._say(
                claim,
                "ExternalProvisioning",
                f"Waiting for a volume to be created either by the external provisioner "
                f"'{provisioner}' or manually by the system administrator. If volume creation "
                f"is delayed, please verify that the provisioner is running and correctly "
                f"registered.",
            )
            return
        name = f"pvc-{m.get('uid')}"
        spec: Json = {
            "capacity": {
                "storage": (_spec(claim).get("resources") or {})
                .get("requests", {})
                .get("storage", "0")
            },
            "accessModes": list(_spec(claim).get("accessModes") or []),
            "volumeMode": _mode(claim),
            "storageClassName": class_name,
            "persistentVolumeReclaimPolicy": cls.get("reclaimPolicy") or "Delete",
            "hostPath": {"path": f"{PROVISION_ROOT}/{name}", "type": "DirectoryOrCreate"},
            "claimRef": claim_ref(claim),
        }
        if cls.get("mountOptions"):
            spec["mountOptions"] = list(cls["mountOptions"])
        if node is not None:
            host = (_meta(node).get("labels") or {}).get(HOSTNAME_LABEL) or _meta(node).get("name")
            term = {
                "matchExpressions": [{"key": HOSTNAME_LABEL, "operator": "In", "values": [host]}]
            }
            spec["nodeAffinity"] = {"required": {"nodeSelectorTerms": [term]}}
        body: Json = {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": name, "annotations": {PROVISIONED_BY: provisioner}},
            "spec": spec,
        }
        try:
            created = await self.client.create(PVS, body)
        except ApiError as exc:
            if exc.code != 409:
                raise
            return  # made by an earlier sync; its watch event binds the claim
        self.volumes.remember(created)
        await self.recorder.record(
            claim, "ProvisioningSucceeded", f"Successfully provisioned volume {name}"
        )

    # ---- volumes ---------------------------------------------------------------------------

    async def sync_volume(self, key: str) -> None:
        volume = self.volumes.get(key)
        if volume is None:
            return
        volume = copy.deepcopy(volume)
        volume.setdefault("apiVersion", "v1")
        volume.setdefault("kind", "PersistentVolume")
        ref = _spec(volume).get("claimRef")
        if not isinstance(ref, dict) or not ref.get("uid"):
            # Unused, or reserved for a claim that has not bound it yet.
            await self._volume_phase(volume, "Available")
            return
        claim = await self._claim_of(volume, ref)
        if claim is None:
            if _phase(volume) not in ("Released", "Failed"):
                volume = await self._volume_phase(volume, "Released")
            await self._reclaim(volume)
            return
        wanted = _spec(claim).get("volumeName")
        if not wanted:
            if _mode(claim) != _mode(volume):
                await self.recorder.record(
                    volume,
                    "VolumeMismatch",
                    f"Cannot bind PersistentVolume to requested PersistentVolumeClaim "
                    f'"{_meta(claim).get("name")}" due to incompatible volumeMode.',
                    type="Warning",
                )
                return
            self.claim_queue.add(obj_key(claim))
        elif wanted == _meta(volume).get("name"):
            await self._volume_phase(volume, "Bound")
        elif (
            PROVISIONED_BY in _annotations(volume)
            and _spec(volume).get("persistentVolumeReclaimPolicy") == "Delete"
        ):
            # Made for this claim, which got another volume: not needed.
            if _phase(volume) not in ("Released", "Failed"):
                volume = await self._volume_phase(volume, "Released")
            await self._reclaim(volume)
        else:
            await self._unbind(volume)

    async def _claim_of(self, volume: Json, ref: Json) -> Json | None:
        """The claim the volume is bound to, or None if it is gone (the cache may lag: the
        server is asked before a volume is released)."""
        key = f"{ref.get('namespace')}/{ref.get('name')}"
        claim = self.claims.get(key)
        if claim is not None and _meta(claim).get("uid") == ref.get("uid"):
            return claim
        if _phase(volume) in ("Released", "Failed") and claim is None:
            return None
        try:
            claim = await self.client.get(PVCS, str(ref.get("name")), ref.get("namespace"))
        except ApiError as exc:
            if exc.code != 404:
                raise
            return None
        return claim if _meta(claim).get("uid") == ref.get("uid") else None

    async def _unbind(self, volume: Json) -> None:
        """Undo a binding that lost: drop the controller's claimRef, or only the uid of one
        the user wrote."""
        name = str(_meta(volume).get("name"))
        patch: Json = {"metadata": {"resourceVersion": _meta(volume).get("resourceVersion")}}
        if BOUND_BY_CONTROLLER in _annotations(volume):
            patch["spec"] = {"claimRef": None}
            patch["metadata"]["annotations"] = {BOUND_BY_CONTROLLER: None}
        else:
            patch["spec"] = {"claimRef": {"uid": None}}
        updated = await self.client.patch(PVS, name, patch)
        self.volumes.remember(updated)
        await self._volume_phase(updated, "Available")

    async def _reclaim(self, volume: Json) -> None:
        policy = _spec(volume).get("persistentVolumeReclaimPolicy") or "Retain"
        name = str(_meta(volume).get("name"))
        if policy == "Retain":
            return
        if policy == "Delete":
            try:
                await self.client.delete(PVS, name, uid=_meta(volume).get("uid"))
            except ApiError as exc:
                if exc.code not in (404, 409):
                    raise
            return
        if policy == "Recycle":
            # Nothing to scrub in an emulated cluster: the volume is free again.
            updated = await self.client.patch(
                PVS,
                name,
                {
                    "metadata": {
                        "resourceVersion": _meta(volume).get("resourceVersion"),
                        "annotations": {BOUND_BY_CONTROLLER: None},
                    },
                    "spec": {"claimRef": None},
                },
            )
            self.volumes.remember(updated)
            await self._volume_phase(updated, "Available")
            await self.recorder.record(updated, "VolumeRecycled", "Volume recycled")
            return
        if _phase(volume) != "Failed":
            updated = await self.client.patch(
                PVS,
                name,
                {
                    "status": {
                        "phase": "Failed",
                        "message": "Volume has unrecognized PersistentVolumeReclaimPolicy",
                    }
                },
                subresource="status",
            )
            self.volumes.remember(updated)
            await self.recorder.record(
                updated,
                "VolumeUnknownReclaimPolicy",
                "Volume has unrecognized PersistentVolumeReclaimPolicy",
                type="Warning",
            )
