"""Running KAI's own scheduler test cases the way their README says.

Used by test_kai_conformance.py and by ``python -m tests.conformance.kai_cases``
(a summary with timings for the README and issue notes).
"""

from __future__ import annotations

import json
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kai_py.conf.schedconfig import parse_config
from kai_py.scheduler.model import Config
from kai_py.simulate.inputs import load_documents
from kai_py.simulate.simulation import Simulation, parse_now, pod_entries

CASES_DIR = Path(__file__).parent / "kai"
KNOWN_DIFFERENCES = Path(__file__).parent / "KNOWN-DIFFERENCES.md"

_RUNNING = {"Running", "Bound"}
_PENDING = {"Pending", "Pipelined", "Evicted", "Moved"}
# Session cases: expected status -> the kai-py statuses that match it.
_SESSION = {
    "Bound": {"Bound"},
    "Running": {"Running"},
    "Pending": {"Pending"},
    "Pipelined": {"Pipelined"},
    "Moved": {"Pipelined", "Moved"},
    "Evicted": {"Evicted"},
    "Releasing": {"Releasing"},
}


def case_names() -> list[str]:
    return sorted(p.name[: -len(".expect.json")] for p in CASES_DIR.glob("*.expect.json"))


def known_differences() -> dict[str, str]:
    """Case name -> reason, from the table in KNOWN-DIFFERENCES.md."""
    found: dict[str, str] = {}
    for line in KNOWN_DIFFERENCES.read_text(encoding="utf-8").splitlines():
        match = re.match(r"^\|\s*`([^`]+)`\s*\|\s*(.+?)\s*\|$", line)
        if match:
            found[match.group(1)] = match.group(2)
    return found


def is_session(name: str) -> bool:
    return _expect(name).get("mode") == "session"


