"""``jobmaster.testing.work()``: the worker's own path, run in the test's thread,
against a real Redis (for users' test suites: workflows move, outcomes are kept)."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Callable, Iterator

import pytest
import redis

import jobmaster
from jobmaster import testing
from jobmaster.client import Client
from jobmaster.config import Config
from jobmaster.keys import Keys
from tests import async_jobs, jobs

K = Keys()


@pytest.fixture(autouse=True)
def _jobs_on_this_redis(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The test jobs (and work() without a config) use this test's Redis."""
    monkeypatch.setenv("JOBMASTER_REDIS_URL", redis_url)
    jobmaster.configure(redis_url)
    yield


def texts(values: list[bytes]) -> list[str]:
    return [v.decode() for v in values]


def test_work_runs_queued_and_scheduled_jobs_and_records_them_as_a_worker(
    client: Client, store: redis.Redis
) -> None:
    jids = client.push_bulk({"job": "tests.record", "args": [["w1"], ["w2"]]})
    later = client.push({"job": "tests.record", "args": ["w3"], "at": time.time() + 3600})
    assert testing.work() == Counter(done=3)
    assert store.smembers("test:done") == {b"w1", b"w2", b"w3"}
    assert [client.status(jid) for jid in [*jids, later]] == ["complete"] * 3
    assert store.get(K.stat("processed")) == b"3"
    assert store.keys(f"{K.prefix}inprogress:*") == []  # every job acknowledged
    assert testing.work() == Counter()  # nothing left


def test_work_without_scheduled_leaves_future_jobs_alone(
    client: Client, store: redis.Redis
) -> None:
    client.push({"job": "tests.record", "args": ["now"]})
    client.push({"job": "tests.record", "args": ["later"], "at": time.time() + 3600})
    assert testing.work(include_scheduled=False) == Counter(done=1)
    assert store.zcard(K.scheduled) == 1


def test_a_failing_job_is_retried_then_dead_without_raising(
    client: Client, store: redis.Redis
) -> None:
    jid = client.push({"job": "tests.fails", "args": ["f"]})  # retry=2
    assert testing.work() == Counter(retry=2, dead=1)
    assert store.hget("test:attempts", "f") == b"3"
    (dead,) = [json.loads(raw) for raw in store.zrange(K.dead, 0, -1)]
    assert dead["jid"] == jid
    assert "failing on purpose: f" in dead["error_message"]
    assert client.status(jid) == "dead"


def test_a_chain_moves_on_step_by_step(client: Client, store: redis.Redis) -> None:
    cid = jobmaster.chain(*(jobs.step.s(str(n)) for n in range(1, 4)), client=client)
    assert testing.work() == Counter(done=3)
    assert texts(store.lrange("test:order", 0, -1)) == ["1", "2", "3"]
    status = jobmaster.chain_status(cid, client)
    assert status is not None and status["state"] == "succeeded"


def test_a_failing_chain_step_stops_the_chain_and_runs_its_on_failure(
    client: Client, store: redis.Redis
) -> None:
    cid = jobmaster.chain(
        jobs.step.s("1"),
        jobs.step.s("2", fail=True),
        jobs.step.s("3"),
        on_failure=jobs.callback.s("chain-failed"),
        client=client,
    )
    assert testing.work() == Counter(done=2, dead=1)  # step 1 and the callback; step 2 (retry=0)
    assert texts(store.lrange("test:order", 0, -1)) == ["1", "2"]
    assert texts(store.lrange("test:callbacks", 0, -1)) == [f"chain-failed:{cid}"]


def test_a_batch_fires_its_callbacks_once(client: Client, store: redis.Redis) -> None:
    batch = jobmaster.batch(
        description="in a test",
        on_complete=jobs.callback.s("complete"),
        on_success=jobs.callback.s("success"),
        client=client,
    )
    with batch.jobs():
        for n in range(5):
            jobs.step.enqueue(f"b{n}")
    assert testing.work() == Counter(done=7)  # 5 jobs and 2 callbacks
    assert sorted(texts(store.lrange("test:callbacks", 0, -1))) == [
        f"complete:{batch.bid}",
        f"success:{batch.bid}",
    ]


