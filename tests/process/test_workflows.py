"""Chains and batches against real ``jobmaster`` masters: order, failure,
a 1,000-job batch's callbacks, cancel, and children SIGKILLed mid-batch."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
import redis

import jobmaster
from jobmaster.api import BatchInfo, BatchSet
from jobmaster.client import Client
from tests import jobs
from tests.helpers import holds_for, wait_until
from tests.process.conftest import JobmasterProcess, wait_for_worker

pytestmark = pytest.mark.process
Run = Callable[..., JobmasterProcess]
Write = Callable[..., Path]


def texts(store: redis.Redis, key: str) -> list[str]:
    return [value.decode() for value in store.lrange(key, 0, -1)]


def start_master(
    run: Run, write: Write, store: redis.Redis, **settings: object
) -> JobmasterProcess:
    master = run("-c", str(write(processes=2, **settings)))
    wait_for_worker(store, master)
    return master


def batch_info(client: Client, bid: str) -> BatchInfo:
    info = BatchSet(client).get(bid)
    assert info is not None, f"batch {bid} is gone"
    return info


def test_a_chain_of_five_steps_runs_in_order(
    run_jobmaster: Run, write_config: Write, store: redis.Redis, redis_url: str
) -> None:
    start_master(run_jobmaster, write_config, store)
    client = Client(redis_url)
    cid = jobmaster.chain(*[jobs.step.s(f"s{n}") for n in range(1, 6)], client=client)
    wait_until(lambda: store.llen("test:order") == 5, timeout=20, message="five steps ran")
    assert texts(store, "test:order") == ["s1", "s2", "s3", "s4", "s5"]
    wait_until(lambda: (jobmaster.chain_status(cid, client) or {}).get("state") == "succeeded", 5)


def test_a_chain_step_failing_stops_the_rest(
    run_jobmaster: Run, write_config: Write, store: redis.Redis, redis_url: str
) -> None:
    start_master(run_jobmaster, write_config, store)
    client = Client(redis_url)
    cid = jobmaster.chain(
        jobs.step.s("s1"),
        jobs.step.s("s2", fail=True),
        jobs.step.s("s3"),
        jobs.step.s("s4"),
        on_failure=jobs.callback.s("failed"),
        client=client,
    )
    wait_until(lambda: texts(store, "test:callbacks") == [f"failed:{cid}"], timeout=20)
    holds_for(1.0, lambda: texts(store, "test:order") == ["s1", "s2"], "a step ran after s2 failed")
    status = jobmaster.chain_status(cid, client)
    assert status is not None and (status["state"], status["done"]) == ("failed", 1)


def test_a_batch_of_1000_with_10_failing_fires_on_complete_once_and_on_success_never(
    run_jobmaster: Run, write_config: Write, store: redis.Redis, redis_url: str
) -> None:
    client = Client(redis_url)
    batch = jobmaster.batch(
        description="1,000 jobs, 10 failing",
        on_complete=jobs.callback.s("complete"),
        on_success=jobs.callback.s("success"),
        client=client,
    )
    with batch.jobs():
        for number in range(1000):
            jobs.member.enqueue(number, fail=number % 100 == 7)
    start_master(run_jobmaster, write_config, store, concurrency=5)
    bid = batch.bid
    wait_until(lambda: texts(store, "test:callbacks") == [f"complete:{bid}"], timeout=60)
    info = batch_info(client, bid)
    assert (info.total, info.succeeded, info.failed, info.dead, info.pending) == (
        1000,
        990,
        10,
        10,
        10,
    )
    assert store.hlen("test:member_runs") == 1000
    holds_for(1.0, lambda: texts(store, "test:callbacks") == [f"complete:{bid}"], "callback again")


def test_cancel_in_the_middle_skips_the_rest(
    run_jobmaster: Run, write_config: Write, store: redis.Redis, redis_url: str
) -> None:
    client = Client(redis_url)
    batch = jobmaster.batch(on_complete=jobs.callback.s("complete"), client=client)
    batch.add(*[jobs.member.s(number, seconds=0.02) for number in range(400)])
    start_master(run_jobmaster, write_config, store, concurrency=2)
    wait_until(lambda: store.hlen("test:member_runs") >= 20, timeout=20, message="20 jobs ran")
    assert batch.cancel()
    ran_at_cancel = store.hlen("test:member_runs")
    wait_until(lambda: texts(store, "test:callbacks") == [f"complete:{batch.bid}"], timeout=30)
    info = batch_info(client, batch.bid)
    ran = store.hlen("test:member_runs")
    # Only the jobs already running when it was cancelled (2 x 2 threads) end after it.
    assert ran <= ran_at_cancel + 4
    assert (info.succeeded, info.skipped, info.pending, info.state) == (
        ran,
        400 - ran,
        0,
        "complete",
    )


def test_a_batch_completes_with_exact_counts_while_children_are_sigkilled(
    run_jobmaster: Run, write_config: Write, store: redis.Redis, redis_url: str
) -> None:
    client = Client(redis_url)
    batch = jobmaster.batch(
        on_complete=jobs.callback.s("complete"),
        on_success=jobs.callback.s("success"),
        client=client,
    )
    with batch.jobs():
        for number in range(600):
            jobs.member.enqueue(number, seconds=0.05)
    # max_crashes: a job hit by several of the kills must not become a poison pill.
    master = start_master(
        run_jobmaster, write_config, store, concurrency=4, max_crashes=50, heartbeat_ttl=3
    )
    kills = 0
    while kills < 4 and store.hlen("test:member_runs") < 500:
        children = [c for c in psutil.Process(master.pid).children() if c.status() != "zombie"]
        busy = sum(int(store.hget(k, "busy") or 0) for k in store.scan_iter("*heartbeat*"))
        if children and busy:
            os.kill(children[0].pid, signal.SIGKILL)
            kills += 1
        time.sleep(0.5)
    assert kills >= 2, "the batch ended before the children could be killed"
    bid = batch.bid
    wait_until(
        lambda: sorted(texts(store, "test:callbacks")) == [f"complete:{bid}", f"success:{bid}"],
        timeout=60,
        message="both callbacks",
    )
    info = batch_info(client, bid)
    assert (info.total, info.succeeded, info.failed, info.pending, info.skipped) == (
        600,
        600,
        0,
        0,
        0,
    )
    runs = {int(k): int(v) for k, v in store.hgetall("test:member_runs").items()}
    assert sorted(runs) == list(range(600))
    assert sum(runs.values()) - 600 <= kills * 4  # reruns only of jobs killed mid-run
    holds_for(1.0, lambda: len(texts(store, "test:callbacks")) == 2, "a callback fired twice")
    assert master.popen.poll() is None


def test_a_poison_pill_in_a_batch_is_counted_dead_and_the_batch_completes(
    run_jobmaster: Run, write_config: Write, store: redis.Redis, redis_url: str
) -> None:
    client = Client(redis_url)
    batch = jobmaster.batch(
        on_complete=jobs.callback.s("complete"),
        on_death=jobs.callback.s("death"),
        on_success=jobs.callback.s("success"),
        client=client,
    )
    batch.add(jobs.kill_self.s("pill"), jobs.member.s(1))
    # One thread per child: the pill never takes an innocent job down with it.
    master = start_master(run_jobmaster, write_config, store, max_crashes=2, concurrency=1)
    bid = batch.bid
    # Buried by the master's recovery, not by a FINISH: the batch still hears of it.
    try:
        wait_until(
            lambda: sorted(texts(store, "test:callbacks")) == [f"complete:{bid}", f"death:{bid}"],
            timeout=30,
        )
    except AssertionError as missing:
        info = BatchSet(client).get(bid)
        fired = texts(store, "test:callbacks")
        raise AssertionError(f"callbacks {fired}, {info}\n{master.log()}") from missing
    info = batch_info(client, bid)
    assert (info.succeeded, info.dead, info.failed, info.pending) == (1, 1, 1, 1)
    [dead] = list(jobmaster.DeadSet(client))
    assert dead.job == "tests.kill_self"
    holds_for(0.5, lambda: len(texts(store, "test:callbacks")) == 2, "a callback fired twice")


def test_two_children_finishing_a_batch_together_fire_its_callback_once(
    run_jobmaster: Run, write_config: Write, store: redis.Redis, redis_url: str
) -> None:
    """300 batches of two jobs: each batch's last two jobs finish at nearly the
    same moment in two children, again and again; every callback fires once."""
    client = Client(redis_url)
    bids = []
    for _ in range(300):
        batch = jobmaster.batch(
            on_complete=jobs.callback.s("complete"),
            on_success=jobs.callback.s("success"),
            client=client,
        )
        with batch.jobs():
            jobs.member.enqueue(0)
            jobs.member.enqueue(1)
        bids.append(batch.bid)
    start_master(run_jobmaster, write_config, store, concurrency=1)
    wait_until(lambda: store.llen("test:callbacks") >= 600, timeout=60, message="600 callbacks")
    holds_for(0.5, lambda: store.llen("test:callbacks") == 600, "a callback fired twice")
    fired = sorted(texts(store, "test:callbacks"))
    assert fired == sorted([f"complete:{bid}" for bid in bids] + [f"success:{bid}" for bid in bids])
