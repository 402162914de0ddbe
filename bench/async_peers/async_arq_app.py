"""arq's jobs for bench/async_peers.py: ``arq async_arq_app.WorkerSettings``.

arq's worker runs one process; bench/async_peers/launch.py starts two.
``max_jobs = 100`` (arq's default is 10): 100 jobs in flight per process, as
taskiq's and SAQ's settings here and jobmaster's ``async_concurrency``
default. Everything else is arq's default (results kept for an hour, 0.5 s
poll delay when the queue is empty).
"""

from __future__ import annotations

import os
from typing import Any, ClassVar

import amarks
from arq.connections import RedisSettings


async def asleep(ctx: dict[str, Any], count: int) -> None:
    await amarks.asleep(count)


async def ahttp(ctx: dict[str, Any], count: int) -> None:
    await amarks.ahttp(count)


class WorkerSettings:
    functions: ClassVar[list[Any]] = [asleep, ahttp]
    redis_settings = RedisSettings.from_dsn(os.environ["BENCH_REDIS_URL"])
    max_jobs = 100
