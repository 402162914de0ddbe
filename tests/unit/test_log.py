"""Log formatters: one line per event, pid and job context on every line."""

from __future__ import annotations

import io
import json
import logging
import os
import re
from collections.abc import Iterator

import pytest

from jobmaster import log as jm_log

LOGGER = "jobmaster.tests.unit.log"


class Capture:
    """A logger writing to a string through one formatter."""

    def __init__(self, formatter: logging.Formatter) -> None:
        self.stream = io.StringIO()
        self.handler = logging.StreamHandler(self.stream)
        self.handler.setFormatter(formatter)
        self.logger = logging.getLogger(LOGGER)
        self.logger.addHandler(self.handler)
        self.logger.setLevel(logging.DEBUG)
        self.logger.propagate = False

    def lines(self) -> list[str]:
        return self.stream.getvalue().splitlines()

    def close(self) -> None:
        self.logger.removeHandler(self.handler)
        self.logger.propagate = True


@pytest.fixture(autouse=True)
def no_process_fields(monkeypatch: pytest.MonkeyPatch) -> None:
    """set_process_fields changes a module global: give each test its own."""
    monkeypatch.setattr(jm_log, "_process_fields", {})


@pytest.fixture
def json_log() -> Iterator[Capture]:
    capture = Capture(jm_log.JsonFormatter())
    yield capture
    capture.close()


@pytest.fixture
def text_log() -> Iterator[Capture]:
    capture = Capture(jm_log.TextFormatter())
    yield capture
    capture.close()


TIME = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"


def test_json_line_fields(json_log: Capture) -> None:
    json_log.logger.info("job %s done", "x")
    (line,) = json_log.lines()
    entry = json.loads(line)
    assert re.fullmatch(TIME, entry["time"])
    assert entry["level"] == "info"
    assert entry["logger"] == LOGGER
    assert entry["pid"] == os.getpid()
    assert entry["message"] == "job x done"
    assert set(entry) == {"time", "level", "logger", "pid", "message"}


def test_json_context_from_extra(json_log: Capture) -> None:
    json_log.logger.warning(
        "failed", extra={"jid": "abc123", "job": "app.send", "queue": "mail", "other": 1}
    )
    entry = json.loads(json_log.lines()[0])
    assert entry["level"] == "warning"
    assert entry["jid"] == "abc123"
    assert entry["job"] == "app.send"
    assert entry["queue"] == "mail"
    assert "other" not in entry


def test_json_child_from_process_fields(json_log: Capture) -> None:
    jm_log.set_process_fields(child=2)
    json_log.logger.info("started")
    json_log.logger.info("again", extra={"jid": "j1"})
    first, second = (json.loads(line) for line in json_log.lines())
    assert first["child"] == 2
    assert second["child"] == 2
    assert second["jid"] == "j1"


def test_json_one_line_per_event_even_with_newlines(json_log: Capture) -> None:
    json_log.logger.info("first\nsecond")
    try:
        raise ValueError("broken\nvalue")
    except ValueError:
        json_log.logger.exception("job crashed", extra={"jid": "j2"})
    lines = json_log.lines()
    assert len(lines) == 2
    assert json.loads(lines[0])["message"] == "first\nsecond"
    crashed = json.loads(lines[1])
    assert crashed["level"] == "error"
    assert crashed["jid"] == "j2"
    assert crashed["error"].startswith("Traceback (most recent call last):")
    assert "ValueError: broken\nvalue" in crashed["error"]


def test_json_non_serialisable_context_does_not_break_the_line(json_log: Capture) -> None:
    json_log.logger.info("odd", extra={"job": object()})
    entry = json.loads(json_log.lines()[0])
    assert entry["job"].startswith("<object object")


def test_text_line_has_pid_and_context(text_log: Capture) -> None:
    jm_log.set_process_fields(child=1)
    text_log.logger.info("done in %d ms", 5, extra={"jid": "abc123", "job": "app.send"})
    (line,) = text_log.lines()
    assert re.match(TIME + " INFO " + re.escape(LOGGER), line)
    assert f"pid={os.getpid()}" in line
    assert "child=1" in line
    assert "jid=abc123" in line
    assert "job=app.send" in line
    assert line.endswith(": done in 5 ms")


def test_text_line_without_context(text_log: Capture) -> None:
    text_log.logger.warning("plain")
    (line,) = text_log.lines()
    assert line.endswith(f"WARNING {LOGGER} pid={os.getpid()}: plain")
    assert "jid=" not in line


def test_text_exception_adds_traceback(text_log: Capture) -> None:
    try:
        raise KeyError("missing")
    except KeyError:
        text_log.logger.exception("job crashed", extra={"jid": "j3"})
    lines = text_log.lines()
    assert "jid=j3" in lines[0]
    assert lines[0].endswith(": job crashed")
    assert lines[1] == "Traceback (most recent call last):"
    assert lines[-1] == "KeyError: 'missing'"


def test_setup_logging_installs_one_handler(monkeypatch: pytest.MonkeyPatch) -> None:
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", list(root.handlers))
    monkeypatch.setattr(root, "level", root.level)
    jm_log.setup_logging("warning", "json")
    assert len(root.handlers) == 1
    assert isinstance(root.handlers[0].formatter, jm_log.JsonFormatter)
    assert root.level == logging.WARNING
    jm_log.setup_logging("debug", "text")
    assert len(root.handlers) == 1
    assert isinstance(root.handlers[0].formatter, jm_log.TextFormatter)
