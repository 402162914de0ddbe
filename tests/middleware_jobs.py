"""Jobs with per-job middleware, for tests/integration/test_middleware.py."""

from __future__ import annotations

import time

import jobmaster
from jobmaster.middleware import JobContext, RateLimit, WithoutOverlapping
from tests.jobs import store


class RecordingRateLimit(RateLimit):
    """RateLimit that records the window each admitted start was counted in.

    The job's own clock can't tell: a start admitted at x.999 s runs at
    x+1.001 s, which would look like a third start in the next window.
    """

    def before_process(self, job: JobContext) -> None:
        store().rpush("test:windows", self.admit(job))


@jobmaster.job(name="tests.rate_limited", middleware=[RecordingRateLimit("api", limit=2, per=1.0)])
def rate_limited(marker: str) -> None:
    store().sadd("test:done", marker)


@jobmaster.job(name="tests.exclusive", middleware=[WithoutOverlapping("exclusive", 10)])
def exclusive(marker: str) -> None:
    started = time.time()
    time.sleep(0.3)
    store().rpush("test:intervals", f"{started}:{time.time()}")
    store().sadd("test:done", marker)
