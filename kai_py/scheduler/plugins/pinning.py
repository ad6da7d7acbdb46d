"""The GPU pin predicate: a pinned task runs only on nodes with a card its pin allows."""

from __future__ import annotations

from kai_py.api.keys import GPU_INVENTORY_ANNOTATION
from kai_py.scheduler.framework import Framework
from kai_py.scheduler.model import Config, Node, Task
from kai_py.scheduler.pinning import unhealthy_clause


def gpu_pin(task: Task, node: Node) -> str | None:
    pin = task.pin
    if pin is None:
        return None
    if not node.cards:
        return f"node(s) published no GPU inventory ({GPU_INVENTORY_ANNOTATION})"
    if not any(pin.allows(card) for card in node.cards):
        return f"node(s) had no GPU allowed by {pin.text}{unhealthy_clause(task, node)}"
    return None


def register(framework: Framework, config: Config) -> None:
    framework.predicates.append(("gpuPin", gpu_pin))
