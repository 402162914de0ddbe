"""The child's side: count each job as its outcome is recorded; report to the master.

``JobMetrics`` is fed by the processor threads (``observe``) and read by the
child's main thread, which runs the ``Reporter`` once per tick. Counting is
always on (a lock and a dict update per job); reporting only happens in a
child whose master serves metrics.
"""

from __future__ import annotations

import errno
import logging
import os
import socket
import threading
import time
from collections.abc import Callable

from jobmaster import registry
from jobmaster.metrics.series import Key, Report, Series, encode
from jobmaster.worker.outcome import Outcome

log = logging.getLogger("jobmaster.metrics.jobs")

REPORT_INTERVAL = 1.0  # seconds between two reports: what a SIGKILLed child can lose
FLUSH_FOR = 1.0  # seconds the final report keeps trying while the master's queue is full
# The label of a payload naming no registered job: names read from Redis are
# anyone's to invent, and each new label value would be a new series forever.
UNREGISTERED = "(unregistered)"


class JobMetrics:
    """This process's counts per (job, queue) since it started."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._series: dict[Key, Series] = {}
        self.version = 0  # bumped by each observation: "anything new to report?"

    def observe(self, job: str, queue: str, failed: bool, seconds: float | None) -> None:
        with self._lock:
            self._series.setdefault((job, queue), Series()).observe(failed, seconds)
            self.version += 1

    def observe_outcome(self, outcome: Outcome, queue: str) -> None:
        """Count a recorded outcome: a run, failed or not. A job held back by
        middleware (``deferred``), skipped (its batch cancelled) or cancelled
        before it started did not run and is not counted; an expired one did not
        run either, and has a count of its own."""
        job = outcome.job if registry.lookup(outcome.job) is not None else UNREGISTERED
        if outcome.kind == "expired":
            self.observe_expired(job, queue)
            return
        if not outcome.attempted:
            return
        ran = outcome.started_at > 0 and outcome.ended_at >= outcome.started_at
        seconds = outcome.ended_at - outcome.started_at if ran else None
        self.observe(job, queue, outcome.failed, seconds)

    def observe_expired(self, job: str, queue: str) -> None:
        with self._lock:
            self._series.setdefault((job, queue), Series()).expired += 1
            self.version += 1

    def snapshot(self) -> dict[Key, Series]:
        with self._lock:
            return {key: series.copy() for key, series in self._series.items()}


class Reporter:
    """Sends this child's cumulative counts to the master, on a non-blocking socket.

    A send that would block (the master's queue is full: it is busy) is
    dropped and tried again at the next tick; the next report carries
    everything anyway.
    """

    def __init__(
        self,
        sock: socket.socket,
        metrics: JobMetrics,
        busy: Callable[[], int],
        threads: int,
    ) -> None:
        self.sock = sock
        self.metrics = metrics
        self.busy = busy
        self.threads = threads
        self._sent: tuple[int, int] | None = None  # (version, busy) last delivered
        self._next = 0.0
        self._too_big_logged = False

    def tick(self, now: float) -> None:
        """Report if something changed and the last report is a second old."""
        if now < self._next:
            return
        state = (self.metrics.version, self.busy())
        if state != self._sent and self._send(state):
            self._next = now + REPORT_INTERVAL

    def flush(self) -> None:
        """The final report, once the last job is recorded: a graceful stop loses nothing."""
        deadline = time.monotonic() + FLUSH_FOR
        state = (self.metrics.version, 0)
        while not self._send(state) and time.monotonic() < deadline:
            time.sleep(0.01)

    def _send(self, state: tuple[int, int]) -> bool:
        """Send one report; False only if it would block (worth trying again)."""
        report = Report(os.getpid(), state[1], self.threads, self.metrics.snapshot())
        try:
            self.sock.send(encode(report))
        except BlockingIOError:
            return False
        except OSError as error:
            if error.errno == errno.EMSGSIZE and not self._too_big_logged:
                self._too_big_logged = True
                log.warning(
                    "metrics: report too large for one datagram (%d series)", len(report.jobs)
                )
            # Else the master is gone: the child notices through its ppid and stops.
            return True
        self._sent = state
        return True
