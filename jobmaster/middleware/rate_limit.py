"""RateLimit: at most ``limit`` starts per ``per`` seconds for jobs sharing a key."""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from typing import Any

from jobmaster.middleware.base import Defer, JobContext, Middleware
from jobmaster.scripts import RateCount

KeySpec = str | Callable[[dict[str, Any]], str]


class RateLimit(Middleware):
    """A fixed window per ``key`` (a string, or a function of the payload).

    Jobs over the limit are deferred to the next window, with jitter so they
    don't all come back in the same instant.
    """

    def __init__(self, key: KeySpec, limit: int, per: float) -> None:
        if limit < 1 or per <= 0:
            raise ValueError("RateLimit needs limit >= 1 and per > 0 seconds")
        self.key, self.limit, self.per = key, limit, float(per)

    def before_process(self, job: JobContext) -> None:
        self.admit(job)

    def admit(self, job: JobContext) -> int:
        """Count this start in the current window and return that window's
        number, or raise ``Defer`` when the window is full.

        The window is fixed at this moment, not when the job's code starts a
        little later: anything that checks the limit (a subclass that records
        admissions, a test) must use the returned number, because a start
        admitted at the end of one window would otherwise be counted in the
        next.
        """
        name = self.key(job.payload) if callable(self.key) else self.key
        now = time.time()
        window = math.floor(now / self.per)
        counting = RateCount(job.keys.rate_window(name, window), max(1, math.ceil(self.per * 2)))
        count = int(counting.run(job.scripts.rate_count))
        if count > self.limit:
            wait = (window + 1) * self.per - now + random.uniform(0, self.per / 10)
            raise Defer(wait, f"rate limit {name}: {self.limit} per {self.per:g}s")
        return window
