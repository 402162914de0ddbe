"""What a failed attempt comes to, as the worker will record it: shared by the
integrations that report failures (Sentry, OpenTelemetry).

Middleware's ``after_process`` hears the error, not the outcome; the outcome
is decided by a pure function of the payload, the error and the job's
registered ``retry`` (worker/outcome.py), which this asks, so an integration
never disagrees with what the worker records.
"""

from __future__ import annotations

import time
from typing import Any

from jobmaster import registry
from jobmaster.backoff import DEFAULT_RETRY
from jobmaster.errors import JobCancelled

RETRY = "retry"  # it will run again
DEAD = "dead"  # failed for good: in the dead set
FAILED = "failed"  # failed for good with retry off: dropped
CANCELLED = "cancelled"  # jobmaster.cancel: not a failure of the job's
FOR_GOOD = (DEAD, FAILED)


def outcome_of(payload: dict[str, Any], error: BaseException) -> str:
    """``retry``, ``dead``, ``failed`` (retry off) or ``cancelled``."""
    if isinstance(error, JobCancelled):
        return CANCELLED
    # Imported here: the worker's modules stay out of producers (a web app
    # that installs this middleware to enqueue never runs a job).
    from jobmaster.worker.outcome import decide_failure

    registered = registry.lookup(payload.get("job"))
    default_retry = registered.job_options.retry if registered is not None else DEFAULT_RETRY
    kind = decide_failure(payload, error, None, time.time(), default_retry).kind
    return {"retry": RETRY, "dead": DEAD}.get(kind.value, FAILED)
