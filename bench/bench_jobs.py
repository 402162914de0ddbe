"""Jobs for the benchmarks in bench/ (imported by the worker as ``app = ["bench_jobs"]``).

``bench_jobs.stamp(t_enqueue)`` records how long after ``t_enqueue`` (a
``time.time()`` taken by the producer just before the push) the job body
started, as a JSON object LPUSHed to ``bench:latency`` on the Redis named by
the ``BENCH_REDIS_URL`` environment variable (the benchmark's private server).

``bench_jobs.hold(token, seconds)`` is the long job that bench/failover.py
kills the child under: it records each start and stops early on request.

``bench_jobs.noop()`` does nothing: the job bench/status_cost.py pushes by the
thousand to measure the per-job cost of the machinery around it;
``bench_jobs.answer()`` returns a small dict, to measure keeping results.
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


FAILOVER_PREFIX = "bench:failover:"  # same as failover.FAILOVER_PREFIX


@jobmaster.job(name="bench_jobs.hold", retry=False)
def hold(token: str, seconds: float = 30.0) -> None:
    """Mark a start (``RPUSH bench:failover:started:<token>``), then run until
    ``bench:failover:stop:<token>`` exists or ``seconds`` have passed (bench/failover.py)."""
    conn = _redis()
    mark = {"t": time.time(), "pid": os.getpid(), "thread": threading.current_thread().name}
    conn.rpush(f"{FAILOVER_PREFIX}started:{token}", json.dumps(mark))
    stop = f"{FAILOVER_PREFIX}stop:{token}"
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if conn.exists(stop):
            return
        time.sleep(0.02)


@jobmaster.job(name="bench_jobs.noop", retry=False)
def noop() -> None:
    """Nothing at all (bench/status_cost.py)."""
    return None


ANSWER = {"ok": True, "count": 42, "note": "done"}  # a typical small result


@jobmaster.job(name="bench_jobs.answer", retry=False)
def answer() -> dict[str, object]:
    """A small return value, kept as the job's result (bench/status_cost.py --results)."""
    return ANSWER
