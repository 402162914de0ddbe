"""The processor threads of one process and their lifecycle.

Duties: start ``concurrency`` processors and the wakeup listener; give
them their work through a few verbs (``take`` a claimed job, ``record`` an
outcome, ``finished``, ``bury``: processor.py); ``quiet``
(stop fetching, let running jobs finish, then give back what no thread
runs) and ``resume``; ``leave`` (a recycle: quiet for good, whatever
resumes it); on stop, wait for
running jobs until the deadline, then push back what is still in our
in-progress list *before* the process exits: a job pushed back and run again
is better than a job lost.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import redis

from jobmaster.connection import byte_list
from jobmaster.metrics.jobs import JobMetrics
from jobmaster.outage import OUTAGE_BACKOFF, OutageLog
from jobmaster.poison import interrupted
from jobmaster.recovery import RecoveryReport, Triage
from jobmaster.slots import StartedSlots
from jobmaster.worker.cancels import CancelWatch
from jobmaster.worker.context import WorkerContext
from jobmaster.worker.executor import Executor
from jobmaster.worker.fetch import Fetcher, Unit
from jobmaster.worker.outcome import Outcome, record, run_hook
from jobmaster.worker.processor import Processor
from jobmaster.worker.running import RunningTable
from jobmaster.worker.wakeup import WakeupListener, WorkSignal
from jobmaster.worker.watchdog import Watchdog

log = logging.getLogger("jobmaster.worker.manager")

# Builds the triage of a stop whose running jobs are to blame (a memory
# recycle), from the digests of the jobs whose code runs (slots.py).
Blame = Callable[[Sequence[bytes]], Triage]

PUSH_BACK_ATTEMPTS_FOR = 10.0  # seconds spent retrying the push back while Redis is away
FETCH_SETTLE = 2.0  # seconds halt waits for fetches in flight to land
IDLE_WAIT = 60.0  # an idle thread wakes on a notification; this only bounds the wait
QUIET_WAIT = 0.5  # seconds a quiet thread waits before it looks again


class Manager:
    def __init__(
        self,
        ctx: WorkerContext,
        slots: StartedSlots | None = None,
        *,
        watchdog: Watchdog | None = None,
        cancels: CancelWatch | None = None,
        max_jobs: int = 0,
    ) -> None:
        """``watchdog``: enforces job timeouts (None: none are). ``cancels``: stops
        the jobs ``jobmaster.cancel`` names (None: not heard). ``max_jobs``: stop
        fetching once this many jobs are done (0: no limit)."""
        self.ctx = ctx
        self.signal = WorkSignal()
        self.fetcher = Fetcher(ctx, self.signal)
        self.fetching = threading.Event()
        self.fetching.set()
        self.fetch_outage = OutageLog("fetch")  # shared by the processor threads
        self.table = RunningTable(self.fetching, ctx.stopping, slots, max_jobs)
        self.job_metrics = JobMetrics()  # counts per job, reported to a master serving metrics
        self._fetches = 0  # fetches in flight (a fetched job is not claimed yet)
        self._fetch_lock = threading.Condition()
        self._swept = True  # nothing to sweep until a quiet begins (sweep_unclaimed)
        executor = Executor.of(ctx, watchdog, cancels)
        self.processors = [
            Processor(i, self, self.table, executor, ctx.stopping)
            for i in range(ctx.config.concurrency)
        ]
        self.listener = WakeupListener(ctx, self.signal, self.fetcher.names)

    @property
    def max_jobs(self) -> int:
        return self.table.max_jobs

    # -- the processors' verbs (processor.Work) ----------------------------
    def take(self) -> Unit | None:
        """Fetch a job and claim it for the calling thread; None after waiting
        (quiet, nothing came, or Redis away: the thread asks again)."""
        if not self.fetching.is_set():
            self.fetching.wait(QUIET_WAIT)
            self.sweep_unclaimed()
            return None
        seen = self.signal.generation
        failed = False
        with self.fetch_in_flight():
            try:
                unit = self.fetcher.fetch()
                self.fetch_outage.succeeded(time.monotonic())
            except redis.RedisError as error:
                # One log line per outage, not one per thread.
                self.fetch_outage.failed(error, time.monotonic())
                unit, failed = None, True
            # Claimed atomically with the quiet/stop state (running.py):
            # else a stop could look at the table between our check and
            # our claim, push the job back, and we would run it anyway.
            if unit is not None and not self.table.claim(unit):
                self.give_back(unit)  # fetched as quiet or stop began
                return None
        if failed:
            self.ctx.stopping.wait(OUTAGE_BACKOFF)
        elif unit is None:
            self.signal.wait(seen, self.fetching, IDLE_WAIT)
        return unit

    def record(self, unit: Unit, outcome: Outcome) -> None:
        """Record a job's outcome, only if it is still ours (else it was pushed
        back, or the watchdog recorded it); count it and run its hook."""
        if self.table.may_record(unit) and record(self.ctx, unit.raw, outcome, unit.queue):
            self.job_metrics.observe_outcome(outcome, unit.queue)
            run_hook(outcome)

    def finished(self, unit: Unit) -> None:
        if self.table.finished(unit) and self.table.spent and self.fetching.is_set():
            self.quiet()

    def bury(self, unit: Unit, reason: str) -> None:
        self.ctx.recovery.bury(self.ctx.inprogress_key, unit.raw, reason, unit.queue)

    # -- the watchdog's ------------------------------------------------------
    def give_up(self, unit: Unit, outcome: Outcome) -> None:
        """A job stuck past its timeout: no longer its thread's to record (or to
        wait for at a stop); its outcome is recorded here instead."""
        self.table.abandon(unit)
        if record(self.ctx, unit.raw, outcome, unit.queue):
            self.job_metrics.observe_outcome(outcome, unit.queue)
            run_hook(outcome)

    @property
    def completed(self) -> int:
        return self.table.completed

    @contextmanager
    def fetch_in_flight(self) -> Iterator[None]:
        """Around a fetch and its claim or give-back: halt waits for it, so that a
        job fetched as stop began is back on its queue before the process exits."""
        with self._fetch_lock:
            self._fetches += 1
        try:
            yield
        finally:
            with self._fetch_lock:
                self._fetches -= 1
                self._fetch_lock.notify_all()

    @property
    def busy(self) -> int:
        return self.table.busy

    def running(self) -> Counter[bytes]:
        """How many claims each payload (as stored) has now."""
        return self.table.claimed()

    def give_back(self, unit: Unit) -> None:
        """Return a job fetched after quiet/stop began to the front of its queue.

        If Redis is away it stays in our in-progress list, where the stop's
        push back, the self-check or the master finds it: never lost.
        """
        try:
            self.ctx.recovery.requeue(
                self.ctx.inprogress_key, [unit.raw], queues={unit.raw: unit.queue}
            )
        except redis.RedisError as error:
            log.warning("could not give back a job (%s); it stays in progress", error)

    def sweep_unclaimed(self) -> None:
        """Once per quiet, when no job is claimed and no fetch is in flight:
        give back whatever our in-progress list still holds.

        Such an entry is run by no thread and never will be: a FETCH whose
        reply was lost to the socket timeout (Redis stalled: fetch.py) moved
        it here after the thread gave up on it. The self-check would requeue it,
        but only after two of its checks (20 to 60 s): a quiet pool held a job
        it never ran, and the operator waiting for it to drain (before a
        deploy) waited that long, or stopped it with the job in the list.
        """
        # Held for the read and the requeue: no fetch begins meanwhile (a
        # resume's fetch, listed but not yet claimed, would be taken from the
        # thread about to run it). A stop's halt waits for it: one round trip.
        with self._fetch_lock:
            if self._swept or self._fetches or self.fetching.is_set() or self.table.busy:
                return
            if self.ctx.stopping.is_set():  # halt pushes back the whole list
                return
            try:
                listed = Counter(byte_list(self.ctx.redis.lrange(self.ctx.inprogress_key, 0, -1)))
                unclaimed = listed - self.table.claimed()
                report = self.ctx.recovery.requeue(self.ctx.inprogress_key, unclaimed.elements())
            except redis.RedisError as error:  # tried again at the next look (QUIET_WAIT)
                log.debug("quiet: could not look at our in-progress list (%s)", error)
                return
            self._swept = True
        if report.requeued or report.buried:
            log.warning(
                "quiet: gave back %d in-progress job(s) that no thread was running: %s",
                len(report.requeued) + len(report.buried),
                ", ".join(report.requeued + report.buried),
            )

    # -- lifecycle ---------------------------------------------------------
    def start(self) -> None:
        self.listener.start()
        for processor in self.processors:
            processor.start()

    @property
    def quiet_now(self) -> bool:
        return not self.fetching.is_set()

    def quiet(self) -> None:
        self._swept = False  # this quiet's sweep (sweep_unclaimed)
        if self.table.quiet():
            log.info("quiet: no new jobs will be fetched; %d running", self.busy)
        self.signal.notify_all()

    def resume(self) -> None:
        if self.table.resume():
            log.info("resumed: fetching again")
            self.signal.notify_all()
        elif self.table.leaving or self.table.spent:
            log.info("resume ignored: this process is being recycled (%d running)", self.busy)

    def leave(self) -> None:
        """Recycled: quiet for good (a CONT or a remote resume never undoes it)."""
        if self.table.leave():
            log.info("recycled: no new jobs will be fetched; %d running", self.busy)
        self.signal.notify_all()

    def wait_idle(self, deadline: float, interrupted: Callable[[], bool] = lambda: False) -> bool:
        """Wait until no job runs, the monotonic ``deadline`` passes or ``interrupted()``."""
        return self.table.wait_idle(deadline, interrupted)

    def halt(self, blame: Blame | None = None) -> RecoveryReport:
        """End the processors and push back everything left in our in-progress list
        (through the triage ``blame`` builds from the jobs still running, when
        those are to blame).

        The jobs still running are taken from their threads first (the table's
        ``close``): a thread whose job ends after this records nothing, since the
        job is back on its queue and its next run records it.
        """
        running = self.table.close()
        started = self.table.started_digests()
        # Either way the jobs whose code ran count a run cut short (attempt).
        triage = blame(started) if blame is not None else interrupted(started)
        self.signal.notify_all()
        if running:
            log.warning(
                "stopping with %d job(s) still running: pushing them back: %s",
                len(running),
                ", ".join(sorted(self._jid(unit.raw) for unit in running)),
            )
        with self._fetch_lock:  # bounded: a fetch is one round trip
            deadline = time.monotonic() + FETCH_SETTLE
            while self._fetches and time.monotonic() < deadline:
                self._fetch_lock.wait(0.05)
        queues = {unit.raw: unit.queue for unit in running}
        deadline = time.monotonic() + PUSH_BACK_ATTEMPTS_FOR
        while True:
            try:
                entries = byte_list(self.ctx.redis.lrange(self.ctx.inprogress_key, 0, -1))
                return self.ctx.recovery.requeue(
                    self.ctx.inprogress_key, entries, queues=queues, triage=triage
                )
            except redis.RedisError as error:
                if time.monotonic() > deadline:
                    log.error(
                        "could not push back in-progress jobs (%s): they stay in %s and are "
                        "recovered once this process's heartbeat expires",
                        error,
                        self.ctx.inprogress_key,
                    )
                    return RecoveryReport()
                time.sleep(0.5)

    @staticmethod
    def _jid(raw: bytes) -> str:
        try:
            return str(json.loads(raw).get("jid"))
        except (ValueError, AttributeError):
            return "?"
