"""Jobs for the benchmarks in bench/ (imported by the worker as ``app = ["bench_jobs"]``).

``bench_jobs.stamp(t_enqueue)`` records how long after ``t_enqueue`` (a
``time.time()`` taken by the producer just before the push) the job body
started, as a JSON object LPUSHed to ``bench:latency`` on the Redis named by
the ``BENCH_REDIS_URL`` environment variable (the benchmark's private server).
"""

from __future__ import annotations

import json
import os
import threading
import time

import redis

import jobmaster

RESULTS_KEY = "bench:latency"

_lock = threading.Lock()
_client: redis.Redis | None = None


def _redis() -> redis.Redis:
    global _client  # one lazily made client per worker process
    with _lock:
        if _client is None:
            _client = redis.Redis.from_url(os.environ["BENCH_REDIS_URL"])
        return _client


@jobmaster.job(name="bench_jobs.stamp", retry=False)
def stamp(t_enqueue: float) -> None:
    started = time.time()
    record = {
        "latency": started - t_enqueue,
        "t_enqueue": t_enqueue,
        "thread": threading.current_thread().name,
    }
    _redis().lpush(RESULTS_KEY, json.dumps(record))
