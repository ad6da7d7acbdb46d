"""The long-running processes' event loop: uvloop where installed, KAI_PY_EVENT_LOOP chooses."""

from __future__ import annotations

import asyncio
import gc
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kai_py.api import collector, eventloop

uvloop = pytest.importorskip("uvloop")  # a dependency wherever uvloop builds (not Windows)

REPO = Path(__file__).resolve().parents[2]


async def _loop_type() -> type:
    await asyncio.sleep(0)
    return type(asyncio.get_running_loop())


def test_auto_runs_on_uvloop_and_asyncio_on_the_standard_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(eventloop.ENV, raising=False)
    assert eventloop.run(_loop_type(), eventloop.loop_factory()) is uvloop.Loop
    monkeypatch.setenv(eventloop.ENV, "asyncio")
    assert eventloop.loop_factory() is None
    ran_on = eventloop.run(_loop_type(), eventloop.loop_factory())
    assert not issubclass(ran_on, uvloop.Loop)
    assert issubclass(ran_on, asyncio.BaseEventLoop)
    assert eventloop.name(eventloop.loop_factory()) == "asyncio"
    monkeypatch.setenv(eventloop.ENV, " UVLOOP ")  # as a person types it
    assert eventloop.loop_factory() is uvloop.new_event_loop
    assert eventloop.name(eventloop.loop_factory()) == "uvloop"


def test_a_bad_choice_names_the_variable_and_the_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(eventloop.ENV, "tokio")
    with pytest.raises(ValueError, match=r"KAI_PY_EVENT_LOOP='tokio': expected one of auto"):
        eventloop.loop_factory()


def test_without_uvloop_auto_falls_back_and_uvloop_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import fails as if not installed
    assert eventloop.loop_factory("auto") is None
    with pytest.raises(ValueError, match="uvloop is not installed"):
        eventloop.loop_factory("uvloop")


@pytest.mark.parametrize(
    ("command", "message"),
    [
        (["run"], "kai-py run: error: KAI_PY_EVENT_LOOP='bogus'"),
        (["dev", "--no-operator", "--port", "0"], "kai-py dev: KAI_PY_EVENT_LOOP='bogus'"),
    ],
)
def test_the_commands_refuse_a_bad_choice_before_starting(command: list[str], message: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "kai_py.cli", *command],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env={**os.environ, eventloop.ENV: "bogus"},
    )
    assert done.returncode == 2, done.stderr
    assert message in done.stderr


def test_a_long_running_loop_paces_the_collector_for_its_young_objects() -> None:
    """The young generation's threshold is raised; the older ones' are left as they were."""
    before = gc.get_threshold()
    gc.set_threshold(700, 7, 9)
    try:
        eventloop.run(asyncio.sleep(0), eventloop.loop_factory())
        assert gc.get_threshold() == (collector.YOUNG_THRESHOLD, 7, 9)
        assert collector.YOUNG_THRESHOLD > 700
    finally:
        gc.set_threshold(*before)
