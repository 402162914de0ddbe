"""The worker's side of a cancel (worker/cancels.py) against a real Redis, no
fork: what a process reads once a second, and JobCancelled in the thread of
a job whose code runs. A real master: tests/process/test_cancel.py."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator

import pytest
import redis

import jobmaster
from jobmaster.api import Canceller, DeadSet, RetrySet
from jobmaster.client import Client
from jobmaster.config import Config
from jobmaster.errors import JobCancelled
from jobmaster.keys import Keys
from jobmaster.worker.cancels import CancelWatch
from jobmaster.worker.context import WorkerContext
from jobmaster.worker.executor import Executor
from jobmaster.worker.fetch import Fetcher
from jobmaster.worker.outcome import record
from jobmaster.worker.process import WorkerProcess
from tests import jobs
from tests.helpers import wait_until

pytestmark = pytest.mark.timeout(60)
K = Keys()


@pytest.fixture
def watch(store: redis.Redis) -> Iterator[CancelWatch]:
    stop = threading.Event()
    found = CancelWatch(store, K, stop)
    yield found
    stop.set()
    if found.is_alive():
        found.join(timeout=5)


@pytest.fixture(autouse=True)
def _default_client(redis_url: str) -> None:
    jobmaster.configure(redis_url)


def working(store: redis.Redis, jid: str) -> str:
    store.set(K.status(jid), "working", ex=60)
    return jid


def test_a_running_job_gets_job_cancelled_within_a_second(
    watch: CancelWatch, store: redis.Redis
) -> None:
    jid = working(store, "a" * 24)
    ended: list[BaseException | None] = []
    started = threading.Event()

    def job() -> None:
        try:
            with watch.running(jid):
                started.set()
                deadline = time.monotonic() + 20
                while time.monotonic() < deadline:
                    # Job code that swallows its own errors: JobCancelled is no Exception.
                    with contextlib.suppress(Exception):
                        time.sleep(0.01)
            ended.append(None)
        except BaseException as error:
            ended.append(error)

    thread = threading.Thread(target=job)
    thread.start()
    watch.start()
    assert started.wait(5)
    asked = time.monotonic()
    assert jobmaster.cancel(jid)
    thread.join(timeout=10)
    took = time.monotonic() - asked
    assert len(ended) == 1 and isinstance(ended[0], JobCancelled)
    assert took < 2.0, f"stopped {took:.2f}s after the cancel"


def test_a_job_cancelled_before_it_starts_does_not_start(
    watch: CancelWatch, store: redis.Redis
) -> None:
    jid = working(store, "b" * 24)
    assert jobmaster.cancel(jid)
    watch.poll()
    assert watch.requested(jid) and not watch.requested("c" * 24)
    ran = []
    with pytest.raises(JobCancelled), watch.running(jid):
        ran.append(jid)
    assert ran == []


def test_forged_scores_hide_no_later_request(watch: CancelWatch, store: redis.Redis) -> None:
    store.zadd(K.cancels, {"future": time.time() + 10 * 86400, "inf": float("inf")})
    watch.poll()
    jid = working(store, "d" * 24)
    assert jobmaster.cancel(jid)
    watch.poll()
    assert watch.requested(jid)


def test_a_steady_read_costs_nothing_new(watch: CancelWatch, store: redis.Redis) -> None:
    """Once read, requests are not read again (past the overlap): one small call a second."""
    store.zadd(K.cancels, {f"old{n}": time.time() - 3600 for n in range(50)})
    watch.poll()
    assert watch.requested("old7")
    store.zrem(K.cancels, "old7")  # gone from Redis: still known, and not re-read
    before = store.info("commandstats").get("cmdstat_zrange", {}).get("calls", 0)
    watch.poll()
    after = store.info("commandstats").get("cmdstat_zrange", {}).get("calls", 0)
    assert after - before == 1
    assert watch.requested("old7")


def test_a_job_cancelled_between_fetch_and_start_never_runs(
    make_config: Callable[..., Config], client: Client, store: redis.Redis, watch: CancelWatch
) -> None:
    """Fetched (in our in-progress list, status still "queued"), then cancelled:
    the removal finds nothing waiting, the request stops it as it starts."""
    ctx = WorkerContext.create(make_config(status_ttl=60))
    try:
        batch = jobmaster.batch(client=client)
        with batch.jobs():
            jid = jobs.record.enqueue("fetched-then-cancelled")
        unit = Fetcher(ctx).fetch()
        assert unit is not None and client.status(jid) == "queued"

        result = Canceller(client).cancel(str(jid))
        assert (result.cancelled, result.removed_from) == (True, None)
        watch.poll()  # what the watch's thread does once a second
        outcome = Executor.of(ctx, cancels=watch).run(unit)
        assert record(ctx, unit.raw, outcome)
    finally:
        ctx.redis.close()
    assert not store.sismember("test:started", "fetched-then-cancelled")
    assert client.status(str(jid)) == "cancelled"
    assert store.llen(ctx.inprogress_key) == 0  # acknowledged: in one place, none
    assert client.attempts(str(jid)) == []  # no attempt: it never ran
    assert store.get(K.stat("processed")) is None
    assert store.sismember(K.batch_failed(batch.bid), str(jid))


def test_a_running_unique_job_cancelled_frees_its_lock_and_is_not_retried(
    make_config: Callable[..., Config],
    running_worker: Callable[[Config], WorkerProcess],
    client: Client,
    store: redis.Redis,
) -> None:
    running_worker(make_config(status_ttl=60))
    unique = jobs.stubborn.options(unique="until_executed")  # a loop: stops at a bytecode
    jid = unique.enqueue("held", 60.0)
    assert jid is not None
    wait_until(lambda: client.status(jid) == "working", timeout=10, message="running")
    assert unique.enqueue("held", 60.0) is None  # its lock is held

    assert jobmaster.cancel(jid)

    wait_until(lambda: client.status(jid) == "cancelled", timeout=5, message="cancelled")
    assert not store.sismember("test:done", "held")
    assert RetrySet(client).size() == 0 and DeadSet(client).size() == 0
    again = unique.enqueue("held", 60.0)
    assert again is not None  # the lock went with it
    wait_until(lambda: client.status(again) == "working", timeout=10, message="running again")
    assert jobmaster.cancel(again)  # not left running past the test (a thread left behind)
    wait_until(lambda: client.status(again) == "cancelled", timeout=5, message="cancelled")


def test_a_forged_cancels_key_neither_stops_a_start_nor_later_cancels(
    watch: CancelWatch, store: redis.Redis
) -> None:
    store.set(K.cancels, "forged")
    watch.catch_up()  # logged, not raised: the process starts
    jid = working(store, "f" * 24)
    assert jobmaster.cancel(jid)  # replaces the forged key
    watch.poll()
    assert watch.requested(jid)


def test_a_flood_of_one_score_hides_no_later_request(
    watch: CancelWatch, store: redis.Redis
) -> None:
    """Issue 22 hole 7: 1,500 members with one score made every page of the
    inclusive walk the same page; a genuine request after them was never read."""
    stamp = time.time() - 1
    store.zadd(K.cancels, {f"flood{n:05}": stamp for n in range(1500)})
    jid = working(store, "e" * 24)
    assert jobmaster.cancel(jid)
    watch.poll()  # the fallback read alone (the watch's thread is not started)
    assert watch.requested(jid)
    assert watch.requested("flood00000") and watch.requested("flood01499")


def test_a_flood_past_one_read_is_walked_through_in_later_reads(
    watch: CancelWatch, store: redis.Redis
) -> None:
    """More members of one score than a read may take: each read goes on where
    the last stopped, so the genuine request is read after a few reads."""
    stamp = time.time() - 1
    for start in range(0, 30_000, 5000):
        store.zadd(K.cancels, {f"flood{n:05}": stamp for n in range(start, start + 5000)})
    store.zadd(K.cancels, {"g" * 24: time.time()})  # as CANCEL_REQUEST scores it
    for _ in range(4):
        watch.poll()
    assert watch.requested("g" * 24)


def test_forged_near_future_scores_push_out_no_genuine_request(
    watch: CancelWatch, store: redis.Redis
) -> None:
    """The set kept its 10,000 highest scores: 10,000 forged ones an hour ahead
    trimmed every genuine request as it was made."""
    ahead = time.time() + 3600
    store.zadd(K.cancels, {f"ahead{n:05}": ahead + n for n in range(10_000)})
    jid = working(store, "h" * 24)
    assert jobmaster.cancel(jid)
    assert store.zscore(K.cancels, jid) is not None
    assert store.zcount(K.cancels, time.time() + 120, "+inf") == 0  # the forged ones went
    watch.poll()
    assert watch.requested(jid)


def test_a_running_job_hears_its_cancel_at_once_not_at_the_next_read(
    watch: CancelWatch, store: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 22 hole 6: the watch hears the cancel channel; the periodic read
    (here once a minute) is only the fallback for a lost message."""
    monkeypatch.setattr("jobmaster.worker.cancels.INTERVAL", 60.0)
    jid = working(store, "i" * 24)
    stopped = threading.Event()

    def job() -> None:
        with contextlib.suppress(JobCancelled), watch.running(jid):
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                time.sleep(0.01)
        stopped.set()

    watch.start()
    assert watch.subscribed.wait(5)
    thread = threading.Thread(target=job)
    thread.start()
    time.sleep(0.2)  # past the watch's first read: only the message can stop it now
    asked = time.monotonic()
    assert jobmaster.cancel(jid)
    assert stopped.wait(5)
    took = time.monotonic() - asked
    thread.join(timeout=5)
    assert took < 1.0, f"stopped {took:.2f}s after the cancel"
