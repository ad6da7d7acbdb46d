"""The fault suite prints its figures table at the end of the session.

With ``KAI_PY_FAULT_RESULTS`` set to a path, the figures are also written there as
JSON (``bench/faults.py`` runs the suite several times and adds them up).
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

from fault_harness import RESULTS, SEED, table


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not RESULTS:
        return
    terminalreporter.write_line("")
    terminalreporter.write_line(table())
    path = os.environ.get("KAI_PY_FAULT_RESULTS")
    if path:
        with open(path, "w") as f:
            json.dump({"seed": SEED, "results": [dataclasses.asdict(r) for r in RESULTS]}, f)
