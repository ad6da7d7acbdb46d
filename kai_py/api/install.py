"""The objects an installation of kai-py puts into a cluster besides the CRDs.

KAI's chart installs four PriorityClasses, the default queues, the
namespace of the GPU reservation pods, its Config and the default
SchedulingShard. ``kai-py dev`` creates the same
objects from here, and tests/chart/ checks that the Helm chart renders these
very manifests, so the chart and the emulated cluster cannot drift apart.
"""

from __future__ import annotations

from typing import Any, Final

from kai_py import __version__
from kai_py.api import keys

Json = dict[str, Any]

#: Where the image built from the repository's Dockerfile is published.
IMAGE_REPOSITORY: Final = "ghcr.io/kai-py/kai-py"
#: The image of this version of kai-py: every role runs it, reservation pods too.
DEFAULT_IMAGE: Final = f"{IMAGE_REPOSITORY}:{__version__}"

#: The ServiceAccount of the reservation pods (it may patch its own pod only).
RESERVATION_SERVICE_ACCOUNT: Final = "kai-resource-reservation"

#: KAI's default queue resources: no guarantee, no limit, weight 1 (quota 0, limit -1).
_OPEN_RESOURCES: Final[Json] = {
    name: {"quota": 0, "limit": -1, "overQuotaWeight": 1} for name in ("cpu", "gpu", "memory")
}


def priority_classes() -> list[Json]:
    """KAI's four PriorityClasses: train 50, build-preemptible 75, build 100, inference 125."""
    return [
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name},
            "value": value,
        }
        for name, value in keys.STANDARD_PRIORITY_CLASSES.items()
    ]


def default_queues() -> list[Json]:
    """``default-parent-queue`` and ``default-queue`` under it, open as KAI's chart makes them."""

    def queue(name: str, parent: str | None) -> Json:
        spec: Json = {"resources": {k: dict(v) for k, v in _OPEN_RESOURCES.items()}}
        if parent:
            spec["parentQueue"] = parent
        return {
            "apiVersion": f"{keys.GROUP}/{keys.QUEUE_VERSION}",
            "kind": "Queue",
            "metadata": {"name": name},
            "spec": spec,
        }

    return [
        queue(keys.DEFAULT_PARENT_QUEUE, None),
        queue(keys.DEFAULT_QUEUE, keys.DEFAULT_PARENT_QUEUE),
    ]


def reservation_namespace() -> Json:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": keys.RESERVATION_NAMESPACE},
    }


def reservation_service_account() -> Json:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {
            "name": RESERVATION_SERVICE_ACCOUNT,
            "namespace": keys.RESERVATION_NAMESPACE,
        },
    }


def kai_config(namespace: str = keys.DEFAULT_KAI_NAMESPACE) -> list[Json]:
    """KAI's Config (``kai-config``) and the default SchedulingShard, as the chart
    renders them with its default values: KAI's clients read both by name."""
    version = f"{keys.KAI_CONFIG_GROUP}/{keys.KAI_CONFIG_VERSION}"
    return [
        {
            "apiVersion": version,
            "kind": "Config",
            "metadata": {"name": keys.KAI_CONFIG_NAME},
            "spec": {
                "global": {
                    "nodePoolLabelKey": keys.NODE_POOL_LABEL,
                    "schedulerName": keys.DEFAULT_SCHEDULER_NAME,
                },
                "namespace": namespace,
                # Read by KAI's clients; false switches scheduling off.
                "scheduler": {"service": {"enabled": True}},
            },
        },
        {
            "apiVersion": version,
            "kind": "SchedulingShard",
            "metadata": {"name": "default"},
            # KAI's clients read the placement strategy the shard always has in KAI.
            "spec": {
                "partitionLabelValue": "",
                "placementStrategy": {"gpu": "binpack", "cpu": "binpack"},
            },
        },
    ]


def install_objects(namespace: str = keys.DEFAULT_KAI_NAMESPACE) -> list[Json]:
    """Everything above, in the order they can be created (namespace first, queues parent
    first); ``namespace``: where kai-py's own parts run (the Config says it)."""
    return [
        reservation_namespace(),
        reservation_service_account(),
        *priority_classes(),
        *default_queues(),
        *kai_config(namespace),
    ]
