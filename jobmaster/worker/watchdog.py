"""Job timeouts: raise JobTimeout in a job's thread, and give up on a stuck one.

At a job's ``timeout`` the watchdog raises ``JobTimeout`` inside the job's
thread (``PyThreadState_SetAsyncExc``): Python code stops at its next
bytecode, the attempt fails and is retried like any failure. A thread stuck
in C code (a CPU-bound extension, a blocking call) never reaches a bytecode,
so ``timeout_grace`` seconds later the watchdog records the attempt as
failed itself, marks the job abandoned (if the thread ever returns, it must
not record it twice) and reports it, so the child can be recycled through
the supervisor's graceful path. An async job's timeout cancels its task on
its event loop, which another job may be holding (a blocking call): such a
job is not stuck, its cancel waits, and it is given up on only once it had
its cancel for ``timeout_grace`` (or holds the loop itself).
"""

from __future__ import annotations

import ctypes
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from jobmaster.errors import JobTimeout
from jobmaster.worker.fetched import FetchedJob

log = logging.getLogger("jobmaster.worker.watchdog")

TICK = 0.1  # seconds between looks: a timeout fires at most this late


# Stops a running job with an exception of this class, where a raise in its
# thread cannot (an async job: its task is cancelled on its loop).
Interrupt = Callable[[type[BaseException]], None]
# Whether a job stopped by an ``Interrupt`` is to blame for still running
# ``grace`` seconds after: an async job's cancel waits for its loop, which
# another job may hold (coroutines.TaskStopper.blamed).
Blamed = Callable[[float], bool]


@dataclass(eq=False)
class Armed:
    job: FetchedJob
    thread_id: int
    timeout: float
    deadline: float  # monotonic: raise JobTimeout
    hard_deadline: float  # monotonic: give up on the thread
    fired: bool = False
    interrupt: Interrupt | None = None  # None: raise in ``thread_id``
    blamed: Blamed | None = None  # None: past ``hard_deadline`` it is stuck

    def fire(self) -> None:
        self.fired = True
        if self.interrupt is not None:
            self.interrupt(JobTimeout)
        else:
            raise_in_thread(self.thread_id, JobTimeout)

    @property
    def key(self) -> object:
        """Where it is kept: a thread runs one job at a time, a loop many."""
        return self.thread_id if self.interrupt is None else self


def raise_in_thread(thread_id: int, exception: type[BaseException] | None) -> None:
    """Schedule ``exception`` in another thread (None cancels a pending one)."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread_id), ctypes.py_object(exception) if exception else None
    )


class Watchdog(threading.Thread):
    def __init__(
        self, grace: float, on_stuck: Callable[[Armed], None], stop: threading.Event
    ) -> None:
        super().__init__(name="jobmaster-watchdog", daemon=True)
        self.grace = grace
        self.on_stuck = on_stuck
        self.stop_event = stop
        self._armed: dict[object, Armed] = {}  # thread id (or an async job's Armed) -> it
        self._lock = threading.Lock()

    @contextmanager
    def deadline(self, job: FetchedJob, timeout: float | None) -> Iterator[None]:
        """Run the block under ``timeout`` seconds (None: no limit)."""
        armed = self.arm(job, timeout)
        try:
            yield
        finally:
            self.disarm(armed)

    def arm(
        self,
        job: FetchedJob,
        timeout: float | None,
        interrupt: Interrupt | None = None,
        blamed: Blamed | None = None,
    ) -> Armed | None:
        """``deadline`` in two calls, for the executor (which enters a job's
        scopes in one object: worker/executor.py); ``disarm`` must follow.
        ``interrupt``: how to stop the job (None: raise in this thread);
        ``blamed``: whether, past its hard deadline, the job itself keeps
        running (None: it does)."""
        if not timeout:
            return None
        thread_id = threading.get_ident()
        now = time.monotonic()
        armed = Armed(
            job,
            thread_id,
            timeout,
            now + timeout,
            now + timeout + self.grace,
            interrupt=interrupt,
            blamed=blamed,
        )
        with self._lock:
            self._armed[armed.key] = armed
        return armed

    def disarm(self, armed: Armed | None) -> None:
        if armed is None:
            return
        with self._lock:
            self._armed.pop(armed.key, None)
            if armed.fired and armed.interrupt is None:
                # The job ended as the exception was sent: it must not
                # surface later, in the processor's own code.
                raise_in_thread(armed.thread_id, None)

    def run(self) -> None:
        while not self.stop_event.wait(TICK):
            now = time.monotonic()
            stuck = []
            with self._lock:
                for armed in list(self._armed.values()):
                    if not armed.fired and now >= armed.deadline:
                        armed.fire()
                    elif (
                        armed.fired
                        and now >= armed.hard_deadline
                        and (armed.blamed is None or armed.blamed(self.grace))
                    ):
                        del self._armed[armed.key]
                        stuck.append(armed)
            for armed in stuck:
                try:
                    self.on_stuck(armed)
                except Exception:
                    log.exception("could not handle a stuck job")
