"""KAI's scheduler-internals dashboard's metric names in a scrape of the operator, on
both backends (the check itself: tests/operator/kai_dashboards.py)."""

from __future__ import annotations

import pytest
from kai_dashboards import check_after_a_preemption, free_port
from kubernetes import client as k8s
from operator_helpers import Operator
from realapi_backends import Backend

PORT = free_port()


@pytest.fixture
def operator_args() -> list[str]:
    return ["--metrics-port", str(PORT)]


@pytest.mark.slow
def test_every_name_of_kais_internals_dashboard_is_in_a_scrape(
    backend: Backend, operator: Operator, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi
) -> None:
    check_after_a_preemption(PORT, operator, core, custom)
