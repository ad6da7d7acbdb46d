"""Node order: binpack (fullest node that fits) or spread (emptiest).

The order itself lives in ``placement.Placer``, which keeps nodes indexed by
free GPUs so that either order picks in O(buckets); this plugin chooses it.
"""

from __future__ import annotations

from kai_py.scheduler.framework import Framework
from kai_py.scheduler.model import Config


def register(framework: Framework, config: Config) -> None:
    if config.placement not in ("binpack", "spread"):
        raise ValueError(f"placement must be binpack or spread, got {config.placement!r}")
    framework.placement = config.placement
    card = config.card_placement or config.placement
    if card not in ("binpack", "spread"):
        raise ValueError(f"card placement must be binpack or spread, got {card!r}")
    framework.card_placement = card
