"""A background loop that survives Redis outages.

Every periodic duty of a worker (heartbeat, pollers, recovery) runs through
``run_periodically``: when Redis is away the step fails, the loop logs once
per outage, waits about a second and tries again. No thread dies of it, and
the log is not flooded with one line per attempt.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import redis

from jobmaster.outage import OUTAGE_BACKOFF, OutageLog

log = logging.getLogger("jobmaster.worker.loop")


def run_periodically(
    what: str,
    step: Callable[[], float | None],
    interval: float,
    stop: threading.Event,
    first_wait: float = 0.0,
) -> None:
    """Call ``step`` every ``interval`` seconds (or what it returns) until ``stop`` is set.

    Redis errors back off; any other exception is logged with its traceback
    and the loop goes on, because one bad entry must not end a duty that
    protects every other job.
    """
    outage = OutageLog(what)
    stop.wait(first_wait)
    while not stop.is_set():
        try:
            next_wait = step()
            outage.succeeded(time.monotonic())
        except redis.RedisError as error:
            outage.failed(error, time.monotonic())
            next_wait = OUTAGE_BACKOFF
        except Exception:
            log.exception("%s: unexpected error; carrying on", what)
            next_wait = OUTAGE_BACKOFF
        stop.wait(interval if next_wait is None else next_wait)
