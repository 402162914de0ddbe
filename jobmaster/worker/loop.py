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

from jobmaster.connection import describe_error

log = logging.getLogger("jobmaster.worker.loop")

OUTAGE_BACKOFF = 1.0  # seconds between attempts while Redis is unreachable


class OutageLog:
    """Logs the start and the end of a Redis outage, once each.

    An outage is Redis unreachable, or Redis refusing (out of memory: a
    ``ResponseError``, not a ``ConnectionError``). One log may be shared by
    threads doing the same duty (the processors' fetches), so that a process
    logs one line per outage, not one per thread.
    """

    def __init__(self, what: str) -> None:
        self.what = what
        self.failing_since: float | None = None
        self._lock = threading.Lock()

    def failed(self, error: Exception, now: float) -> None:
        with self._lock:
            if self.failing_since is not None:
                return
            self.failing_since = now
        log.warning(
            "%s: Redis unavailable (%s); retrying every %.0fs",
            self.what,
            describe_error(error),
            OUTAGE_BACKOFF,
        )

    def succeeded(self, now: float) -> None:
        with self._lock:
            since, self.failing_since = self.failing_since, None
        if since is not None:
            log.info("%s: Redis reachable again after %.1fs", self.what, now - since)


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
