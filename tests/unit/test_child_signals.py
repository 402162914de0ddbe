"""A child forked while the pool is quiet must hear the CONT the master sends
before the child's handlers are in (the signals are blocked across the fork,
so the CONT waits, pending). The child reset the master's handlers to SIG_DFL
first, and a SIG_DFL over a pending SIGCONT discards it: that child stayed
quiet for good. Each test forks, plays the master's side of the window, and
reports through its exit code."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable

import pytest

from jobmaster.signals import MASTER_SIGNALS, SignalQueue, blocked, reset_in_child
from jobmaster.supervisor.spawn import take_signals

pytestmark = [
    pytest.mark.timeout(30),
    # Under pytest-xdist this process runs threads of its own (3.12+ warns at
    # any fork then); the forked child touches only signals and exits.
    pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning"),
    pytest.mark.skipif(sys.platform != "linux", reason="the kernel's rule is Linux's"),
]


def _in_child(setup: Callable[[set[int | signal.Signals]], SignalQueue]) -> bool:
    """Fork; in the child, as the master's fork does: the master's handlers in,
    its signals blocked, a CONT sent before the child's own handlers (the
    window), then ``setup``. True if the child's queue got the CONT."""
    pid = os.fork()
    if pid == 0:
        code = 2
        try:
            SignalQueue(MASTER_SIGNALS).install()  # the master's handlers, inherited
            with blocked(MASTER_SIGNALS) as previous:
                os.kill(os.getpid(), signal.SIGCONT)  # the master's resume, in the window
                signals = setup(previous)
            code = 0 if signals.get(timeout=2) == signal.SIGCONT else 1
        finally:
            os._exit(code)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.WEXITSTATUS(status) in (0, 1), "the child failed"
            return os.WEXITSTATUS(status) == 0
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    raise AssertionError("the forked child did not report")


def test_a_cont_sent_before_the_childs_handlers_reaches_it() -> None:
    assert _in_child(take_signals)


def test_a_default_disposition_over_a_pending_cont_discards_it() -> None:
    """Why the order matters: the old child's order (reset, then install)."""

    def old_order(mask: set[int | signal.Signals]) -> SignalQueue:
        reset_in_child(MASTER_SIGNALS)
        signals = SignalQueue()
        signals.install()
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        return signals

    assert not _in_child(old_order)
