"""Min and median of a bench's runs: numbers in ``--json``, "0.058 / 0.059" in text.

Shared by the benches, so that machines read ``{"min": ..., "median": ...}`` while the
text lines print the pair as before (``str`` and f-strings of a ``MinMedian``).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable


class MinMedian(dict[str, float]):
    """``{"min": ..., "median": ...}`` (a dict, so ``json.dumps`` writes numbers)."""

    def __init__(self, values: Iterable[float], digits: int = 3) -> None:
        seen = list(values)
        super().__init__(min=min(seen), median=statistics.median(seen))
        self.digits = digits

    def __str__(self) -> str:
        return f"{self['min']:.{self.digits}f} / {self['median']:.{self.digits}f}"

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)
