"""The master's Redis thread (supervisor/duties.py) against fakes: no Redis, no fork.

What the loop relies on: a requeue handed over happens on the thread, in
order, retried after a Redis error; what the thread reads wakes the loop's
select; a bug in one duty or the thread's death goes neither unnoticed nor
stops the others; a stop waits for the thread no longer than its grace,
even when the thread is stuck in a Redis call.
"""

from __future__ import annotations

import logging
import select
import signal
import threading
import time
from collections.abc import Iterator

import pytest
import redis

from jobmaster.config import Config
from jobmaster.keys import Keys
from jobmaster.log import handlers_held
from jobmaster.recovery import RecoveryReport, Triage
from jobmaster.signals import MASTER_SIGNALS
from jobmaster.supervisor.duties import (
    CONTROL_INTERVAL,
    RETRY_MAX,
    DeadChild,
    MasterState,
    RedisDuties,
)
from tests.helpers import wait_until
from tests.unit.test_master_loop import FakeRecovery, FakeRedis

pytestmark = pytest.mark.timeout(30)
IDENTITY = "host:1:master"


class FakeTicker:
    """Periodic jobs or the history sample: counts its ticks, in which thread."""

    def __init__(self, error: Exception | None = None) -> None:
        self.ticks = 0
        self.error = error
        self.masks: list[set[int]] = []

    def tick(self, now: float) -> object:
        self.ticks += 1
        self.masks.append(set(signal.pthread_sigmask(signal.SIG_BLOCK, [])))
        if self.error is not None:
            raise self.error
        return []


