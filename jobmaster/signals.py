"""Signals: the handlers only enqueue; the main loop acts.

A Python signal handler runs between two bytecodes of the main thread,
possibly while that thread holds the logging lock or is inside a Redis
call. Logging, locking or talking to Redis there can deadlock, so the
handler only puts the signal number on a ``SimpleQueue`` (whose ``put`` is
reentrant, documented safe in a signal handler) and the main loop reads it.
"""

from __future__ import annotations

import queue
import signal
from collections.abc import Iterable
from types import FrameType

# What each signal asks of a process running workers (SPEC §7).
QUIET = {signal.SIGTSTP}
RESUME = {signal.SIGCONT}
STOP = {signal.SIGTERM, signal.SIGINT}
WORKER_SIGNALS = QUIET | RESUME | STOP


def name(signum: int) -> str:
    """``SIGTERM`` for 15; the number for anything unnamed."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return str(signum)


class SignalQueue:
    """Signals received, in order, for the main loop to handle."""

    def __init__(self, signals: Iterable[int] = WORKER_SIGNALS) -> None:
        self.signals = sorted(set(signals))
        self._queue: queue.SimpleQueue[int] = queue.SimpleQueue()
        self._previous: dict[int, object] = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self._queue.put(signum)

    def install(self) -> None:
        for signum in self.signals:
            self._previous[signum] = signal.signal(signum, self._handle)

    def restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)  # type: ignore[arg-type]
        self._previous.clear()

    def put(self, signum: int) -> None:
        """Queue a signal as if received (tests, and remote commands mapped to signals)."""
        self._queue.put(signum)

    def get(self, timeout: float) -> int | None:
        try:
            return self._queue.get(timeout=timeout)
        except queue.Empty:
            return None
