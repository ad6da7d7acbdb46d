"""Benchmark one scheduling cycle on a synthetic cluster.

Prints the seconds of one full cycle (all actions) next to a naive first-fit
placer over the same input (the floor), and their ratio. Then the reclaim
case: a full cluster of preemptible pods from one queue and pending pods in
another; it prints the seconds of the cycle that reclaims.
The preempt case is the same cluster with the pending pods in the full queue
itself, at a higher priority (``--reclaim-pods`` sets how many, for both).
Both the cycle and the floor run with the garbage collector paused, as the
operator runs its cycles.

    python bench/cycle.py                # 1,000 nodes x 8 GPUs, 10,000 pending pods
    python bench/cycle.py --json
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from collections.abc import Callable

from figures import MinMedian

from kai_py.scheduler import build_name
from kai_py.scheduler.cycle import run_cycle
from kai_py.scheduler.model import Job, Node, Queue, Snapshot, Task, TaskStatus
from kai_py.scheduler.resources import INF, Res
from kai_py.state.gcpause import paused_gc

GIB = 2.0**30


def _nodes(count: int, gpus: int) -> list[Node]:
    return [
        Node(f"node-{i:05d}", Res(cpu=128_000, memory=1024 * GIB, gpu=gpus), gpu_memory_mib=81920)
        for i in range(count)
    ]


def _queues(count: int) -> list[Queue]:
    unlimited = Res(INF, INF, INF)
    queues = [
        Queue("root", None, quota=unlimited.copy(), limit=unlimited.copy(), weight=Res(1, 1, 1))
    ]
    for d in range(max(1, count // 10)):
        queues.append(
            Queue(
                f"dept-{d}",
                "root",
                quota=Res(INF, INF, 0),
                limit=unlimited.copy(),
                weight=Res(1, 1, 1),
            )
        )
    departments = [q.name for q in queues[1:]]
    for i in range(count):
        queues.append(
            Queue(
                f"q-{i:03d}",
                departments[i % len(departments)],
                quota=Res(INF, INF, 8.0 * (i % 5)),
                limit=unlimited.copy(),
                weight=Res(1, 1, 1 + i % 3),
                created=float(i),
            )
        )
    return queues


def _pending_jobs(
    pods: int, queues: list[str], rng: random.Random, prefix: str = "job"
) -> list[Job]:
    jobs: list[Job] = []
    made = 0
    while made < pods:
        size = min(rng.randint(1, 8), pods - made)
        uid = f"{prefix}-{len(jobs):05d}"
        job = Job(
            uid,
            "bench",
            uid,
            rng.choice(queues),
            priority=50,
            preemptible=True,
            min_member=size,
            created=float(len(jobs)),
        )
        gpus = rng.choice((1, 1, 1, 2, 4))
        for t in range(size):
            job.tasks.append(
                Task(
                    f"{uid}-{t}",
                    "bench",
                    f"{uid}-{t}",
                    uid,
                    Res(cpu=4000, memory=32 * GIB, gpu=gpus),
                    created=float(len(jobs)),
                )
            )
        jobs.append(job)
        made += size
    return jobs


def allocate_snapshot(nodes: int, gpus: int, pods: int, queues: int, seed: int) -> Snapshot:
    rng = random.Random(seed)
    qs = _queues(queues)
    leaves = [q.name for q in qs if q.name.startswith("q-")]
    return Snapshot(_nodes(nodes, gpus), qs, _pending_jobs(pods, leaves, rng), now=1e6)


def reclaim_snapshot(
    nodes: int, gpus: int, pending: int, seed: int, preempt: bool = False
) -> Snapshot:
    """The cluster full of one queue's preemptible one-GPU pods; another queue asks for
    more (reclaim). ``preempt``: the same queue asks, with a higher priority, and its
    quota covers the cluster (preempt: nothing to reclaim from another queue)."""
    rng = random.Random(seed)
    unlimited = Res(INF, INF, INF)
    owner_quota = Res(INF, INF, nodes * gpus if preempt else 0)
    qs = [
        Queue("root", None, quota=unlimited.copy(), limit=unlimited.copy(), weight=Res(1, 1, 1)),
        Queue("owner", "root", quota=owner_quota, limit=unlimited.copy(), weight=Res(1, 1, 1)),
        Queue(
            "claimer",
            "root",
            quota=Res(INF, INF, nodes * gpus / 2),
            limit=unlimited.copy(),
            weight=Res(1, 1, 1),
        ),
    ]
    node_list = _nodes(nodes, gpus)
    jobs: list[Job] = []
    for node in node_list:
        for g in range(gpus):
            uid = f"run-{node.name}-{g}"
            job = Job(
                uid, "bench", uid, "owner", priority=50, preemptible=True, min_member=1, created=0.0
            )
            job.tasks.append(
                Task(
                    uid,
                    "bench",
                    uid,
                    uid,
                    Res(cpu=4000, memory=32 * GIB, gpu=1),
                    status=TaskStatus.RUNNING,
                    node_name=node.name,
                    start_time=0.0,
                )
            )
            jobs.append(job)
    claim = []
    for i in range(pending):
        uid = f"claim-{i:05d}"
        job = Job(
            uid,
            "bench",
            uid,
            "owner" if preempt else "claimer",
            priority=200 if preempt else 50,
            preemptible=not preempt,
            min_member=1,
            created=1.0 + i,
        )
        job.tasks.append(Task(uid, "bench", uid, uid, Res(cpu=4000, memory=32 * GIB, gpu=1)))
        claim.append(job)
    rng.shuffle(claim)
    return Snapshot(node_list, qs, jobs + claim, now=1e6)


def first_fit(snapshot: Snapshot) -> int:
    """The floor: each gang on the first nodes with room, no queues, no order.

    An honest one: nodes are bucketed by free whole GPUs, so a task looks only at
    nodes that have the GPUs it asks for (the fewest such first, as binpack does),
    instead of scanning every node per task.
    """
    free: dict[str, list[float]] = {
        n.name: [n.allocatable.gpu, n.allocatable.cpu, n.allocatable.memory] for n in snapshot.nodes
    }
    buckets: dict[int, dict[str, None]] = {}  # free whole GPUs -> nodes (insertion-ordered)
    for name, f in free.items():
        buckets.setdefault(int(f[0]), {})[name] = None
    most = max(buckets, default=0)

    def move(name: str, before: float, after: float) -> None:
        if int(before) != int(after):
            del buckets[int(before)][name]
            buckets.setdefault(int(after), {})[name] = None

    placed = 0
    for job in snapshot.jobs:
        taken: list[tuple[str, Task]] = []
        for task in job.tasks:
            if task.status is not TaskStatus.PENDING:
                continue
            req = task.request
            found = None
            for level in range(max(0, math.ceil(req.gpu)), most + 1):
                for name in buckets.get(level, ()):
                    f = free[name]
                    if f[0] >= req.gpu and f[1] >= req.cpu and f[2] >= req.memory:
                        found = name
                        break
                if found is not None:
                    break
            if found is None:
                break
            f = free[found]
            before = f[0]
            f[0] -= req.gpu
            f[1] -= req.cpu
            f[2] -= req.memory
            move(found, before, f[0])
            taken.append((found, task))
        if len(taken) < job.min_member:
            for name, task in taken:
                f = free[name]
                before = f[0]
                f[0] += task.request.gpu
                f[1] += task.request.cpu
                f[2] += task.request.memory
                move(name, before, f[0])
        else:
            placed += len(taken)
    return placed


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    """Seconds of one run with the garbage collector paused: the operator runs its
    cycles so (``kai_py.state.gcpause``), and the floor is timed the same way."""
    with paused_gc():
        start = time.perf_counter()
        result = fn()
        return time.perf_counter() - start, result


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--queues", type=int, default=50)
    parser.add_argument("--reclaim-pods", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    def three(
        make: Callable[[], Snapshot], run: Callable[[Snapshot], object]
    ) -> tuple[list[float], object]:
        """Three runs, each on a fresh input (made outside the timing)."""
        times, result = [], None
        for _ in range(3):
            snapshot = make()
            seconds, result = timed(lambda snap=snapshot: run(snap))
            times.append(seconds)
        return times, result

    def alloc() -> Snapshot:
        return allocate_snapshot(args.nodes, args.gpus, args.pods, args.queues, args.seed)

    cycle_t, decisions = three(alloc, lambda snap: run_cycle(snap))
    floor_t, floor_placed = three(alloc, first_fit)
    bound = len(decisions.binds)  # type: ignore[attr-defined]
    reclaim_t, rdec = three(
        lambda: reclaim_snapshot(args.nodes, args.gpus, args.reclaim_pods, args.seed),
        lambda snap: run_cycle(snap),
    )
    evicted = len(rdec.evictions)  # type: ignore[attr-defined]
    preempt_t, pdec = three(
        lambda: reclaim_snapshot(args.nodes, args.gpus, args.reclaim_pods, args.seed, True),
        lambda snap: run_cycle(snap),
    )
    preempted = len(pdec.evictions)  # type: ignore[attr-defined]
    cycle_s, floor_s = min(cycle_t), min(floor_t)

    def fmt(times: list[float]) -> MinMedian:
        return MinMedian(times)

    result = {
        "nodes": args.nodes,
        "pods": args.pods,
        "scheduler": build_name(),
        "cycle_s": fmt(cycle_t),
        "floor_s": fmt(floor_t),
        "ratio": round(cycle_s / floor_s, 2) if floor_s > 0 else None,
        "bound": bound,
        "floor_bound": floor_placed,
        "reclaim_pods": args.reclaim_pods,
        "reclaim_s": fmt(reclaim_t),
        "reclaim_evicted": evicted,
        "preempt_s": fmt(preempt_t),
        "preempt_evicted": preempted,
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"cluster: {args.nodes} nodes x {args.gpus} GPUs, {args.pods} pending pods in {args.queues} queues"
        )
        print(f"scheduler: {result['scheduler']}; the floor: interpreted Python")
        print("seconds, min / median of 3")
        print(f"full cycle:       {fmt(cycle_t)} s  ({bound} pods bound)")
        print(f"first-fit floor:  {fmt(floor_t)} s  ({floor_placed} pods placed; GPU-bucketed)")
        print(
            f"ratio:            {result['ratio']}x of the mins "
            "(target: cycle <= 1 s and <= 10x the floor)"
        )
        print(
            f"reclaim cycle:    {fmt(reclaim_t)} s  ({evicted} pods evicted for {args.reclaim_pods} pending; target <= 3 s)"
        )
        print(
            f"preempt cycle:    {fmt(preempt_t)} s  ({preempted} pods evicted for {args.reclaim_pods} "
            "pending of a higher priority in the same queue)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
