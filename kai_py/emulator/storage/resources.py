"""What the emulator serves: resource types and the registry that finds them.

A :class:`ResourceType` names one served (group, version, plural). Several
versions of a CRD share one storage (``storage_key``), so an object written
through v1 is read back through v2 (without conversion: the emulator only
rewrites ``apiVersion``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

ALL_VERBS: tuple[str, ...] = (
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
)


@dataclass(frozen=True)
class PrinterColumn:
    """One Table column; ``json_path`` is a kubectl-style path (``.spec.x``)."""

    name: str
    type: str
    json_path: str
    description: str = ""
    priority: int = 0
    format: str = ""


@dataclass(frozen=True, eq=False)
class ResourceType:
    """One served resource: identity, scope, discovery data and, for CRDs, schema.

    Compared and hashed by identity: the registry holds exactly one instance
    per served (group, version, plural).
    """

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    singular: str = ""
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    #: Subresources served: "status", "binding", "eviction", "scale".
    subresources: frozenset[str] = frozenset()
    verbs: tuple[str, ...] = ALL_VERBS
    printer_columns: tuple[PrinterColumn, ...] = ()
    #: CRDs only: the version's openAPIV3Schema (structural), or None.
    schema: Mapping[str, Any] | None = None
    #: True for resources defined by a CustomResourceDefinition.
    custom: bool = False
    #: Strategic merge patch needs Go struct tags; CRDs do not support it.
    strategic_merge: bool = True
    extra: Mapping[str, Any] = field(default_factory=dict)
    #: Storage shared with another group's kind (events.k8s.io -> core events).
    storage: str = ""

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def storage_key(self) -> str:
        """Key shared by all versions of the same group/plural."""
        if self.storage:
            return self.storage
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def has_status(self) -> bool:
        return "status" in self.subresources

    @property
    def qualified_kind(self) -> str:
        """``Kind.group`` as used in 422 messages (``Pod``, ``Queue.scheduling.run.ai``)."""
        return f"{self.kind}.{self.group}" if self.group else self.kind

    def __repr__(self) -> str:
        return f"<ResourceType {self.api_version} {self.plural}>"


class Registry:
    """All served resource types, indexed for lookups by path and by name."""

    def __init__(self, types: Iterable[ResourceType] = ()) -> None:
        self._by_gvr: dict[tuple[str, str, str], ResourceType] = {}
        for rt in types:
            self.add(rt)

    def add(self, rt: ResourceType) -> None:
        self._by_gvr[(rt.group, rt.version, rt.plural)] = rt

    def remove_group_plural(self, group: str, plural: str) -> list[ResourceType]:
        gone = [rt for k, rt in self._by_gvr.items() if k[0] == group and k[2] == plural]
        for rt in gone:
            del self._by_gvr[(rt.group, rt.version, rt.plural)]
        return gone

    def get(self, group: str, version: str, plural: str) -> ResourceType | None:
        return self._by_gvr.get((group, version, plural))

    def __iter__(self) -> Iterator[ResourceType]:
        return iter(list(self._by_gvr.values()))

    def versions_of(self, storage_key: str) -> list[ResourceType]:
        return [rt for rt in self._by_gvr.values() if rt.storage_key == storage_key]

    def groups(self) -> dict[str, list[str]]:
        """group -> served versions, preferred first (the group's first registered)."""
        out: dict[str, list[str]] = {}
        for rt in self._by_gvr.values():
            versions = out.setdefault(rt.group, [])
            if rt.version not in versions:
                versions.append(rt.version)
        return out

    def in_group_version(self, group: str, version: str) -> list[ResourceType]:
        return [rt for rt in self._by_gvr.values() if rt.group == group and rt.version == version]

    def resolve(self, name: str | ResourceType) -> ResourceType:
        """Find a type by plural, ``plural.group``, ``plural.version.group``, kind or short name.

        Ambiguous names resolve to the first registered (built-ins come first),
        as kubectl's preference order would.
        """
        if isinstance(name, ResourceType):
            return name
        lowered = name.lower()
        candidates = list(self._by_gvr.values())
        for rt in candidates:
            if lowered in (rt.storage_key, f"{rt.plural}.{rt.version}.{rt.group}"):
                return rt
        for rt in candidates:
            if lowered in (rt.plural, rt.singular, rt.kind.lower()) or lowered in rt.short_names:
                return rt
        raise KeyError(name)


def _core(plural: str, kind: str, namespaced: bool = True, **kw: Any) -> ResourceType:
    return ResourceType(
        group="",
        version="v1",
        plural=plural,
        kind=kind,
        namespaced=namespaced,
        singular=kind.lower(),
        **kw,
    )


def _g(
    group: str, version: str, plural: str, kind: str, namespaced: bool = True, **kw: Any
) -> ResourceType:
    return ResourceType(
        group=group,
        version=version,
        plural=plural,
        kind=kind,
        namespaced=namespaced,
        singular=kind.lower(),
        **kw,
    )


_STATUS = frozenset({"status"})


def builtin_types() -> list[ResourceType]:
    """The built-in resources the emulator serves from the start."""
    return [
        _core(
            "namespaces",
            "Namespace",
            False,
            short_names=("ns",),
            subresources=frozenset({"status", "finalize"}),
        ),
        _core("nodes", "Node", False, short_names=("no",), subresources=_STATUS),
        _core(
            "pods",
            "Pod",
            short_names=("po",),
            categories=("all",),
            subresources=frozenset({"status", "binding", "eviction", "log"}),
        ),
        _core("configmaps", "ConfigMap", short_names=("cm",)),
        _core("secrets", "Secret"),
        _core(
            "services", "Service", short_names=("svc",), categories=("all",), subresources=_STATUS
        ),
        _core("events", "Event", short_names=("ev",)),
        _core("serviceaccounts", "ServiceAccount", short_names=("sa",)),
        _core(
            "persistentvolumeclaims",
            "PersistentVolumeClaim",
            short_names=("pvc",),
            subresources=_STATUS,
        ),
        _core(
            "persistentvolumes",
            "PersistentVolume",
            False,
            short_names=("pv",),
            subresources=_STATUS,
        ),
        _core("resourcequotas", "ResourceQuota", short_names=("quota",), subresources=_STATUS),
        _core("limitranges", "LimitRange", short_names=("limits",)),
        _g("events.k8s.io", "v1", "events", "Event", short_names=("ev",), storage="events"),
        _g(
            "scheduling.k8s.io",
            "v1",
            "priorityclasses",
            "PriorityClass",
            False,
            short_names=("pc",),
        ),
        _g("coordination.k8s.io", "v1", "leases", "Lease"),
        _g("storage.k8s.io", "v1", "storageclasses", "StorageClass", False, short_names=("sc",)),
        _g("storage.k8s.io", "v1", "csidrivers", "CSIDriver", False),
        _g("storage.k8s.io", "v1", "csinodes", "CSINode", False),
        _g("storage.k8s.io", "v1", "csistoragecapacities", "CSIStorageCapacity"),
        _g(
            "storage.k8s.io",
            "v1",
            "volumeattachments",
            "VolumeAttachment",
            False,
            subresources=_STATUS,
        ),
        _g("node.k8s.io", "v1", "runtimeclasses", "RuntimeClass", False),
        _g(
            "apiextensions.k8s.io",
            "v1",
            "customresourcedefinitions",
            "CustomResourceDefinition",
            False,
            short_names=("crd", "crds"),
            categories=("api-extensions",),
            subresources=_STATUS,
        ),
        _g("batch", "v1", "jobs", "Job", categories=("all",), subresources=_STATUS),
        _g(
            "batch",
            "v1",
            "cronjobs",
            "CronJob",
            short_names=("cj",),
            categories=("all",),
            subresources=_STATUS,
        ),
        _g(
            "apps",
            "v1",
            "deployments",
            "Deployment",
            short_names=("deploy",),
            categories=("all",),
            subresources=frozenset({"status", "scale"}),
        ),
        _g(
            "apps",
            "v1",
            "replicasets",
            "ReplicaSet",
            short_names=("rs",),
            categories=("all",),
            subresources=frozenset({"status", "scale"}),
        ),
        _g(
            "apps",
            "v1",
            "statefulsets",
            "StatefulSet",
            short_names=("sts",),
            categories=("all",),
            subresources=frozenset({"status", "scale"}),
        ),
        _g(
            "apps",
            "v1",
            "daemonsets",
            "DaemonSet",
            short_names=("ds",),
            categories=("all",),
            subresources=_STATUS,
        ),
        _g(
            "policy",
            "v1",
            "poddisruptionbudgets",
            "PodDisruptionBudget",
            short_names=("pdb",),
            subresources=_STATUS,
        ),
        _g(
            "admissionregistration.k8s.io",
            "v1",
            "mutatingwebhookconfigurations",
            "MutatingWebhookConfiguration",
            False,
            categories=("api-extensions",),
        ),
        _g(
            "admissionregistration.k8s.io",
            "v1",
            "validatingwebhookconfigurations",
            "ValidatingWebhookConfiguration",
            False,
            categories=("api-extensions",),
        ),
        _g("rbac.authorization.k8s.io", "v1", "roles", "Role"),
        _g("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding"),
        _g("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False),
        _g("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", False),
        # Reviews are answered, never stored (see server.py): everyone may do everything.
        _g(
            "authorization.k8s.io",
            "v1",
            "selfsubjectaccessreviews",
            "SelfSubjectAccessReview",
            False,
            verbs=("create",),
            extra={"review": True},
        ),
        _g(
            "authorization.k8s.io",
            "v1",
            "subjectaccessreviews",
            "SubjectAccessReview",
            False,
            verbs=("create",),
            extra={"review": True},
        ),
        _g(
            "authentication.k8s.io",
            "v1",
            "selfsubjectreviews",
            "SelfSubjectReview",
            False,
            verbs=("create",),
            extra={"review": True},
        ),
    ]


def types_from_crd(crd: Mapping[str, Any]) -> list[ResourceType]:
    """The served versions of a CustomResourceDefinition, storage version first."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    group = spec.get("group", "")
    namespaced = spec.get("scope", "Namespaced") == "Namespaced"
    versions = [v for v in spec.get("versions") or [] if v.get("served", True)]
    versions.sort(key=lambda v: not v.get("storage", False))
    out: list[ResourceType] = []
    for v in versions:
        subs: set[str] = set()
        sub_spec = v.get("subresources") or {}
        if "status" in sub_spec:
            subs.add("status")
        if "scale" in sub_spec:
            subs.add("scale")
        columns = tuple(
            PrinterColumn(
                name=c.get("name", ""),
                type=c.get("type", "string"),
                json_path=c.get("jsonPath", ""),
                description=c.get("description", ""),
                priority=int(c.get("priority", 0)),
                format=c.get("format", ""),
            )
            for c in v.get("additionalPrinterColumns") or []
        )
        schema = (v.get("schema") or {}).get("openAPIV3Schema")
        out.append(
            ResourceType(
                group=group,
                version=v["name"],
                plural=names.get("plural", ""),
                kind=names.get("kind", ""),
                namespaced=namespaced,
                singular=names.get("singular", "") or names.get("kind", "").lower(),
                short_names=tuple(names.get("shortNames") or ()),
                categories=tuple(names.get("categories") or ()),
                subresources=frozenset(subs),
                printer_columns=columns,
                schema=schema,
                custom=True,
                strategic_merge=False,
            )
        )
    return out
