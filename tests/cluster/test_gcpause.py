"""The collector is off while a cycle computes, and on again after, as it was."""

from __future__ import annotations

import gc

import pytest

from kai_py.cluster.gcpause import paused_gc


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
    gc.collect()
    before = gc.get_count()[0]
    with paused_gc():
        made = [{"pod": i} for i in range(50_000)]
        assert gc.get_count()[0] >= before + 50_000  # no young collection ran
        del made
