"""KAI's scheduler-internals dashboard works against kai-py: every metric it queries
is in a scrape of a running operator (on the emulator; the real API server's
tier runs the same check in tests/realapi/test_dashboards_backends.py)."""

from __future__ import annotations

import pytest
from kai_dashboards import (
    INTERNALS,
    KAI_DASHBOARD,
    KAI_SOURCE,
    check_after_a_preemption,
    free_port,
    kai_dashboard_names,
)
from kubernetes import client as k8s
from operator_helpers import Operator

from kai_py.emulator.dev_cluster import ThreadedDevCluster

PORT = free_port()


@pytest.mark.skipif(not KAI_DASHBOARD.exists(), reason=f"KAI's tree is not at {KAI_SOURCE}")
def test_the_committed_names_are_those_of_kais_dashboard() -> None:
    assert kai_dashboard_names() == set(INTERNALS)


@pytest.fixture
def operator_args() -> list[str]:
    return ["--metrics-port", str(PORT)]


@pytest.mark.slow
def test_every_name_of_kais_internals_dashboard_is_in_a_scrape(
    cluster: ThreadedDevCluster,
    operator: Operator,
    core: k8s.CoreV1Api,
    custom: k8s.CustomObjectsApi,
) -> None:
    check_after_a_preemption(PORT, operator, core, custom)
