"""Fault injection for the HTTP API: failed requests and latency, on demand.

Faults apply to requests that arrive over HTTP (the clients under test),
not to in-process :class:`~kai_py.emulator.storage.store.Store` calls, so simulated
kubelets and controllers keep working while the operator sees errors::

    srv.faults.add(verb="create", resource="pods", fraction=0.5, code=500)
    srv.faults.add(verb="*", resource="*", latency=0.2)   # 200 ms on every request
    srv.faults.clear()

Verbs are the Kubernetes ones: get, list, watch, create, update, patch,
delete, deletecollection; ``resource`` is a plural (``pods``), optionally
with a subresource (``pods/binding``) or ``*``.
"""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass

from kai_py.emulator.storage.errors import ApiError, conflict, internal_error


@dataclass
class Fault:
    verb: str = "*"
    resource: str = "*"
    fraction: float = 1.0
    code: int | None = None  # 500 or 409 (or any HTTP code); None = latency only
    latency: float = 0.0
    #: How many more times it may fire; None = unlimited.
    remaining: int | None = None
    fired: int = 0

    def matches(self, verb: str, resource: str) -> bool:
        if self.verb not in ("*", verb):
            return False
        base = resource.split("/", 1)[0]
        return (
            self.resource in ("*", resource, base)
            if "/" not in self.resource
            else (self.resource == resource)
        )


class FaultSet:
    """The faults in force; thread-safe, so tests may change them from any thread."""

    def __init__(self, seed: int | None = None) -> None:
        self._faults: list[Fault] = []
        self._lock = threading.Lock()
        self._random = random.Random(seed)

    def add(
        self,
        *,
        verb: str = "*",
        resource: str = "*",
        fraction: float = 1.0,
        code: int | None = None,
        latency: float = 0.0,
        times: int | None = None,
    ) -> Fault:
        fault = Fault(
            verb=verb,
            resource=resource,
            fraction=fraction,
            code=code,
            latency=latency,
            remaining=times,
        )
        with self._lock:
            self._faults.append(fault)
        return fault

    def remove(self, fault: Fault) -> None:
        with self._lock:
            if fault in self._faults:
                self._faults.remove(fault)

    def clear(self) -> None:
        with self._lock:
            self._faults.clear()

    def __len__(self) -> int:
        return len(self._faults)

    def decide(self, verb: str, resource: str, name: str = "") -> tuple[float, ApiError | None]:
        """Latency to add and the error to answer with (or None) for one request."""
        delay = 0.0
        error: ApiError | None = None
        with self._lock:
            for f in self._faults:
                if not f.matches(verb, resource) or f.remaining == 0:
                    continue
                if self._random.random() >= f.fraction:
                    continue
                delay += f.latency
                if f.code is not None and error is None:
                    error = _error_for(f.code, resource, name)
                if f.remaining is not None:
                    f.remaining -= 1
                f.fired += 1
        return delay, error


def _error_for(code: int, resource: str, name: str) -> ApiError:
    if code == 409:
        return conflict(
            resource.split("/", 1)[0],
            "",
            name or "unknown",
            "injected conflict (kai-py emulator fault)",
        )
    if code == 500:
        return internal_error("injected fault (kai-py emulator)")
    if code == 429:
        return ApiError(429, "TooManyRequests", "injected fault: too many requests")
    if code == 503:
        return ApiError(503, "ServiceUnavailable", "injected fault: service unavailable")
    return ApiError(code, "InternalError", f"injected fault (HTTP {code})")
