"""A job's return value, made into what FINISH stores beside its status.

``encode`` turns it into JSON text once, in the worker thread that ran the
job, so FINISH only copies bytes: None (the common case) stores nothing,
and a value JSON cannot encode (a datetime, a set, NaN, a dict with int
keys that JSON would silently turn into strings) completes the job all
the same with a result of None, and a ``job.result_dropped`` log line says
why. Raising instead would retry a job that did its work.

``result_ttl`` is how long the status, attempts and result of an ended job
are kept: its ``result_ttl`` (a payload field, job.py), else (None) the
workers' ``status_ttl``. results.py reads what FINISH writes.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping
from typing import Any

from jobmaster import payload as wire

log = logging.getLogger("jobmaster.worker.returns")

# A result_ttl longer than this is kept this long: the payload may be forged,
# and an EX beyond what Redis accepts would fail FINISH after its LREM.
LONGEST_TTL = 10 * 365 * 86400


def encode(value: Any, jid: str, job: str) -> bytes | None:
    """The value as compact JSON; None for None and for what JSON cannot encode."""
    if value is None:
        return None
    try:
        wire.check_json(value, "its return value")
        return json.dumps(value, separators=(",", ":"), allow_nan=False).encode()
    except (TypeError, ValueError, RecursionError) as error:
        reason = str(error) if not isinstance(error, RecursionError) else "nested too deeply"
        context = {"jid": jid, "job": job, "event": "job.result_dropped"}
        log.warning(
            "result of jid=%s job=%s not kept, the job is complete with result None: %s",
            jid,
            job,
            reason,
            extra=context,
        )
        return None


def result_ttl(payload: Mapping[str, Any]) -> int | None:
    """The job's ``result_ttl`` in whole seconds: how long its status, attempts and
    result are kept once it ended (None: ``status_ttl``). A forged value (not a
    number of seconds >= 1) is ignored, a huge one capped."""
    value = payload.get("result_ttl")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if not 1 <= value < math.inf:
        return None
    return min(round(value), LONGEST_TTL)
