"""The event loop of the long-running processes (the operator, ``kai-py dev``).

uvloop (libuv under asyncio's interface) is used where it is installed: the operator
spends much of its CPU in the loop itself (callbacks, futures, socket reads for
thousands of API requests and watch events), and on the emulated cluster a burst of
4,000 pods cost the operator 4 to 18 % less CPU with it (bench/e2e.py). Everything
else is the same asyncio code; uvloop has no Windows build, where asyncio's own loop
runs.

``KAI_PY_EVENT_LOOP`` chooses: ``auto`` (the default: uvloop when importable),
``uvloop`` (required: an error when missing) or ``asyncio`` (the standard loop, to
rule the loop out when chasing a problem).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from typing import Any, Final, TypeVar

from kai_py.api import collector

ENV: Final = "KAI_PY_EVENT_LOOP"
CHOICES: Final = ("auto", "uvloop", "asyncio")

T = TypeVar("T")
LoopFactory = Callable[[], asyncio.AbstractEventLoop]


def loop_factory(choice: str | None = None) -> LoopFactory | None:
    """The loop to run on (None: asyncio's default). ``choice`` defaults to the
    environment's; a value outside ``CHOICES`` raises ValueError naming it."""
    if choice is None:
        choice = os.environ.get(ENV, "auto").strip().lower() or "auto"
    if choice not in CHOICES:
        raise ValueError(f"{ENV}={choice!r}: expected one of {', '.join(CHOICES)}")
    if choice == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            raise ValueError(f"{ENV}=uvloop: uvloop is not installed") from None
        return None
    factory: LoopFactory = uvloop.new_event_loop
    return factory


def name(factory: LoopFactory | None) -> str:
    """What ``loop_factory()``'s answer runs, for logs and benchmark output."""
    return "asyncio" if factory is None else "uvloop"


def run(main: Coroutine[Any, Any, T], factory: LoopFactory | None) -> T:
    """``asyncio.run(main)`` on the loop ``factory`` makes (``loop_factory()``'s answer,
    asked before anything starts so that a bad setting stops nothing half-way), with
    the collector paced for a long-running process (``collector.tune``)."""
    collector.tune()
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)
