"""Dramatiq's jobs for bench/async_peers.py: ``dramatiq -p 2 -t T async_dramatiq_app``.

Dramatiq's ``RedisBroker`` on ``BENCH_REDIS_URL`` with its default
middleware plus ``AsyncIO`` (its documented support for ``async def``
actors: one event loop thread per worker process, each coroutine awaited
by one of the worker's threads, so ``-t`` bounds the jobs in flight).
"""

from __future__ import annotations

import os

import amarks
import dramatiq
from dramatiq.brokers.redis import RedisBroker
from dramatiq.middleware.asyncio import AsyncIO

broker = RedisBroker(url=os.environ["BENCH_REDIS_URL"])
broker.add_middleware(AsyncIO())
dramatiq.set_broker(broker)


@dramatiq.actor
async def asleep(count: int) -> None:
    await amarks.asleep(count)


@dramatiq.actor
async def ahttp(count: int) -> None:
    await amarks.ahttp(count)
