"""Operator settings: from the command line, shared by every handler module."""

from __future__ import annotations

import argparse
import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from kai_py.api import keys
from kai_py.conf.schedconfig import load_config
from kai_py.scheduler.admission.ungate import QUEUE_ADMISSION_MODES
from kai_py.scheduler.model import Config
from kai_py.state.documents import InputError
from kai_py.state.partition import Partition

#: The parts of the operator, by the names ``--controllers`` takes.
CONTROLLER_NAMES: Final = ("scheduler", "binder", "podgrouper")
#: Parts that run only when named: the admission webhooks need a TLS certificate.
OPTIONAL_CONTROLLERS: Final = ("webhooks",)
#: The shard of a scheduler started without --shard or --node-pool (unlabelled nodes).
DEFAULT_SHARD: Final = "default"
_LABEL_VALUE: Final = re.compile(r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")
_LABEL_KEY: Final = re.compile(
    r"(?:[a-z0-9](?:[-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
)


def _controllers(text: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    known = (*CONTROLLER_NAMES, *OPTIONAL_CONTROLLERS)
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"expected a comma-separated list of {', '.join(known)}, got {text!r}"
        )
    return names


@dataclass(slots=True)
class OperatorSettings:
    scheduler_name: str = keys.DEFAULT_SCHEDULER_NAME
    schedule_period: float = 1.0  # seconds between cycles
    placement: str = "binpack"
    liveness_endpoint: str | None = None
    verbose: bool = False
    event_refresh: float = 10.0  # seconds between count updates of a repeated Event
    metrics_port: int | None = None
    controllers: tuple[str, ...] = field(default=CONTROLLER_NAMES)
    # The scheduler configuration (--config, in KAI's shape); placement is applied over it.
    scheduler: Config = field(default_factory=Config)
    leader_elect: bool = False
    lease_name: str = "kai-py-operator"
    lease_namespace: str = "kai-scheduler"
    # The scheduling shard this process's scheduler is, and the node pool it serves:
    # nodes, pods, PodGroups and BindRequests whose node_pool_label is node_pool ("" =
    # those without the label, KAI's default shard). The binder and the pod-grouper
    # serve every pool.
    shard: str = DEFAULT_SHARD
    node_pool: str = ""
    node_pool_label: str = keys.NODE_POOL_LABEL

    @property
    def partition(self) -> Partition:
        return Partition(self.node_pool_label, self.node_pool)

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--scheduler-name",
            default=keys.DEFAULT_SCHEDULER_NAME,
            help="schedule pods with this spec.schedulerName (default: %(default)s)",
        )
        parser.add_argument(
            "--schedule-period",
            type=float,
            default=1.0,
            help="seconds between scheduling cycles (default: %(default)s)",
        )
        parser.add_argument(
            "--placement",
            choices=["binpack", "spread"],
            default=None,
            help="GPU placement strategy (default: binpack, or the --config file's)",
        )
        parser.add_argument(
            "--config",
            dest="config_file",
            default=None,
            metavar="FILE",
            help="a scheduler configuration in KAI's shape (actions, tiers, parameters)",
        )
        parser.add_argument(
            "--liveness",
            dest="liveness_endpoint",
            default=None,
            help="serve a liveness probe, e.g. http://0.0.0.0:8080/healthz",
        )
        parser.add_argument(
            "--event-refresh",
            type=float,
            default=10.0,
            help="a repeated Event's count is written at most this often, in seconds "
            "(default: %(default)s)",
        )
        parser.add_argument(
            "--metrics-port",
            type=int,
            default=None,
            help="serve Prometheus metrics (kai_cycle_duration_seconds, ...) on this port",
        )
        parser.add_argument(
            "--controllers",
            type=_controllers,
            default=CONTROLLER_NAMES,
            help="which parts to run, comma-separated (default: scheduler,binder,podgrouper; "
            "also: webhooks); e.g. one process per part, as KAI deploys them",
        )
        parser.add_argument(
            "--leader-elect",
            action=argparse.BooleanOptionalAction,
            default=None,
            help="only the replica holding a coordination.k8s.io Lease schedules, binds and "
            "groups (default: on when running in a cluster, off otherwise)",
        )
        parser.add_argument(
            "--lease-name",
            default=None,
            help="name of the leader-election Lease (default: kai-py-operator for all "
            "parts, else kai-py- and the parts run, e.g. kai-py-binder)",
        )
        parser.add_argument(
            "--lease-namespace",
            default=None,
            help="namespace of the Lease (default: the pod's namespace in a cluster, "
            "else kai-scheduler)",
        )
        parser.add_argument(
            "--node-pool",
            default=None,
            metavar="VALUE",
            help="schedule only the node pool whose nodes, pods and PodGroups carry "
            "--node-pool-label=VALUE (default: those without the label); one process "
            "per pool, as KAI's scheduling shards",
        )
        parser.add_argument(
            "--shard",
            default=None,
            metavar="NAME",
            help="the scheduling shard's name: its Lease is kai-py-scheduler-NAME "
            "(default: the --node-pool value, or 'default' without one)",
        )
        parser.add_argument(
            "--node-pool-label",
            default=keys.NODE_POOL_LABEL,
            metavar="KEY",
            help="the label key of node pools (default: %(default)s)",
        )
        parser.add_argument(
            "--queue-admission-gating",
            choices=QUEUE_ADMISSION_MODES,
            default=None,
            help="hold new pods with the scheduling gate kai.scheduler/queue-admission "
            "until their job fits within its queue's quota and limit: 'queues' = queues "
            "with spec.admissionGating: true, 'all' = every queue but those with false "
            "(default: off, or the --config file's queueAdmissionGating); the scheduler "
            "and the pod webhook read it (docs/autoscaling.md)",
        )
        parser.add_argument(
            "--verbose",
            action="store_true",
            help="log at DEBUG level, and keep the access line of each probe, webhook "
            "call and scrape (hidden otherwise)",
        )

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> OperatorSettings:
        if args.schedule_period <= 0:
            raise SystemExit("kai-py run: --schedule-period: must be above 0")
        scheduler = Config()
        if args.config_file:
            try:
                loaded = load_config(Path(args.config_file))
            except InputError as exc:
                raise SystemExit("kai-py run: --config: " + "; ".join(exc.problems)) from None
            scheduler = loaded.config
            for warning in loaded.warnings:
                logging.getLogger("kai_py").warning("%s", warning)
        if args.placement:
            scheduler.placement = args.placement
        if getattr(args, "queue_admission_gating", None):
            scheduler.queue_admission_gating = args.queue_admission_gating
        node_pool = args.node_pool or ""
        shard = args.shard or node_pool or DEFAULT_SHARD
        problem = _shard_problem(shard, node_pool, args.node_pool_label, args.controllers)
        if problem:
            raise SystemExit(f"kai-py run: {problem}")
        return cls(
            scheduler_name=args.scheduler_name,
            schedule_period=args.schedule_period,
            placement=scheduler.placement,
            scheduler=scheduler,
            liveness_endpoint=args.liveness_endpoint,
            verbose=args.verbose,
            event_refresh=max(0.0, args.event_refresh),
            metrics_port=args.metrics_port,
            controllers=tuple(args.controllers),
            leader_elect=_elects(args.leader_elect, args.controllers),
            lease_name=args.lease_name or lease_name_for(args.controllers, shard),
            lease_namespace=args.lease_namespace or pod_namespace() or "kai-scheduler",
            shard=shard,
            node_pool=node_pool,
            node_pool_label=args.node_pool_label,
        )


