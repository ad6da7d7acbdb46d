"""What the binder knows of the scheduler's unbound pods from the pod watch.

A Regular (whole-GPU) bind needs of its pod only the uid (the Binding's
precondition) and whether it is pinned to cards (then the pinned bind reads the
whole pod): the pod watch the operator keeps anyway has both, so such a bind
does not GET the pod first. That is one API request per pod fewer, and safe
whatever the watch lags by: the Binding names the uid the BindRequest was made
for (the API server refuses it for another pod of that name), a pod bound
meanwhile answers 409 and is then read and judged (bound to that node: done;
elsewhere: a final failure), and a pod gone answers 404. A pod the watch has
not shown yet, one that names cards or one with PersistentVolumeClaims (the
bind reads them) is read as before.

Hints are kept only for live, unbound pods of the scheduler: a pod leaves the
map once it is bound, terminating or deleted, so its size follows the pending
pods. ``observe`` runs on the event loop, ``get`` in bind threads: one dict
read or write each (atomic under the GIL).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from kai_py.gpu.pins import names_pin

#: Hints kept at most (pending pods of the scheduler; beyond that they start over).
MAX_HINTS: Final = 100_000


@dataclass(frozen=True, slots=True)
class PodHint:
    uid: str
    pinned: bool  # names cards (HAMi's pin annotations): the bind reads the whole pod
    claims: bool = False  # has PersistentVolumeClaims: the bind reads the whole pod


class PodHints:
    def __init__(self, scheduler_name: Callable[[], str] | str) -> None:
        self._scheduler_name = scheduler_name
        self._hints: dict[tuple[str, str], PodHint] = {}

    def __len__(self) -> int:
        return len(self._hints)

    def observe(self, event_type: str | None, pod: Mapping[str, Any]) -> None:
        m = pod.get("metadata") or {}
        key = (str(m.get("namespace") or "default"), str(m.get("name") or ""))
        spec = pod.get("spec") or {}
        name = self._scheduler_name
        ours = spec.get("schedulerName") == (name() if callable(name) else name)
        if (
            event_type == "DELETED"
            or not ours
            or spec.get("nodeName")
            or m.get("deletionTimestamp")
            or not m.get("uid")
        ):
            self._hints.pop(key, None)
            return
        if len(self._hints) >= MAX_HINTS and key not in self._hints:
            # Pods deleted while the watch was down leave hints no event removes: never
            # let them pile up (a pod without a hint is only read first, as before).
            self._hints.clear()
        claims = any(
            isinstance(v, Mapping) and ("persistentVolumeClaim" in v or "ephemeral" in v)
            for v in spec.get("volumes") or ()
        )
        self._hints[key] = PodHint(str(m["uid"]), names_pin(pod), claims)

    def get(self, namespace: str, name: str) -> PodHint | None:
        return self._hints.get((namespace, name))
