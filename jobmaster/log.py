"""Logging setup: one line per event, as text for people or JSON for shippers.

Every line carries the pid, and the child index, jid, job and queue when the
call passes them (``extra={"jid": ..., "job": ...}``) or the process has
them (``set_process_fields(child=2)`` after a fork).
"""

from __future__ import annotations

import datetime
import json
import logging
import sys
from typing import Any

CONTEXT_FIELDS = ("child", "jid", "job", "queue")
_process_fields: dict[str, Any] = {}


def set_process_fields(**fields: Any) -> None:
    """Fields added to every line of this process (e.g. its child index)."""
    _process_fields.update(fields)


def _timestamp(record: logging.LogRecord) -> str:
    moment = datetime.datetime.fromtimestamp(record.created, tz=datetime.timezone.utc)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _context(record: logging.LogRecord) -> dict[str, Any]:
    values = dict(_process_fields)
    for field in CONTEXT_FIELDS:
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
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": _timestamp(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "pid": record.process,
            **_context(record),
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def setup_logging(level: str = "info", log_format: str = "text") -> None:
    """Send jobmaster's (and the app's) log lines to stdout in the chosen format."""
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    root = logging.getLogger()
    for existing in list(root.handlers):
        root.removeHandler(existing)
    root.addHandler(handler)
    root.setLevel(level.upper())
