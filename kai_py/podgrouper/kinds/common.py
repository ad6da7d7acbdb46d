"""What every kind's grouper shares: the objects of a pod's owner chain, the
warnings naming an object and its field, and the ``Plan`` a grouper returns.

A grouper decides only what is particular to its kind (which object the group
is named after, minMember, subgroups, the kind's default priority class);
``rules._group`` assembles the PodGroup from the plan, the same for every kind.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final

from kai_py.api import keys
from kai_py.api.common import OwnerReference, object_ref
from kai_py.api.podgroup import SubGroup

# PodGroup names are DNS subdomains.
_MAX_NAME: Final = 253


@dataclass(frozen=True)
class ObjectRef:
    """The object an event is about."""

    api_version: str
    kind: str
    name: str
    namespace: str | None = None
    uid: str | None = None

    @property
    def ref(self) -> str:
        return object_ref(self.namespace, self.name)


@dataclass(frozen=True)
class GrouperWarning:
    """A problem found while grouping, naming the object and its field."""

    REASON: ClassVar[str] = keys.POD_GROUPER_WARNING_REASON
    EVENT_TYPE: ClassVar[str] = "Warning"

    involved: ObjectRef
    field: str
    problem: str

    @property
    def message(self) -> str:
        """The event message: `Job "ns/train": metadata.annotations[...]: must be ...`."""
        return f'{self.involved.kind} "{self.involved.ref}": {self.field}: {self.problem}'


class Invalid(Exception):
    """A bad field: the pod is not grouped until its workload is fixed."""

    def __init__(self, warning: GrouperWarning) -> None:
        super().__init__(warning.message)
        self.warning = warning


def mapping(value: Any) -> Mapping[str, Any]:
    # A plain dict first: the ABC check costs more than the rest of the call.
    return value if type(value) is dict or isinstance(value, Mapping) else {}


def str_map(value: Any) -> dict[str, str]:
    if not value:  # most objects have no labels or no annotations
        return {}
    return {str(k): str(v) for k, v in mapping(value).items()}


def group_of(api_version: str) -> str:
    return api_version.split("/", 1)[0] if "/" in api_version else ""


@dataclass(frozen=True, slots=True)
class Obj:
    """The pod or one of its owners. ``manifest`` is None when the object is
    known only from an ownerReference (the caller could not supply it)."""

    api_version: str
    kind: str
    name: str
    uid: str
    namespace: str
    manifest: Mapping[str, Any] | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, manifest: Mapping[str, Any], namespace: str) -> Obj:
        meta = mapping(manifest.get("metadata"))
        return cls(
            api_version=str(manifest.get("apiVersion") or ""),
            kind=str(manifest.get("kind") or ""),
            name=str(meta.get("name") or ""),
            uid=str(meta.get("uid") or ""),
            # Owners of a pod live in its namespace (cross-namespace owners are invalid).
            namespace=str(meta.get("namespace") or namespace),
            manifest=manifest,
            labels=str_map(meta.get("labels")),
            annotations=str_map(meta.get("annotations")),
        )

    @classmethod
    def from_reference(cls, ref: Mapping[str, Any], namespace: str) -> Obj:
        return cls(
            api_version=str(ref.get("apiVersion") or ""),
            kind=str(ref.get("kind") or ""),
            name=str(ref.get("name") or ""),
            uid=str(ref.get("uid") or ""),
            namespace=namespace,
        )

    @property
    def group(self) -> str:
        return group_of(self.api_version)

    def is_kind(self, group: str, kind: str) -> bool:
        return self.kind == kind and self.group == group

    def event_ref(self) -> ObjectRef:
        return ObjectRef(self.api_version, self.kind, self.name, self.namespace, self.uid or None)

    def owner_reference(self) -> OwnerReference:
        return OwnerReference(
            api_version=self.api_version, kind=self.kind, name=self.name, uid=self.uid
        )

    def spec(self) -> Mapping[str, Any]:
        return mapping((self.manifest or {}).get("spec"))

    def status(self) -> Mapping[str, Any]:
        return mapping((self.manifest or {}).get("status"))


def group_name_for(obj_name: str, uid: str, kind: str) -> str:
    """``pg-<name>-<uid>``, cut to a valid object name. Without a uid (hand-written
    manifests) the kind stands in, so a Job and a Pod of one name do not clash."""
    suffix = uid or kind.lower()
    room = _MAX_NAME - len("pg--") - len(suffix)
    return f"pg-{obj_name[:room]}-{suffix}"


def invalid(obj: Obj, field_path: str, problem: str) -> Invalid:
    return Invalid(GrouperWarning(obj.event_ref(), field_path, problem))


def non_negative_int(value: Any, where: Obj, field_path: str, *, minimum: int = 0) -> int:
    # YAML may give an int, or a string in an annotation; bools are not numbers.
    if isinstance(value, bool):
        value = repr(value)
    number = int(value.strip()) if isinstance(value, str) and value.strip().isdigit() else value
    # The PodGroup field is an int32.
    if isinstance(number, int) and minimum <= number < 2**31:
        return number
    shown = f'"{value}"' if isinstance(value, str) else repr(value)
    what = "a non-negative integer" if minimum == 0 else f"an integer of at least {minimum}"
    raise invalid(where, field_path, f"must be {what}, got {shown}")


def needs_manifest(obj: Obj) -> None:
    if obj.manifest is None:
        raise invalid(
            obj,
            "metadata.ownerReferences",
            "owner not available to the pod-grouper; the pod is grouped once it is",
        )


def annotation_path(key: str) -> str:
    return f'metadata.annotations["{key}"]'


def label_path(key: str) -> str:
    return f'metadata.labels["{key}"]'


#: An object that is not an owner of the pod but that its kind's grouper reads
#: (a Grove PodGang, a RayJob's RayCluster): (apiVersion, kind, name) -> manifest.
Related = Callable[[str, str, str], Mapping[str, Any] | None]


def no_related(_api_version: str, _kind: str, _name: str) -> Mapping[str, Any] | None:
    return None


@dataclass(slots=True)
class Workload:
    """What a kind's grouper is given: the pod, its owners nearest first (the top
    owner last), and the non-owner objects its kind reads."""

    pod: Obj
    pod_spec: Mapping[str, Any]
    chain: Sequence[Obj]
    related: Related = no_related

    @property
    def top(self) -> Obj:
        return self.chain[-1] if self.chain else self.pod


@dataclass(slots=True)
class Plan:
    """A kind's grouping: the PodGroup is named after and owned by ``owner``
    (``name`` overrides the name), with ``min_member`` or, for a group of
    subgroups, ``min_sub_group``; the pod goes into subgroup ``pod_sub_group``.

    Priority: ``priority_class`` (the kind's own field, e.g. a Kubeflow job's
    runPolicy) is read after the priorityClassName labels and before the pod's
    own class; ``priority_override`` beats the labels too (Ray's own label);
    ``default_priority_class`` (None: the configured default) comes last."""

    owner: Obj
    min_member: int = 1
    name: str | None = None
    min_sub_group: int | None = None
    sub_groups: tuple[SubGroup, ...] = ()
    pod_sub_group: str | None = None
    default_priority_class: str | None = None
    priority_class: str | None = None
    priority_override: str | None = None
    # Objects whose labels and annotations count besides the chain (e.g. a Grove PodGang).
    extra_lookup: tuple[Obj, ...] = ()
    warnings: tuple[GrouperWarning, ...] = ()


#: A kind's grouper.
Grouper = Callable[[Workload], Plan]
