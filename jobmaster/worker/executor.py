"""Running one fetched job: decode, look up, call, decide the outcome.

Nothing here touches Redis; ``record`` (outcome.py) does that afterwards.
Bad input becomes a dead-set outcome instead of an exception, so one
broken payload never kills a processor thread or holds up the jobs behind it.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace

from jobmaster import payload as wire
from jobmaster import registry
from jobmaster.worker.fetch import Unit
from jobmaster.worker.outcome import Outcome, bad_payload, decide_failure, succeeded

log = logging.getLogger("jobmaster.worker.executor")


def execute(unit: Unit) -> Outcome:
    """Run the job in ``unit`` in this thread and say how it ended (and when)."""
    started = time.time()
    return replace(_run(unit), started_at=started, ended_at=time.time())


def _run(unit: Unit) -> Outcome:
    try:
        payload = wire.decode(unit.raw)
    except wire.BadPayload as error:
        return _buried(unit, str(error))
    job = registry.lookup(payload["job"])
    if job is None:
        return _buried(unit, f"no job registered as {payload['job']!r}")
    context = {"jid": payload["jid"], "job": job.name, "queue": unit.queue}
    log.debug("start", extra=context)
    started = time.monotonic()
    try:
        job.func(*payload["args"], **payload["kwargs"])
    except BaseException as error:  # a job's SystemExit must not end the thread either
        options = job.job_options
        outcome = decide_failure(payload, error, options.backoff, time.time(), options.retry)
        _log_failure(outcome, context, time.monotonic() - started)
        return outcome
    log.debug("done in %.1f ms", (time.monotonic() - started) * 1000, extra=context)
    return succeeded(payload)


def _buried(unit: Unit, reason: str) -> Outcome:
    outcome = bad_payload(unit.raw, reason, unit.queue)
    log.error(
        "dead on arrival: %s",
        reason,
        extra={"jid": outcome.jid, "job": outcome.job, "queue": unit.queue},
    )
    return outcome


def _log_failure(outcome: Outcome, context: dict[str, object], seconds: float) -> None:
    duration = seconds * 1000
    if outcome.kind == "retry":
        count = (outcome.stored or {}).get("retry_count")
        log.warning(
            "failed after %.1f ms: %s; retry %s in %.0fs",
            duration,
            outcome.reason,
            count,
            outcome.score - time.time(),
            extra=context,
        )
    elif outcome.kind == "dead":
        log.error("failed after %.1f ms, dead: %s", duration, outcome.reason, extra=context)
    else:
        log.warning(
            "failed after %.1f ms, dropped (retry off): %s", duration, outcome.reason, extra=context
        )
