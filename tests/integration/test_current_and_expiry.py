"""``current_job()`` and ``expires_in`` through the worker's own path
(``jobmaster.testing.work()`` runs it in this thread), against a real Redis."""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterator

import pytest
import redis

import jobmaster
from jobmaster import testing
from jobmaster.api import Stats
from jobmaster.client import Client
from jobmaster.config import Config
from jobmaster.keys import Keys
from jobmaster.worker.process import WorkerProcess
from tests import current_jobs, jobs
from tests.helpers import wait_until

K = Keys()
pytestmark = pytest.mark.timeout(60)
StartWorker = Callable[[Config], WorkerProcess]


@pytest.fixture(autouse=True)
def _jobs_on_this_redis(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("JOBMASTER_REDIS_URL", redis_url)
    jobmaster.configure(redis_url)
    yield


def test_current_job_says_which_job_and_which_attempt(client: Client) -> None:
    jid = current_jobs.current.options(queue="low").enqueue("r", fail_first=True)
    assert testing.work() == Counter(retry=1, done=1)
    first, second = current_jobs.seen("r")
    assert first is not None and second is not None
    assert (first["jid"], first["name"], first["queue"]) == (jid, "tests.current", "low")
    assert (first["attempt"], second["attempt"]) == (1, 2)
    assert first["batch_id"] is None
    assert isinstance(first["enqueued_at"], float)
    assert second["enqueued_at"] >= first["enqueued_at"]  # pushed again for its retry
    assert jobmaster.current_job() is None  # nothing left behind in this thread


def test_current_job_names_the_batch(client: Client) -> None:
    batch = jobmaster.batch(description="current", client=client)
    with batch.jobs():
        current_jobs.current.enqueue("b")
    testing.work()
    [info] = current_jobs.seen("b")
    assert info is not None and info["batch_id"] == batch.bid


def test_drain_sets_current_job_too(client: Client) -> None:
    jid = current_jobs.current.enqueue("d")
    assert testing.drain() == 1
    [info] = current_jobs.seen("d")
    assert info is not None and (info["jid"], info["queue"], info["attempt"]) == (jid, "default", 1)


def created_ago(
    seconds: float, expires_in: float, marker: str, **more: object
) -> dict[str, object]:
    return {
        "job": "tests.record",
        "args": [marker],
        "created_at": time.time() - seconds,
        "expires_in": expires_in,
        **more,
    }


def test_a_job_fetched_after_its_expiry_is_not_run_and_is_counted(
    client: Client, store: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    late = client.push(created_ago(3600, 60, "late"))
    in_time = client.push(created_ago(1, 60, "in-time"))
    assert late is not None and in_time is not None
    with caplog.at_level(logging.INFO, logger="jobmaster.worker.executor"):
        assert testing.work() == Counter(expired=1, done=1)
    assert store.smembers("test:started") == {b"in-time"}  # the late one never ran
    assert client.status(late) == "expired"
    assert client.status(in_time) == "complete"
    # One place at a time: acknowledged, and in no set.
    assert store.keys(f"{K.prefix}inprogress:*") == []
    for zset in (K.retry, K.dead, K.scheduled):
        assert store.zcard(zset) == 0
    assert client.attempts(late) == []  # not an attempt: it did not run
    [line] = [r for r in caplog.records if getattr(r, "event", None) == "job.expired"]
    assert (line.jid, line.job) == (late, "tests.record")  # type: ignore[attr-defined]
    stats = Stats(client.redis)
    assert (stats.expired, stats.expired_today) == (1, 1)
    assert (stats.processed, stats.failed) == (1, 0)  # the run that happened, only
    assert stats.as_dict()["expired"] == 1


def test_the_option_expires_a_job(client: Client, store: redis.Redis) -> None:
    jid = jobs.record.options(expires_in=0.001).enqueue("soon")
    time.sleep(0.01)  # past its millisecond: what is tested is a fetch after it
    assert testing.work() == Counter(expired=1)
    assert client.status(jid or "") == "expired"
    assert store.smembers("test:started") == set()


def test_an_expired_job_of_a_batch_counts_as_a_failure(client: Client, store: redis.Redis) -> None:
    batch = jobmaster.batch(on_complete=jobs.callback.s("complete"), client=client)
    with batch.jobs():
        jobs.record.options(expires_in=0.001).enqueue("late-in-batch")
        jobs.record.enqueue("fine-in-batch")
    time.sleep(0.01)  # past the first one's millisecond
    assert testing.work() == Counter(expired=1, done=2)  # the job, and the callback
    info = jobmaster.batch_status(batch.bid, client)
    assert info is not None and info["pending"] == 1  # the expired one never succeeds
    assert [v.decode() for v in store.lrange("test:callbacks", 0, -1)] == [f"complete:{batch.bid}"]


def test_a_forged_expiry_runs_the_job(client: Client, store: redis.Redis) -> None:
    client.push({"job": "tests.record", "args": ["forged"], "expires_in": "soon"})
    assert testing.work() == Counter(done=1)
    assert json.loads(store.get(K.stat("processed")) or "0") == 1


def test_an_expired_unique_job_frees_its_lock(client: Client, store: redis.Redis) -> None:
    """It will never run: an until_executed lock kept would refuse its next enqueue."""
    jid = jobs.unique_exec.options(expires_in=0.001).enqueue("u")
    assert jid is not None
    assert jobs.unique_exec.enqueue("u") is None  # locked while it waits
    time.sleep(0.01)  # past its millisecond
    assert testing.work() == Counter(expired=1)
    assert store.keys(f"{K.prefix}unique:*") == []
    assert jobs.unique_exec.enqueue("u") is not None


def test_attempt_counts_a_run_pushed_back_by_a_stop(
    make_config: Callable[..., Config], running_worker: StartWorker, client: Client
) -> None:
    """SPEC §11: attempt is 1 on the first run, and counts runs. A stop's
    push-back while the job ran did not move it: the next run said 1 again."""
    current_jobs.current_then_sleeps.enqueue("pushed back", 2)  # ends within the leak check
    first = running_worker(make_config(concurrency=1, app=["tests.current_jobs"]))
    wait_until(lambda: len(current_jobs.seen("pushed back")) == 1, timeout=10)
    assert len(first.stop(timeout=0.2).requeued) == 1
    running_worker(make_config(concurrency=1, app=["tests.current_jobs"]))
    wait_until(lambda: len(current_jobs.seen("pushed back")) == 2, timeout=10)
    attempts = [info["attempt"] for info in current_jobs.seen("pushed back") if info]
    assert attempts == [1, 2]
