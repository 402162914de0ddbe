"""Logging a Redis outage once, at its start and its end.

Shared by the worker's loops and the master's Redis thread: a process
that logged one line per failed attempt flooded its log for as long as
Redis was away, and one that logged nothing left the operator guessing.
"""

from __future__ import annotations

import logging
import threading

from jobmaster.connection import describe_error

log = logging.getLogger("jobmaster.outage")

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
