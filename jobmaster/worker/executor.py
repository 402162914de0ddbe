"""Running one fetched job: decode, look up, call, decide the outcome.

Nothing here writes to Redis; ``record`` (outcome.py) does that afterwards,
and the job's "working" mark rides in a later round trip (acks.py).
The one read is a batch job's ``cancelled`` flag: such a job is skipped.
Bad input becomes a dead-set outcome instead of an exception, so one
broken payload never kills a processor thread or holds up the jobs behind it.

Each job logs one ``job.start`` line and one end line named after its
outcome: ``job.done`` (INFO), ``job.retry`` or ``job.failed`` (retry off;
WARNING), ``job.dead`` (ERROR), with ``duration_ms`` and, for a failure, the
error's class and message. A job held back by middleware logs
``job.deferred`` instead, and a job of a cancelled batch ``job.skipped``.
The lines carry the jid, job name and queue, never the arguments: those may
be secrets (``encrypt=True``) or personal data.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import replace
from typing import Any

from jobmaster import crypto, registry
from jobmaster import payload as wire
from jobmaster.errors import JobTimeout
from jobmaster.job import JobFunction
from jobmaster.middleware import base as hooks
from jobmaster.middleware.base import Defer, JobContext
from jobmaster.worker import returns
from jobmaster.worker.context import WorkerContext
from jobmaster.worker.fetch import Unit
from jobmaster.worker.outcome import (
    Outcome,
    bad_payload,
    decide_failure,
    deferred,
    skipped,
    succeeded,
    with_hook,
    with_unique,
)
from jobmaster.worker.watchdog import Watchdog
from jobmaster.workflows import steps
from jobmaster.workflows.batch import running_in

log = logging.getLogger("jobmaster.worker.executor")


OnStart = Callable[[dict[str, Any]], None]


def execute(
    unit: Unit,
    watchdog: Watchdog | None = None,
    on_start: OnStart | None = None,
    ctx: WorkerContext | None = None,
) -> Outcome:
    """Run the job in ``unit`` in this thread and say how it ended (and when).

    ``on_start(payload)`` runs just before the job's code (an ``until_started``
    unique job's lock is released there).
    """
    started = time.time()
    outcome = _run(unit, watchdog, on_start, ctx)
    return replace(outcome, started_at=started, ended_at=time.time())


def timeout_of(payload: dict[str, Any], job: JobFunction[..., Any]) -> float | None:
    """The payload's ``timeout`` (from ``.options()``), else the job's own."""
    value = payload.get("timeout")
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return float(value)
    return job.job_options.timeout


def _run(
    unit: Unit, watchdog: Watchdog | None, on_start: OnStart | None, ctx: WorkerContext | None
) -> Outcome:
    try:
        payload = wire.decode(unit.raw)
    except wire.BadPayload as error:
        return _buried(unit, str(error))
    context = {"jid": payload["jid"], "job": payload["job"], "queue": unit.queue}
    if ctx is not None and steps.cancelled(ctx.redis, ctx.keys, steps.step_of(payload)):
        _event(logging.INFO, "job.skipped", context, "skipped: its batch was cancelled")
        return skipped(payload)
    job = registry.lookup(payload["job"])
    if job is None:
        return _buried(unit, f"no job registered as {payload['job']!r}")
    try:  # opened if sealed; refused in clear for an encrypt=True job (a BadPayload)
        arguments = crypto.arguments(payload, sealed=job.job_options.encrypt)
    except wire.BadPayload as error:
        return _buried(unit, str(error))
    chain = [*hooks.installed(), *job.job_options.middleware]
    around = None
    if chain and ctx is not None:
        around = JobContext(payload, unit.queue, ctx.name, ctx.redis, ctx.keys, ctx.scripts)
        try:
            hooks.before_process(chain, around)
        except Defer as held:
            _event(
                logging.INFO, "job.deferred", context, "held back for %.1fs: %s", held.seconds, held
            )
            return with_unique(deferred(payload, held.seconds, str(held), time.time()), payload)
    _event(logging.INFO, "job.start", context, "start")
    if ctx is not None:  # "working", in a round trip made anyway (acks.py)
        ctx.acks.mark(ctx.keys.status(str(payload["jid"])), unit.raw)
    outcome, raised = _call(job, payload, unit, watchdog, on_start, context, arguments)
    if around is not None:
        hooks.after_process(chain, around, raised)
    return outcome


def _call(
    job: JobFunction[..., Any],
    payload: dict[str, Any],
    unit: Unit,
    watchdog: Watchdog | None,
    on_start: OnStart | None,
    context: dict[str, Any],
    arguments: tuple[list[Any], dict[str, Any]],  # the payload stays sealed
) -> tuple[Outcome, BaseException | None]:
    """Call the job's function under its timeout; the outcome and the error, if any."""
    started = time.monotonic()
    timeout = timeout_of(payload, job)
    if on_start is not None:
        on_start(payload)
    options = job.job_options
    try:
        # running_in: jobmaster.current_batch() for the job's code.
        with (
            watchdog.deadline(unit, payload, timeout) if watchdog else nullcontext(),
            running_in(payload),
        ):
            value = job.func(*arguments[0], **arguments[1])
    except BaseException as error:  # a job's SystemExit must not end the thread either
        if isinstance(error, JobTimeout) and not str(error):
            error = JobTimeout(f"ran past its timeout of {timeout:g}s")
        outcome = decide_failure(payload, error, options.backoff, time.time(), options.retry)
        _log_failure(outcome, context, time.monotonic() - started)
        return with_hook(with_unique(outcome, payload), payload, options, error), error
    took = (time.monotonic() - started) * 1000
    _event(logging.INFO, "job.done", context, "done in %.1f ms", took, duration_ms=took)
    result = returns.encode(value, str(payload["jid"]), str(payload["job"]))
    done = succeeded(payload, result)
    return with_hook(with_unique(done, payload), payload, options, None), None


