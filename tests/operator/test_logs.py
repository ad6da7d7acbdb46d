"""Logging: JSON or text through structlog, object fields, repeats held back."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from kai_py.controllers import logs


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield stream
    root.handlers[:] = handlers
    root.setLevel(level)


def test_the_format_follows_the_variable_then_the_place() -> None:
    assert logs.log_format({"KAI_PY_LOG_FORMAT": "text", "KUBERNETES_SERVICE_HOST": "x"}) == "text"
    assert logs.log_format({"KUBERNETES_SERVICE_HOST": "10.0.0.1"}) == "json"
    assert logs.log_format({}) == "text"


def test_json_lines_name_the_object_of_kopfs_per_object_loggers(captured: io.StringIO) -> None:
    logs.configure(fmt="json", stream=captured)
    ref = {"kind": "Pod", "name": "train-0", "namespace": "team-a", "apiVersion": "v1"}
    # Not "... succeeded.": the scheduling module, once imported, drops those lines.
    line = "Handler 'bind' failed temporarily."
    logging.getLogger("kopf.objects").info(line, extra={"k8s_ref": ref})
    logging.getLogger("kai_py.binder").warning("no card", extra={"node": "gpu-1"})
    first, second = (json.loads(line) for line in captured.getvalue().splitlines())
    assert first["pod"] == "team-a/train-0"
    assert first["event"] == line
    assert first["level"] == "info" and first["logger"] == "kopf.objects"
    assert "k8s_ref" not in first
    assert second["node"] == "gpu-1" and second["level"] == "warning"


def test_text_lines_are_readable(captured: io.StringIO) -> None:
    logs.configure(fmt="text", stream=captured)
    logging.getLogger("kai_py.scheduling").info("cache warm", extra={"queue": "team-a"})
    line = captured.getvalue().strip()
    assert "cache warm" in line and "queue=team-a" in line and not line.startswith("{")


def test_the_same_failure_every_second_is_logged_once_per_window() -> None:
    now = [0.0]
    repeat = logs.RepeatFilter(window=60, clock=lambda: now[0])

    def record(message: str, level: int = logging.WARNING) -> logging.LogRecord:
        return logging.LogRecord("kai_py.x", level, __file__, 1, message, None, None)

    passed = []
    for second in range(120):
        now[0] = float(second)
        r = record("cannot list pods: 503")
        if repeat.filter(r):
            passed.append((second, getattr(r, "repeated", 0)))
    assert passed == [(0, 0), (60, 59)]
    assert repeat.filter(record("another failure"))
    assert all(repeat.filter(record("progress", logging.INFO)) for _ in range(3))


def test_no_line_per_liveness_probe(captured: io.StringIO) -> None:
    logs.configure(fmt="text", stream=captured)
    logging.getLogger("aiohttp.access").info('127.0.0.1 "GET /healthz HTTP/1.1" 200')
    assert captured.getvalue() == ""


def test_kopfs_success_line_per_webhook_call_is_debug(captured: io.StringIO) -> None:
    """An admission webhook's handler posts no Event (Kopf marks its lines k8s_skip):
    its "succeeded." line, three per pod created, is shown with --verbose only."""
    ref = {"kind": "Pod", "name": "train-0", "namespace": "team-a"}
    kopf_log = logging.getLogger("kopf.objects")
    for verbose in (False, True):
        captured.seek(0)
        captured.truncate()
        logs.configure(verbose=verbose, fmt="json", stream=captured)
        kopf_log.info(
            "Handler 'pods-validate' succeeded.", extra={"k8s_ref": ref, "k8s_skip": True}
        )
        # A handler whose lines are posted as Events keeps its INFO line.
        kopf_log.info("Handler 'on-create' succeeded.", extra={"k8s_ref": ref, "k8s_skip": False})
        lines = [json.loads(line) for line in captured.getvalue().splitlines()]
        got = [(line["event"], line["level"]) for line in lines]
        webhook = [("Handler 'pods-validate' succeeded.", "debug")] if verbose else []
        assert got == [*webhook, ("Handler 'on-create' succeeded.", "info")]


def test_a_namespaced_objects_line_has_its_namespace(captured: io.StringIO) -> None:
    logs.configure(fmt="json", stream=captured)
    logging.getLogger("kai_py.binder").info("created reservation pod", extra={"pod": "ns-1/r-0"})
    logging.getLogger("kai_py.binder").info("node line", extra={"node": "gpu-1"})
    first, second = (json.loads(line) for line in captured.getvalue().splitlines())
    assert first["namespace"] == "ns-1" and first["pod"] == "ns-1/r-0"
    assert "namespace" not in second


def test_one_event_name_for_other_objects_is_not_held_back_as_a_repeat() -> None:
    repeat = logs.RepeatFilter(window=60, clock=lambda: 0.0)

    def record(pod: str) -> logging.LogRecord:
        rec = logging.LogRecord("kai_py.x", logging.WARNING, __file__, 1, "bind failed", None, None)
        rec.pod = pod
        return rec

    assert [repeat.filter(record(p)) for p in ("a/1", "a/2", "a/1")] == [True, True, False]
