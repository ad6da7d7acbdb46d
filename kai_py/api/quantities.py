"""Kubernetes resource quantities ("500m", "2Gi", "1.5") and KAI's status maps.

KAI reports queue and pod-group usage as ``resource.Quantity`` maps whose
values are in KAI units: GPUs in devices, CPU in millicores, memory in MB
(10^6 bytes). The CRD types them as int-or-string, so kai-py writes
fractional values as strings ("1.5") and whole ones as integers.
"""

from __future__ import annotations

import math
import re
from typing import Final, NamedTuple

from kai_py.api import keys

# The API server's own grammar for a quantity (apimachinery resource.Quantity).
QUANTITY_PATTERN: Final = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]"
    r"|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
_QUANTITY = re.compile(
    r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"((?:[KMGTPE]i)|[numkMGTPE]|(?:[eE][+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)))?$"
)

_SUFFIX: Final[dict[str, float]] = {
    "": 1.0,
    "n": 1e-9,
    "u": 1e-6,
    "m": 1e-3,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "E": 1e18,
    "Ki": 2.0**10,
    "Mi": 2.0**20,
    "Gi": 2.0**30,
    "Ti": 2.0**40,
    "Pi": 2.0**50,
    "Ei": 2.0**60,
}


def parse_quantity(value: str | int | float) -> float:
    """A quantity as a plain number in base units ("500m" -> 0.5, "1Ki" -> 1024)."""
    if isinstance(value, bool):
        raise ValueError(f'must be a quantity such as 1, "500m" or "2Gi", got {value!r}')
    if isinstance(value, int | float):
        return float(value)
    # No stripping: the API server's grammar has no spaces either.
    match = _QUANTITY.match(value) if isinstance(value, str) else None
    if match is None:
        raise ValueError(f'must be a quantity such as 1, "500m" or "2Gi", got {value!r}')
    number, suffix = match.group(1), match.group(2) or ""
    if suffix in _SUFFIX:  # "E" and "Ei" are exa and exbi, not exponents
        return float(number) * _SUFFIX[suffix]
    # An exponent; the API server's grammar allows a fractional one ("1e.5").
    return float(number) * math.pow(10.0, float(suffix[1:]))


def format_quantity(value: float) -> int | str:
    """An int-or-string value for a status map: integers stay integers, fractions are strings.

    Fractions below a million keep 6 significant digits; one that rounds to a whole
    number ("274878" for 274877.9 MB) is written as that integer, so what is read
    back formats the same way again (a status compared with what it would be written
    as is equal when nothing changed).
    """
    if float(value).is_integer():
        return int(value)
    if abs(value) >= 1e6:
        return repr(float(value))
    text = f"{value:.6g}"
    rounded = float(text)
    return int(rounded) if rounded.is_integer() else text


class ResourceAmounts(NamedTuple):
    """One figure per KAI resource: GPUs in devices, CPU in millicores, memory in MB."""

    gpu: float = 0.0
    cpu: float = 0.0
    memory: float = 0.0


def to_resource_map(amounts: ResourceAmounts) -> dict[str, int | str]:
    """The status map KAI writes: ``nvidia.com/gpu``, ``cpu`` and ``memory`` keys."""
    return {
        keys.GPU_RESOURCE: format_quantity(amounts.gpu),
        keys.CPU_RESOURCE: format_quantity(amounts.cpu),
        keys.MEMORY_RESOURCE: format_quantity(amounts.memory),
    }


def from_resource_map(values: dict[str, int | str] | None) -> ResourceAmounts:
    """Read a status map back; missing keys are zero (KAI omits empty resources)."""
    values = values or {}

    def get(key: str) -> float:
        raw = values.get(key)
        return 0.0 if raw is None else parse_quantity(raw)

    return ResourceAmounts(
        gpu=get(keys.GPU_RESOURCE), cpu=get(keys.CPU_RESOURCE), memory=get(keys.MEMORY_RESOURCE)
    )
