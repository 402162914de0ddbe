"""The job bodies every peer runs, so they do exactly the same work.

Each ``*_app`` module wraps these two functions in its peer's task
decorator. They talk to the bench's private Redis, named by
``BENCH_REDIS_URL``, with a plain redis-py client made lazily once per
process (redis-py's pool notices a fork and reconnects in the child).

- :func:`noop` INCRs ``bench:peers:done``: how the bench knows a job ran,
  the same for every peer (the one Redis command it adds to each job is
  added to all of them alike).
- :func:`hold` RPUSHes a start mark (time, pid) to
  ``bench:peers:started:<token>``, runs until ``bench:peers:stop:<token>``
  exists or ``seconds`` have passed, then RPUSHes a finish mark: the long
  job the failover and shutdown measures kill or interrupt.

:func:`anoop` and :func:`ahold` are the same bodies for an async peer
(taskiq), on redis-py's asyncio client, made lazily once per event loop.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time

import redis
import redis.asyncio

PREFIX = "bench:peers:"
DONE_KEY = PREFIX + "done"

_lock = threading.Lock()
_client: redis.Redis | None = None
_async_clients: dict[int, redis.asyncio.Redis] = {}  # by id() of the event loop


def conn() -> redis.Redis:
    global _client
    with _lock:
        if _client is None:
            _client = redis.Redis.from_url(os.environ["BENCH_REDIS_URL"])
        return _client


def started_key(token: str) -> str:
    return f"{PREFIX}started:{token}"


def finished_key(token: str) -> str:
    return f"{PREFIX}finished:{token}"


def stop_key(token: str) -> str:
    return f"{PREFIX}stop:{token}"


def noop() -> None:
    conn().incr(DONE_KEY)


def hold(token: str, seconds: float) -> None:
    client = conn()
    client.rpush(started_key(token), json.dumps({"t": time.time(), "pid": os.getpid()}))
    deadline = time.monotonic() + seconds
    # 20 ms steps: a stop request is seen quickly, at ~50 GETs/s per running job.
    while time.monotonic() < deadline and not client.exists(stop_key(token)):
        time.sleep(0.02)
    client.rpush(finished_key(token), json.dumps({"t": time.time(), "pid": os.getpid()}))


def aconn() -> redis.asyncio.Redis:
    """This event loop's asyncio client (an asyncio connection belongs to one loop)."""
    loop = id(asyncio.get_running_loop())
    if loop not in _async_clients:
        _async_clients[loop] = redis.asyncio.Redis.from_url(os.environ["BENCH_REDIS_URL"])
    return _async_clients[loop]


async def anoop() -> None:
    await aconn().incr(DONE_KEY)


async def ahold(token: str, seconds: float) -> None:
    client = aconn()
    await client.rpush(started_key(token), json.dumps({"t": time.time(), "pid": os.getpid()}))
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not await client.exists(stop_key(token)):
        await asyncio.sleep(0.02)
    await client.rpush(finished_key(token), json.dumps({"t": time.time(), "pid": os.getpid()}))
