"""The leaking job of ``bench/memory.py --leaks`` (``app = ["bench_leak"]``).

``bench_leak.leak(token, megabytes, seconds)`` keeps ``megabytes`` for good
(a leak: its child grows by that much per job, for as long as it lives),
sleeps ``seconds``, then counts its run: ``HINCRBY leak:runs token 1`` on the
bench's private server (``BENCH_REDIS_URL``). A token counted twice ran
twice (its child was killed, or pushed it back); one never counted is lost.
"""

from __future__ import annotations

import os
import threading
import time

import redis

import jobmaster

RUNS_KEY = "leak:runs"
_LEAKED: list[bytes] = []
_lock = threading.Lock()
_client: redis.Redis | None = None


def client() -> redis.Redis:
    global _client
    with _lock:
        if _client is None:
            _client = redis.Redis.from_url(os.environ["BENCH_REDIS_URL"])
        return _client


@jobmaster.job(name="bench_leak.leak", retry=False)
def leak(token: str, megabytes: float, seconds: float) -> None:
    _LEAKED.append(b"x" * int(megabytes * 2**20))  # every page written: really resident
    time.sleep(seconds)
    client().hincrby(RUNS_KEY, token, 1)