def _shard_problem(
    shard: str, node_pool: str, label: str, controllers: tuple[str, ...]
) -> str | None:
    """Why these shard flags cannot run, or None."""
    if not _LABEL_VALUE.fullmatch(node_pool):
        return f"--node-pool: {node_pool!r} is not a label value (63 characters at most: "
        "letters, digits, '-', '_', '.', starting and ending with a letter or digit)"
    if not _LABEL_KEY.fullmatch(label):
        return f"--node-pool-label: {label!r} is not a label key"
    if not _LABEL_VALUE.fullmatch(shard) or not shard:
        return f"--shard: {shard!r} is not a name (it goes into a Lease name)"
    if shard != DEFAULT_SHARD and any(p in controllers for p in ("binder", "podgrouper")):
        # Every shard's process would bind and group every pool's pods: one of each
        # serves all pools (KAI's shape).
        return (
            f"--shard {shard}: runs the scheduler only (--controllers scheduler); "
            "the binder and the pod-grouper run once, in another process, for every pool"
        )
    return None


def _elects(flag: bool | None, controllers: tuple[str, ...]) -> bool:
    """Elect a leader only for parts that must run once (the webhooks serve on every
    replica); by default only in a cluster."""
    if not any(part in CONTROLLER_NAMES for part in controllers):
        return False
    return in_cluster() if flag is None else bool(flag)


def lease_name_for(controllers: tuple[str, ...], shard: str = "default") -> str:
    """One Lease per set of parts: a binder Deployment and a scheduler Deployment each
    elect their own leader instead of one of them standing by for ever. Each scheduling
    shard but the default one has its own (the default keeps the names it had before
    there were shards, so an upgrade elects against the same Lease)."""
    if shard != DEFAULT_SHARD:
        return f"kai-py-scheduler-{shard}"
    parts = [part for part in CONTROLLER_NAMES if part in controllers]
    if parts == list(CONTROLLER_NAMES):
        return "kai-py-operator"
    return "kai-py-" + "-".join(parts)


_SA_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def in_cluster() -> bool:
    """Running in a pod (the API server's address is in the environment)."""
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST"))


def pod_namespace() -> str | None:
    """The namespace this pod runs in, when it runs in one."""
    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    try:
        with open(_SA_NAMESPACE) as f:
            return f.read().strip() or None
    except OSError:
        return None


_current = OperatorSettings()


def configure(settings: OperatorSettings) -> None:
    global _current
    _current = settings


def current() -> OperatorSettings:
    return _current
