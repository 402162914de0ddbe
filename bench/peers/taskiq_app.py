"""taskiq's jobs for bench/peers.py: ``taskiq worker taskiq_app:broker`` loads this.

taskiq-redis's ``RedisStreamBroker`` on ``BENCH_REDIS_URL`` (the bench's
private server): the broker its README shows first, the one that
acknowledges (a consumer group on a stream, XACK after the task; a dead
consumer's messages are claimed by another after ``idle_timeout``, 10
minutes by default). ``BENCH_TASKIQ_BROKER=list`` picks ``ListQueueBroker``
instead (BRPOP, no acknowledgement: a message is gone once popped). No
result backend. The tasks are ``async def``, taskiq's own idiom, on
redis-py's asyncio client; the broker's other options are its defaults.
"""

from __future__ import annotations

import os

import marks
from taskiq import AsyncBroker
from taskiq_redis import ListQueueBroker, RedisStreamBroker

KIND = os.environ.get("BENCH_TASKIQ_BROKER", "stream")
URL = os.environ["BENCH_REDIS_URL"]
broker: AsyncBroker = ListQueueBroker(URL) if KIND == "list" else RedisStreamBroker(URL)


@broker.task
async def noop() -> None:
    await marks.anoop()


@broker.task
async def hold(token: str, seconds: float) -> None:
    await marks.ahold(token, seconds)