def test_work_with_a_config_uses_its_redis_and_namespace(
    make_config: Callable[..., Config], store: redis.Redis
) -> None:
    config = make_config(namespace="elsewhere", queues=["only"])
    other = Client.from_config(config)
    other.push({"job": "tests.record", "args": ["ns"], "queue": "another"})
    assert testing.work(config) == Counter(done=1)  # every known queue, not just "only"
    assert store.smembers("test:done") == {b"ns"}
    assert config.queues == ["only"]  # the caller's config is left as it was
    assert store.get(Keys("elsewhere").stat("processed")) == b"1"
    assert store.get(K.stat("processed")) is None


def test_a_job_that_enqueues_itself_forever_stops_at_the_limit(client: Client) -> None:
    client.push({"job": "tests.requeues_itself", "args": []})
    with pytest.raises(RuntimeError, match="more keep coming"):
        testing.work(limit=20)


@pytest.mark.parametrize("run", [testing.drain, testing.work], ids=["drain", "work"])
def test_releasing_a_job_whose_queue_refuses_it_never_loses_it(
    client: Client, store: redis.Redis, run: Callable[[], object]
) -> None:
    """Scheduled jobs move as the poller moves them, in one TRANSFER: a ZREM
    and then a push that a forged queue key refused lost the job."""
    store.set(K.queue("weird"), "forged")
    jid = client.push(
        {"job": "tests.record", "args": ["x"], "queue": "weird", "at": time.time() + 60}
    )
    run()
    (buried,) = [json.loads(raw) for raw in store.zrange(K.dead, 0, -1)]
    assert buried["jid"] == jid
    assert f"{K.queue('weird')} holds a string" in buried["dead_reason"]
    assert store.zcard(K.scheduled) == 0


def test_work_and_drain_run_async_jobs_to_their_end(client: Client, store: redis.Redis) -> None:
    """An async job under work() is recorded as a worker records it (its
    result kept), under drain() it runs too: each on a loop of its own."""
    jid = async_jobs.who.enqueue("worked")
    assert testing.work() == Counter(done=1)
    assert client.result(str(jid)) == {
        "jid": jid,
        "name": "tests.async.who",
        "attempt": 1,
        "marker": "worked",
    }
    async_jobs.nap.enqueue("drained", 0.01)
    assert testing.drain() == 1
    assert store.lrange("test:async:done", 0, -1)[0].startswith(b"drained:")


def test_work_runs_an_async_job_when_called_from_a_running_event_loop(client: Client) -> None:
    jid = async_jobs.who.enqueue("from a loop")

    async def an_async_test() -> Counter[str]:
        return testing.work()  # a sync call inside a loop: the job gets a loop of its own

    assert asyncio.run(an_async_test()) == Counter(done=1)
    assert client.status(str(jid)) == "complete"


def test_a_chain_of_async_jobs_moves_on_and_keeps_each_result(client: Client) -> None:
    cid = jobmaster.chain(async_jobs.who.s("first"), async_jobs.nap.s("second", 0.01))
    assert testing.work() == Counter(done=2)
    status = jobmaster.chain_status(cid)
    assert status is not None and status["state"] == "succeeded" and status["done"] == 2


def test_drain_from_a_running_event_loop_keeps_current_job_for_an_async_job(
    client: Client,
) -> None:
    """drain() called by an async test runs an async job on a thread of its
    own (coroutines.run_coroutine): that thread began with an empty context,
    so ``current_job()`` was None in the job, as it never is in a worker."""
    async_jobs.who.enqueue("drained from a loop")

    async def an_async_test() -> int:
        return testing.drain()

    assert asyncio.run(an_async_test()) == 1
