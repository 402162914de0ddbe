"""Signal handlers only enqueue; the main loop reads the queue."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest

from jobmaster.signals import CHILD_SIGNALS, QUIET, RESUME, STOP, SignalQueue, blocked, name


@pytest.fixture
def installed() -> Iterator[SignalQueue]:
    """A SignalQueue for SIGCONT and SIGUSR2 only: a stray TERM must still end pytest."""
    previous = {signum: signal.getsignal(signum) for signum in (signal.SIGCONT, signal.SIGUSR2)}
    queue = SignalQueue([signal.SIGUSR2, signal.SIGCONT])
    queue.install()
    try:
        yield queue
    finally:
        queue.restore()
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def test_installed_handler_puts_received_signal_on_queue(installed: SignalQueue) -> None:
    os.kill(os.getpid(), signal.SIGCONT)
    assert installed.get(timeout=5) == signal.SIGCONT
    assert installed.get(timeout=0.01) is None


def test_signals_arrive_in_order(installed: SignalQueue) -> None:
    os.kill(os.getpid(), signal.SIGUSR2)
    assert installed.get(timeout=5) == signal.SIGUSR2
    os.kill(os.getpid(), signal.SIGCONT)
    assert installed.get(timeout=5) == signal.SIGCONT


def test_put_and_get_keep_order() -> None:
    queue = SignalQueue()
    for signum in (signal.SIGTSTP, signal.SIGTERM, signal.SIGCONT, signal.SIGTERM):
        queue.put(signum)
    got = [queue.get(timeout=1) for _ in range(4)]
    assert got == [signal.SIGTSTP, signal.SIGTERM, signal.SIGCONT, signal.SIGTERM]


def test_get_times_out_with_none() -> None:
    queue = SignalQueue()
    started = time.monotonic()
    assert queue.get(timeout=0.05) is None
    assert time.monotonic() - started >= 0.04


def test_restore_puts_previous_handlers_back() -> None:
    def custom(signum: int, frame: object) -> None:
        pass

    original = {signum: signal.getsignal(signum) for signum in (signal.SIGCONT, signal.SIGUSR2)}
    signal.signal(signal.SIGUSR2, custom)
    try:
        queue = SignalQueue([signal.SIGCONT, signal.SIGUSR2])
        before = {signum: signal.getsignal(signum) for signum in queue.signals}
        queue.install()
        for signum in queue.signals:
            assert signal.getsignal(signum) == queue._handle
        queue.restore()
        after = {signum: signal.getsignal(signum) for signum in queue.signals}
        assert after == before
        assert after[signal.SIGUSR2] is custom
        queue.restore()  # a second restore changes nothing
        assert {signum: signal.getsignal(signum) for signum in queue.signals} == before
    finally:
        for signum, handler in original.items():
            signal.signal(signum, handler)


def test_default_signals_are_the_worker_table() -> None:
    assert SignalQueue().signals == sorted(CHILD_SIGNALS)
    assert signal.SIGTSTP in QUIET
    assert signal.SIGCONT in RESUME
    assert {signal.SIGTERM, signal.SIGINT} <= STOP


def test_name() -> None:
    assert name(15) == "SIGTERM"
    assert name(signal.SIGKILL) == "SIGKILL"
    assert name(signal.SIGTSTP) == "SIGTSTP"
    assert name(999) == "999"


def test_blocked_yields_the_mask_a_forked_child_restores_then_restores_it() -> None:
    """spawn.fork_child forks inside ``blocked``: the child restores the yielded
    mask once its own handlers are in, the master when the block ends."""
    before = signal.pthread_sigmask(signal.SIG_BLOCK, set())
    with blocked({signal.SIGUSR2}) as previous:
        assert previous == before
        assert signal.SIGUSR2 in signal.pthread_sigmask(signal.SIG_BLOCK, set())
    assert signal.pthread_sigmask(signal.SIG_BLOCK, set()) == before
