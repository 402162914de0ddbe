"""Huey's jobs for bench/peers.py: ``huey_consumer huey_app.huey`` loads this.

``RedisHuey`` on ``BENCH_REDIS_URL`` (the bench's private server) with its
defaults: blocking BRPOP fetch, results stored only when not ``None`` (so
the no-op stores none).
"""

from __future__ import annotations

import os

import marks
from huey import RedisHuey

huey = RedisHuey("bench", url=os.environ["BENCH_REDIS_URL"])


@huey.task()
def noop() -> None:
    marks.noop()


@huey.task()
def hold(token: str, seconds: float) -> None:
    marks.hold(token, seconds)
