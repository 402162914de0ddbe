"""An app with lifecycle hooks, as a real one has them (tests/process/test_lifecycle.py).

Its ``on_child_start`` opens a Redis connection of the child's own (as an
app would reopen its database pool after fork) and its job uses only that
one, so a job that runs proves the hook ran in its process. What each hook
did is recorded under ``test:lifecycle:*`` on the server named by
JOBMASTER_REDIS_URL. Behaviour the tests switch on, by environment:

- ``LIFECYCLE_FAIL_FILE``: while that file exists, ``on_child_start`` raises
  (a database that is not up yet);
- ``LIFECYCLE_THREAD``: ``on_master_start`` starts a thread, as an SDK's
  sender would (the master must warn that children will not have it);
- ``LIFECYCLE_MASTER_FAIL``: ``on_master_start`` raises.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import redis

import jobmaster

POOL: redis.Redis | None = None  # this process's own connection, opened after fork
POOL_PID = 0  # the process that opened it
_sender_stop = threading.Event()


def _connect() -> redis.Redis:
    return redis.Redis.from_url(os.environ["JOBMASTER_REDIS_URL"])


@jobmaster.on_master_start
def announce_master() -> None:
    _connect().rpush("test:lifecycle:master_start", os.getpid())
    if os.environ.get("LIFECYCLE_MASTER_FAIL"):
        raise RuntimeError("the cache to warm is unreachable")
    if os.environ.get("LIFECYCLE_THREAD"):
        threading.Thread(target=_sender_stop.wait, name="app-sender", daemon=True).start()


@jobmaster.on_child_start
def reopen_pool() -> None:
    global POOL, POOL_PID
    fail_file = os.environ.get("LIFECYCLE_FAIL_FILE")
    if fail_file and Path(fail_file).exists():
        _connect().incr("test:lifecycle:start_failures")
        raise ConnectionError("the database is not up yet")
    POOL, POOL_PID = _connect(), os.getpid()
    POOL.sadd("test:lifecycle:child_start", os.getpid())
    POOL.rpush(f"test:lifecycle:order:{os.getpid()}", "reopen_pool")


@jobmaster.on_child_start
def second_start_hook() -> None:
    _connect().rpush(f"test:lifecycle:order:{os.getpid()}", "second_start_hook")


@jobmaster.on_child_stop
def flush() -> None:
    _connect().sadd("test:lifecycle:child_stop", os.getpid())


@jobmaster.job(name="tests.lifecycle.use_pool")
def use_pool(marker: str) -> None:
    """Runs only on the connection its child's own hook opened."""
    if POOL is None or os.getpid() != POOL_PID:
        raise RuntimeError(f"no pool of this process's own (opened in pid {POOL_PID})")
    POOL.hset("test:lifecycle:ran", marker, os.getpid())
