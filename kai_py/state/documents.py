"""What a build reads: manifests with where each came from, and the error that
refuses an input as a whole.

A ``Document`` is one object and its source ("path#3" for a file's third document,
or the watch it came from in the operator), so every message about it can say
where to look. ``InputError`` carries every problem found at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(slots=True, frozen=True)
class Document:
    source: str  # "path" or "path#3" for the 3rd document of a file
    body: Mapping[str, Any]


class InputError(Exception):
    """The input as a whole cannot be used (exit status 2)."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems
