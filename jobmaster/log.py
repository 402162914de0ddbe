"""Logging setup: one line per event, as text for people or JSON for shippers.

Every line carries the pid, and the child index, jid, job and queue when the
call passes them (``extra={"jid": ..., "job": ...}``) or the process has
them (``set_process_fields(child=2)`` after a fork). Per-job lines also pass
``event`` (``job.start``, ``job.done``...), ``duration_ms`` and ``error``:
JSON shows them as fields for log shippers to filter on; text leaves them
out, since its message already says them in words ("done in 3.1 ms").
"""

from __future__ import annotations

import contextlib
import datetime
import json
import logging
import os
import sys
from collections.abc import Iterator, Mapping
from typing import Any

CONTEXT_FIELDS = ("child", "jid", "job", "queue")
EVENT_FIELDS = ("event", "duration_ms", "error")  # JSON only
_process_fields: dict[str, Any] = {}


def set_process_fields(**fields: Any) -> None:
    """Fields added to every line of this process (e.g. its child index)."""
    _process_fields.update(fields)


_second: tuple[int, str] = (-1, "")  # the last second formatted, and its text


def _timestamp(record: logging.LogRecord) -> str:
    """``2026-11-30T01:02:03.456Z``. The part up to the second is formatted once
    a second: a worker logs two lines a job, and a datetime per line was a
    tenth of what a line costs."""
    global _second
    second, millis = int(record.created), int(record.msecs)  # as logging's own %(msecs)
    cached, text = _second
    if cached != second:
        moment = datetime.datetime.fromtimestamp(second, tz=datetime.timezone.utc)
        text = moment.strftime("%Y-%m-%dT%H:%M:%S")
        _second = (second, text)  # one tuple: threads see the old pair or the new
    return f"{text}.{millis:03d}Z"


def _context(record: logging.LogRecord, fields: tuple[str, ...] = CONTEXT_FIELDS) -> dict[str, Any]:
    values = dict(_process_fields)
    for field in fields:
        value = getattr(record, field, None)
        if value is not None:
            values[field] = value
    return values


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        context = " ".join(f"{k}={v}" for k, v in _context(record).items())
        line = (
            f"{_timestamp(record)} {record.levelname} {record.name} pid={record.process}"
            f"{' ' + context if context else ''}: {record.getMessage()}"
        )
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class JsonFormatter(logging.Formatter):
    """One JSON object per line; a field that does not apply is left out, not null."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": _timestamp(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "pid": record.process,
            **_context(record, CONTEXT_FIELDS + EVENT_FIELDS),
            "message": record.getMessage(),
        }
        if record.exc_info:
            # The traceback ends with "Class: message", so it says at least
            # what an ``error`` passed in ``extra`` would.
            entry["error"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def setup_logging(
    level: str = "info", log_format: str = "text", levels: Mapping[str, str] | None = None
) -> None:
    """Send jobmaster's (and the app's) log lines to stdout in the chosen format.

    ``levels`` sets single loggers apart from ``level``, e.g.
    ``{"jobmaster.worker.executor": "warning"}`` to keep the failures but not
    a start and a done line per job. Children inherit all of it through fork.
    """
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    root = logging.getLogger()
    for existing in list(root.handlers):
        root.removeHandler(existing)
    root.addHandler(handler)
    root.setLevel(level.upper())
    for name, named_level in (levels or {}).items():
        logging.getLogger(name).setLevel(named_level.upper())


@contextlib.contextmanager
def handlers_held() -> Iterator[None]:
    """Hold every handler's lock, so no other thread is in the middle of a line.

    For ``fork``: CPython gives a child fresh handler locks, but not fresh
    copies of what a thread caught in the middle of ``emit`` holds at that
    instant: the lock of a buffered stream over a Python-level raw stream
    stays held in the child for ever (tried: the child's first write
    hangs), as would a socket handler's half-sent line. A thread writes
    through one handler at a time, so taking them all in turn cannot
    deadlock. A child forked inside the block has fresh
    locks already (CPython's at-fork hook): only the parent releases them.
    """
    parent = os.getpid()
    handlers: dict[int, logging.Handler] = {}
    loggers = [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]
    for logger in loggers:
        if isinstance(logger, logging.Logger):
            handlers.update((id(handler), handler) for handler in logger.handlers)
    held: list[logging.Handler] = []
    try:
        for handler in handlers.values():
            handler.acquire()
            held.append(handler)
        yield
    finally:
        if os.getpid() == parent:
            for handler in reversed(held):
                handler.release()
