"""``kai-py crds --apply``: kai-py's CRDs applied to the cluster, server-side.

Helm installs a chart's ``crds/`` once and never upgrades them; the chart runs
this command in a pre-install / pre-upgrade hook Job (kai-py's own image, so the
CRDs are those of the version being installed). Server-side apply with one
field manager makes it idempotent and lets it take over fields another
manager (Helm's first install, a ``kubectl apply``) wrote. It returns once every
CRD is Established with its new schema, so the release's objects are written
against it (a kind new to the cluster may answer 429 for a moment more, which
Helm's client retries).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any, Final

from kai_py.apiclient.kube import Kube, KubeError, path_of

FIELD_MANAGER: Final = "kai-py-crds"
APPLY_PATCH: Final = "application/apply-patch+yaml"

Json = dict[str, Any]


def _established(crd: Json) -> bool:
    conditions = (crd.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)


def apply_crds(
    kube: Kube,
    documents: Iterable[Json],
    *,
    timeout: float = 60.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> list[str]:
    """Apply each CRD and wait until all are Established; one line per CRD."""
    lines: list[str] = []
    names: list[str] = []
    for doc in documents:
        name = str(doc["metadata"]["name"])
        path = path_of("apiextensions.k8s.io", "v1", "customresourcedefinitions", None, name)
        try:
            before = kube.get(path)["metadata"].get("generation")
        except KubeError as exc:
            if exc.code != 404:
                raise
            before = None
        after = kube.request(
            "PATCH",
            path,
            doc,
            content_type=APPLY_PATCH,
            query=[("fieldManager", FIELD_MANAGER), ("force", "true")],
        )["metadata"].get("generation")
        if before is None:
            lines.append(f"created {name}")
        elif after != before:
            lines.append(f"updated {name} (generation {before} -> {after})")
        else:
            lines.append(f"unchanged {name}")
        names.append(name)
    deadline = clock() + timeout
    waiting = list(names)
    while waiting:
        waiting = [
            name
            for name in waiting
            if not _established(
                kube.get(
                    path_of("apiextensions.k8s.io", "v1", "customresourcedefinitions", None, name)
                )
            )
        ]
        if waiting and clock() > deadline:
            raise KubeError(0, "Timeout", f"CRDs not Established after {timeout:g} s: {waiting}")
        if waiting:
            sleep(0.2)
    return lines
