"""``kai-py reserve``: the program inside a GPU reservation pod.

The NVIDIA device plugin gives the reservation pod one whole card and tells
the container which in ``NVIDIA_VISIBLE_DEVICES``. The program writes that
UUID into its own pod's ``run.ai/reserve_for_gpu_index`` annotation, where the
binder waits for it, and then holds the card until the pod is deleted.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Mapping

from kai_py.api import keys
from kai_py.apiclient.kube import Kube, KubeError, load_api_client, path_of


class ReserveError(Exception):
    pass


def card_of(env: Mapping[str, str]) -> str:
    """The one card the device plugin handed this container."""
    devices = [d for d in (env.get("NVIDIA_VISIBLE_DEVICES") or "").split(",") if d.strip()]
    if not devices or devices[0] in ("all", "none", "void"):
        raise ReserveError(
            "NVIDIA_VISIBLE_DEVICES does not name a card; a reservation pod must request "
            f"{keys.GPU_RESOURCE}: 1 so that the NVIDIA device plugin gives it one"
        )
    if len(devices) > 1:
        raise ReserveError(
            f"NVIDIA_VISIBLE_DEVICES names {len(devices)} cards; a reservation pod holds one"
        )
    return devices[0].strip()


def announce(kube: Kube, namespace: str, name: str, card: str) -> None:
    path = path_of("", "v1", "pods", namespace, name)
    kube.patch(path, {"metadata": {"annotations": {keys.RESERVED_GPU_INDEX_ANNOTATION: card}}})


def run_reserve(kubeconfig: str | None = None, wait: bool = True) -> int:
    env = os.environ
    name, namespace = env.get("POD_NAME"), env.get("POD_NAMESPACE")
    if not name or not namespace:
        print(
            "kai-py reserve: POD_NAME and POD_NAMESPACE must be set (downward API)", file=sys.stderr
        )
        return 2
    try:
        card = card_of(env)
        announce(Kube(load_api_client(kubeconfig)), namespace, name, card)
    except ReserveError as exc:
        print(f"kai-py reserve: {exc}", file=sys.stderr)
        return 2
    except KubeError as exc:
        print(f"kai-py reserve: cannot annotate pod {namespace}/{name}: {exc}", file=sys.stderr)
        return 1
    print(f"kai-py reserve: pod {namespace}/{name} holds GPU {card}", flush=True)
    if wait:
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        with contextlib.suppress(KeyboardInterrupt):
            stop.wait()
    return 0
