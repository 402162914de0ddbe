"""WorkSignal with real threads: one notify wakes one sleeper, no lost wake-ups."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from jobmaster.worker.wakeup import WorkSignal
from tests.helpers import wait_until

LONG = 30.0  # a wait that must be ended by something other than its timeout


class Sleepers:
    """Threads waiting on one WorkSignal; counts how each wait ended."""

    def __init__(self, signal: WorkSignal) -> None:
        self.signal = signal
        self.keep_waiting = threading.Event()
        self.keep_waiting.set()
        self.lock = threading.Lock()
        self.results: list[bool] = []
        self.threads: list[threading.Thread] = []

    def start(self, count: int, timeout: float = LONG) -> None:
        seen = self.signal.generation
        for _ in range(count):
            thread = threading.Thread(target=self._wait, args=(seen, timeout), daemon=True)
            self.threads.append(thread)
            thread.start()
        wait_until(lambda: self.signal.waiters == len(self.threads), timeout=5)

    def _wait(self, seen: int, timeout: float) -> None:
        woken = self.signal.wait(seen, self.keep_waiting, timeout)
        with self.lock:
            self.results.append(woken)

    def woken(self) -> int:
        with self.lock:
            return sum(self.results)

    def finished(self) -> int:
        with self.lock:
            return len(self.results)

    def release(self) -> None:
        """End every wait and join the threads.

        notify_all ends the waits at once; clearing keep_waiting alone would
        take up to a 0.5 s wait slice per test.
        """
        self.keep_waiting.clear()
        self.signal.notify_all()
        for thread in self.threads:
            thread.join(timeout=5)
        assert not any(thread.is_alive() for thread in self.threads)


@pytest.fixture
def sleepers() -> Iterator[Sleepers]:
    group = Sleepers(WorkSignal())
    try:
        yield group
    finally:
        group.release()


def test_waiter_returns_true_when_notified(sleepers: Sleepers) -> None:
    sleepers.start(1)
    sleepers.signal.notify(1)
    wait_until(lambda: sleepers.finished() == 1, timeout=5)
    assert sleepers.results == [True]
    assert sleepers.signal.waiters == 0


def test_notify_one_wakes_exactly_one_of_three(sleepers: Sleepers) -> None:
    sleepers.start(3)
    sleepers.signal.notify(1)
    wait_until(lambda: sleepers.woken() == 1, timeout=5)
    # The others keep sleeping: give a wrongly woken thread well over one of the
    # 0.5 s wait slices to show up, polling instead of sleeping blindly.
    deadline = time.monotonic() + 0.6
    while time.monotonic() < deadline:
        assert sleepers.finished() == 1
        assert sleepers.signal.waiters == 2
        time.sleep(0.02)
    assert sleepers.results == [True]


def test_notify_three_wakes_three(sleepers: Sleepers) -> None:
    sleepers.start(4)
    sleepers.signal.notify(3)
    wait_until(lambda: sleepers.woken() == 3, timeout=5)
    assert sleepers.finished() == 3
    assert sleepers.signal.waiters == 1


def test_notify_more_than_waiters_leaves_no_permit_behind(sleepers: Sleepers) -> None:
    sleepers.start(2)
    sleepers.signal.notify(5)
    wait_until(lambda: sleepers.woken() == 2, timeout=5)
    # Permits are capped at the sleepers: a later sleeper (with a fresh
    # generation) is not woken by the surplus.
    signal, keep_waiting = sleepers.signal, threading.Event()
    keep_waiting.set()
    started = time.monotonic()
    assert signal.wait(signal.generation, keep_waiting, 0.2) is False
    assert time.monotonic() - started >= 0.19


def test_notify_all_wakes_every_waiter(sleepers: Sleepers) -> None:
    sleepers.start(3)
    sleepers.signal.notify_all()
    wait_until(lambda: sleepers.woken() == 3, timeout=5)


def test_notify_between_generation_and_wait_returns_at_once() -> None:
    signal, keep_waiting = WorkSignal(), threading.Event()
    keep_waiting.set()
    seen = signal.generation  # a fetch found nothing...
    signal.notify(1)  # ...a job arrives before the thread sleeps
    started = time.monotonic()
    # A 2 s bound: were the wake-up lost, the wait would time out and say False.
    assert signal.wait(seen, keep_waiting, 2.0) is True
    assert time.monotonic() - started < 1.0
    assert signal.waiters == 0


def test_notify_with_no_waiters_does_not_wake_later_sleeper() -> None:
    signal, keep_waiting = WorkSignal(), threading.Event()
    keep_waiting.set()
    signal.notify(3)
    assert signal.wait(signal.generation, keep_waiting, 0.1) is False


def test_clearing_keep_waiting_ends_wait_promptly(sleepers: Sleepers) -> None:
    sleepers.start(2)
    started = time.monotonic()
    sleepers.keep_waiting.clear()
    wait_until(lambda: sleepers.finished() == 2, timeout=2)
    assert time.monotonic() - started < 1.5  # one 0.5 s slice, not the 30 s timeout
    assert sleepers.results == [False, False]
    assert sleepers.signal.waiters == 0


def test_cleared_keep_waiting_returns_false_without_sleeping() -> None:
    signal, keep_waiting = WorkSignal(), threading.Event()
    started = time.monotonic()
    assert signal.wait(signal.generation, keep_waiting, LONG) is False
    assert time.monotonic() - started < 0.5


def test_timeout_returns_false() -> None:
    signal, keep_waiting = WorkSignal(), threading.Event()
    keep_waiting.set()
    started = time.monotonic()
    assert signal.wait(signal.generation, keep_waiting, 0.15) is False
    elapsed = time.monotonic() - started
    assert 0.14 <= elapsed < 1.0
    assert signal.waiters == 0
