"""KAI's ``usageDBConfig`` (on a SchedulingShard or in the scheduler configuration), read.

The keys and defaults are KAI's: ``clientType``, ``connectionString``,
``connectionStringEnvVar``, ``usageParams`` (``windowSize`` 1w, ``windowType``
sliding | tumbling, ``tumblingWindowStartTime``, ``halfLifePeriod`` off,
``fetchInterval`` 1m, ``stalenessPeriod`` 5m, ``waitTimeout`` 1m,
``extraParams``). kai-py adds one client type, ``embedded`` (also what an empty
``clientType`` means): the scheduler keeps the usage itself, with no Prometheus.
A value that does not parse raises ValueError naming the field and the value.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from kai_py.api.durations import parse_duration

CLIENT_TYPES: Final = ("embedded", "prometheus")
WINDOW_TYPES: Final = ("sliding", "tumbling")
_PROM_UNITS: Final = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_PROM_UNITS["y"] = 365 * 86400.0
_PROM_DURATION: Final = re.compile(r"^((\d+)(ms|s|m|h|d|w|y))+$")
_PROM_PART: Final = re.compile(r"(\d+)(ms|s|m|h|d|w|y)")
_PARAMS: Final = frozenset(
    {
        "windowSize",
        "windowType",
        "tumblingWindowStartTime",
        "halfLifePeriod",
        "fetchInterval",
        "stalenessPeriod",
        "waitTimeout",
        "extraParams",
    }
)
_KEYS: Final = frozenset(
    {"clientType", "connectionString", "connectionStringEnvVar", "usageParams", "extraParams"}
)


@dataclass(frozen=True, slots=True)
class UsageDB:
    """Where a queue's past usage comes from, and over which window (seconds)."""

    client_type: str = "embedded"
    connection_string: str = ""
    connection_string_env_var: str = ""
    window: float = 7 * 86400.0
    window_type: str = "sliding"
    tumbling_start: float | None = None  # epoch seconds; None = when usage was first kept
    half_life: float | None = None  # None = no decay
    fetch_interval: float = 60.0
    staleness: float = 300.0
    wait_timeout: float = 60.0
    extra: Mapping[str, str] = field(default_factory=dict)


def window_duration(text: object) -> float:
    """A Prometheus duration ("1w", "2d12h", "90s") or a Go one ("1h30m"), in seconds."""
    if isinstance(text, str) and _PROM_DURATION.match(text):
        return sum(int(n) * _PROM_UNITS[u] for n, u in _PROM_PART.findall(text))
    return parse_duration(str(text))


def parse_usage_db(data: object, where: str) -> UsageDB:
    """``data``: the ``usageDBConfig`` mapping found at ``where`` (for messages)."""
    if not isinstance(data, Mapping):
        raise ValueError(f"{where}: expected a mapping, got {data!r}")
    unknown = sorted(set(data) - _KEYS)
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {', '.join(unknown)}")
    client = data.get("clientType") or "embedded"
    if client not in CLIENT_TYPES:
        raise ValueError(
            f"{where}.clientType: expected one of {', '.join(CLIENT_TYPES)}, got {client!r}"
        )
    params = data.get("usageParams") or {}
    if not isinstance(params, Mapping):
        raise ValueError(f"{where}.usageParams: expected a mapping, got {params!r}")
    unknown = sorted(set(params) - _PARAMS)
    if unknown:
        raise ValueError(f"{where}.usageParams: unknown key(s) {', '.join(unknown)}")
    values: dict[str, Any] = {"client_type": client}
    for key, attr in (
        ("connectionString", "connection_string"),
        ("connectionStringEnvVar", "connection_string_env_var"),
    ):
        if data.get(key) is not None:
            values[attr] = str(data[key])
    for key, attr in (
        ("windowSize", "window"),
        ("halfLifePeriod", "half_life"),
        ("fetchInterval", "fetch_interval"),
        ("stalenessPeriod", "staleness"),
        ("waitTimeout", "wait_timeout"),
    ):
        if params.get(key) is None:
            continue
        try:
            seconds = window_duration(params[key])
        except ValueError as exc:
            raise ValueError(f"{where}.usageParams.{key}: {exc}") from None
        if key == "halfLifePeriod" and seconds <= 0:
            values[attr] = None  # KAI: a half-life of 0 or below means no decay
            continue
        if seconds < 0 or (seconds == 0 and key in ("windowSize", "fetchInterval")):
            raise ValueError(f"{where}.usageParams.{key}: must be positive, got {params[key]!r}")
        values[attr] = seconds
    window_type = params.get("windowType") or "sliding"
    if window_type not in WINDOW_TYPES:
        raise ValueError(
            f"{where}.usageParams.windowType: expected sliding or tumbling, got {window_type!r}"
        )
    values["window_type"] = window_type
    start = params.get("tumblingWindowStartTime")
    if start is not None:
        try:
            values["tumbling_start"] = datetime.fromisoformat(
                str(start).replace("Z", "+00:00")
            ).timestamp()
        except ValueError:
            raise ValueError(
                f"{where}.usageParams.tumblingWindowStartTime: expected an RFC 3339 time, "
                f"got {start!r}"
            ) from None
    extra: dict[str, str] = {}
    # KAI reads extraParams inside usageParams; accept it beside them as well.
    for source in (data.get("extraParams"), params.get("extraParams")):
        if source is None:
            continue
        if not isinstance(source, Mapping):
            raise ValueError(f"{where}.extraParams: expected a mapping, got {source!r}")
        extra.update({str(k): str(v) for k, v in source.items()})
    values["extra"] = extra
    return UsageDB(**values)


def parse_k_value(value: object, where: str) -> float:
    """KAI's kValue: a number; below 0 is refused (KAI sets it to 0 with a log line)."""
    try:
        number = float(str(value))
    except ValueError:
        raise ValueError(f"{where}: expected a number, got {value!r}") from None
    if number < 0 or number != number:
        raise ValueError(f"{where}: must be 0 or more, got {value!r}")
    return number
