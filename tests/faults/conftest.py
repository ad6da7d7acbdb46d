"""The fault suite prints its figures table at the end of the session."""

from __future__ import annotations

from typing import Any

from fault_harness import RESULTS, table


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if RESULTS:
        terminalreporter.write_line("")
        terminalreporter.write_line(table())
