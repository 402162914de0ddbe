"""Running one fetched job: read it once, run it, build its one outcome.

A job's way through here is straight: ``FetchedJob.read`` decodes the entry
once (fetched.py), ``run`` takes it through its steps in order, and the
ending it comes to (outcome.py: ran, held back, skipped, refused, expired) is
made into one ``Outcome`` by ``conclude``, once, with its lock, workflow step and
hook. Nothing here records it: ``record`` (outcome.py) does that afterwards,
and the job's "working" mark rides in a later round trip (core.py).
Redis is touched twice at most: a batch job's ``cancelled`` flag is read
(such a job is skipped), and an ``until_started`` job's lock is released
as it starts. Bad input becomes a dead-set outcome instead of an exception, so one
broken payload never kills a processor thread or holds up the jobs behind it.

Each job logs one ``job.start`` line and one end line named after its
outcome: ``job.done`` (INFO), ``job.retry`` or ``job.failed`` (retry off;
WARNING), ``job.dead`` (ERROR), with ``duration_ms`` and, for a failure, the
error's class and message. A job held back by middleware logs
``job.deferred`` instead, a job of a cancelled batch ``job.skipped``, a
job stopped by ``jobmaster.cancel`` (running, or before it started)
``job.cancelled`` (WARNING), and a job fetched after its ``expires_in``
``job.expired`` (it does not run).
The lines carry the jid, job name and queue, never the arguments: those may
be secrets (``encrypt=True``) or personal data.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any, cast

import redis

from jobmaster import current
from jobmaster import payload as wire
from jobmaster.errors import JobCancelled, JobTimeout
from jobmaster.keys import Keys
from jobmaster.middleware import base as middleware
from jobmaster.middleware.base import Defer, JobContext, Middleware
from jobmaster.registry import RegisteredJob
from jobmaster.scripts import Scripts, Unlock
from jobmaster.worker.cancels import CancelWatch, Watched
from jobmaster.worker.context import WorkerContext
from jobmaster.worker.core import IOCore
from jobmaster.worker.coroutines import TaskStopper, run_coroutine
from jobmaster.worker.fetched import FetchedJob
from jobmaster.worker.outcome import (
    Ending,
    Expired,
    HeldBack,
    Kind,
    NotStarted,
    Outcome,
    Ran,
    Refused,
    Skipped,
    bad_payload,
    conclude,
)
from jobmaster.worker.unit import Unit
from jobmaster.worker.watchdog import Armed, Blamed, Interrupt, Watchdog
from jobmaster.workflows import batch, steps

log = logging.getLogger("jobmaster.worker.executor")


@dataclass(frozen=True)
class Executor:
    """Runs fetched jobs in the calling thread; what it needs, and only that.

    One job's way, in order, each step once: read (fetched.py), end it unrun
    if it expired, skip if its batch was cancelled, bury if it cannot run,
    middleware before, mark it working, release an ``until_started`` lock,
    call it under its timeout (``current_job()`` set), build its one outcome
    (outcome.py), log its end line, middleware after.
    """

    client: redis.Redis
    keys: Keys
    scripts: Scripts
    worker: str  # this process's identity, for middleware
    core: IOCore  # where the "working" mark goes
    watchdog: Watchdog | None = None  # job timeouts; None: no limit enforced
    cancels: CancelWatch | None = None  # jobmaster.cancel's requests; None: not heard

    @classmethod
    def of(
        cls,
        ctx: WorkerContext,
        watchdog: Watchdog | None = None,
        cancels: CancelWatch | None = None,
    ) -> Executor:
        return cls(ctx.redis, ctx.keys, ctx.scripts, ctx.name, ctx.core, watchdog, cancels)

    def run(self, unit: Unit) -> Outcome:
        """Run the job in ``unit`` and say how it ended (and when). An async job
        (``jobmaster.testing``: a worker runs those on its loop) runs to its end
        on an event loop of its own."""
        started = time.time()
        job = self._read(unit, started)
        if isinstance(job, Outcome):
            return job
        if job.function is not None and job.function.is_async:
            return run_coroutine(self.arun(unit, job))
        ended = self._not_run(job, self._not_to_run(job, started), started)
        if ended is not None:
            return ended
        function = cast(RegisteredJob, job.function)  # refused if None
        chain, around = self._around(job)
        if around is not None:
            try:
                middleware.before_process(chain, around)
            except Defer as held:
                return self._end(job, HeldBack(held.seconds, str(held)), started)
        status_key = self._starting(job)
        ending, took = self._call(job, function)
        self.core.ended(status_key)  # its mark is kept alive no more
        outcome = self._end(job, ending, started, took)
        if around is not None:
            middleware.after_process(chain, around, ending.error)
        return outcome

    async def arun(self, unit: Unit, job: FetchedJob | None = None) -> Outcome:
        """``run`` for an async job, on the event loop, step for step. The steps
        that may wait on Redis (a batch job's cancelled flag, an
        ``until_started`` lock, a sync middleware) run in a thread, so the loop
        runs the other jobs meanwhile."""
        started = time.time()
        read = job if job is not None else self._read(unit, started)
        if isinstance(read, Outcome):
            return read
        job = read
        if job.step is not None:  # reads its batch's cancelled flag
            not_run = await asyncio.to_thread(self._not_to_run, job, started)
        else:
            not_run = self._not_to_run(job, started)
        ended = self._not_run(job, not_run, started)
        if ended is not None:
            return ended
        function = cast(RegisteredJob, job.function)  # refused if None
        chain, around = self._around(job)
        if around is not None:
            try:
                await middleware.abefore_process(chain, around)
            except Defer as held:
                return self._end(job, HeldBack(held.seconds, str(held)), started)
        status_key = self._starting(job)
        ending, took = await self._acall(job, function)
        self.core.ended(status_key)
        outcome = self._end(job, ending, started, took)
        if around is not None:
            await middleware.aafter_process(chain, around, ending.error)
        return outcome

    def _not_run(
        self, job: FetchedJob, not_run: Expired | Skipped | NotStarted | None, started: float
    ) -> Outcome | None:
        """The outcome of a job not to run (``not_run``) or that cannot run
        (refused: not registered here, arguments it cannot open); None: run it."""
        if not_run is not None:
            return self._end(job, not_run, started)
        if job.function is None or job.refused is not None:
            return self._end(job, Refused(job.refused or "not registered"), started)
        return None

    @staticmethod
    def _read(unit: Unit, started: float) -> FetchedJob | Outcome:
        """The job read from its entry, or its dead-on-arrival outcome."""
        try:
            return FetchedJob.read(unit)
        except wire.BadPayload as error:
            outcome = bad_payload(unit.raw, str(error), unit.queue, started, time.time())
            _log_buried(outcome, unit.queue, str(error))
            return outcome

    def _around(self, job: FetchedJob) -> tuple[list[Middleware], JobContext | None]:
        """The middleware around the job, and what their hooks see (None: none)."""
        chain = [*middleware.installed(), *job.options.middleware]
        if not chain:
            return chain, None
        return chain, JobContext(
            job.wire, job.queue, self.worker, self.client, self.keys, self.scripts
        )

    def _starting(self, job: FetchedJob) -> str:
        """Its start line, and its "working" mark (in a round trip made anyway:
        core.py); the status key the mark is under."""
        _event(logging.INFO, "job.start", job, "start")
        status_key = self.keys.status(job.jid)
        self.core.mark(status_key, job.raw)
        return status_key

    def _not_to_run(self, job: FetchedJob, now: float) -> Expired | Skipped | NotStarted | None:
        """Why a read job is not to run at all, if it is not: cheapest look first."""
        if job.expires_at is not None and now > job.expires_at:  # its payload alone
            return Expired(job.payload.get("expires_in"))
        if steps.cancelled(self.client, self.keys, job.step):
            return Skipped()
        if self.cancels is not None and self.cancels.requested(job.jid):
            return NotStarted()  # a local look: no round trip
        return None

    def _call(self, job: FetchedJob, function: RegisteredJob) -> tuple[Ran, float]:
        """Call the job's function under its timeout: how it ended, and how long
        it took (seconds)."""
        started = time.monotonic()
        self._release_until_started(job)
        args, kwargs = job.arguments
        try:
            with Scope(job, self.watchdog, self.cancels):
                value = function.func(*args, **kwargs)
        except BaseException as error:  # a job's SystemExit must not end the thread either
            if isinstance(error, JobTimeout) and not str(error):
                error = JobTimeout(f"ran past its timeout of {job.timeout:g}s")
            elif isinstance(error, JobCancelled) and not str(error):
                error = JobCancelled("cancelled while running (jobmaster.cancel)")
            return Ran(error), time.monotonic() - started
        return Ran(value=value), time.monotonic() - started

    async def _acall(self, job: FetchedJob, function: RegisteredJob) -> tuple[Ran, float]:
        """``_call`` for an async job: its coroutine awaited under its timeout
        and cancel watch, which stop it by cancelling its task (a raise in the
        loop's thread would hit whichever job runs there at that moment); the
        ``CancelledError`` it raises is read as their reason."""
        started = time.monotonic()
        if job.until_started is not None:
            await asyncio.to_thread(self._release_until_started, job)
        args, kwargs = job.arguments
        stopper = TaskStopper()
        scope = Scope(job, self.watchdog, self.cancels, stopper.interrupt, stopper.blamed)
        try:
            with scope:
                try:
                    value = await function.func(*args, **kwargs)
                finally:
                    stopper.done()
        except BaseException as error:
            if isinstance(error, asyncio.CancelledError) and stopper.cancelled_from_outside():
                raise  # the loop is closing at a stop: no outcome, no end line
            error = scope.reason(error, stopper)
            if isinstance(error, JobTimeout) and not str(error):
                error = JobTimeout(f"ran past its timeout of {job.timeout:g}s")
            elif isinstance(error, JobCancelled) and not str(error):
                error = JobCancelled("cancelled while running (jobmaster.cancel)")
            return Ran(error), time.monotonic() - started
        stopper.stopped()  # a stop it swallowed is taken back all the same
        return Ran(value=value), time.monotonic() - started

    def _end(
        self, job: FetchedJob, ending: Ending, started: float, took: float | None = None
    ) -> Outcome:
        """The job's one outcome, and its end line."""
        outcome = conclude(job, ending, started, time.time())
        _log_end(outcome, ending, job, took)
        return outcome

    def _release_until_started(self, job: FetchedJob) -> None:
        """An ``until_started`` unique job frees its lock as it starts."""
        if job.until_started is None:
            return
        try:
            Unlock(lock_key=self.keys.unique(job.until_started), jid=job.jid).run(
                self.scripts.unlock
            )
        except redis.RedisError as error:  # it expires on its own (a bounded TTL)
            log.warning("could not release the unique lock of jid=%s: %s", job.jid, error)


class Scope:
    """What a job's code runs inside: its cancel watch (cancels.py), its timeout
    (watchdog.py), ``jobmaster.current_batch()`` and ``jobmaster.current_job()``.

    One object, entered and left as four nested ``with`` blocks would be (in
    that order, left in reverse, each left even if one left before it raised:
    a cancel or timeout is raised asynchronously and may land in here). Four
    generator context managers cost about 10 µs of a no-op job's worker CPU
    (~250 µs); this, about 3.
    """

    __slots__ = (
        "_armed",
        "_batch",
        "_current",
        "_watched",
        "blamed",
        "cancels",
        "interrupt",
        "job",
        "watchdog",
    )

    def __init__(
        self,
        job: FetchedJob,
        watchdog: Watchdog | None,
        cancels: CancelWatch | None,
        interrupt: Interrupt | None = None,
        blamed: Blamed | None = None,
    ) -> None:
        """``interrupt``: how the timeout and a cancel stop the job (None: an
        exception raised in this thread); ``blamed``: whether it is stuck once
        past its timeout's grace (watchdog.py; None: it is)."""
        self.job = job
        self.watchdog = watchdog
        self.cancels = cancels
        self.interrupt = interrupt
        self.blamed = blamed
        self._watched: Watched | None = None
        self._armed: Armed | None = None
        self._batch: batch.RunningToken | None = None
        self._current: current.Token | None = None

    def __enter__(self) -> None:
        job = self.job
        try:
            if self.cancels is not None:  # raises JobCancelled if already asked
                self._watched = self.cancels.watch(job.jid, self.interrupt)
            if self.watchdog is not None:
                self._armed = self.watchdog.arm(job, job.timeout, self.interrupt, self.blamed)
            self._batch = batch.enter_running(job.payload)
            self._current = current.enter(job.wire, job.queue)
        except BaseException:
            self.__exit__(None, None, None)
            raise

    def reason(self, error: BaseException, stopper: TaskStopper) -> BaseException:
        """What an async job's ``CancelledError`` means: its timeout or its
        cancel fired (the task was cancelled for it), else the error itself."""
        if isinstance(error, asyncio.CancelledError) and stopper.stopped():
            if self._armed is not None and self._armed.fired:
                return JobTimeout()
            if self._watched is not None and self._watched.fired:
                return JobCancelled()
        return error

    def __exit__(self, *_: object) -> None:
        try:
            if self._current is not None:
                current.leave(self._current)
        finally:
            try:
                if self._batch is not None:
                    batch.leave_running(self._batch)
            finally:
                try:
                    if self.watchdog is not None:
                        self.watchdog.disarm(self._armed)
                finally:
                    if self.cancels is not None and self._watched is not None:
                        self.cancels.unwatch(self._watched)


def execute(unit: Unit, ctx: WorkerContext, watchdog: Watchdog | None = None) -> Outcome:
    """Run one job in this thread (``jobmaster.testing.work``, tests)."""
    return Executor.of(ctx, watchdog).run(unit)


def _event(
    level: int,
    event: str,
    about: FetchedJob | dict[str, Any],
    message: str,
    *args: object,
    **fields: Any,
) -> None:
    """Log one per-job line with ``event`` (and e.g. ``duration_ms``) as fields.

    Checked first so that a level that hides the line (``log_levels``) costs
    no dict (not even the job's fields: ``about``) and no formatting: this
    runs twice for every job.
    """
    if not log.isEnabledFor(level):
        return
    if "duration_ms" in fields:
        fields["duration_ms"] = round(fields["duration_ms"], 3)
    # Made here rather than by ``log.log``, which looks up the calling
    # frame's file and line (a walk of the stack, for fields our formats
    # never print): the caller of a per-job line is always this function.
    context = about.log_context() if isinstance(about, FetchedJob) else about
    extra = {**context, "event": event, **fields}
    log.handle(log.makeRecord(log.name, level, __file__, 0, message, args, None, "_event", extra))


def _log_buried(outcome: Outcome, queue: str, reason: str) -> None:
    context = {"jid": outcome.jid, "job": outcome.job, "queue": queue}
    _event(logging.ERROR, "job.dead", context, "dead on arrival: %s", reason, error=outcome.error)


def _log_end(outcome: Outcome, ending: Ending, job: FetchedJob, took: float | None) -> None:
    """The job's end line, named after its outcome (see the module docstring)."""
    if isinstance(ending, Refused):
        _log_buried(outcome, job.queue, ending.reason)
    elif isinstance(ending, Skipped):
        _event(logging.INFO, "job.skipped", job, "skipped: its batch was cancelled")
    elif isinstance(ending, Expired):
        _event(logging.INFO, "job.expired", job, "expired: %s", outcome.reason)
    elif isinstance(ending, HeldBack):
        message = "held back for %.1fs: %s"
        _event(logging.INFO, "job.deferred", job, message, ending.seconds, ending.reason)
    elif isinstance(ending, NotStarted):
        _event(logging.WARNING, "job.cancelled", job, "cancelled before it started")
    elif outcome.kind is Kind.CANCELLED:
        ms = _milliseconds(took or 0.0)
        message = "cancelled after %.1f ms: %s"
        fields = {"duration_ms": ms, "error": outcome.error}
        _event(logging.WARNING, "job.cancelled", job, message, ms, outcome.reason, **fields)
    elif outcome.kind is Kind.DONE:
        ms = _milliseconds(took or 0.0)
        _event(logging.INFO, "job.done", job, "done in %.1f ms", ms, duration_ms=ms)
    else:
        _log_failure(outcome, job, took or 0.0)


def _milliseconds(seconds: float) -> float:
    """A duration as the end line shows it, rounded once: its message (%.1f)
    and its ``duration_ms`` field are formatted from this one value, so they
    cannot disagree at a rounding boundary (202.1 in one, 202.15 -> 202.2 in
    the other)."""
    return round(seconds * 1000, 3)


def _log_failure(outcome: Outcome, job: FetchedJob, seconds: float) -> None:
    """The failure's end line: ``job.retry``, ``job.dead`` or ``job.failed`` (dropped)."""
    took = _milliseconds(seconds)
    fields = {"duration_ms": took, "error": outcome.error}
    if outcome.kind is Kind.RETRY:
        count = (outcome.stored or {}).get("retry_count")
        _event(
            logging.WARNING,
            "job.retry",
            job,
            "failed after %.1f ms: %s; retry %s in %.0fs",
            took,
            outcome.reason,
            count,
            outcome.score - time.time(),
            **fields,
        )
    elif outcome.kind is Kind.DEAD:
        message = "failed after %.1f ms, dead: %s"
        _event(logging.ERROR, "job.dead", job, message, took, outcome.reason, **fields)
    else:
        message = "failed after %.1f ms, dropped (retry off): %s"
        _event(logging.WARNING, "job.failed", job, message, took, outcome.reason, **fields)
