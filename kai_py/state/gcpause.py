"""No garbage-collector pass while a scheduling cycle runs, the wait for its writes included.

A cycle makes tens of thousands of objects (parsed Tasks, the session's state)
that live exactly as long as the cycle. With the collector on, they outlive a
couple of young collections, are promoted to the oldest generation and soon
trigger a full collection, which walks every object the cache holds: at 2,000
nodes and 70,000 pods a pause of 0.5-1.9 s in nearly every cycle
(`bench/scale.py`). Paused, those objects are freed by reference counting when
the cycle drops them, before any collection sees them; what the cache keeps is
walked only by the rare full collections its own growth causes. The pause lasts
until the cycle has returned, as its objects live on while it waits for its
binds' writes (seconds in a burst), and a collector on again then walked them all.
The rest of the process runs without the collector meanwhile: its acyclic garbage
is freed by reference counting as ever, and the rest waits for the cycle's end.

The cache's own load is the other case: a warm-up LIST of 140,000 pods makes
millions of objects that all live on, and each full collection on the way walks
all of them again (at 4,000 nodes 27 full collections, the load 1.5 times as long:
``bench/scale.py --warm-up``). ``load_then_freeze`` pauses the collector for the load, then
collects once and moves the survivors out of the collector's reach
(``gc.freeze``): later full collections walk only what was made since.
"""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager


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


@asynccontextmanager
async def load_then_freeze() -> AsyncIterator[None]:
    """The collector paused while the block loads what will live on; then one full
    collection (garbage cycles made meanwhile are freed, not frozen) and the survivors
    frozen. Frozen objects are still freed by reference counting when dropped (the
    cache's objects hold no cycles); a cycle among them that dies later is not
    collected, which is why only a load freezes, not every cycle."""
    with paused_gc():
        yield
    gc.collect()
    gc.freeze()
