"""The emulator's RBAC rule matching: verbs, groups, subresources, wildcards, names."""

from __future__ import annotations

from kai_py.emulator.apiserver.rbac import _matches

RULE = {"apiGroups": [""], "resources": ["pods", "pods/status"], "verbs": ["get", "patch"]}


def test_verb_group_and_resource_must_all_match() -> None:
    assert _matches(RULE, "patch", "", "pods/status", "p")
    assert not _matches(RULE, "create", "", "pods", "p")
    assert not _matches(RULE, "get", "apps", "pods", "p")
    assert not _matches(RULE, "patch", "", "pods/binding", "p")  # a subresource is its own


def test_wildcards_and_resource_names() -> None:
    anything = {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}
    assert _matches(anything, "delete", "batch", "jobs", None)
    subresources = {"apiGroups": [""], "resources": ["pods/*"], "verbs": ["create"]}
    assert _matches(subresources, "create", "", "pods/eviction", "p")
    assert not _matches(subresources, "create", "", "pods", "p")
    named = {**RULE, "resourceNames": ["mine"]}
    assert _matches(named, "get", "", "pods", "mine")
    assert not _matches(named, "get", "", "pods", "other")
    assert not _matches(named, "get", "", "pods", None)
