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
import select
import sys
import time
import weakref
from collections.abc import Iterator, Mapping
from typing import IO, Any

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
        return _JSON.encode(entry)


# One encoder for every line: ``json.dumps(..., default=str)`` builds a new
# one per call (only a call with every default shares the module's), about
# a quarter of what a JSON line cost. ``encode`` keeps no state between
# calls, so threads share it (as they share the module's).
_JSON = json.JSONEncoder(default=str)


# A write of at most this many bytes to a pipe is atomic (POSIX): it is
# never interleaved with another process's or thread's write. Linux makes a
# write to a regular file atomic at any size (it holds the inode's lock).
PIPE_BUF = getattr(select, "PIPE_BUF", 512)  # 4096 on Linux; 512 is POSIX's floor
LONG_LINE_WAIT = 5.0  # seconds a long line waits for short ones in flight


class LineHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes each line with one ``os.write`` on the stream's file descriptor.

    ``StreamHandler`` formats, writes and flushes under the handler's lock,
    and a child's job threads log two lines a job: at info, each thread
    queued behind the one formatting or in the write call
    (``bench/log_lines.py``: 10 threads wrote about a fifth more lines a
    second, for a sixth less CPU a line, without it). Here a line is
    formatted in the caller's thread, outside any lock, and reaches the
    kernel in one write:

    - a line of at most PIPE_BUF bytes (every job line): one ``os.write``,
      atomic on a pipe and on a file, so the lines of threads and of
      processes (the master and its children share the fd) never
      interleave, and no thread waits for another;
    - a longer line (a deep traceback) holds the handler's lock, keeps
      short lines of this process off the fd until it is whole (a pipe
      splits a long write, and a short one could land inside it), and
      writes in as many calls as the fd takes.

    Nothing is buffered in Python: when ``emit`` returns, the line is in the
    kernel, and a SIGKILLed child loses no line it logged. A stream without
    a file descriptor (a ``StringIO``, pytest's capture) gets
    ``StreamHandler``'s own locked write.
    """

    def __init__(self, stream: IO[str] | None = None) -> None:
        super().__init__(stream)
        self._fd: int | None = None
        self._encoding = "utf-8"
        self._writing: set[object] = set()  # tokens of the short writes under way
        self._exclusive = False  # a long line is being written: short ones take the lock
        self._take_fd()
        _line_handlers.add(self)

    def setStream(self, stream: IO[str]) -> IO[str] | None:
        old = super().setStream(stream)
        with self.lock:  # type: ignore[union-attr]
            self._take_fd()
        return old

    def _take_fd(self) -> None:
        try:
            fd = self.stream.fileno()
            # What was printed before goes out before the first line written beside it.
            self.stream.flush()
        except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is both
            self._fd = None
            return
        self._fd = fd
        self._encoding = getattr(self.stream, "encoding", None) or "utf-8"

    def handle(self, record: logging.LogRecord) -> Any:
        """``Handler.handle`` without its lock around ``emit``, when there is an fd."""
        passed: object = self.filter(record)  # a record or a bool under 3.12+
        if isinstance(passed, logging.LogRecord):  # a filter's own copy of it
            record = passed
        if passed:
            if self._fd is None:
                with self.lock:  # type: ignore[union-attr]
                    self.emit(record)
            else:
                self.emit(record)
        return passed

    def emit(self, record: logging.LogRecord) -> None:
        fd = self._fd
        if fd is None:
            super().emit(record)
            return
        try:
            # backslashreplace: an unencodable character never costs the line.
            line = (self.format(record) + self.terminator).encode(
                self._encoding, "backslashreplace"
            )
            if len(line) <= PIPE_BUF:
                self._write_short(fd, line)
            else:
                self._write_long(fd, line)
        except RecursionError:  # as StreamHandler: see CPython issue 36272
            raise
        except Exception:
            self.handleError(record)

    def _write_short(self, fd: int, line: bytes) -> None:
        # Registered, then checked: a long writer sets the flag, then waits for
        # the set to empty, so one of the two always sees the other.
        token = object()
        self._writing.add(token)
        try:
            if not self._exclusive:
                _write_all(fd, line)
                return
        finally:
            self._writing.discard(token)
        with self.lock:  # type: ignore[union-attr]  # behind the long line
            _write_all(fd, line)

    def _write_long(self, fd: int, line: bytes) -> None:
        with self.lock:  # type: ignore[union-attr]
            self._exclusive = True
            try:
                # Each short write under way is one syscall: this waits
                # microseconds, unless the reader of a full pipe has stalled
                # (then the bound: a line perhaps torn beats a thread held).
                deadline = time.monotonic() + LONG_LINE_WAIT
                while self._writing and time.monotonic() < deadline:
                    time.sleep(0.0005)
                _write_all(fd, line)
            finally:
                self._exclusive = False

    def _after_fork_in_child(self) -> None:
        # A thread of the parent caught in a write does not exist here: its
        # token would hold every long line of the child for LONG_LINE_WAIT.
        self._writing = set()
        self._exclusive = False


def _write_all(fd: int, data: bytes) -> None:
    """``data`` to ``fd``: one call unless the fd takes less (a long line on a
    pipe, a full non-blocking pipe: waited on until writable)."""
    try:
        written = os.write(fd, data)
        if written == len(data):
            return
    except BlockingIOError:
        written = 0
    view = memoryview(data)[written:]
    while view:
        try:
            view = view[os.write(fd, view) :]
        except BlockingIOError:  # someone set the shared fd non-blocking
            select.select([], [fd], [], 1.0)


_line_handlers: weakref.WeakSet[LineHandler] = weakref.WeakSet()


def _reset_line_handlers() -> None:
    for handler in list(_line_handlers):
        handler._after_fork_in_child()


os.register_at_fork(after_in_child=_reset_line_handlers)


def setup_logging(
    level: str = "info", log_format: str = "text", levels: Mapping[str, str] | None = None
) -> None:
    """Send jobmaster's (and the app's) log lines to stdout in the chosen format.

    ``levels`` sets single loggers apart from ``level``, e.g.
    ``{"jobmaster.worker.executor": "warning"}`` to keep the failures but not
    a start and a done line per job. Children inherit all of it through fork.
    """
    handler = LineHandler(sys.stdout)
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
    ``LineHandler``'s short lines take no lock and need none here: a line
    is one ``os.write``, with no Python buffer behind it to inherit.
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
