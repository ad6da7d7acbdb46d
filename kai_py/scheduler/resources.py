"""A small fixed resource vector: milli-CPU, memory bytes and GPU devices.

Kept as three floats with ``__slots__`` because the allocate loop does this
arithmetic millions of times; a dict of resource names would be several
times slower.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

EPS: Final = 1e-9
RESOURCE_NAMES: Final = ("gpu", "cpu", "memory")
INF: Final = float("inf")


class Res:
    __slots__ = ("cpu", "gpu", "memory")

    def __init__(self, cpu: float = 0.0, memory: float = 0.0, gpu: float = 0.0) -> None:
        self.cpu = cpu
        self.memory = memory
        self.gpu = gpu

    @classmethod
    def of(cls, values: dict[str, float]) -> Res:
        return cls(values.get("cpu", 0.0), values.get("memory", 0.0), values.get("gpu", 0.0))

    def copy(self) -> Res:
        return Res(self.cpu, self.memory, self.gpu)

    def __add__(self, other: Res) -> Res:
        return Res(self.cpu + other.cpu, self.memory + other.memory, self.gpu + other.gpu)

    def __sub__(self, other: Res) -> Res:
        return Res(self.cpu - other.cpu, self.memory - other.memory, self.gpu - other.gpu)

    def add(self, other: Res) -> None:
        self.cpu += other.cpu
        self.memory += other.memory
        self.gpu += other.gpu

    def sub(self, other: Res) -> None:
        self.cpu -= other.cpu
        self.memory -= other.memory
        self.gpu -= other.gpu

    def fits_in(self, other: Res) -> bool:
        return (
            self.cpu <= other.cpu + EPS
            and self.memory <= other.memory + EPS
            and self.gpu <= other.gpu + EPS
        )

    def get(self, name: str) -> float:
        value: float = getattr(self, name)
        return value

    def items(self) -> Iterator[tuple[str, float]]:
        yield "gpu", self.gpu
        yield "cpu", self.cpu
        yield "memory", self.memory

    def as_dict(self) -> dict[str, float]:
        return {"gpu": self.gpu, "cpu": self.cpu, "memory": self.memory}

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Res):
            return NotImplemented
        return (
            abs(self.cpu - other.cpu) <= EPS
            and abs(self.memory - other.memory) <= EPS
            and abs(self.gpu - other.gpu) <= EPS
        )

    def __hash__(self) -> int:
        return hash((round(self.cpu, 6), round(self.memory, 3), round(self.gpu, 6)))

    def __repr__(self) -> str:
        return f"Res(cpu={self.cpu:g}m, memory={self.memory:g}, gpu={self.gpu:g})"


def format_quantity(name: str, value: float) -> str:
    """Human units for messages: GPUs as devices, CPU in cores, memory in GB."""
    if value == INF:
        return "unlimited"
    if name == "gpu":
        return f"{value:g} GPU" if abs(value - 1) <= EPS else f"{value:g} GPUs"
    if name == "cpu":
        return f"{value / 1000:g} CPU"
    return f"{value / 1e9:g} GB"
