"""Run every scenario file under tests/scenarios (see README.md there)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from kai_py.simulate.pools import of_pool
from kai_py.simulate.simulation import Simulation, parse_now, scheduler_config, to_json
from kai_py.state.documents import Document, InputError
from kai_py.state.partition import Partition

HERE = Path(__file__).parent
FILES = sorted(HERE.glob("*.yaml"))


def _load(path: Path) -> tuple[dict[str, Any], list[Document]]:
    header: dict[str, Any] | None = None
    docs: list[Document] = []
    for index, body in enumerate(yaml.safe_load_all(path.read_text(encoding="utf-8")), start=1):
        if body is None:
            continue
        if body.get("kind") == "Scenario":
            header = body
        else:
            docs.append(Document(f"{path.name}#{index}", body))
    assert header is not None, f"{path.name}: no 'kind: Scenario' document"
    return header, docs


def _close(a: float, b: float) -> bool:
    return abs(float(a) - float(b)) <= 1e-6 * max(1.0, abs(float(b)))


def _match_subset(want: Any, got: Any, where: str) -> list[str]:
    if isinstance(want, Mapping):
        if not isinstance(got, Mapping):
            return [f"{where}: expected a mapping, got {got!r}"]
        problems: list[str] = []
        for key, value in want.items():
            problems += _match_subset(value, got.get(key), f"{where}.{key}")
        return problems
    if isinstance(want, bool) or want is None or isinstance(want, str):
        return [] if want == got else [f"{where}: expected {want!r}, got {got!r}"]
    if isinstance(want, int | float):
        ok = isinstance(got, int | float) and not isinstance(got, bool) and _close(got, want)
        return [] if ok else [f"{where}: expected {want!r}, got {got!r}"]
    if isinstance(want, list):
        return [] if list(want) == list(got or []) else [f"{where}: expected {want!r}, got {got!r}"]
    return [f"{where}: cannot compare {want!r}"]


def check(path: Path) -> list[str]:
    header, docs = _load(path)
    expect = header.get("expect") or {}
    try:
        config = scheduler_config(
            placement=header.get("placement", "binpack"),
            actions=header.get("actions"),
            config_file=HERE / header["config"] if header.get("config") else None,
        )
        if "nodePool" in header:  # one shard's view (kai-py simulate --node-pool)
            docs, _ = of_pool(docs, Partition(value=str(header["nodePool"])))
        sim = Simulation(
            docs,
            now=parse_now(header["now"]) if header.get("now") else None,
            recreate_evicted=bool(header.get("recreateEvicted", False)),
            config=config,
        )
        outcome = sim.run(header.get("cycles"))
    except InputError as exc:
        if "error" not in expect:
            return [f"input refused: {exc}"]
        text = str(exc)
        return [f"error text lacks {s!r}: {text}" for s in expect["error"] if s not in text]
    if "error" in expect:
        return [f"expected the input to be refused with {expect['error']}"]
    result = to_json(outcome)
    problems: list[str] = []
    for pod, want in (expect.get("pods") or {}).items():
        got = result["pods"].get(pod)
        if got is None:
            problems.append(f"pod {pod}: not in the outcome")
            continue
        want = dict(want)
        status = want.pop("status", None)
        if status is not None:
            allowed = status if isinstance(status, list) else [status]
            if got["status"] not in allowed:
                problems.append(f"pod {pod}: status {got['status']}, expected {status}")
        problems += _match_subset(want, got, f"pod {pod}")
    if "evictions" in expect:
        want_ev = sorted((e["pod"], e["action"], e.get("by")) for e in expect["evictions"] or [])
        got_ev = sorted(
            (
                e["pod"],
                e["action"],
                e["by"] if any("by" in w for w in expect["evictions"] or []) else None,
            )
            for e in result["evictions"]
        )
        if [w[:2] for w in want_ev] != [g[:2] for g in got_ev] or any(
            w[2] is not None and w[2] != g[2] for w, g in zip(want_ev, got_ev, strict=False)
        ):
            problems.append(f"evictions: expected {want_ev}, got {got_ev}")
    for want in expect.get("events") or []:
        want = dict(want)
        contains = want.pop("messageContains", None)
        if not any(
            all(e.get(k) == v for k, v in want.items())
            and (contains is None or contains in e["message"])
            for e in result["events"]
        ):
            problems.append(f"event {want} (message containing {contains!r}) not found")
    for group, want in (expect.get("podgroups") or {}).items():
        problems += _match_subset(want, result["podgroups"].get(group), f"podgroup {group}")
    for queue, want in (expect.get("queues") or {}).items():
        problems += _match_subset(want, result["queues"].get(queue), f"queue {queue}")
    return problems


def test_there_are_scenarios() -> None:
    assert len(FILES) >= 80  # issue 2 and issue 3 ask for 40 each


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_scenario(path: Path) -> None:
    problems = check(path)
    assert not problems, "\n".join(problems)
