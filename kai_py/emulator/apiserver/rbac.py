"""RBAC authorization, on demand: requests made with a ServiceAccount's token are
checked against the Roles, ClusterRoles and bindings in the store, as the API
server's RBAC authorizer checks them.

Off by default (every request is allowed). A test turns it on and names the
tokens that stand for ServiceAccounts; a request with any other token (the
emulator's own kubeconfig, the tests' clients) is an administrator's::

    srv.rbac = Authorizer(srv.store, {"scheduler-token": ("kai-system", "kai-py-scheduler")})

Every refusal is also kept in ``denials`` so that a test can say which call
a role was missing. Not modelled: aggregated ClusterRoles, non-resource URLs
(discovery and /version are always allowed), user and group subjects.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kai_py.emulator.storage.errors import ApiError, forbidden
from kai_py.emulator.storage.store import Store

JSON = dict[str, Any]


@dataclass
class Denial:
    account: str
    verb: str
    group: str
    resource: str
    namespace: str | None
    name: str | None


def _matches(
    rule: Mapping[str, Any], verb: str, group: str, resource: str, name: str | None
) -> bool:
    if not any(v in ("*", verb) for v in rule.get("verbs") or []):
        return False
    if not any(g in ("*", group) for g in rule.get("apiGroups") or []):
        return False
    base = resource.split("/", 1)[0]
    resources = rule.get("resources") or []
    if not any(r in ("*", resource) or (r == f"{base}/*" and "/" in resource) for r in resources):
        return False
    names = rule.get("resourceNames") or []
    return not names or (name is not None and name in names)


@dataclass
class Authorizer:
    store: Store
    #: token -> (namespace, ServiceAccount name)
    tokens: dict[str, tuple[str, str]]
    denials: list[Denial] = field(default_factory=list)
    #: (account, verb, group, resource) of every request that was allowed.
    allowed: set[tuple[str, str, str, str]] = field(default_factory=set)

    def account_of(self, authorization: str | None) -> tuple[str, str] | None:
        if not authorization or not authorization.startswith("Bearer "):
            return None
        return self.tokens.get(authorization.removeprefix("Bearer ").strip())

    async def check(
        self,
        authorization: str | None,
        verb: str,
        group: str,
        resource: str,
        plural: str,
        namespace: str | None,
        name: str | None,
    ) -> None:
        """Raise 403 unless the request's ServiceAccount (if any) may do this."""
        account = self.account_of(authorization)
        if account is None:
            return
        user = f"system:serviceaccount:{account[0]}:{account[1]}"
        if await self._allowed(account, verb, group, resource, namespace, name):
            self.allowed.add((user, verb, group, resource))
            return
        self.denials.append(Denial(user, verb, group, resource, namespace, name))
        where = f' in the namespace "{namespace}"' if namespace else " at the cluster scope"
        raise forbidden(
            plural,
            group,
            name or "",
            f'User "{user}" cannot {verb} resource "{resource}" in API group "{group}"{where}',
        )

    async def _allowed(
        self,
        account: tuple[str, str],
        verb: str,
        group: str,
        resource: str,
        namespace: str | None,
        name: str | None,
    ) -> bool:
        def bound(binding: JSON) -> bool:
            return any(
                s.get("kind") == "ServiceAccount" and (s.get("namespace"), s.get("name")) == account
                for s in binding.get("subjects") or []
            )

        async def rules_of(ref: JSON, binding_ns: str | None) -> list[JSON]:
            kind, role_name = ref.get("kind"), str(ref.get("name") or "")
            try:
                if kind == "ClusterRole":
                    role = await self.store.get("clusterroles", None, role_name)
                else:
                    role = await self.store.get("roles", binding_ns, role_name)
            except ApiError:
                return []  # a binding to a missing role grants nothing
            return list(role.get("rules") or [])

        granted: list[JSON] = []
        cluster_bindings, _ = await self.store.list("clusterrolebindings")
        for binding in cluster_bindings:
            if bound(binding):
                granted.extend(await rules_of(binding.get("roleRef") or {}, None))
        if namespace:
            bindings, _ = await self.store.list("rolebindings", namespace)
            for binding in bindings:
                if bound(binding):
                    granted.extend(await rules_of(binding.get("roleRef") or {}, namespace))
        return any(_matches(rule, verb, group, resource, name) for rule in granted)
