"""Operator settings: from the command line, shared by every handler module."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Final

from kai_py.api import keys

#: The parts of the operator, by the names ``--controllers`` takes.
CONTROLLER_NAMES: Final = ("scheduler", "binder", "podgrouper")
#: Parts that run only when named: the admission webhooks need a TLS certificate.
OPTIONAL_CONTROLLERS: Final = ("webhooks",)


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
        parser.add_argument("--placement", choices=["binpack", "spread"], default="binpack")
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
        parser.add_argument("--verbose", action="store_true")

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> OperatorSettings:
        if args.schedule_period <= 0:
            raise SystemExit("kai-py run: --schedule-period: must be above 0")
        return cls(
            scheduler_name=args.scheduler_name,
            schedule_period=args.schedule_period,
            placement=args.placement,
            liveness_endpoint=args.liveness_endpoint,
            verbose=args.verbose,
            event_refresh=max(0.0, args.event_refresh),
            metrics_port=args.metrics_port,
            controllers=tuple(args.controllers),
        )


_current = OperatorSettings()


def configure(settings: OperatorSettings) -> None:
    global _current
    _current = settings


def current() -> OperatorSettings:
    return _current
