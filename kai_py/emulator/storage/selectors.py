"""Label and field selectors, parsed from their query-string form.

Label selectors support ``=``, ``==``, ``!=``, ``in``, ``notin``, ``key`` and
``!key``; field selectors ``=``, ``==`` and ``!=`` on the fields each
resource type supports (an unsupported field is a 400, as in Kubernetes).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kai_py.emulator.storage.errors import ApiError, bad_request

JSON = dict[str, Any]

_LABEL_KEY = re.compile(
    r"^([a-z0-9A-Z]([-a-z0-9A-Z.]*[a-z0-9A-Z])?/)?[a-z0-9A-Z]([-a-z0-9A-Z_.]*[a-z0-9A-Z])?$"
)


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!exists"
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.op == "exists":
            return present
        if self.op == "!exists":
            return not present
        if self.op in ("=", "in"):
            return present and labels[self.key] in self.values
        # "!=" and "notin" match objects without the key, as in Kubernetes.
        return not present or labels[self.key] not in self.values


def _split_top(text: str) -> list[str]:
    """Split on commas that are not inside parentheses."""
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


_SET_RE = re.compile(r"^(\S+)\s+(in|notin)\s*\((.*)\)$")


def parse_label_selector(text: str | None) -> list[Requirement]:
    if not text:
        return []
    out = []
    for part in _split_top(text):
        m = _SET_RE.match(part)
        if m:
            key, op, vals = m.group(1), m.group(2), m.group(3)
            values = frozenset(v.strip() for v in vals.split(",") if v.strip())
            out.append(Requirement(_check_key(key, text), op, values))
        elif part.startswith("!"):
            out.append(Requirement(_check_key(part[1:].strip(), text), "!exists"))
        elif "!=" in part:
            key, value = part.split("!=", 1)
            out.append(Requirement(_check_key(key.strip(), text), "!=", frozenset({value.strip()})))
        elif "==" in part or "=" in part:
            key, value = part.split("==", 1) if "==" in part else part.split("=", 1)
            out.append(Requirement(_check_key(key.strip(), text), "=", frozenset({value.strip()})))
        else:
            out.append(Requirement(_check_key(part, text), "exists"))
    return out


def _check_key(key: str, text: str) -> str:
    if not _LABEL_KEY.match(key):
        raise bad_request(
            f"unable to parse requirement: invalid label key {key!r} in selector {text!r}"
        )
    return key


def selector_from_label_selector(sel: Mapping[str, Any] | None) -> list[Requirement]:
    """Requirements from a ``metav1.LabelSelector`` object (matchLabels, matchExpressions)."""
    if not sel:
        return []
    reqs = [
        Requirement(k, "=", frozenset({str(v)})) for k, v in (sel.get("matchLabels") or {}).items()
    ]
    ops = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!exists"}
    for expr in sel.get("matchExpressions") or []:
        reqs.append(
            Requirement(expr["key"], ops[expr["operator"]], frozenset(expr.get("values") or ()))
        )
    return reqs


def labels_match(reqs: list[Requirement], obj: Mapping[str, Any]) -> bool:
    if not reqs:
        return True
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return all(r.matches(labels) for r in reqs)


@dataclass(frozen=True)
class FieldRequirement:
    field: str
    op: str  # "=" or "!="
    value: str


def _path_getter(path: str) -> Callable[[Mapping[str, Any]], str]:
    parts = path.split(".")

    def get(obj: Mapping[str, Any]) -> str:
        cur: Any = obj
        for p in parts:
            if not isinstance(cur, Mapping):
                return ""
            cur = cur.get(p)
        if cur is None:
            return ""
        if isinstance(cur, bool):
            return "true" if cur else "false"
        return str(cur)

    return get


_COMMON_FIELDS = ("metadata.name", "metadata.namespace")
_FIELDS_BY_STORAGE: dict[str, tuple[str, ...]] = {
    "pods": (
        "spec.nodeName",
        "spec.schedulerName",
        "status.phase",
        "spec.restartPolicy",
        "spec.serviceAccountName",
        "status.podIP",
        "status.nominatedNodeName",
        "spec.hostNetwork",
    ),
    "nodes": ("spec.unschedulable",),
    "events": (
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    ),
    "namespaces": ("status.phase",),
    "secrets": ("type",),
    "jobs.batch": ("status.successful",),
    "replicasets.apps": ("status.replicas",),
}


def parse_field_selector(text: str | None, storage_key: str, kind: str) -> list[FieldRequirement]:
    if not text:
        return []
    allowed = _COMMON_FIELDS + _FIELDS_BY_STORAGE.get(storage_key, ())
    out = []
    for part in _split_top(text):
        if "!=" in part:
            f, v = part.split("!=", 1)
            op = "!="
        elif "==" in part:
            f, v = part.split("==", 1)
            op = "="
        elif "=" in part:
            f, v = part.split("=", 1)
            op = "="
        else:
            raise bad_request(f"invalid selector: '{text}'; can't understand '{part}'")
        f = f.strip()
        if f not in allowed:
            raise ApiError(
                400, "BadRequest", f"field label not supported: {f}", details={"kind": kind}
            )
        out.append(FieldRequirement(f, op, v.strip()))
    return out


_GETTERS: dict[str, Callable[[Mapping[str, Any]], str]] = {}


def fields_match(reqs: list[FieldRequirement], obj: Mapping[str, Any]) -> bool:
    for r in reqs:
        getter = _GETTERS.get(r.field)
        if getter is None:
            getter = _GETTERS[r.field] = _path_getter(r.field)
        got = getter(obj)
        if r.field == "source" and not got:
            got = _path_getter("source.component")(obj)
        if (got == r.value) != (r.op == "="):
            return False
    return True
