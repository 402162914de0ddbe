"""taskiq's jobs for bench/async_peers.py: ``taskiq worker -w 2 async_taskiq_app:broker``.

taskiq-redis's ``RedisStreamBroker`` (the acknowledging one, as in
bench/peers/taskiq_app.py) on ``BENCH_REDIS_URL``, no result backend; the
worker's defaults (``--max-async-tasks 100``).
"""

from __future__ import annotations

import os

import amarks
from taskiq_redis import RedisStreamBroker

broker = RedisStreamBroker(os.environ["BENCH_REDIS_URL"])


@broker.task
async def asleep(count: int) -> None:
    await amarks.asleep(count)


@broker.task
async def ahttp(count: int) -> None:
    await amarks.ahttp(count)
