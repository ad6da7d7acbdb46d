"""The fault suite's figures: run ``tests/faults`` (the operator under kill -9, API
errors, emulator restarts, node failure, two replicas, reservation pods deleted
mid-bind) a number of times with different seeds and print the table:

    scenario | runs | double binds | card-seconds over 100 % | kubelet GPU rejections |
    lost pods | leftover reservation pods | stuck BindRequests |
    time to complete after faults stop (min / median / max)

and the failover time with two replicas (min / median / max), the writes accepted
from a replica after it lost the Lease, and the longest time two replicas both
wrote (the old leader's last accepted write minus the new leader's first).

    python bench/faults.py               # 3 runs, seeds 8, 9, 10 (about 4 minutes each)
    python bench/faults.py --runs 1 --seed 42
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
COUNTS = (
    "double_binds",
    "over_card_seconds",
    "rejections",
    "lost_pods",
    "leftover_reservations",
    "stuck_bindrequests",
    "undecided_deletions",
)


def _spread(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{min(values):.1f} / {statistics.median(values):.1f} / {max(values):.1f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seed", type=int, default=8, help="first seed; run i uses seed + i")
    parser.add_argument("-k", default=None, help="only the scenarios pytest -k selects")
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    failed = 0
    for i in range(args.runs):
        seed = args.seed + i
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "results.json"
            env = {**os.environ, "KAI_PY_FAULT_SEED": str(seed), "KAI_PY_FAULT_RESULTS": str(out)}
            command = [
                sys.executable,
                "-m",
                "pytest",
                "tests/faults",
                "-q",
                "-p",
                "no:cacheprovider",
            ]
            if args.k:
                command += ["-k", args.k]
            print(f"run {i + 1}/{args.runs}: seed {seed}", flush=True)
            done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
            if done.returncode != 0:
                failed += 1
                print(done.stdout[-4000:], flush=True)
            if out.exists():
                rows.extend(json.loads(out.read_text())["results"])
    by_scenario: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_scenario.setdefault(row["scenario"], []).append(row)
    print()
    print(
        f"fault suite figures: {args.runs} run(s), seeds {args.seed}..{args.seed + args.runs - 1}"
    )
    print(
        "scenario | runs | double binds | card-seconds over 100 % | kubelet GPU rejections | "
        "lost pods | leftover reservation pods | stuck BindRequests | "
        "time to complete after faults stop, s (min / median / max)"
    )
    print("|".join(["---"] * 9))
    failovers: list[float] = []
    overlaps: list[float] = []
    for name, group in by_scenario.items():
        sums = {k: sum(r[k] for r in group) for k in COUNTS}
        completes = [r["complete_seconds"] for r in group if r["complete_seconds"] is not None]
        failovers += [r["failover_seconds"] for r in group if r["failover_seconds"] is not None]
        overlaps += [
            r["two_writers_seconds"] for r in group if r.get("two_writers_seconds") is not None
        ]
        print(
            f"{name} | {len(group)} | {sums['double_binds']} | {sums['over_card_seconds']:g} | "
            f"{sums['rejections']} | {sums['lost_pods']} | {sums['leftover_reservations']} | "
            f"{sums['stuck_bindrequests']} | {_spread(completes)}"
        )
    if failovers:
        print(
            f"failover with two replicas (the leader killed, paused or cut off -> the other "
            f"holds the Lease), s: {_spread(failovers)}"
        )
    if overlaps:
        late = sum(r.get("writes_after_lost_lease", 0) for r in rows)
        print(
            f"writes accepted from a replica after it lost the Lease: {late}; old leader's "
            f"last write - new leader's first, s (min / median / max, above 0: both wrote): "
            f"{_spread(overlaps)}"
        )
    deleted = sum(r["undecided_deletions"] for r in rows)
    if deleted:
        print(f"pods the operator deleted with no eviction decided: {deleted}")
    if failed:
        print(f"{failed} run(s) had failing scenarios")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
