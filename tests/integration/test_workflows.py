"""Chains and batches run by a worker in this process, against a real Redis:
the semantics of each callback, cancel, nesting and statuses."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator

import pytest
import redis

import jobmaster
from jobmaster import testing
from jobmaster.api import BatchSet, RetrySet
from jobmaster.client import Client
from jobmaster.config import Config
from jobmaster.keys import Keys
from jobmaster.worker.process import WorkerProcess
from tests import jobs
from tests.helpers import holds_for, wait_until

K = Keys()
StartWorker = Callable[[Config], WorkerProcess]


@pytest.fixture(autouse=True)
def _default_client(redis_url: str) -> Iterator[None]:
    """Jobs that add to their own batch use the default client: this test's Redis."""
    jobmaster.configure(redis_url)
    yield


def texts(values: list[bytes]) -> list[str]:
    return [v.decode() for v in values]


def callbacks(store: redis.Redis) -> list[str]:
    return texts(store.lrange("test:callbacks", 0, -1))


def test_a_chain_runs_its_steps_in_order_each_after_the_previous_succeeded(
    make_config: Callable[..., Config],
    running_worker: StartWorker,
    client: Client,
    store: redis.Redis,
) -> None:
    running_worker(make_config(concurrency=4))
    steps = [jobs.step.s(str(n)) for n in range(1, 6)]
    cid = jobmaster.chain(*steps, client=client)
    wait_until(lambda: store.llen("test:order") == 5, timeout=10, message="5 steps ran")
    assert texts(store.lrange("test:order", 0, -1)) == ["1", "2", "3", "4", "5"]
    wait_until(lambda: (jobmaster.chain_status(cid, client) or {}).get("state") == "succeeded", 5)
    status = jobmaster.chain_status(cid, client)
    assert status is not None and (status["steps"], status["done"]) == (5, 5)
    assert client.status(status["current"]) == "complete"  # the last step's jid


def test_a_step_failing_for_good_stops_the_chain_and_runs_both_on_failures(
    make_config: Callable[..., Config],
    running_worker: StartWorker,
    client: Client,
    store: redis.Redis,
) -> None:
    running_worker(make_config())
    cid = jobmaster.chain(
        jobs.step.s("1"),
        jobs.step_hooked.s("2"),
        jobs.step.s("3"),
        on_failure=jobs.callback.s("chain-failed"),
        client=client,
    )
    wait_until(lambda: callbacks(store) == [f"chain-failed:{cid}"], timeout=10)
    # The step's own hook runs after its outcome is recorded, and the recording
    # enqueued the chain's callback: another thread may run that one first.
    wait_until(
        lambda: store.hget("test:hooks", "failure:2") == b"KeyError",
        timeout=5,
        message="the step's own on_failure hook ran",
    )
    holds_for(0.5, lambda: store.llen("test:order") == 2, "a step ran after the failure")
    status = jobmaster.chain_status(cid, client)
    assert status is not None and (status["state"], status["done"]) == ("failed", 1)
    [dead] = list(jobmaster.DeadSet(client))
    assert (dead.job, dead.args) == ("tests.step_hooked", ["2"])


def test_a_batch_fires_complete_once_and_success_never_when_jobs_die(
    make_config: Callable[..., Config],
    running_worker: StartWorker,
    client: Client,
    store: redis.Redis,
) -> None:
    batch = jobmaster.batch(
        description="50 jobs, 5 dying",
        on_complete=jobs.callback.s("complete"),
        on_success=jobs.callback.s("success"),
        on_death=jobs.callback.s("death"),
        client=client,
    )
    with batch.jobs():
        for number in range(50):
            jobs.member.enqueue(number, fail=number % 10 == 0)
    running_worker(make_config(concurrency=8))
    bid = batch.bid
    wait_until(lambda: sorted(callbacks(store)) == [f"complete:{bid}", f"death:{bid}"], 15)
    info = BatchSet(client).get(bid)
    assert info is not None
    assert (info.total, info.pending, info.succeeded, info.failed, info.dead) == (50, 5, 45, 5, 5)
    assert info.complete and not info.success and info.state == "complete"
    holds_for(0.5, lambda: len(callbacks(store)) == 2, "a callback fired twice")


def test_success_and_complete_fire_once_with_the_batch_id_after_retries(
    make_config: Callable[..., Config],
    running_worker: StartWorker,
    client: Client,
    store: redis.Redis,
) -> None:
    batch = jobmaster.batch(
        on_complete=jobs.callback.s("complete"),
        on_success=jobs.callback.s("success"),
        client=client,
    )
    with batch.jobs():
        jobs.flaky.enqueue("flaky", 2)  # fails twice, then succeeds (retry=5, backoff 0)
        jobs.member.enqueue(1)
    running_worker(make_config())
    bid = batch.bid
    # Complete once every job has run once (the flaky one failed); success at the end.
    wait_until(lambda: callbacks(store) == [f"complete:{bid}", f"success:{bid}"], timeout=20)
    info = BatchSet(client).get(bid)
    assert info is not None and info.success and (info.failed, info.pending) == (0, 0)


