"""LineHandler: each line in one ``os.write``, no lock for a line that fits in PIPE_BUF.

Written to a real pipe, drained by a reader thread as a log collector would:
what a pipe does with concurrent writes (atomic up to PIPE_BUF, split beyond)
is what these tests are about, and a StringIO would hide it.
"""

from __future__ import annotations

import io
import json
import logging
import os
import re
import sys
import threading
from collections.abc import Iterator
from typing import IO

import pytest

from jobmaster import log as jm_log
from tests.helpers import wait_until

pytestmark = pytest.mark.timeout(60)
LOGGER = "jobmaster.tests.unit.line_handler"


class Pipe:
    """A pipe whose read end a thread drains into ``data`` until the write end closes."""

    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.pipe()
        self.stream = open(self.write_fd, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
        self.chunks: list[bytes] = []
        self.reader = threading.Thread(target=self._drain, daemon=True)
        self.reader.start()

    def _drain(self) -> None:
        while chunk := os.read(self.read_fd, 65536):
            self.chunks.append(chunk)

    def close(self) -> list[str]:
        """Every line written, once the writers are done."""
        self.stream.close()
        os.close(self.write_fd)
        self.reader.join(timeout=30)
        assert not self.reader.is_alive(), "the reader did not see the pipe close"
        os.close(self.read_fd)
        return b"".join(self.chunks).decode().split("\n")[:-1]


@pytest.fixture
def pipe() -> Iterator[Pipe]:
    pipe = Pipe()
    yield pipe
    if not pipe.stream.closed:
        pipe.close()


@pytest.fixture
def logger(no_process_fields: None) -> Iterator[logging.Logger]:
    logger = logging.getLogger(LOGGER)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    yield logger
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
    logger.propagate = True


@pytest.fixture
def no_process_fields(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jm_log, "_process_fields", {})


def attach(
    logger: logging.Logger, stream: IO[str], json_format: bool = False
) -> jm_log.LineHandler:
    handler = jm_log.LineHandler(stream)
    plain = logging.Formatter("%(message)s")
    handler.setFormatter(jm_log.JsonFormatter() if json_format else plain)
    logger.addHandler(handler)
    return handler


def in_threads(count: int, target: object) -> None:
    threads = [threading.Thread(target=target, args=(n,)) for n in range(count)]  # type: ignore[arg-type]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not any(thread.is_alive() for thread in threads), "a writer is stuck"


def test_a_short_line_is_written_while_another_thread_holds_the_lock(
    logger: logging.Logger, pipe: Pipe
) -> None:
    # StreamHandler would wait here: it writes under the handler's lock.
    handler = attach(logger, pipe.stream)
    written = threading.Event()

    def log_one() -> None:
        logger.info("not queued behind the lock")
        written.set()

    with handler.lock:  # type: ignore[union-attr]
        thread = threading.Thread(target=log_one)
        thread.start()
        wait_until(written.is_set, timeout=10, message="the line waited for the lock")
    thread.join(timeout=10)
    assert pipe.close() == ["not queued behind the lock"]


def test_lines_of_many_threads_never_interleave(logger: logging.Logger, pipe: Pipe) -> None:
    attach(logger, pipe.stream)
    per_thread = 300

    def write(thread: int) -> None:
        for n in range(per_thread):
            # Up to 4,000 bytes: near PIPE_BUF, where a torn write would show.
            logger.info("%d %d %s.", thread, n, "x" * (n * 13 % 4000))

    in_threads(16, write)
    lines = pipe.close()
    assert len(lines) == 16 * per_thread
    pattern = re.compile(r"(\d+) (\d+) (x*)\.")
    seen = set()
    for line in lines:
        match = pattern.fullmatch(line)
        assert match, f"a torn line: {line[:80]!r}..."
        thread, n = int(match[1]), int(match[2])
        assert len(match[3]) == n * 13 % 4000
        seen.add((thread, n))
    assert len(seen) == 16 * per_thread


def test_a_long_line_comes_out_whole_among_short_ones(logger: logging.Logger, pipe: Pipe) -> None:
    # A pipe splits a write beyond PIPE_BUF (and its 64 KiB buffer fills):
    # without the short lines held off, they land inside the long one.
    attach(logger, pipe.stream)
    long_lines = 20
    body = "y" * 200_000
    done = threading.Event()

    def write(thread: int) -> None:
        if thread == 0:
            for n in range(long_lines):
                logger.info("long %d %s.", n, body)
            done.set()
            return
        n = 0
        while not done.is_set():
            logger.info("short %d %d.", thread, n)
            n += 1

    in_threads(8, write)
    lines = pipe.close()
    long = [line for line in lines if line.startswith("long ")]
    assert len(long) == long_lines
    for n, line in enumerate(long):
        assert line == f"long {n} {body}.", f"long line {n} torn ({len(line)} chars)"
    short = [line for line in lines if not line.startswith("long ")]
    assert short, "no short line was written while the long ones were"
    assert all(re.fullmatch(r"short \d+ \d+\.", line) for line in short)


def test_json_lines_of_many_threads_are_each_one_object(logger: logging.Logger, pipe: Pipe) -> None:
    attach(logger, pipe.stream, json_format=True)

    def write(thread: int) -> None:
        for n in range(200):
            extra = {"jid": f"{thread}-{n}", "job": "app.noop", "event": "job.done"}
            logger.info("done in %.1f ms\nwith a newline", n / 10, extra=extra)

    in_threads(12, write)
    entries = [json.loads(line) for line in pipe.close()]
    assert len(entries) == 12 * 200
    assert {e["jid"] for e in entries} == {f"{t}-{n}" for t in range(12) for n in range(200)}
    assert all(e["event"] == "job.done" and e["pid"] == os.getpid() for e in entries)


def test_an_unencodable_character_does_not_cost_the_line(logger: logging.Logger) -> None:
    read_fd, write_fd = os.pipe()
    stream = open(write_fd, "w", encoding="ascii", closefd=False)  # noqa: SIM115
    try:
        attach(logger, stream)
        logger.info("caf\u00e9")
        assert os.read(read_fd, 100) == b"caf\\xe9\n"
    finally:
        stream.close()
        os.close(read_fd)
        os.close(write_fd)


def test_a_stream_without_a_descriptor_gets_streamhandler_writes(logger: logging.Logger) -> None:
    stream = io.StringIO()
    attach(logger, stream)
    logger.info("into a StringIO")
    assert stream.getvalue() == "into a StringIO\n"


def test_other_handlers_beside_it_still_get_every_line(logger: logging.Logger, pipe: Pipe) -> None:
    attach(logger, pipe.stream)
    other = io.StringIO()
    logger.addHandler(logging.StreamHandler(other))  # an app's, or pytest's caplog
    logger.info("to both")
    assert pipe.close() == ["to both"]
    assert other.getvalue() == "to both\n"


def test_a_filter_that_drops_or_rewrites_a_record_is_obeyed(
    logger: logging.Logger, pipe: Pipe
) -> None:
    handler = attach(logger, pipe.stream)
    handler.addFilter(lambda record: "secret" not in record.getMessage())
    logger.info("secret token")
    logger.info("public")
    assert pipe.close() == ["public"]


def test_a_record_a_filter_returns_is_the_one_written(logger: logging.Logger, pipe: Pipe) -> None:
    """From 3.12 a filter may return the record to log instead (a redacting
    filter); before, what it returns only says yes or no, as logging does."""
    handler = attach(logger, pipe.stream)

    def redact(record: logging.LogRecord) -> logging.LogRecord:
        copy = logging.makeLogRecord(record.__dict__)
        copy.msg, copy.args = "redacted", None
        return copy

    handler.addFilter(redact)
    logger.info("token %s", "s3cret")
    expected = "redacted" if sys.version_info >= (3, 12) else "token s3cret"
    assert pipe.close() == [expected]


def test_what_was_printed_before_comes_out_before_the_first_line(
    logger: logging.Logger, pipe: Pipe
) -> None:
    pipe.stream.write("printed earlier\n")  # still in the stream's buffer
    attach(logger, pipe.stream)
    logger.info("logged later")
    assert pipe.close() == ["printed earlier", "logged later"]


def test_set_stream_moves_the_lines(logger: logging.Logger, pipe: Pipe) -> None:
    handler = attach(logger, pipe.stream)
    logger.info("to the pipe")
    other = io.StringIO()
    handler.setStream(other)
    logger.info("to the StringIO")
    assert pipe.close() == ["to the pipe"]
    assert other.getvalue() == "to the StringIO\n"


def test_setup_logging_installs_a_line_handler_on_stdout(monkeypatch: pytest.MonkeyPatch) -> None:
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", list(root.handlers))
    monkeypatch.setattr(root, "level", root.level)
    jm_log.setup_logging("info", "json")
    [handler] = root.handlers
    assert isinstance(handler, jm_log.LineHandler)
    assert handler.stream is sys.stdout
