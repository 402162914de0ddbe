"""The watchdog raises JobTimeout in a running thread, and gives up on a stuck one."""

from __future__ import annotations

import threading
import time

from jobmaster.errors import JobTimeout
from jobmaster.worker.fetched import FetchedJob
from jobmaster.worker.unit import Unit
from jobmaster.worker.watchdog import Armed, Watchdog
from tests.helpers import wait_until

RAW = b'{"jid": "j", "job": "tests.nothing", "args": [], "queue": "default"}'
JOB = FetchedJob.read(Unit(raw=RAW, queue="default"))


def start_watchdog(grace: float, stuck: list[Armed]) -> tuple[Watchdog, threading.Event]:
    stop = threading.Event()
    watchdog = Watchdog(grace, stuck.append, stop)
    watchdog.start()
    return watchdog, stop


def test_a_python_loop_is_interrupted_at_its_timeout() -> None:
    stuck: list[Armed] = []
    watchdog, stop = start_watchdog(30.0, stuck)
    caught: list[BaseException] = []

    def job() -> None:
        try:
            with watchdog.deadline(JOB, 0.3):
                while True:
                    pass
        except JobTimeout as error:
            caught.append(error)

    begun = time.monotonic()
    thread = threading.Thread(target=job)
    thread.start()
    thread.join(timeout=5)
    stop.set()
    assert not thread.is_alive() and len(caught) == 1
    assert 0.3 <= time.monotonic() - begun < 2
    assert stuck == []


def test_a_thread_stuck_outside_python_is_given_up_after_the_grace() -> None:
    stuck: list[Armed] = []
    watchdog, stop = start_watchdog(0.3, stuck)
    release = threading.Event()
    outcome: list[str] = []

    def job() -> None:
        try:
            with watchdog.deadline(JOB, 0.2):
                release.wait(10)  # blocks in C: the exception waits for it
            outcome.append("returned")
        except JobTimeout:
            outcome.append("timeout")

    thread = threading.Thread(target=job)
    thread.start()
    wait_until(lambda: len(stuck) == 1, timeout=5, message="given up after timeout + grace")
    assert stuck[0].job is JOB and stuck[0].timeout == 0.2
    release.set()
    thread.join(timeout=5)
    stop.set()
    assert outcome == ["timeout"]  # delivered once it returned to Python


def test_a_job_that_ends_in_time_gets_no_exception_later() -> None:
    stuck: list[Armed] = []
    watchdog, stop = start_watchdog(30.0, stuck)
    with watchdog.deadline(JOB, 0.2):
        pass
    time.sleep(0.5)  # past the deadline: nothing may fire at this thread now
    stop.set()
    assert stuck == []


def test_no_timeout_means_no_watch() -> None:
    stuck: list[Armed] = []
    watchdog, stop = start_watchdog(0.0, stuck)
    with watchdog.deadline(JOB, None):
        time.sleep(0.3)
    stop.set()
    assert stuck == []
