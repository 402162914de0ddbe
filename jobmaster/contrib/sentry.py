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
from jobmaster import middleware as middlewares
from jobmaster.contrib import _failures
from jobmaster.current import JobInfo
from jobmaster.middleware import JobContext, Middleware

log = logging.getLogger("jobmaster.contrib.sentry")

Report = Literal["deaths", "failures"]
GroupBy = Literal["job", "job+error", "sentry"]
FLUSH_TIMEOUT = 2.0  # seconds a stopping child gives its queued events
IGNORED_LOGGERS = ("jobmaster.worker.executor", "django.tasks", "django_tasks")

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
        info = JobInfo.of(job.payload, job.queue)
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
