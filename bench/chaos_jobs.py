"""The job bench/chaos.py runs under fire (imported by its master as ``app = ["chaos_jobs"]``).

``chaos_jobs.work(token, sleep_ms, bloat_mb)`` counts its start, sleeps
``sleep_ms`` (so kills land on running jobs), then records its completion
in one MULTI: ``SADD chaos:done token`` and ``HINCRBY chaos:runs token 1``.
A completion counted twice is a duplicate run; a token never in
``chaos:done`` (nor in the dead set) is a lost job.

With ``bloat_mb`` it first grows its process by that many MB and keeps them,
so the master's memory killer has a child to recycle.

Its Redis is the bench's private server, named by ``BENCH_REDIS_URL``. While
that server restarts the recording fails; the job raises, and its retry
(after ``RETRY_BACKOFF`` seconds) runs it again: a run that recorded nothing
is not a run.
"""

from __future__ import annotations

import os
import threading
import time

import redis

import jobmaster

DONE_KEY = "chaos:done"
RUNS_KEY = "chaos:runs"
STARTS_KEY = "chaos:starts"
RETRY_BACKOFF = 1.0
MB = 1024 * 1024

_lock = threading.Lock()
_client: redis.Redis | None = None
_ballast: list[bytes] = []  # what a bloating job leaves behind in its child


def _redis() -> redis.Redis:
    global _client  # one lazily made client per child (never inherited across fork)
    with _lock:
        if _client is None:
            _client = redis.Redis.from_url(os.environ["BENCH_REDIS_URL"], socket_timeout=5)
        return _client


@jobmaster.job(name="chaos_jobs.work", retry=25, backoff=RETRY_BACKOFF)
def work(token: str, sleep_ms: float, bloat_mb: int = 0) -> None:
    conn = _redis()
    conn.hincrby(STARTS_KEY, token, 1)
    if bloat_mb:
        # Written, not just reserved: the pages must count in the child's USS.
        _ballast.append(b"\x01" * (bloat_mb * MB))
    time.sleep(sleep_ms / 1000)
    with conn.pipeline(transaction=True) as pipe:
        pipe.sadd(DONE_KEY, token)
        pipe.hincrby(RUNS_KEY, token, 1)
        pipe.execute()
