"""Signals: the handlers only enqueue; the main loops act.

A Python signal handler runs between two bytecodes of the main thread,
possibly while that thread holds the logging lock or is inside a Redis
call. Logging, locking or talking to Redis there can deadlock, so the
handler only puts the signal number on a ``SimpleQueue`` (whose ``put`` is
reentrant, documented safe in a signal handler). The master also asks for a
wakeup pipe (``signal.set_wakeup_fd``) so its ``select`` returns at once.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
from collections.abc import Iterable, Iterator
from types import FrameType

# What each signal asks (SPEC §7). Children get the same meanings, so a
# signal from the platform and one forwarded by the master are one request.
QUIET = {signal.SIGTSTP}
RESUME = {signal.SIGCONT}
STOP = {signal.SIGTERM, signal.SIGINT}
STOP_NOW = {signal.SIGQUIT}  # the master's "second Ctrl-C" to its children
DUMP = {signal.SIGUSR1}
# The master's alone. ``systemctl kill``, supervisord, a container runtime or
# a terminal signal every process at once, and by default HUP and USR2 kill
# a process and TTIN/TTOU stop it: a child caught them with no handler, and
# died mid-job (its jobs ran again) or sat stopped, unnoticed. A child
# catches them and does nothing; the master acts (master-to-child requests,
# such as a recycle, go through the child's pipe, never a signal). Caught,
# not ignored: a caught signal is back to its default in a subprocess a job
# starts, while an ignored one would stay ignored there.
MASTER_ONLY = {signal.SIGHUP, signal.SIGTTIN, signal.SIGTTOU, signal.SIGUSR2}
CHILD_SIGNALS = QUIET | RESUME | STOP | STOP_NOW | DUMP | MASTER_ONLY
MASTER_SIGNALS = CHILD_SIGNALS | {signal.SIGCHLD}


def name(signum: int) -> str:
    """``SIGTERM`` for 15; the number for anything unnamed."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return str(signum)


class SignalQueue:
    """Signals received, in order, for a main loop to handle."""

    def __init__(self, signals: Iterable[int] = CHILD_SIGNALS, *, wakeup: bool = False) -> None:
        self.signals = sorted(set(signals))
        self._queue: queue.SimpleQueue[int] = queue.SimpleQueue()
        self._previous: dict[int, object] = {}
        self._wakeup = wakeup
        self._pipe: tuple[int, int] | None = None

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self._queue.put(signum)

    def install(self) -> None:
        if self._wakeup:
            read_end, write_end = os.pipe()
            os.set_blocking(read_end, False)
            os.set_blocking(write_end, False)
            self._pipe = (read_end, write_end)
            signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
        for signum in self.signals:
            self._previous[signum] = signal.signal(signum, self._handle)

    def restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)  # type: ignore[arg-type]
        self._previous.clear()
        if self._pipe is not None:
            signal.set_wakeup_fd(-1)
            for fd in self._pipe:
                os.close(fd)
            self._pipe = None

    @property
    def wakeup_fd(self) -> int | None:
        """Readable when a signal arrived (with ``wakeup=True``)."""
        return self._pipe[0] if self._pipe else None

    def drain_wakeup(self) -> None:
        if self._pipe is not None:
            with contextlib.suppress(BlockingIOError):
                while os.read(self._pipe[0], 512):
                    pass

    def put(self, signum: int) -> None:
        """Queue a signal as if received (tests, and remote commands mapped to signals)."""
        self._queue.put(signum)

    def get(self, timeout: float) -> int | None:
        try:
            if timeout <= 0:
                return self._queue.get_nowait()
            return self._queue.get(timeout=timeout)
        except queue.Empty:
            return None


def reset_in_child(signals: Iterable[int]) -> None:
    """Back to the default dispositions after fork, for the signals a child
    does not catch: the master's handlers write to the master's queue, which
    means nothing in a child. A signal the child catches gets its handler in
    place of the master's instead (spawn.take_signals says why)."""
    signal.set_wakeup_fd(-1)
    for signum in signals:
        signal.signal(signum, signal.SIG_DFL)


@contextlib.contextmanager
def blocked(signals: Iterable[int]) -> Iterator[set[int | signal.Signals]]:
    """Block signals around fork, so a child never runs the master's handlers
    in the instant before it installs its own. Yields the mask to restore
    (a forked child restores it itself, once its own handlers are in)."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, set(signals))
    try:
        yield previous
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