def _expect(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(
        (CASES_DIR / f"{name}.expect.json").read_text(encoding="utf-8")
    )
    return data


def case_config(expect: dict[str, Any]) -> Config:
    """The scheduler configuration KAI's test ran with, as a ``--config`` file would say it."""
    session = expect.get("kai_session") or {}
    data: dict[str, Any] = {}
    if "actions" in expect:
        data["actions"] = ", ".join(expect["actions"])
    if "max_consolidation_preemptees" in session:
        cap = session["max_consolidation_preemptees"]
        data["maxNumberConsolidationPreemptees"] = -1 if cap is None else cap
    if "allow_consolidating_reclaim" in session:
        data["allowConsolidatingReclaim"] = session["allow_consolidating_reclaim"]
    if "staleness_grace_period_seconds" in session:
        data["globalDefaultStalenessGracePeriod"] = f"{session['staleness_grace_period_seconds']}s"
    loaded = parse_config(data, "kai_session")
    assert not loaded.warnings, loaded.warnings
    return loaded.config


def _session_mismatch(key: str, want: dict[str, Any], got: dict[str, Any] | None) -> str | None:
    expected = want["status"]
    if expected == "Finished":
        if got is None or got["status"] in ("Failed", "Succeeded"):
            return None
        return f"{key}: expected Finished, got {got['status']}"
    if got is None:
        return f"{key}: missing from the outcome"
    status = got["status"]
    if status not in _SESSION.get(expected, set()):
        return f"{key}: expected {expected}, got {status} on {got['node']}"
    node = want.get("node")
    # A list: any of these nodes (KAI's test asserts a set of nodes or a domain, not each pod's).
    fits = node is None or got["node"] == node or (isinstance(node, list) and got["node"] in node)
    if expected in ("Bound", "Running", "Pipelined", "Moved") and not fits:
        return f"{key}: expected {expected} on {want['node']}, got {got['node']}"
    if expected in ("Bound", "Running"):
        return _gpu_mismatch(key, want, got)
    return None


def _mismatch(key: str, want: dict[str, Any], got: dict[str, Any] | None) -> str | None:
    if got is None:
        return f"{key}: missing from the outcome"
    kai = want["kai_status"]
    status = got["status"]
    if kai == "Running":
        if status not in _RUNNING:
            return f"{key}: expected Running, got {status}"
        if want.get("node") is not None and got["node"] != want["node"]:
            return f"{key}: expected node {want['node']}, got {got['node']}"
        return _gpu_mismatch(key, want, got)
    elif kai == "Pending":
        if status not in _PENDING:
            return f"{key}: expected Pending, got {status} on {got['node']}"
    elif kai in ("Releasing", "StuckInReleasing"):
        if status != "Releasing":
            return f"{key}: expected Releasing, got {status}"
    else:
        return f"{key}: unknown kai_status {kai!r} in the case"
    return None


def _gpu_mismatch(key: str, want: dict[str, Any], got: dict[str, Any]) -> str | None:
    gpus = got["gpus"]
    expected = float(want.get("gpus") or 0)
    if "gpu_memory" in want:
        if float(gpus.get("memory") or 0) != float(want["gpu_memory"]):
            return f"{key}: expected {want['gpu_memory']} MiB of GPU memory, got {gpus}"
    elif expected and not expected.is_integer():
        if abs(float(gpus.get("portion") or 0) - expected) > 1e-9:
            return f"{key}: expected a {expected} GPU share, got {gpus}"
    elif float(gpus.get("count") or 0) != expected:
        return f"{key}: expected {expected:g} GPUs, got {gpus}"
    return None


@dataclass(slots=True)
class CaseResult:
    name: str
    problems: list[str]
    seconds: float


def run_case(name: str) -> CaseResult:
    started = time.perf_counter()
    expect = _expect(name)
    docs = load_documents([CASES_DIR / f"{name}.yaml"])
    config = case_config(expect)
    problems: list[str] = []
    if expect.get("mode") == "session":
        # One session, only the listed actions; compared as the session leaves it.
        sim = Simulation(docs, now=parse_now(expect["now"]), config=config)
        pods = pod_entries(sim.run(1))
        for key, want in sorted(expect["pods"].items()):
            problem = _session_mismatch(key, want, pods.get(key))
            if problem:
                problems.append(problem)
        return CaseResult(name, problems, time.perf_counter() - started)
    sim = Simulation(docs, now=parse_now(expect["now"]), recreate_evicted=True, config=config)
    for stage, cycles in (
        ("after the cycles", expect["cycles"]),
        ("when stable", expect["stable_cycles"]),
    ):
        outcome = sim.run(cycles)
        pods = pod_entries(outcome)
        for key, want in sorted(expect["pods"].items()):
            problem = _mismatch(key, want, pods.get(key))
            if problem:
                problems.append(f"{stage} ({outcome.cycles} cycles): {problem}")
        if problems:
            break
    return CaseResult(name, problems, time.perf_counter() - started)


def main() -> int:
    known = known_differences()
    started = time.perf_counter()
    results = [run_case(n) for n in case_names()]
    passed = [r for r in results if not r.problems]
    for r in results:
        mark = "ok  " if not r.problems else ("diff" if r.name in known else "FAIL")
        print(f"{mark} {r.name} ({r.seconds * 1000:.0f} ms)")
        for p in r.problems:
            print(f"       {p}")
    print(
        f"\n{len(passed)}/{len(results)} KAI cases pass; {len(known)} known differences; "
        f"{time.perf_counter() - started:.2f} s"
    )
    for kind, (ok, total) in sorted(per_kind(results).items()):
        print(f"  {kind}: {ok}/{total}")
    return 0


def kind_of(name: str) -> str:
    """``integration``, or ``session <actions>`` for the per-action cases."""
    expect = _expect(name)
    if expect.get("mode") != "session":
        return "integration"
    return "session " + ",".join(expect["actions"])


def per_kind(results: list[CaseResult]) -> dict[str, tuple[int, int]]:
    counts: dict[str, tuple[int, int]] = {}
    for r in results:
        ok, total = counts.get(kind_of(r.name), (0, 0))
        counts[kind_of(r.name)] = (ok + (not r.problems), total + 1)
    return counts


if __name__ == "__main__":
    sys.exit(main())
