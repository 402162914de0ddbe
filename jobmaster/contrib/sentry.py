"""Failures of jobs reported to Sentry (``pip install 'jobmaster[sentry]'``).

In the app module the worker imports (``app = [...]``)::

    import sentry_sdk
    import jobmaster.contrib.sentry

    sentry_sdk.init(dsn="https://...")                 # where the app always does it
    jobmaster.contrib.sentry.setup(report="deaths")    # or "failures"

or, with the same defaults, ``middleware = ["jobmaster.contrib.sentry:SentryMiddleware"]``
in the config. Each event names the job (tags ``jobmaster.job``,
``jobmaster.queue``, ``jobmaster.jid``, ``jobmaster.attempt``,
``jobmaster.batch``, ``jobmaster.outcome``; the same in a ``jobmaster``
context) and is grouped by job name (its fingerprint), so a job that keeps
failing is one issue however its stack traces differ. Never its arguments:
they may be secrets (``encrypt=True``) or personal data.

``report``:
- ``"deaths"`` (the default): once per job that failed for good, i.e. went
  to the dead set or was dropped with ``retry=False``. A job retried 25 times
  before it dies is one event, not 26.
- ``"failures"``: every failed attempt, retries included (``jobmaster.outcome``
  tells ``retry`` from ``dead`` and ``failed``).
A cancelled job (``jobmaster.cancel``) is never reported: it did not fail.
A poison pill (a job that kept killing its worker, buried by the master,
which runs no job code) is reported as a death too, by the worker that runs
its failure hook (jobmaster/failure_hook.py), with the job's own tags and
a ``PoisonPill`` error.

Around fork: ``sentry_sdk.init`` may run in the master, with the preloaded app.
It starts no thread there, and sentry-sdk (2.x) starts its sender thread
again in each child the first time the child sends (it notes which process
started it), so each child needs nothing more. What a child needs is to
send what it queued before it exits (a child leaves without Python's
``atexit``): this module flushes at ``on_child_stop``. A child killed
outright (SIGKILL, OOM) loses what it had not sent yet.

Each job runs in a Sentry isolation scope of its own carrying these tags,
so what the job's code reports itself (``sentry_sdk.capture_message``) is
tagged too, and one job's breadcrumbs never land on the next job's event.
jobmaster's own line for a failed job (``job.dead``, an ERROR) would be a
second event for the same failure, and so would Django's for a failed task
(jobmaster.contrib.django): those loggers are left out of Sentry's logging
integration.
"""

from __future__ import annotations

import contextvars
import logging
from contextlib import AbstractContextManager
from typing import Any, Literal

import sentry_sdk
from sentry_sdk.integrations.logging import ignore_logger
from sentry_sdk.utils import event_from_exception

import jobmaster
from jobmaster import failure_hook
from jobmaster import middleware as middlewares
from jobmaster.contrib import _failures
from jobmaster.current import JobInfo
from jobmaster.errors import PoisonPill
from jobmaster.middleware import JobContext, Middleware

log = logging.getLogger("jobmaster.contrib.sentry")

Report = Literal["deaths", "failures"]
GroupBy = Literal["job", "job+error", "sentry"]
FLUSH_TIMEOUT = 2.0  # seconds a stopping child gives its queued events
# Lines that would be a second event for a failure this module reports: a
# job's end line, Django's for a failed task, and the master's for a child a
# poison pill killed and for the pill's burial (reported as the job's death).
IGNORED_LOGGERS = (
    "jobmaster.worker.executor",
    "jobmaster.supervisor.deaths",
    "jobmaster.recovery",
    "django.tasks",
    "django_tasks",
)

# The job's isolation scope, entered by before_process and left by
# after_process (the same thread, or the same asyncio task, for one job).
_entered: contextvars.ContextVar[AbstractContextManager[Any] | None] = contextvars.ContextVar(
    "jobmaster_sentry_scope", default=None
)


