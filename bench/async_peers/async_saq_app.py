"""SAQ's jobs for bench/async_peers.py: ``saq async_saq_app.settings --workers 2``.

SAQ's Redis queue on ``BENCH_REDIS_URL``; ``concurrency`` 100 per process
(SAQ's default is 10), the rest SAQ's defaults. ``--workers 2`` runs jobs in
the main process and in one forked beside it.
"""

from __future__ import annotations

import os
from typing import Any

import amarks
from saq import Queue

queue = Queue.from_url(os.environ["BENCH_REDIS_URL"])


async def asleep(ctx: dict[str, Any], *, count: int) -> None:
    await amarks.asleep(count)


async def ahttp(ctx: dict[str, Any], *, count: int) -> None:
    await amarks.ahttp(count)


settings = {"queue": queue, "functions": [asleep, ahttp], "concurrency": 100}
