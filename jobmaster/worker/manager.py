"""The processor threads of one process and their lifecycle.

Duties: start ``concurrency`` processors and the wakeup listener; give
them their work through a few verbs (``take`` a claimed job, ``record`` an
outcome, ``finished``, ``bury``: processor.py); ``quiet``
(stop fetching, let running jobs finish) and ``resume``; ``leave`` (a
recycle: quiet for good, whatever resumes it); on stop, wait for
running jobs until the deadline, then push back what is still in our
in-progress list *before* the process exits: a job pushed back and run again
is better than a job lost.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence

import redis

from jobmaster import registry
from jobmaster.connection import byte_list
from jobmaster.metrics.jobs import JobMetrics
from jobmaster.poison import interrupted
from jobmaster.recovery import RecoveryReport, Triage
from jobmaster.slots import StartedSlots
from jobmaster.worker.async_runner import AsyncRunner, pool_of
from jobmaster.worker.cancels import CancelWatch
from jobmaster.worker.context import WorkerContext
from jobmaster.worker.executor import Executor
from jobmaster.worker.fetch import Feed, Fetcher, Pool
from jobmaster.worker.outcome import Outcome, arecord, arun_hook, record, run_hook
from jobmaster.worker.processor import Processor
from jobmaster.worker.running import RunningTable
from jobmaster.worker.unit import Unit
from jobmaster.worker.wakeup import CoreWakeups, WakeupListener
from jobmaster.worker.watchdog import Watchdog

log = logging.getLogger("jobmaster.worker.manager")

# Builds the triage of a stop whose running jobs are to blame (a memory
# recycle), from the digests of the jobs whose code runs (slots.py).
Blame = Callable[[Sequence[bytes]], Triage]

PUSH_BACK_ATTEMPTS_FOR = 10.0  # seconds spent retrying the push back while Redis is away
FETCH_SETTLE = 2.0  # seconds halt waits for the I/O core's round trip in flight
TAKE_WAIT = 1.0  # seconds an idle runner waits for a job before it looks at the stop


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
        self.fetcher = Fetcher(ctx)
        self.fetching = threading.Event()
        self.fetching.set()
        self.table = RunningTable(self.fetching, ctx.stopping, slots, max_jobs)
        self.job_metrics = JobMetrics()  # counts per job, reported to a master serving metrics
        # Jobs fetched for the runners by the I/O core (core.py), each already in
        # our in-progress list; None wakes a runner to look at the stop.
        self.ready: queue.SimpleQueue[Unit | None] = queue.SimpleQueue()
        self.core = ctx.core
        executor = Executor.of(ctx, watchdog, cancels)
        config = ctx.config
        pools = [Pool(config.concurrency, self._hand_threads)]
        # An event loop only for an app with async jobs (async_runner.py); its
        # tasks' started slots follow the threads'.
        self.runner: AsyncRunner | None = None
        if registry.any_async():
            self.runner = AsyncRunner(
                self,
                self.table,
                executor,
                capacity=config.async_concurrency,
                first_slot=config.concurrency,
                loop_kind=config.async_loop,
            )
            pools.append(Pool(config.async_concurrency, self.runner.hand))
        self.feed = Feed(self.fetcher, self.table, pools, pool_of if self.runner else None)
        self.core.attach(self.feed)
        self.signal = CoreWakeups(self.core)
        self.processors = [
            Processor(i, self, self.table, executor, ctx.stopping)
            for i in range(config.concurrency)
        ]
        self.listener = WakeupListener(ctx, self.signal, self.fetcher.names)

    @property
    def max_jobs(self) -> int:
        return self.table.max_jobs

    # -- the processors' verbs (processor.Work) ----------------------------
    def take(self) -> Unit | None:
        """A job fetched by the I/O core, claimed for the calling thread; None
        after waiting (nothing came, or a stop woke it: the thread asks again)."""
        try:
            unit = self.ready.get(timeout=TAKE_WAIT)
        except queue.Empty:
            return None
        if unit is None:
            return None
        # Claimed atomically with the quiet/stop state (running.py): else a
        # stop could look at the table between our check and our claim, push
        # the job back, and we would run it anyway.
        if not self.table.claim(unit):
            self.refuse(unit)  # fetched as quiet or stop began
            return None
        return unit

    def _hand_threads(self, units: list[Unit]) -> None:
        for unit in units:
            self.ready.put(unit)

    # -- the event loop's (async_runner.AsyncWork) ----------------------------
    def claim(self, unit: Unit) -> bool:
        return self.table.claim(unit)

    def refuse(self, unit: Unit) -> None:
        self.give_back(unit)
        self.core.free(unit)

    async def arecord(self, unit: Unit, outcome: Outcome) -> None:
        """``record`` for an async job, on the loop (the FINISH awaited)."""
        if self.table.may_record(unit) and await arecord(
            self.ctx, unit.raw, outcome, unit.queue, frees=unit
        ):
            self.job_metrics.observe_outcome(outcome, unit.queue)
            await arun_hook(outcome)

    def record(self, unit: Unit, outcome: Outcome) -> None:
        """Record a job's outcome, only if it is still ours (else it was pushed
        back, or the watchdog recorded it); count it and run its hook."""
        if self.table.may_record(unit) and record(
            self.ctx, unit.raw, outcome, unit.queue, frees=unit
        ):
            self.job_metrics.observe_outcome(outcome, unit.queue)
            run_hook(outcome)

    def finished(self, unit: Unit) -> None:
        if self.table.finished(unit) and self.table.spent and self.fetching.is_set():
            self.quiet()
        # Its runner is free: said already by its FINISH (the core set ``freed``
        # before that call's reply reached this thread), else said now. A
        # token per job would wake the core once more per job for nothing.
        if not unit.freed:
            self.core.free(unit)

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

    # -- lifecycle ---------------------------------------------------------
    def start(self) -> None:
        if self.runner is not None:
            self.runner.start()  # before the first fetch: jobs for it come with it
        self.core.start()
        self.listener.start()
        for processor in self.processors:
            processor.start()

    @property
    def quiet_now(self) -> bool:
        return not self.fetching.is_set()

    def quiet(self) -> None:
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
        # The round trip in flight may be fetching: its jobs land in our
        # in-progress list (pushed back below) and in ``ready`` (a runner that
        # takes one gives it back: nothing can be claimed any more). Bounded: a
        # round trip; after it the core fetches no more.
        self.core.barrier(FETCH_SETTLE)
        for _ in self.processors:
            self.ready.put(None)  # idle runners look at the stop now
        try:
            return self._push_back({unit.raw: unit.queue for unit in running}, triage)
        finally:
            if self.runner is not None:
                self.runner.close()

    def _push_back(self, queues: dict[bytes, str], triage: Triage) -> RecoveryReport:
        """Everything in our in-progress list back to its queue (through ``triage``)."""
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