class StuckRecovery(FakeRecovery):
    """A requeue that hangs as on a paused Redis, until released."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def requeue_all(self, identity: str, *, triage: Triage | None = None) -> RecoveryReport:
        self.release.wait(20)
        raise redis.TimeoutError("Timeout reading from socket")


def build(
    recovery: FakeRecovery | None = None, ticker: FakeTicker | None = None
) -> tuple[RedisDuties, FakeRedis]:
    client = FakeRedis()
    duties = RedisDuties(
        config=Config(),
        client=client,  # type: ignore[arg-type]
        keys=Keys(),
        identity=IDENTITY,
        recovery=recovery or FakeRecovery(),  # type: ignore[arg-type]
        ticker=ticker or FakeTicker(),  # type: ignore[arg-type]
        history=FakeTicker(),  # type: ignore[arg-type]
    )
    duties.publish(MasterState(wanted=2, quiet=False, stopping=False, children=("c1", "c2")))
    return duties, client


@pytest.fixture
def running() -> Iterator[list[RedisDuties]]:
    """Threads started by a test, finished after it."""
    started: list[RedisDuties] = []
    yield started
    for duties in started:
        duties.finish(1.0)


def dead(identity: str, crashed: bool = True) -> DeadChild:
    return DeadChild(identity, f"child 1 ({identity})", None, crashed, time.monotonic())


def readable(fd: int, timeout: float) -> bool:
    return bool(select.select([fd], [], [], timeout)[0])


def test_a_requeue_handed_over_is_done_at_once_and_wakes_the_loop(
    running: list[RedisDuties],
) -> None:
    recovery = FakeRecovery()
    duties, client = build(recovery)
    duties.start()
    running.append(duties)
    wait_until(lambda: client.heartbeats, timeout=5, message="first pass")
    duties.drain_wakeup()
    duties.requeue(dead("a"))
    duties.requeue(dead("b"))
    assert readable(duties.wakeup_fd, 2.0)  # the report is for the loop to count
    wait_until(lambda: len(recovery.requeued) == 2, timeout=5, message="requeued")
    assert [identity for identity, _ in recovery.requeued] == ["a", "b"]
    assert duties.pending() == ()
    assert [r.requeued for r in duties.take_reports()] == [["jid-1"], ["jid-1"]]
    assert Keys().heartbeat("a") in client.deleted


def test_a_failed_requeue_backs_off_and_goes_once_redis_answers() -> None:
    recovery = FakeRecovery()
    duties, _ = build(recovery)
    recovery.failures_to_come = 1
    duties._next_control = float("inf")  # the control list is not read for now...
    duties._written = duties._state  # ...nor a changed state written
    duties.requeue(dead("a"))
    duties.run_pass(time.monotonic())
    assert duties.pending() != ()
    assert duties.outage.failing_since is not None
    duties.run_pass(time.monotonic())  # within the backoff: not tried again
    assert recovery.requeued == []
    duties._next_control = 0.0
    duties.run_pass(time.monotonic())  # the control read answers: the backoff ends
    duties.run_pass(time.monotonic())
    assert [i for i, _ in recovery.requeued] == ["a"]
    assert duties.outage.failing_since is None


def test_a_buggy_requeue_is_logged_and_tried_again_later_not_every_pass(
    caplog: pytest.LogCaptureFixture,
) -> None:
    recovery = FakeRecovery()
    duties, _ = build(recovery)
    recovery.failures_to_come = 1
    duties.requeue(dead("a"))

    def bug(identity: str, *, triage: Triage | None = None) -> RecoveryReport:
        raise KeyError("a bug")

    recovery.requeue_all = bug  # type: ignore[method-assign]
    duties.run_pass(time.monotonic())
    assert "child 1 (a): could not requeue its jobs; trying again" in caplog.text
    duties.run_pass(time.monotonic())  # the control list answers: not a Redis outage
    assert caplog.text.count("could not requeue") == 1
    assert duties._retry_at - time.monotonic() > RETRY_MAX - 0.5
    assert [d.identity for d in duties.pending()] == ["a"]


def test_remote_commands_go_to_the_loop_through_its_pipe() -> None:
    duties, client = build()
    client.control += [b"quiet", b"stop"]
    now = time.monotonic()
    duties.talk(now)
    assert duties._next_wait(now) <= CONTROL_INTERVAL  # the next read comes that soon
    assert readable(duties.wakeup_fd, 0.0)
    assert duties.take_commands() == ["quiet", "stop"]
    duties.drain_wakeup()
    assert not readable(duties.wakeup_fd, 0.0)


def test_a_bug_in_one_duty_is_logged_and_the_others_go_on(
    running: list[RedisDuties], caplog: pytest.LogCaptureFixture
) -> None:
    ticker = FakeTicker(error=RuntimeError("a bug"))
    duties, client = build(ticker=ticker)
    duties.start()
    running.append(duties)
    wait_until(lambda: ticker.ticks >= 2, timeout=5, message="the thread goes on")
    client.control.append(b"resume")
    wait_until(lambda: duties.take_commands() == ["resume"], timeout=5)
    assert "periodic: unexpected error; carrying on" in caplog.text
    # Signals are the main thread's: the thread was started with them blocked.
    assert set(MASTER_SIGNALS) <= ticker.masks[0]


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_dead_thread_is_logged_and_started_again(
    running: list[RedisDuties], caplog: pytest.LogCaptureFixture
) -> None:
    ticker = FakeTicker(error=SystemExit(1))  # not an Exception: it ends the thread
    duties, _ = build(ticker=ticker)
    duties.start()
    running.append(duties)
    wait_until(lambda: duties._thread is not None and not duties._thread.is_alive(), timeout=5)
    ticker.error = None
    duties.ensure_running()
    assert "the master's Redis thread died; starting it again" in caplog.text
    ticks = ticker.ticks
    wait_until(lambda: ticker.ticks > ticks, timeout=5, message="ticking again")


def test_finish_requeues_what_is_left_then_clears_the_heartbeat() -> None:
    recovery = FakeRecovery()
    duties, client = build(recovery)
    duties.requeue(dead("a", crashed=False))
    assert duties.finish(2.0) == ()
    assert [identity for identity, _ in recovery.requeued] == ["a"]
    assert client.deleted[-1] == Keys().heartbeat(IDENTITY)
    assert client.removed == [(Keys().masters, IDENTITY)]


def test_finish_gives_up_on_a_thread_stuck_in_redis_after_its_grace(
    running: list[RedisDuties],
) -> None:
    recovery = StuckRecovery()
    duties, _ = build(recovery)
    duties.start()
    running.append(duties)
    try:
        duties.requeue(dead("a"))
        started = time.monotonic()
        left = duties.finish(0.5)
        assert time.monotonic() - started < 1.5
        assert [d.identity for d in left] == ["a"]  # left to the orphan scan
    finally:
        recovery.release.set()


def test_handlers_held_keeps_other_threads_from_writing_a_line() -> None:
    logger = logging.getLogger("jobmaster.tests.handlers_held")
    handler = logging.StreamHandler()
    logger.addHandler(handler)
    written = threading.Event()

    def write() -> None:
        logger.warning("a line from another thread")
        written.set()

    try:
        with handlers_held():
            other = threading.Thread(target=write)
            other.start()
            assert not written.wait(0.3)  # held: not in the middle of a line at fork
        assert written.wait(5)
        other.join(5)
    finally:
        logger.removeHandler(handler)


def test_a_changed_state_is_written_at_once_not_at_the_next_beat() -> None:
    """ps showed a new master as 0/0 and its children as "(no master)", and a
    quiet seconds late: the heartbeat waited for its beat interval."""
    duties, client = build()
    now = time.monotonic()
    duties.run_pass(now)  # the first heartbeat, with the state build() published
    assert client.heartbeats[-1]["children"] == "c1,c2"
    duties.publish(MasterState(wanted=3, quiet=True, stopping=False, children=("c1", "c2", "c3")))
    assert duties._wake.is_set()  # the thread's wait ends now
    duties.run_pass(now + 0.01)  # long before the next control read or beat
    assert len(client.heartbeats) == 2
    assert client.heartbeats[-1]["children"] == "c1,c2,c3"
    assert client.heartbeats[-1]["quiet"] == 1


def test_memory_samples_alone_wait_for_the_beat() -> None:
    duties, client = build()
    now = time.monotonic()
    duties.run_pass(now)
    duties._wake.clear()
    duties.publish(
        MasterState(
            wanted=2, quiet=False, stopping=False, children=("c1", "c2"), memory_used_mb=5.0
        )
    )
    assert not duties._wake.is_set()
    duties.run_pass(now + 0.01)
    assert len(client.heartbeats) == 1  # the memory sample waits for its beat
