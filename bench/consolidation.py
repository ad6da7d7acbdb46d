"""Consolidation on KAI's own benchmark topology: how many pods it moves, and how fast.

KAI benchmarks its consolidation action alone on a "mixed" cluster: N nodes x 8
GPUs, J one-GPU jobs in four queues (two per department, each deserving a quarter of
the GPUs), every other job running (job i on node i mod N) and the rest pending.
The pending jobs fit on idle GPUs, so no running pod needs to move for them. Per
size this prints, for consolidation run alone and for a full cycle (all actions):
the pods evicted (moves included), bound and pipelined, and the seconds, min /
median of 3 (each run on a fresh input, the garbage collector paused as the
operator runs its cycles).

    python bench/consolidation.py                  # KAI's sizes: 10/50, 50/200, 100/500
    python bench/consolidation.py --sizes 50x200 --json
"""

from __future__ import annotations

import argparse
import json
import time

from figures import MinMedian

from kai_py.scheduler.cycle import ACTIONS, run_cycle
from kai_py.scheduler.model import Job, Node, Queue, Snapshot, Task, TaskStatus
from kai_py.scheduler.resources import INF, Res
from kai_py.scheduler.session import Decisions
from kai_py.state.gcpause import paused_gc

GIB = 2.0**30


def mixed(nodes: int, jobs: int) -> Snapshot:
    """KAI's ``createBenchmarkTopologyWithMixedJobs``: half running, half pending."""
    total = 8.0 * nodes
    unlimited = Res(INF, INF, INF)
    queues = [
        Queue("root", None, quota=unlimited.copy(), limit=unlimited.copy(), weight=Res(1, 1, 1))
    ]
    for dept in ("dept-a", "dept-b"):
        queues.append(
            Queue(
                dept,
                "root",
                quota=Res(INF, INF, total / 2),
                limit=unlimited.copy(),
                weight=Res(1, 1, 1),
            )
        )
    for i in range(4):
        queues.append(
            Queue(
                f"queue-{i}",
                "dept-a" if i < 2 else "dept-b",
                quota=Res(INF, INF, total / 4),
                limit=unlimited.copy(),
                weight=Res(1, 1, 1),
                created=float(i),
            )
        )
    node_list = [
        Node(f"node-{i}", Res(cpu=64_000, memory=256 * GIB, gpu=8), gpu_memory_mib=81920)
        for i in range(nodes)
    ]
    job_list: list[Job] = []
    for i in range(jobs):
        uid = f"job-{i}"
        job = Job(uid, "bench", uid, f"queue-{i % 4}", 50, True, 1, float(i))
        running = i % 2 == 0
        job.tasks.append(
            Task(
                f"{uid}-0",
                "bench",
                f"{uid}-0",
                uid,
                Res(cpu=1000, memory=1 * GIB, gpu=1),
                status=TaskStatus.RUNNING if running else TaskStatus.PENDING,
                node_name=f"node-{i % nodes}" if running else None,
                start_time=0.0 if running else None,
                created=float(i),
            )
        )
        job_list.append(job)
    return Snapshot(node_list, queues, job_list, now=1e6)


def three(nodes: int, jobs: int, alone: bool) -> tuple[list[float], Decisions]:
    times: list[float] = []
    decisions: Decisions | None = None
    actions = [("consolidation", ACTIONS["consolidation"])] if alone else None
    for _ in range(3):
        snapshot = mixed(nodes, jobs)
        with paused_gc():
            start = time.perf_counter()
            decisions = run_cycle(snapshot, actions)
            times.append(time.perf_counter() - start)
    assert decisions is not None
    return times, decisions


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="10x50,50x200,100x500", help="NODESxJOBS,...")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = []
    for size in args.sizes.split(","):
        nodes, jobs = (int(x) for x in size.split("x"))
        for alone in (True, False):
            times, d = three(nodes, jobs, alone)
            rows.append(
                {
                    "nodes": nodes,
                    "jobs": jobs,
                    "running": (jobs + 1) // 2,
                    "actions": "consolidation" if alone else "all",
                    "evicted": len(d.evictions),
                    "moved": sum(1 for e in d.evictions if e.moved_to),
                    "bound": len(d.binds),
                    "pipelined": len(d.pipelined),
                    "seconds": MinMedian(times, 4),
                }
            )
    if args.json:
        print(json.dumps(rows))
        return 0
    print(
        "KAI's mixed topology (N nodes x 8 GPUs, J one-GPU jobs, half running); seconds min / median of 3"
    )
    for r in rows:
        print(
            f"{r['nodes']:>4} nodes {r['jobs']:>4} jobs  {r['actions']:<13}  evicted {r['evicted']:>3} of "
            f"{r['running']} running (moved {r['moved']}), bound {r['bound']}, pipelined "
            f"{r['pipelined']}, {r['seconds']} s"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
