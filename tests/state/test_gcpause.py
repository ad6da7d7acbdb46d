"""The collector is off while a cycle computes, and on again after, as it was; what a load
keeps is frozen, the garbage it made is not."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Iterator

import pytest

from kai_py.state.gcpause import load_then_freeze, paused_gc


def test_the_collector_is_off_inside_and_back_on_after_even_on_an_error() -> None:
    assert gc.isenabled()
    with paused_gc():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(RuntimeError), paused_gc():
        raise RuntimeError("a failing cycle")
    assert gc.isenabled()


def test_a_collector_turned_off_by_someone_else_stays_off() -> None:
    gc.disable()
    try:
        with paused_gc():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_no_collection_runs_inside_the_block() -> None:
    """What the block makes and drops is freed by reference counting, never walked."""
    runs: list[int] = []

    def seen(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            runs.append(info["generation"])

    gc.callbacks.append(seen)
    try:
        with paused_gc():
            for _ in range(20):  # many times the young generation's threshold
                made = [{"pod": i} for i in range(50_000)]
                del made
        assert runs == []
        [{"pod": i} for i in range(50_000)]  # the same outside: the collector runs
        assert runs != []
    finally:
        gc.callbacks.remove(seen)


class _Node:
    """A cyclic object (a plain dict cannot be weakly referenced)."""

    def __init__(self) -> None:
        self.me = self


@pytest.fixture
def unfrozen() -> Iterator[None]:
    gc.collect()
    gc.unfreeze()  # nothing frozen by an earlier test
    yield
    gc.unfreeze()  # the rest of the session collects as usual


@pytest.mark.usefixtures("unfrozen")
def test_a_load_keeps_its_survivors_out_of_later_collections_and_frees_its_garbage() -> None:
    kept: list[_Node] = []

    async def load() -> weakref.ref[_Node]:
        async with load_then_freeze():
            assert not gc.isenabled()  # no collection walks the load while it grows
            kept.extend(_Node() for _ in range(20_000))
            garbage = _Node()  # a cycle the load made and dropped
            dropped = weakref.ref(garbage)
            del garbage
            await asyncio.sleep(0)
            assert dropped() is not None  # nothing collected it yet
        return dropped

    dropped = asyncio.run(load())
    assert gc.isenabled()
    assert dropped() is None  # collected before the freeze, not frozen for good
    assert gc.get_freeze_count() >= 20_000  # the survivors are out of the collector's reach
    assert all(tracked is not kept[0] for tracked in gc.get_objects())  # not in a generation


@pytest.mark.usefixtures("unfrozen")
def test_a_failed_load_freezes_nothing_and_turns_the_collector_back_on() -> None:
    async def load() -> None:
        async with load_then_freeze():
            raise RuntimeError("the LIST failed")

    with pytest.raises(RuntimeError):
        asyncio.run(load())
    assert gc.isenabled()
    assert gc.get_freeze_count() == 0
