"""The one entry point: ``kai-py simulate | run | reserve | crds | dev``.

Each sub-command imports its implementation lazily so that ``kai-py crds``
does not pay for the emulator and ``kai-py simulate`` does not load Kopf.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from kai_py import __version__


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kai-py", description="A KAI-compatible batch and GPU scheduler for Kubernetes."
    )
    parser.add_argument("--version", action="version", version=f"kai-py {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    sim = sub.add_parser(
        "simulate",
        help="run the scheduling cycle offline on Kubernetes manifests",
        description="Run the scheduler offline on YAML manifests (files or folders).",
    )
    sim.add_argument(
        "paths",
        nargs="+",
        type=Path,
        metavar="PATH",
        help="a YAML or JSON file, a folder of them, or - for standard input",
    )
    sim.add_argument(
        "--cycles",
        type=int,
        default=None,
        help="run exactly N cycles (default: until nothing changes, at most 10)",
    )
    sim.add_argument("--output", choices=["text", "json"], default="text")
    sim.add_argument(
        "--placement",
        choices=["binpack", "spread"],
        default=None,
        help="GPU placement strategy (default: binpack, or the --config file's)",
    )
    sim.add_argument(
        "--actions",
        default=None,
        help="the actions of each cycle, in order, e.g. allocate,reclaim "
        "(default: allocate,consolidation,reclaim,preempt,stalegangeviction)",
    )
    sim.add_argument(
        "--config",
        type=Path,
        default=None,
        metavar="FILE",
        help="a scheduler configuration in KAI's shape (actions, tiers, parameters)",
    )
    sim.add_argument(
        "--now",
        default=None,
        help="the simulated clock, RFC 3339 (default: the latest timestamp in the input)",
    )
    sim.add_argument(
        "--node-pool",
        default=None,
        metavar="VALUE",
        help="one scheduler shard's cycle: only the nodes, pods and PodGroups of the node "
        "pool VALUE ('' for those without the pool label), as `kai-py run --node-pool`",
    )
    sim.add_argument(
        "--node-pool-label",
        default="kai.scheduler/node-pool",
        metavar="KEY",
        help="the label key of node pools (default: %(default)s)",
    )
    sim.add_argument(
        "--over-time",
        default=None,
        metavar="DURATION",
        help="run cycles over DURATION of simulated time (e.g. 2h): pods annotated "
        "kai-py.dev/duration finish, evicted pods come back; prints the GPUs each queue "
        "holds over time",
    )
    sim.add_argument(
        "--step",
        default=None,
        metavar="DURATION",
        help="with --over-time: simulated time between cycles (default: a 500th of it)",
    )
    sim.add_argument(
        "--plot",
        type=Path,
        default=None,
        metavar="FILE",
        help="with --over-time: also draw the GPUs per queue over time as an SVG picture",
    )
    sim.add_argument(
        "--recreate-evicted",
        action="store_true",
        help="between cycles, evicted pods come back as new Pending pods of the same name",
    )

    run = sub.add_parser(
        "run",
        help="run the operator (scheduler, binder, pod-grouper) against a cluster",
        description="Run the kai-py operator against the cluster of the current kubeconfig.",
        add_help=False,
    )
    run.add_argument("operator_args", nargs=argparse.REMAINDER)

    reserve = sub.add_parser(
        "reserve",
        help="the program of a GPU reservation pod (reports its card's UUID)",
        description="Run inside a reservation pod: write the card's UUID into the pod's "
        "run.ai/reserve_for_gpu_index annotation, then hold the card until stopped.",
    )
    reserve.add_argument("--kubeconfig", default=None, help="default: in-cluster config")
    reserve.add_argument("--no-wait", action="store_true", help="exit after reporting")

    agent = sub.add_parser(
        "node-agent",
        help="publish this node's GPUs (NVML) on its Node, for pinning",
        description="Read the node's GPUs through NVML and publish them in the Node's "
        "kai.scheduler/gpu-inventory annotation (again when they change).",
    )
    agent.add_argument("--node", default=os.environ.get("NODE_NAME"), help="default: $NODE_NAME")
    agent.add_argument("--kubeconfig", default=None, help="default: in-cluster config")
    agent.add_argument("--interval", type=float, default=60.0, help="seconds between reads")
    agent.add_argument("--once", action="store_true", help="publish once and exit")
    crds = sub.add_parser(
        "crds",
        help="write the CustomResourceDefinitions generated from the models",
        description="Write the Queue, PodGroup, BindRequest, Topology, Config and SchedulingShard CRDs generated from kai_py/api/.",
    )
    crds.add_argument("--output-dir", "-o", type=Path, default=Path("crds"))
    crds.add_argument(
        "--apply",
        action="store_true",
        help="apply them to the cluster (server-side) instead of writing files, and wait "
        "until each is Established (the chart's pre-install/pre-upgrade hook runs this)",
    )
    crds.add_argument("--kubeconfig", default=None, help="with --apply; default: in-cluster config")
    crds.add_argument(
        "--timeout", type=float, default=60.0, help="with --apply: seconds to wait (default 60)"
    )

    dev = sub.add_parser(
        "dev",
        help="start an emulated cluster with GPU nodes that kubectl can use",
        description="Start an emulated Kubernetes cluster with GPU nodes, KAI's install "
        "objects and the kai-py operator; prints the export KUBECONFIG=... line once the "
        "operator's webhooks answer. Ctrl-C or SIGTERM stops it (exit 0).",
    )
    dev.add_argument("--cluster", type=Path, default=None, help="cluster description (YAML)")
    dev.add_argument("--kubeconfig", type=Path, default=None, help="where to write the kubeconfig")
    dev.add_argument("--port", type=int, default=0, help="port to listen on (default: a free one)")
    dev.add_argument("--no-operator", action="store_true", help="run the emulator alone")
    dev.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        metavar="N",
        help="the operator serves Prometheus metrics at http://127.0.0.1:N/metrics",
    )
    dev.add_argument(
        "--apply",
        type=Path,
        nargs="+",
        default=[],
        metavar="PATH",
        help="create the objects of these YAML files or folders once the cluster is up",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == ["run"]:
        # The operator parses its own options (argparse's REMAINDER would swallow
        # `kai-py run --help` into an error).
        from kai_py.controllers.operator import main as run_operator

        return run_operator(args_list[1:])
    args = _build_parser().parse_args(args_list)
    if args.command == "simulate" and args.over_time is not None:
        from kai_py.simulate import overtime

        return overtime.run_cli(
            paths=args.paths,
            over_time=args.over_time,
            step=args.step,
            plot=args.plot,
            now=args.now,
            placement=args.placement,
            actions=args.actions,
            config_file=args.config,
        )
    if args.command == "simulate":
        if args.step is not None or args.plot is not None:
            print("kai-py simulate: --step and --plot go with --over-time", file=sys.stderr)
            return 2
        from kai_py.simulate.simulation import run_cli

        return run_cli(
            paths=args.paths,
            cycles=args.cycles,
            output=args.output,
            placement=args.placement,
            now=args.now,
            recreate_evicted=args.recreate_evicted,
            actions=args.actions,
            config_file=args.config,
            node_pool=args.node_pool,
            node_pool_label=args.node_pool_label,
        )
    if args.command == "node-agent":
        from kai_py.gpu.nodeagent import run_node_agent

        return run_node_agent(args.node, args.kubeconfig, args.interval, args.once)
    if args.command == "reserve":
        from kai_py.binder.reserve import run_reserve

        return run_reserve(args.kubeconfig, wait=not args.no_wait)
    if args.command == "crds":
        if args.apply:
            from kai_py.api.crdgen import crd_documents
            from kai_py.apiclient.crds import apply_crds
            from kai_py.apiclient.kube import Kube, KubeError, load_api_client

            kube = Kube(load_api_client(args.kubeconfig), timeout=30.0)
            try:
                lines = apply_crds(kube, crd_documents(), timeout=args.timeout)
            except KubeError as exc:
                print(f"kai-py crds --apply: {exc}", file=sys.stderr)
                return 1
            print("\n".join(lines))
            return 0
        from kai_py.api.crdgen import write_crds

        for path in write_crds(args.output_dir):
            print(f"wrote {path}")
        return 0
    if args.command == "dev":
        from kai_py.emulator.dev import run_dev

        return run_dev(
            cluster_file=args.cluster,
            kubeconfig=args.kubeconfig,
            port=args.port,
            no_operator=args.no_operator,
            apply=args.apply,
            metrics_port=args.metrics_port,
        )
    raise AssertionError(f"unhandled command {args.command}")


if __name__ == "__main__":
    sys.exit(main())
