"""Unique jobs against a real Redis: the lock's whole life."""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable

import pytest
import redis

import jobmaster
from jobmaster.config import Config
from jobmaster.keys import Keys
from jobmaster.worker.process import WorkerProcess
from tests import jobs
from tests.helpers import wait_until

K = Keys()
StartWorker = Callable[[Config], WorkerProcess]


@pytest.fixture(autouse=True)
def _default_client(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jobmaster.client, "_default", None)
    jobmaster.configure(redis_url)


def test_until_executed_refuses_duplicates_until_the_job_is_done(
    make_config: Callable[..., Config], running_worker: StartWorker, store: redis.Redis
) -> None:
    first = jobs.unique_exec.enqueue("u1")
    assert first is not None
    assert jobs.unique_exec.enqueue("u1") is None  # the same job is already waiting
    assert jobs.unique_exec.enqueue("u2") is not None  # other arguments: another job
    running_worker(make_config())
    wait_until(lambda: store.scard("test:done") == 2, timeout=10)
    wait_until(lambda: not store.keys(K.unique("*")), timeout=5, message="locks released")
    assert jobs.unique_exec.enqueue("u1") is not None  # done: it may be enqueued again


def test_the_lock_is_kept_through_a_retry_and_released_when_it_dies(
    make_config: Callable[..., Config], running_worker: StartWorker, store: redis.Redis
) -> None:
    assert jobs.unique_retry.enqueue("r") is not None
    running_worker(make_config())
    wait_until(lambda: store.zcard(K.retry) == 1, timeout=10, message="waiting out its retry")
    assert jobs.unique_retry.enqueue("r") is None  # still the same job, retrying
    [lock] = store.keys(K.unique("*"))
    assert store.ttl(lock) > 2  # extended past the retry's wait
    wait_until(lambda: store.zcard(K.dead) == 1, timeout=15)
    assert jobs.unique_retry.enqueue("r") is not None  # dead: the lock is free


def test_until_started_frees_the_lock_when_the_job_starts(
    make_config: Callable[..., Config], running_worker: StartWorker, store: redis.Redis
) -> None:
    assert jobs.unique_started.enqueue("s", 2) is not None
    assert jobs.unique_started.enqueue("s", 2) is None
    running_worker(make_config())
    wait_until(lambda: store.sismember("test:started", "s"), timeout=10)
    wait_until(lambda: jobs.unique_started.enqueue("s", 2) is not None, timeout=5)


def test_seconds_hold_the_lock_for_that_long_and_unique_args_choose(
    store: redis.Redis,
) -> None:
    timed = jobmaster.job(name="tests.unique_timed", unique=1)(lambda marker: None)
    assert timed.enqueue("t") is not None
    assert timed.enqueue("t") is None
    wait_until(lambda: timed.enqueue("t") is not None, timeout=5, message="lock expired")
    assert jobs.unique_by_user.enqueue(7, "a") is not None
    assert jobs.unique_by_user.enqueue(7, "b") is None  # only the user id counts
    assert jobs.unique_by_user.enqueue(8, "a") is not None


def test_a_scheduled_unique_job_holds_its_lock_while_scheduled(store: redis.Redis) -> None:
    jid = jobs.unique_exec.enqueue_in(3600, "later")
    assert jid is not None and store.zcard(K.scheduled) == 1
    assert jobs.unique_exec.enqueue("later") is None
    assert jobmaster.status(jid) == "scheduled"


def _enqueue_many(url: str, count: int, results: multiprocessing.Queue[int]) -> None:
    jobmaster.configure(url)
    pushed = sum(jobs.unique_exec.enqueue("contended") is not None for _ in range(count))
    results.put(pushed)


def test_100_concurrent_enqueues_from_4_processes_make_one_job_that_runs_once(
    redis_url: str,
    make_config: Callable[..., Config],
    running_worker: StartWorker,
    store: redis.Redis,
) -> None:
    # Spawned, not forked: a pytest-xdist worker runs threads (execnet's), and
    # a fork beside them warns under 3.12+; what is tested is four producers.
    context = multiprocessing.get_context("spawn")
    results: multiprocessing.Queue[int] = context.Queue()
    producers = [
        context.Process(target=_enqueue_many, args=(redis_url, 25, results)) for _ in range(4)
    ]
    for producer in producers:
        producer.start()
    for producer in producers:
        producer.join(timeout=30)
    assert sum(results.get(timeout=5) for _ in producers) == 1
    assert store.llen(K.queue("default")) == 1
    running_worker(make_config(concurrency=4))
    wait_until(lambda: store.sismember("test:done", "contended"), timeout=10)
    deadline = time.monotonic() + 1
    while time.monotonic() < deadline:  # nothing else arrives: it ran once
        assert int(store.hget("test:runs", "contended") or 0) == 1
        time.sleep(0.05)


def test_a_job_given_up_past_its_timeout_keeps_its_lock_through_its_retry(
    make_config: Callable[..., Config], store: redis.Redis
) -> None:
    """The watchdog records a job stuck in C code itself (process.give_up_on).
    It built that outcome apart from the processor's, without the job's lock:
    an until_executed lock was neither extended through the retry's wait
    (a duplicate could be enqueued once it expired) nor released, and the
    attempt's history said it started and ended in 1970."""
    from jobmaster.unique import LOCK_TTL
    from jobmaster.worker.fetched import FetchedJob
    from jobmaster.worker.watchdog import Armed

    jid = jobs.unique_exec.enqueue("stuck")
    assert jid is not None
    [lock] = store.keys(K.unique("*"))
    assert 0 < store.ttl(lock) <= LOCK_TTL
    worker = WorkerProcess(make_config(concurrency=1))  # never started: we drive it
    [unit] = worker.manager.fetcher.fetch_many(1)
    assert worker.manager.table.claim(unit)
    now = time.monotonic()
    worker.give_up_on(Armed(FetchedJob.read(unit), 0, 1.0, now - 2.0, now))
    assert store.zcard(K.retry) == 1 and store.llen(worker.ctx.inprogress_key) == 0
    assert store.ttl(lock) > LOCK_TTL, "the lock was not kept through the retry's wait"
    [attempt] = store.lrange(K.attempts(jid), 0, -1)
    assert jobmaster.payload.strict_loads(attempt)["started_at"] > time.time() - 60
    assert worker.manager.busy == 0