def test_cancel_skips_the_jobs_not_started_and_counts_them(
    make_config: Callable[..., Config],
    running_worker: StartWorker,
    client: Client,
    store: redis.Redis,
) -> None:
    batch = jobmaster.batch(
        on_complete=jobs.callback.s("complete"),
        on_success=jobs.callback.s("success"),
        client=client,
    )
    batch.add(*[jobs.member.s(number, seconds=0.05) for number in range(40)])
    running_worker(make_config(concurrency=1))
    wait_until(lambda: store.hlen("test:member_runs") >= 5, timeout=10, message="5 jobs ran")
    assert batch.cancel()
    bid = batch.bid
    wait_until(lambda: callbacks(store) == [f"complete:{bid}"], timeout=15)
    info = BatchSet(client).get(bid)
    ran = store.hlen("test:member_runs")
    assert info is not None and info.cancelled and info.state == "complete"
    assert (info.succeeded, info.skipped, info.pending) == (ran, 40 - ran, 0)
    assert ran < 40
    assert not BatchSet(client).cancel("no-such-batch")
    assert store.exists(K.batch("no-such-batch")) == 0


def test_a_job_can_add_jobs_to_its_own_batch_before_it_completes(
    make_config: Callable[..., Config],
    running_worker: StartWorker,
    client: Client,
    store: redis.Redis,
) -> None:
    batch = jobmaster.batch(on_success=jobs.callback.s("success"), client=client)
    batch.add(jobs.grows_batch.s(3))
    running_worker(make_config())
    wait_until(lambda: callbacks(store) == [f"success:{batch.bid}"], timeout=10)
    info = BatchSet(client).get(batch.bid)
    assert info is not None and (info.total, info.succeeded) == (4, 4)
    assert sorted(store.hkeys("test:member_runs")) == [b"100", b"101", b"102"]


def test_an_empty_batch_is_complete_at_once_and_a_block_that_raises_pushes_nothing(
    make_config: Callable[..., Config],
    running_worker: StartWorker,
    client: Client,
    store: redis.Redis,
) -> None:
    empty = jobmaster.batch(on_complete=jobs.callback.s("complete"), client=client)
    with empty.jobs():
        pass
    broken = jobmaster.batch(client=client)
    with pytest.raises(RuntimeError), broken.jobs():
        jobs.member.enqueue(1)
        raise RuntimeError("the producer fails half way")
    running_worker(make_config())
    wait_until(lambda: callbacks(store) == [f"complete:{empty.bid}"], timeout=10)
    assert BatchSet(client).get(broken.bid) is None
    assert store.llen(K.queue("default")) == 0
    assert [info.bid for info in BatchSet(client).list()] == [empty.bid]
    status = jobmaster.batch_status(empty.bid, client)
    assert status is not None and status["state"] == "success" and status["total"] == 0


def test_an_operator_killing_a_retrying_batch_job_counts_its_death_and_calls_back(
    make_config: Callable[..., Config], client: Client, store: redis.Redis
) -> None:
    """The kill goes through the recovery's transfer: without it the batch's
    dead count stayed 0 and on_death never fired."""
    make_config()  # the jobs' store: this test's Redis
    batch = jobmaster.batch(
        on_death=jobs.callback.s("death"), on_complete=jobs.callback.s("complete"), client=client
    )
    with batch.jobs():
        jid = jobs.fails.enqueue("k")  # retry=2: its first failure waits in the retry set
    # Every job has run once: on_complete runs with that first failure.
    assert testing.work(include_scheduled=False) == Counter(retry=1, done=1)
    assert RetrySet(client).kill(jid)
    status = jobmaster.batch_status(batch.bid, client)
    assert status is not None and status["dead"] == 1
    assert testing.work(include_scheduled=False) == Counter(done=1)  # on_death
    assert sorted(callbacks(store)) == [f"complete:{batch.bid}", f"death:{batch.bid}"]


def test_an_operator_killing_a_retrying_chain_step_stops_the_chain(
    make_config: Callable[..., Config], client: Client, store: redis.Redis
) -> None:
    make_config()
    cid = jobmaster.chain(
        jobs.fails.s("c"),
        jobs.step.s("never"),
        on_failure=jobs.callback.s("chain-failed"),
        client=client,
    )
    assert testing.work(include_scheduled=False) == Counter(retry=1)
    (waiting,) = list(RetrySet(client))
    assert RetrySet(client).kill(waiting.jid)
    assert (jobmaster.chain_status(cid, client) or {}).get("state") == "failed"
    assert testing.work() == Counter(done=1)  # the chain's on_failure, not the next step
    assert callbacks(store) == [f"chain-failed:{cid}"]
    assert store.lrange("test:order", 0, -1) == []
