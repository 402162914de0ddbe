"""Jobs with per-job middleware, for tests/integration/test_middleware.py."""

from __future__ import annotations

import time

import jobmaster
from jobmaster.middleware import RateLimit, WithoutOverlapping
from tests.jobs import store


@jobmaster.job(name="tests.rate_limited", middleware=[RateLimit("api", limit=2, per=1.0)])
def rate_limited(marker: str) -> None:
    store().rpush("test:starts", time.time())
    store().sadd("test:done", marker)


@jobmaster.job(name="tests.exclusive", middleware=[WithoutOverlapping("exclusive", 10)])
def exclusive(marker: str) -> None:
    started = time.time()
    time.sleep(0.3)
    store().rpush("test:intervals", f"{started}:{time.time()}")
    store().sadd("test:done", marker)
