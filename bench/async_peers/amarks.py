"""The job bodies every system runs in bench/async_peers.py, async and sync.

Each ``async_*_app`` module wraps these in its system's task decorator, so
every system does exactly the same work per job:

- ``sleep``: ``await asyncio.sleep(0.02)`` (the thread version: ``time.sleep``);
- ``http``: one GET to the bench's local HTTP server (``BENCH_HTTP_URL``),
  the body read and the status checked: async jobs on one aiohttp
  ``ClientSession`` per event loop, made lazily and reused (keep-alive, its
  default pool); thread jobs on one stdlib ``http.client`` connection per
  thread, kept alive between requests.

Then, for every job alike, one Redis command: an INCR of bench/peers'
``marks.DONE_KEY`` (what the drivers poll). The job whose INCR reaches
``count`` (the number of jobs queued, its argument) writes the time it ended
to ``LAST_KEY``; the first job each process starts writes that start time to
``FIRST_PREFIX + pid`` (one SET per process, not per job). The window from
the earliest start to the last end is the measure's time, free of the
polling's 20 ms steps.
"""

from __future__ import annotations

import asyncio
import http.client
import os
import threading
import time
from urllib.parse import urlsplit

import aiohttp  # imported with the app, not by the first job: it takes 0.3 s here
import marks  # bench/peers/marks.py: the lazy Redis clients and the done counter
import redis.asyncio

PREFIX = "bench:async:"
FIRST_PREFIX = PREFIX + "first:"  # + pid -> the start time of the process's first job
LAST_KEY = PREFIX + "last"  # the end time of the job that completed the count
STARTED_KEY = PREFIX + "started"  # the memory measure's long jobs, counted as they start
PID_KEY = PREFIX + "pid"  # the memory measure's first job: the pid of the child it ran in
SLEEP_S = 0.02
HOLD_CONNECTIONS = 50  # the memory measure's jobs share these to count their starts

_lock = threading.Lock()
_first_taken = False
_sessions: dict[int, aiohttp.ClientSession] = {}  # aiohttp sessions by id() of their event loop
_local = threading.local()  # a thread's keep-alive http.client connection


def take_first() -> bool:
    """True for the first job this process starts (and only for it)."""
    global _first_taken
    with _lock:
        first, _first_taken = not _first_taken, True
    return first


def url() -> str:
    return os.environ["BENCH_HTTP_URL"]


def target() -> tuple[str, int, str]:
    """(host, port, path) of ``BENCH_HTTP_URL``, for http.client."""
    parts = urlsplit(url())
    return parts.hostname or "127.0.0.1", parts.port or 80, parts.path or "/"


# -- async ------------------------------------------------------------------------
def session() -> aiohttp.ClientSession:
    """This event loop's aiohttp session, made on first use."""
    loop = id(asyncio.get_running_loop())
    if loop not in _sessions:
        _sessions[loop] = aiohttp.ClientSession()
    return _sessions[loop]


async def aget() -> None:
    async with session().get(url()) as response:
        await response.read()
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status}")


async def afinish(count: int, started: float, first: bool) -> None:
    client = marks.aconn()
    done = await client.incr(marks.DONE_KEY)
    if first:
        await client.set(f"{FIRST_PREFIX}{os.getpid()}", repr(started))
    if done == count:
        await client.set(LAST_KEY, repr(time.time()))


async def asleep(count: int) -> None:
    started, first = time.time(), take_first()
    await asyncio.sleep(SLEEP_S)
    await afinish(count, started, first)


async def ahttp(count: int) -> None:
    started, first = time.time(), take_first()
    await aget()
    await afinish(count, started, first)


# -- threads ----------------------------------------------------------------------
def get() -> None:
    """One GET on this thread's keep-alive connection (a new one if it broke)."""
    for attempt in (1, 2):
        host, port, path = target()
        conn = getattr(_local, "conn", None)
        if conn is None:
            conn = _local.conn = http.client.HTTPConnection(host, port, timeout=30)
        try:
            conn.request("GET", path)
            response = conn.getresponse()
            response.read()
        except (OSError, http.client.HTTPException):
            conn.close()
            _local.conn = None
            if attempt == 2:
                raise
            continue
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status}")
        return


def finish(count: int, started: float, first: bool) -> None:
    client = marks.conn()
    done = client.incr(marks.DONE_KEY)
    if first:
        client.set(f"{FIRST_PREFIX}{os.getpid()}", repr(started))
    if done == count:
        client.set(LAST_KEY, repr(time.time()))


def sleep(count: int) -> None:
    started, first = time.time(), take_first()
    time.sleep(SLEEP_S)
    finish(count, started, first)


def http_get(count: int) -> None:
    started, first = time.time(), take_first()
    get()
    finish(count, started, first)


# -- the memory measure -----------------------------------------------------------
_hold_clients: dict[int, redis.asyncio.Redis] = {}  # by id() of the event loop


def hold_conn() -> redis.asyncio.Redis:
    """A client whose pool makes a job wait for a connection, not fail: redis-py
    8's asyncio pool refuses a 101st connection (MaxConnectionsError), and a
    thousand jobs start at once here (each fails and is retried 20 to 35 s later,
    which the memory measure first took for a slow start)."""
    loop = id(asyncio.get_running_loop())
    if loop not in _hold_clients:
        pool = redis.asyncio.BlockingConnectionPool.from_url(
            os.environ["BENCH_REDIS_URL"], max_connections=HOLD_CONNECTIONS
        )
        _hold_clients[loop] = redis.asyncio.Redis(connection_pool=pool)
    return _hold_clients[loop]


async def apid() -> None:
    """Says which process ran it: the child the memory measure then reads."""
    await marks.aconn().set(PID_KEY, os.getpid())


async def ahold(seconds: float) -> None:
    """Counted as it starts, then awaits ``seconds``: one of the many in flight."""
    await hold_conn().incr(STARTED_KEY)
    await asyncio.sleep(seconds)
