"""Kubernetes duration strings ("30s", "5m", "1h30m") as KAI writes them.

KAI stores runtimes and grace periods as Go ``time.Duration`` strings, so a
manifest that works there must parse here: a sequence of number + unit, an
optional sign, and the bare ``"0"``.
"""

from __future__ import annotations

import re
from typing import Final

# Seconds per unit, as Go's time.ParseDuration knows them (both micro signs).
_UNITS: Final[dict[str, float]] = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}

_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")

# The same grammar for the CRD schema, so that the API server rejects what
# parse_duration would reject (longest units first inside the alternation).
DURATION_PATTERN: Final = r"^[-+]?(0|((\d+(\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h))+)$"

_HINT: Final = (
    'expected a number followed by a unit (ns, us, ms, s, m, h), e.g. "30s", "5m", "1h30m"'
)


def parse_duration(text: str) -> float:
    """Return the duration in seconds; raise ValueError with a readable message."""
    if not isinstance(text, str):
        raise ValueError(f"must be a duration string ({_HINT}), got {text!r}")
    body = text  # no stripping: Go's parser (and the CRD pattern) refuse spaces
    sign = 1.0
    if body and body[0] in "+-":
        sign = -1.0 if body[0] == "-" else 1.0
        body = body[1:]
    if body == "0":
        return 0.0
    if not body:
        raise ValueError(f"invalid duration {text!r}: {_HINT}")
    total = 0.0
    pos = 0
    while pos < len(body):
        match = _PART.match(body, pos)
        if match is None:
            raise ValueError(f"invalid duration {text!r}: {_HINT}")
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    return sign * total


def format_duration(seconds: float) -> str:
    """The shortest KAI-style string for a number of seconds (e.g. 5400 -> "1h30m")."""
    if seconds == 0:
        return "0s"
    sign = "-" if seconds < 0 else ""
    rest = abs(seconds)
    hours, rest = divmod(rest, 3600.0)
    minutes, rest = divmod(rest, 60.0)
    parts = []
    if hours:
        parts.append(f"{int(hours)}h")
    if minutes:
        parts.append(f"{int(minutes)}m")
    if rest:
        parts.append(f"{rest:g}s")
    return sign + "".join(parts)