def _event(
    level: int, event: str, context: dict[str, Any], message: str, *args: object, **fields: Any
) -> None:
    """Log one per-job line with ``event`` (and e.g. ``duration_ms``) as fields.

    Checked first so that a level that hides the line (``log_levels``) costs
    no dict and no formatting: this runs twice for every job.
    """
    if not log.isEnabledFor(level):
        return
    if "duration_ms" in fields:
        fields["duration_ms"] = round(fields["duration_ms"], 3)
    # Made here rather than by ``log.log``, which looks up the calling
    # frame's file and line (a walk of the stack, for fields our formats
    # never print): the caller of a per-job line is always this function.
    extra = {**context, "event": event, **fields}
    log.handle(log.makeRecord(log.name, level, __file__, 0, message, args, None, "_event", extra))


def _buried(unit: Unit, reason: str) -> Outcome:
    outcome = bad_payload(unit.raw, reason, unit.queue)
    context = {"jid": outcome.jid, "job": outcome.job, "queue": unit.queue}
    _event(logging.ERROR, "job.dead", context, "dead on arrival: %s", reason, error=outcome.error)
    return outcome


def _log_failure(outcome: Outcome, context: dict[str, Any], seconds: float) -> None:
    """The failure's end line: ``job.retry``, ``job.dead`` or ``job.failed`` (dropped)."""
    took = seconds * 1000
    fields = {"duration_ms": took, "error": outcome.error}
    if outcome.kind == "retry":
        count = (outcome.stored or {}).get("retry_count")
        _event(
            logging.WARNING,
            "job.retry",
            context,
            "failed after %.1f ms: %s; retry %s in %.0fs",
            took,
            outcome.reason,
            count,
            outcome.score - time.time(),
            **fields,
        )
    elif outcome.kind == "dead":
        message = "failed after %.1f ms, dead: %s"
        _event(logging.ERROR, "job.dead", context, message, took, outcome.reason, **fields)
    else:
        message = "failed after %.1f ms, dropped (retry off): %s"
        _event(logging.WARNING, "job.failed", context, message, took, outcome.reason, **fields)
