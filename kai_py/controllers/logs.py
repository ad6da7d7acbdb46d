"""Logging for the kai-py processes, through structlog.

- Format: JSON (one object a line, for log collectors) or readable text.
  ``KAI_PY_LOG_FORMAT=json|text`` decides; without it, JSON inside a pod
  (``KUBERNETES_SERVICE_HOST`` is set) and text elsewhere.
- Every standard-library record (kai-py's modules, Kopf, aiohttp) goes
  through the same renderer, so a line is JSON or text whoever wrote it.
- The object a line is about is a field: Kopf's per-object loggers carry a
  reference that becomes ``pod``, ``podgroup``, ``queue``, ``node`` or
  ``bindrequest`` (``namespace/name``); kai-py's own lines pass the same
  fields with ``extra={"pod": ...}``, and ``namespace`` is added from them.
- kai-py's own lines are an event name that is the same for every line of a
  kind (``cycle``, ``cache loaded``, ``created reservation pod``) with the
  figures as fields (``extra={"binds": 3}``: numbers stay numbers). Kopf's
  per-object warnings are also posted as Events, so they keep a sentence.
- Kopf's "Handler 'x' succeeded." line for a handler that posts no Event (one
  per admission webhook call: three per pod) is DEBUG, not INFO.
- The same warning or error repeated (a failing API call every cycle) is
  logged once per ``REPEAT_WINDOW`` seconds, with the count of lines held back.
- No line per liveness probe or metrics scrape (aiohttp's access log only
  in ``--verbose``).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import MutableMapping
from typing import Any, Final, TextIO

import structlog

#: Fields that name the object a line is about.
OBJECT_FIELDS: Final = ("pod", "podgroup", "queue", "node", "bindrequest")
_KIND_FIELD: Final = {
    "Pod": "pod",
    "PodGroup": "podgroup",
    "Queue": "queue",
    "Node": "node",
    "BindRequest": "bindrequest",
}
#: A repeated warning is logged again at most this often (seconds).
REPEAT_WINDOW: Final = 60.0


def log_format(env: MutableMapping[str, str] | None = None) -> str:
    """``json`` or ``text``: the variable if set, else JSON in a pod and text elsewhere."""
    env = os.environ if env is None else env
    chosen = (env.get("KAI_PY_LOG_FORMAT") or "").strip().lower()
    if chosen in ("json", "text"):
        return chosen
    return "json" if env.get("KUBERNETES_SERVICE_HOST") else "text"


def _object_fields(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """Kopf's ``k8s_ref`` (on records of its per-object loggers) -> ``pod=ns/name`` & co."""
    record = event.get("_record")
    ref = getattr(record, "k8s_ref", None) if record is not None else None
    if isinstance(ref, dict) and ref.get("name"):
        field = _KIND_FIELD.get(str(ref.get("kind")), "object")
        ns = ref.get("namespace")
        event.setdefault(field, f"{ns}/{ref['name']}" if ns else str(ref["name"]))
    if "namespace" not in event:
        for field in _NAMESPACED:
            value = event.get(field)
            if isinstance(value, str) and "/" in value:
                event["namespace"] = value.split("/", 1)[0]
                break
    for noise in ("k8s_ref", "k8s_skip", "settings"):
        event.pop(noise, None)
    return event


#: The object fields whose ``namespace/name`` gives the line's ``namespace``.
_NAMESPACED: Final = ("pod", "podgroup", "bindrequest")
#: What every LogRecord has (and what Kopf adds to each of its lines, its settings
#: included): the rest of a record's attributes are the line's own fields.
_RECORD_ATTRS: Final = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {
    "message",
    "asctime",
    "repeated",
    "settings",
    "k8s_skip",
}


def _own_fields(record: logging.LogRecord) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, repr(v)) for k, v in record.__dict__.items() if k not in _RECORD_ATTRS))


class KopfSuccessToDebug(logging.Filter):
    """Kopf's "Handler 'x' succeeded." of a handler whose lines post no Event (admission
    webhooks, watch-event handlers) becomes a DEBUG line: shown with ``--verbose`` only."""

    def __init__(self, verbose: bool) -> None:
        super().__init__()
        self.verbose = verbose

    def filter(self, record: logging.LogRecord) -> bool:
        if (
            record.levelno != logging.INFO
            or not getattr(record, "k8s_skip", False)
            or not record.name.startswith("kopf")
        ):
            return True
        text = str(record.msg)
        if not (text.startswith("Handler '") and text.endswith("' succeeded.")):
            return True
        if not self.verbose:
            return False
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return True


class RepeatFilter(logging.Filter):
    """Lets the same warning through once per ``window`` seconds; counts the rest."""

    def __init__(self, window: float = REPEAT_WINDOW, clock: Any = time.monotonic) -> None:
        super().__init__()
        self.window = window
        self.clock = clock
        self._lock = threading.Lock()
        self._seen: dict[tuple[str, int, str, tuple[tuple[str, str], ...]], tuple[float, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        # The event name is the same for every line of a kind: its fields tell them apart.
        key = (record.name, record.levelno, record.getMessage(), _own_fields(record))
        now = self.clock()
        with self._lock:
            last = self._seen.get(key)
            if last is not None and now - last[0] < self.window:
                self._seen[key] = (last[0], last[1] + 1)
                return False
            held_back = last[1] if last is not None else 0
            self._seen[key] = (now, 0)
            if len(self._seen) > 4096:  # a bound: old keys go first
                for old in sorted(self._seen, key=lambda k: self._seen[k][0])[:2048]:
                    del self._seen[old]
        if held_back:
            record.repeated = held_back
        return True


def configure(verbose: bool = False, fmt: str | None = None, stream: TextIO | None = None) -> str:
    """Route all logging through structlog's renderer; returns the format used."""
    chosen = fmt or log_format()
    out = stream or sys.stderr
    shared: list[Any] = [
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.stdlib.ExtraAdder(),
        _object_fields,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: Any
    if chosen == "json":
        renderer = structlog.processors.JSONRenderer()
        shared.append(structlog.processors.format_exc_info)
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=out.isatty())
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
    )
    handler = logging.StreamHandler(out)
    handler.setFormatter(formatter)
    handler.addFilter(KopfSuccessToDebug(verbose))
    handler.addFilter(RepeatFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    # One line per liveness probe, webhook call or scrape is noise, not news.
    logging.getLogger("aiohttp.access").setLevel(logging.INFO if verbose else logging.WARNING)
    logging.getLogger("asyncio").setLevel(logging.INFO if verbose else logging.WARNING)
    structlog.configure(
        processors=[*shared[:2], structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    return chosen
