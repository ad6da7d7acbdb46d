"""Kubernetes resource quantities ("500m", "80Gi", "1e3") as exact numbers.

The kubelet compares requests with allocatable in the same integer units a
real one uses in its rejection messages: milli-CPU for ``cpu``, bytes for
memory and everything else. Fractions are kept exact (``Fraction``) until
the final rounding so that "0.1" + "0.2" CPU is 300m, not 300.0000001m.
"""

from __future__ import annotations

import functools
import math
import re
from fractions import Fraction

_SUFFIXES: dict[str, Fraction] = {
    "": Fraction(1),
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
}

_QUANTITY = re.compile(
    r"^(?P<sign>[+-]?)(?P<num>\d+(?:\.\d*)?|\.\d+)"
    r"(?:(?P<exp>[eE][+-]?\d+)|(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)$"
)


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity."""


def parse_quantity(value: str | int | float) -> Fraction:
    """The exact value of a quantity, in base units (cores, bytes, devices)."""
    if isinstance(value, bool):
        raise QuantityError(f"not a quantity: {value!r}")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        return Fraction(str(value))
    if not isinstance(value, str):
        raise QuantityError(f"not a quantity: {value!r}")
    return _parse_text(value)


@functools.lru_cache(maxsize=4096)  # a cluster uses few distinct strings, parsed per pod
def _parse_text(value: str) -> Fraction:
    match = _QUANTITY.match(value.strip())
    if match is None:
        raise QuantityError(f"not a quantity: {value!r}")
    number = Fraction(match["num"])
    if match["exp"]:
        number *= Fraction(10) ** int(match["exp"][1:])
    else:
        number *= _SUFFIXES[match["suffix"] or ""]
    return -number if match["sign"] == "-" else number


def to_int_units(resource: str, value: Fraction) -> int:
    """Round up to the unit the kubelet counts in: milli-cores for cpu, else 1.

    Rounding up matches the API server, which stores "0.5m" CPU as "1m".
    """
    scaled = value * 1000 if resource == "cpu" else value
    return math.ceil(scaled)


def format_quantity(resource: str, units: int) -> str:
    """The canonical string of an amount in kubelet units ("1500m", "8")."""
    if resource == "cpu":
        return str(units // 1000) if units % 1000 == 0 else f"{units}m"
    return str(units)
