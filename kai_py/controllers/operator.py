"""The kai-py operator: scheduler loop, binder and pod-grouper as Kopf handlers.

``kai-py run`` (and ``python -m kai_py.controllers.operator``, which
``kai-py dev`` starts) runs all three in one process. The handler modules
register themselves with Kopf on import.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import sys
from collections.abc import Sequence
from typing import Any

import kopf

from kai_py import metrics
from kai_py.api import eventloop
from kai_py.controllers import access, leadership, logs
from kai_py.controllers.settings import OperatorSettings, configure

log = logging.getLogger("kai_py.operator")

#: The handler module of each part of the operator (``--controllers`` names).
CONTROLLERS = {
    "scheduler": "kai_py.controllers.scheduling",
    "binder": "kai_py.controllers.binder",
    "podgrouper": "kai_py.controllers.grouper",
    "webhooks": "kai_py.controllers.webhooks.server",
}


#: Threads for Kopf's synchronous handlers (the pod-grouper's, the binder's pod
#: clean-up): each waits on API requests, so a burst needs more than Kopf's default
#: (cores + 4).
HANDLER_THREADS = 32


def _kopf_settings(settings: kopf.OperatorSettings, **_: Any) -> None:
    # Kopf would post every INFO line a handler logs about an object (one per grouped
    # pod) as a core/v1 Event: an API request per pod for a line already in the log.
    # kai-py posts the Events users read itself (EventRecorder, EventPoster).
    settings.posting.level = logging.WARNING
    settings.execution.max_workers = HANDLER_THREADS


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kai-py run", description="Run the kai-py operator.")
    OperatorSettings.add_arguments(parser)
    parser.add_argument(
        "--kubeconfig", default=None, help="default: $KUBECONFIG, ~/.kube/config, or in-cluster"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.schedule_period <= 0:
        parser.error("--schedule-period: must be above 0")  # exits 2, as argparse does
    try:
        loop = eventloop.loop_factory()
    except ValueError as exc:
        parser.error(str(exc))
    settings = OperatorSettings.from_args(args)
    configure(settings)
    leadership.configure(settings)
    logs.configure(verbose=settings.verbose)
    if args.kubeconfig:
        access.use_kubeconfig(args.kubeconfig)
    problem = access.check_access(args.kubeconfig)
    if problem:
        print(f"kai-py run: {problem}", file=sys.stderr)
        return 1
    # Importing registers the handlers with Kopf's default registry.
    for part in settings.controllers:
        module = CONTROLLERS[part]
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise
            log.warning("not part of this kai-py; running without it", extra={"part": module})
    kopf.on.startup(id="kopf-settings")(_kopf_settings)
    metrics.serve(settings.metrics_port)  # every role serves /metrics, not only the scheduler
    log.info("event loop", extra={"loop": eventloop.name(loop)})
    with contextlib.suppress(KeyboardInterrupt):
        eventloop.run(
            kopf.operator(
                standalone=True,
                clusterwide=True,
                liveness_endpoint=settings.liveness_endpoint,
            ),
            loop,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
