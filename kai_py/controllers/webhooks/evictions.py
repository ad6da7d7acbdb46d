"""The eviction webhook's decision: kai-py's scheduler evicts only pods it schedules.

An Eviction names its pod and nothing else, so the API server's own policies (CEL)
cannot tell a kai-py pod from any other; the webhook reads the pod. Only requests
made by the schedulers' accounts are checked (``KAI_PY_SCHEDULER_USERS``): anyone
else's eviction (``kubectl drain``, a tenant's) is none of kai-py's business. The
chart sends only those requests (matchConditions); configurations Kopf keeps
(``kai-py dev``, tests) send every eviction, and this list keeps them allowed.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, Final

#: Comma-separated user names (``system:serviceaccount:<ns>:<account>``) of kai-py's
#: schedulers; the chart sets it. Unset: no eviction is checked.
USERS_ENV: Final = "KAI_PY_SCHEDULER_USERS"


def scheduler_users(env: Mapping[str, str]) -> frozenset[str]:
    return frozenset(u.strip() for u in (env.get(USERS_ENV) or "").split(",") if u.strip())


def refusal(
    pod: Mapping[str, Any] | None,
    namespace: str,
    name: str,
    scheduler_names: Collection[str],
) -> str | None:
    """Why the scheduler may not evict this pod, or None to allow it.

    ``pod`` None: the pod is gone, and the eviction answers 404 on its own."""
    if pod is None:
        return None
    scheduler = (pod.get("spec") or {}).get("schedulerName") or "default-scheduler"
    if scheduler in scheduler_names:
        return None
    names = ", ".join(sorted(scheduler_names))
    return (
        f"pod {namespace}/{name}: spec.schedulerName is {scheduler!r}; kai-py's scheduler "
        f"evicts only pods it schedules (spec.schedulerName {names})"
    )