class SentryMiddleware(Middleware):
    """Report failed jobs to Sentry (see the module's docstring)."""

    def __init__(self, report: Report = "deaths", group_by: GroupBy = "job") -> None:
        if report not in ("deaths", "failures"):
            raise ValueError(f"report must be 'deaths' or 'failures', got {report!r}")
        if group_by not in ("job", "job+error", "sentry"):
            raise ValueError(f"group_by must be 'job', 'job+error' or 'sentry', got {group_by!r}")
        self.report = report
        self.group_by = group_by
        # A poison pill is buried by the master, which runs no job code: the
        # worker running its failure hook reports its death (failure_hook.py).
        global _reporter
        _reporter = self
        failure_hook.on_buried(_report_buried)
        # A failed job's end line would be a second event: jobmaster's, and
        # Django's for a failed task (its task_finished receiver logs it).
        for logger in IGNORED_LOGGERS:
            ignore_logger(logger)

    # -- the hooks: the same for a thread's job and an async job's task --------
    def before_process(self, job: JobContext) -> None:
        self._enter(job)

    def after_process(self, job: JobContext, error: BaseException | None) -> None:
        try:
            if error is not None:
                self._report(job, error)
        finally:
            _leave()

    async def abefore_process(self, job: JobContext) -> None:
        self._enter(job)  # no Redis, no I/O: no thread needed

    async def aafter_process(self, job: JobContext, error: BaseException | None) -> None:
        self.after_process(job, error)  # capture only queues the event: no I/O here

    # -- what they do ---------------------------------------------------------
    def _enter(self, job: JobContext) -> None:
        _leave()  # a job held back by a later middleware never reached after_process
        scope_manager = sentry_sdk.isolation_scope()
        scope = scope_manager.__enter__()
        _entered.set(scope_manager)
        info = JobInfo.of(job.payload, job.queue)
        for name, value in _tags(info).items():
            scope.set_tag(name, value)
        scope.set_transaction_name(info.name)

    def _report(self, job: JobContext, error: BaseException) -> None:
        outcome = _failures.outcome_of(job.payload, error)
        if outcome == _failures.CANCELLED:
            return
        if self.report == "deaths" and outcome not in _failures.FOR_GOOD:
            return
        self.capture(JobInfo.of(job.payload, job.queue), error, outcome)

    def capture(self, info: JobInfo, error: BaseException, outcome: str) -> None:
        """One event for the job ``info`` names, on top of the current scope."""
        client = sentry_sdk.get_client()
        event, hint = event_from_exception(
            error,
            client_options=client.options,
            mechanism={"type": "jobmaster", "handled": False},
        )
        with sentry_sdk.new_scope() as scope:  # on top of the job's isolation scope
            scope.set_tag("jobmaster.outcome", outcome)
            scope.set_context("jobmaster", _context(info, outcome))
            fingerprint = self._fingerprint(info, error)
            if fingerprint is not None:
                scope.fingerprint = fingerprint
            sentry_sdk.capture_event(event, hint=hint)

    def _fingerprint(self, info: JobInfo, error: BaseException) -> list[str] | None:
        if self.group_by == "job":
            return ["jobmaster", info.name]
        if self.group_by == "job+error":
            return ["jobmaster", info.name, f"{type(error).__module__}.{type(error).__qualname__}"]
        return None  # Sentry's own grouping (stack trace)


_reporter: SentryMiddleware | None = None  # the middleware made last: its settings


def _report_buried(payload: dict[str, Any], error: PoisonPill) -> None:
    """A job the master buried (it kept killing its worker): one event, tagged
    as its own jobs' are, in a scope of its own (not the hook job's)."""
    reporter = _reporter
    if reporter is None:
        return
    info = JobInfo.of(payload)
    with sentry_sdk.isolation_scope() as scope:
        for name, value in _tags(info).items():
            scope.set_tag(name, value)
        scope.set_transaction_name(info.name)
        reporter.capture(info, error, "dead")


def _leave() -> None:
    scope_manager = _entered.get()
    if scope_manager is None:
        return
    _entered.set(None)
    try:
        scope_manager.__exit__(None, None, None)
    except (ValueError, RuntimeError):  # entered in another context: nothing to restore here
        log.debug("a job's Sentry scope was left in another context", exc_info=True)


def _tags(info: JobInfo) -> dict[str, str]:
    tags = {
        "jobmaster.job": info.name,
        "jobmaster.queue": info.queue,
        "jobmaster.jid": info.jid,
        "jobmaster.attempt": str(info.attempt),
    }
    if info.batch_id is not None:
        tags["jobmaster.batch"] = info.batch_id
    return tags


def _context(info: JobInfo, outcome: str) -> dict[str, Any]:
    return {
        "job": info.name,
        "queue": info.queue,
        "jid": info.jid,
        "attempt": info.attempt,
        "batch": info.batch_id,
        "enqueued_at": info.enqueued_at,
        "outcome": outcome,
    }


def setup(report: Report = "deaths", group_by: GroupBy = "job") -> SentryMiddleware:
    """Install the middleware for every job; call it in the app module."""
    installed = SentryMiddleware(report, group_by)
    middlewares.add(installed)
    return installed


@jobmaster.on_child_stop
def _flush() -> None:
    """Send what this child queued: it exits without ``atexit``."""
    sentry_sdk.flush(timeout=FLUSH_TIMEOUT)
