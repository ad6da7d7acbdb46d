"""``kai-py node-agent``: publish a node's GPUs for pinning (a DaemonSet on GPU nodes).

It reads every card through NVML (NVIDIA's ``nvidia-ml-py`` binding): index,
UUID, product name, memory and health, and writes them to its Node in the
``kai.scheduler/gpu-inventory`` annotation (``kai_py.gpu.inventory``
describes the JSON), again whenever they change. The scheduler uses it to
place pinned pods, and for the memory of ``gpu-memory`` shares where GPU
Feature Discovery's ``nvidia.com/gpu.memory`` label is missing.

Where NVML cannot be loaded or started (no driver, not a GPU node) the agent
says so and exits 1: it never publishes cards it did not read. Where HAMi
registered the node's cards (``hami.io/node-nvidia-register``), a difference
from what NVML reports is logged, since HAMi's view is then stale.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import sys
import threading
from typing import Any

from kai_py.api import keys
from kai_py.apiclient.kube import Kube, KubeError, load_api_client, path_of
from kai_py.gpu import inventory
from kai_py.scheduler.model import Card

log = logging.getLogger(__name__)

SOURCE = "nvml"


class NvmlUnavailable(Exception):
    """NVML cannot be used on this machine."""


def load_nvml() -> Any:
    """The started NVML binding, or NvmlUnavailable saying why not."""
    try:
        import pynvml
    except ImportError as exc:  # pragma: no cover - a dependency of kai-py
        raise NvmlUnavailable(f"the nvidia-ml-py package is not installed ({exc})") from None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise NvmlUnavailable(f"NVML could not start: {exc}") from None
    return pynvml


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def read_cards(nvml: Any) -> list[Card]:
    """Every card NVML reports; a card NVML cannot query fully is listed Unhealthy."""
    cards = []
    for index in range(int(nvml.nvmlDeviceGetCount())):
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        uuid = _text(nvml.nvmlDeviceGetUUID(handle))
        try:
            product = _text(nvml.nvmlDeviceGetName(handle))
            memory = float(nvml.nvmlDeviceGetMemoryInfo(handle).total) / 2**20
            healthy = True
        except nvml.NVMLError as exc:
            log.warning(
                "GPU cannot be queried, listed Unhealthy",
                extra={"index": index, "card": uuid, "error": str(exc)},
            )
            product, memory, healthy = "", 0.0, False
        cards.append(Card(index, uuid, product, int(memory), healthy))
    return cards


def publish(kube: Kube, node: str, cards: list[Card]) -> bool:
    """Write the inventory on the Node when it differs; True if written."""
    path = path_of("", "v1", "nodes", None, node)
    current = kube.get(path)
    annotations = (current.get("metadata") or {}).get("annotations") or {}
    wanted = inventory.inventory_json(cards, SOURCE)
    hami = annotations.get(keys.HAMI_NODE_REGISTER_ANNOTATION)
    if hami:
        try:
            theirs = {c.uuid for c in inventory.parse_hami_register(str(hami))}
        except inventory.InventoryError as exc:
            log.warning(
                "HAMi's registration cannot be read", extra={"node": node, "error": str(exc)}
            )
        else:
            ours = {c.uuid for c in cards}
            if theirs != ours:
                log.warning(
                    "HAMi and NVML list other cards; kai-py uses NVML's",
                    extra={"node": node, "hami_cards": sorted(theirs), "nvml_cards": sorted(ours)},
                )
    if annotations.get(keys.GPU_INVENTORY_ANNOTATION) == wanted:
        return False
    kube.patch(path, {"metadata": {"annotations": {keys.GPU_INVENTORY_ANNOTATION: wanted}}})
    return True


def run_node_agent(
    node: str | None,
    kubeconfig: str | None = None,
    interval: float = 60.0,
    once: bool = False,
    nvml: Any = None,
) -> int:
    if not node:
        print("kai-py node-agent: give --node or set NODE_NAME (downward API)", file=sys.stderr)
        return 2
    try:
        nvml = nvml if nvml is not None else load_nvml()
        cards = read_cards(nvml)
    except NvmlUnavailable as exc:
        print(
            f"kai-py node-agent: no GPU inventory for node {node}: {exc}. "
            "Run it only on nodes with the NVIDIA driver.",
            file=sys.stderr,
        )
        return 1
    kube = Kube(load_api_client(kubeconfig))
    stop = threading.Event()
    if not once:
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
    while True:
        try:
            if publish(kube, node, cards):
                print(f"kai-py node-agent: node {node}: published {len(cards)} GPU(s)", flush=True)
        except KubeError as exc:
            print(f"kai-py node-agent: cannot annotate node {node}: {exc}", file=sys.stderr)
            if once:
                return 1
        if once:
            return 0
        with contextlib.suppress(KeyboardInterrupt):
            if stop.wait(interval):
                return 0
        cards = read_cards(nvml)
