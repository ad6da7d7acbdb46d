"""No garbage-collector pass while a scheduling cycle computes.

A cycle makes tens of thousands of objects (parsed Tasks, the session's state)
that live exactly as long as the cycle. With the collector on, they outlive a
couple of young collections, are promoted to the oldest generation and soon
trigger a full collection, which walks every object the cache holds: at 2,000
nodes and 70,000 pods a pause of 0.5-1.9 s in nearly every cycle
(`bench/scale.py`). Paused, those objects are freed by reference counting when
the cycle drops them, before any collection sees them; what the cache keeps is
walked only by the rare full collections its own growth causes.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused_gc() -> Iterator[None]:
    """The collector off for the block (it is process-wide); on again after, as it was."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()
