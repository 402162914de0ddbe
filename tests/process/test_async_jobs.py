"""Async jobs (SPEC 12) in real ``jobmaster`` masters: many at once on one
child's event loop beside its threads, with the sync jobs' guarantees
(timeouts, cancel, a SIGKILL's requeue, poison pills, TERM), a loop blocked
by a job noticed and named, and middleware around them."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest
import redis

import jobmaster
from jobmaster.api import DeadSet, ProcessSet
from jobmaster.client import Client
from jobmaster.commands.processes import process_json
from jobmaster.keys import Keys
from tests import async_jobs
from tests.helpers import wait_until
from tests.process.conftest import JobmasterProcess, wait_for_worker

pytestmark = [pytest.mark.process, pytest.mark.timeout(120)]
Run = Callable[..., JobmasterProcess]
Write = Callable[..., Path]
K = Keys()


@pytest.fixture(autouse=True)
def _default_client(redis_url: str) -> Iterator[None]:
    """``.enqueue`` goes through the default client: this test's Redis."""
    jobmaster.configure(redis_url)
    yield


def start(run: Run, write: Write, store: redis.Redis, **settings: object) -> JobmasterProcess:
    values: dict[str, object] = {"app": ["tests.async_jobs"], "processes": 1, "concurrency": 2}
    master = run("-c", str(write(**{**values, **settings})))
    wait_for_worker(store, master)
    return master


def done(store: redis.Redis, key: str = "test:async:done") -> list[str]:
    return [entry.decode() for entry in store.lrange(key, 0, -1)]


def child_pids(master: JobmasterProcess) -> list[int]:
    return [child.pid for child in psutil.Process(master.pid).children()]


def test_two_hundred_half_second_async_jobs_run_at_once_on_one_child_of_two_threads(
    run_jobmaster: Run, write_config: Write, store: redis.Redis
) -> None:
    """On two threads alone, 200 jobs of 0.5 s would take 50 s."""
    for n in range(200):
        async_jobs.nap.enqueue(f"n{n}", 0.5)
    master = start(run_jobmaster, write_config, store)
    wait_until(lambda: len(done(store)) == 200, timeout=20, message="200 async jobs done")
    # At least 100 (async_concurrency) ran side by side: 100 started before any ended.
    assert len(set(done(store))) == 200
    assert {entry.rsplit(":", 1)[1] for entry in done(store)} == {str(child_pids(master)[0])}
    assert "for 100 async jobs" in master.log()
    wait_until(lambda: not ProcessSet(store).running(), timeout=5, message="all acknowledged")


def test_sync_and_async_jobs_run_side_by_side_in_one_child(
    run_jobmaster: Run, write_config: Write, store: redis.Redis
) -> None:
    for n in range(10):
        async_jobs.nap.enqueue(f"a{n}", 0.3)
        async_jobs.sync_nap.enqueue(f"s{n}", 0.05)
    start(run_jobmaster, write_config, store)
    wait_until(
        lambda: len(done(store)) == 10 and len(done(store, "test:sync:done")) == 10,
        timeout=20,
        message="both kinds done",
    )
    # Sync jobs on the processor threads, async ones on the loop.
    threads = {entry.split(":", 1)[1] for entry in done(store, "test:sync:done")}
    assert threads <= {"jobmaster-processor-0", "jobmaster-processor-1"}


def test_an_async_job_past_its_timeout_is_cancelled_and_fails_with_job_timeout(
    run_jobmaster: Run, write_config: Write, store: redis.Redis, redis_url: str
) -> None:
    jid = async_jobs.forever.options(retry=0).enqueue("late")
    start(run_jobmaster, write_config, store)
    client = Client(redis_url)
    wait_until(lambda: client.status(jid) == "dead", timeout=15, message="timed out, dead")
    attempts = client.attempts(str(jid))
    assert [a["error_class"] for a in attempts] == ["JobTimeout"]
    assert "ran past its timeout of 1s" in attempts[0]["error_message"]
    assert done(store, "test:async:stopped") == ["late"]  # its finally ran: cancelled


def test_an_async_job_that_swallows_its_cancel_is_given_up_and_its_child_recycled(
    run_jobmaster: Run, write_config: Write, store: redis.Redis, redis_url: str
) -> None:
    jid = async_jobs.stubborn.options(retry=0).enqueue("stubborn")
    master = start(run_jobmaster, write_config, store, timeout_grace=1, shutdown_timeout=1)
    first = child_pids(master)
    client = Client(redis_url)
    wait_until(lambda: client.status(jid) == "dead", timeout=15, message="given up")
    # Its timeout's cancel, swallowed (the recycle's stop may cancel it once more).
    assert done(store, "test:async:swallowed")[:1] == ["stubborn"]
    assert client.attempts(str(jid))[0]["error_class"] == "JobTimeout"
    wait_until(
        lambda: child_pids(master) and child_pids(master) != first,
        timeout=20,
        message="the child recycled",
    )
    assert "stuck past its timeout" in master.log()


def test_cancel_of_a_running_async_job_cancels_its_task(
    run_jobmaster: Run, write_config: Write, store: redis.Redis, redis_url: str
) -> None:
    jid = async_jobs.forever.options(timeout=60, retry=3).enqueue("cancel me")
    start(run_jobmaster, write_config, store)
    client = Client(redis_url)
    wait_until(lambda: client.status(jid) == "working", timeout=15, message="running")
    assert jobmaster.cancel(str(jid), client, wait=5) is True
    assert client.status(jid) == "cancelled"
    assert [a["error_class"] for a in client.attempts(str(jid))] == ["JobCancelled"]
    wait_until(lambda: done(store, "test:async:stopped") == ["cancel me"], timeout=5)


def test_a_sigkilled_child_running_fifty_async_jobs_has_all_fifty_requeued_and_run(
    run_jobmaster: Run, write_config: Write, store: redis.Redis
) -> None:
    for n in range(50):
        async_jobs.nap.enqueue(f"k{n}", 3.0)
    master = start(run_jobmaster, write_config, store)
    wait_until(lambda: store.llen("test:async:started") == 50, timeout=15, message="50 running")
    [victim] = child_pids(master)
    os.kill(victim, signal.SIGKILL)
    # At once: the master requeues the dead child's list as it reaps it.
    wait_until(
        lambda: store.llen("test:async:started") == 100, timeout=10, message="all 50 run again"
    )
    wait_until(lambda: len(done(store)) == 50, timeout=20, message="all 50 done")
    assert {entry.split(":")[0] for entry in done(store)} == {f"k{n}" for n in range(50)}
    assert str(victim) not in {entry.rsplit(":", 1)[1] for entry in done(store)}


def test_a_poison_pill_among_twenty_async_jobs_buries_only_itself(
    run_jobmaster: Run, write_config: Write, store: redis.Redis, redis_url: str
) -> None:
    pill = async_jobs.crash.enqueue("pill")
    for n in range(19):
        async_jobs.nap.enqueue(f"p{n}", 0.5)
    start(run_jobmaster, write_config, store)
    client = Client(redis_url)
    wait_until(lambda: client.status(pill) == "dead", timeout=60, message="the pill buried")
    wait_until(lambda: len(set(done(store))) >= 19, timeout=30, message="the others done")
    dead = DeadSet(client).page(0, 50)
    assert [entry.jid for entry in dead] == [pill]
    assert {entry.split(":")[0] for entry in done(store)} == {f"p{n}" for n in range(19)}


def test_term_lets_running_async_jobs_finish_in_time(
    run_jobmaster: Run, write_config: Write, store: redis.Redis
) -> None:
    for n in range(20):
        async_jobs.nap.enqueue(f"t{n}", 1.0)
    master = start(run_jobmaster, write_config, store, shutdown_timeout=10)
    wait_until(lambda: store.llen("test:async:started") == 20, timeout=15, message="running")
    master.signal(signal.SIGTERM)
    assert master.wait(timeout=20) == 0
    assert len(done(store)) == 20
    assert store.llen(K.queue("default")) == 0


def test_term_pushes_back_async_jobs_still_running_after_the_shutdown_timeout(
    run_jobmaster: Run, write_config: Write, store: redis.Redis
) -> None:
    for n in range(20):
        async_jobs.nap.enqueue(f"l{n}", 60.0)
    master = start(run_jobmaster, write_config, store, shutdown_timeout=1)
    wait_until(lambda: store.llen("test:async:started") == 20, timeout=15, message="running")
    master.signal(signal.SIGTERM)
    assert master.wait(timeout=20) == 0
    assert store.llen(K.queue("default")) == 20  # pushed back, none lost
    assert not ProcessSet(store).running()
    assert "20 job(s) pushed back" in master.log()
    # Their tasks ended with the loop: no outcome, no end line for a job pushed back.
    assert "CancelledError" not in master.log() and "failed after" not in master.log()


def test_a_job_blocking_the_loop_does_not_stop_other_jobs_being_acknowledged(
    run_jobmaster: Run, write_config: Write, store: redis.Redis, redis_url: str
) -> None:
    """Thread jobs run and are acknowledged while an async job blocks its loop
    for 2 s; the block is logged with the job's name and shown in ``ps``."""
    master = start(run_jobmaster, write_config, store, heartbeat_ttl=3)  # a beat a second
    blocker = async_jobs.blocker.enqueue("block", 3.0)
    wait_until(lambda: store.llen("test:async:started") == 1, timeout=15, message="blocking")
    jids = [async_jobs.sync_nap.enqueue(f"b{n}", 0.01) for n in range(10)]
    client = Client(redis_url)
    wait_until(
        lambda: all(client.status(jid) == "complete" for jid in jids),
        timeout=2.5,
        message="sync jobs acknowledged while the loop is blocked",
    )
    assert not done(store)  # the blocker still holds its loop

    def shown() -> dict[str, object] | None:
        """What ``jobmaster ps --json`` shows of the child's loop."""
        for process in ProcessSet(store).list():
            blocked = process_json(process).get("loop_blocked")
            if blocked:
                return dict(blocked)
        return None

    wait_until(shown, timeout=3, message="the blocked loop in the heartbeat")
    assert (shown() or {})["jid"] == blocker
    wait_until(lambda: len(done(store)) == 1, timeout=10, message="the blocker done")
    log = master.log()
    assert "event loop blocked for" in log and "by job tests.async.blocker" in log
    assert "event loop free again" in log


def test_a_sync_middleware_runs_around_an_async_job(
    run_jobmaster: Run, write_config: Write, store: redis.Redis
) -> None:
    async_jobs.nap.enqueue("m1", 0.1)
    async_jobs.fail.options(retry=0).enqueue("m2")
    start(run_jobmaster, write_config, store, middleware=["tests.async_jobs:SyncMarks"])
    wait_until(lambda: store.llen("test:middleware") == 4, timeout=15, message="both hooks")
    marks = [entry.decode() for entry in store.lrange("test:middleware", 0, -1)]
    assert sorted(marks) == ["after:m1:ok", "after:m2:ValueError", "before:m1", "before:m2"]


def test_current_job_inside_an_async_job(
    run_jobmaster: Run, write_config: Write, store: redis.Redis, redis_url: str
) -> None:
    jid = async_jobs.who.enqueue("me")
    start(run_jobmaster, write_config, store)
    value = Client(redis_url).result(str(jid), wait=15)
    assert value == {"jid": jid, "name": "tests.async.who", "attempt": 1, "marker": "me"}


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_aenqueue_and_aresult_from_a_running_event_loop_on_either_loop(
    run_jobmaster: Run, write_config: Write, store: redis.Redis, loop: str
) -> None:
    """A web app's way: enqueue and wait for the result without blocking its
    loop (a ticker keeps ticking), the job run on the worker's loop of either kind."""
    master = start(run_jobmaster, write_config, store, async_loop=loop)
    ticks: list[float] = []

    async def app() -> object:
        async def ticker() -> None:
            while True:
                ticks.append(0.0)
                await asyncio.sleep(0.01)

        ticking = asyncio.create_task(ticker())
        jid = await async_jobs.nap.aenqueue("awaited", 0.5)
        value = await jobmaster.aresult(str(jid), wait=15)
        ticking.cancel()
        return value

    assert asyncio.run(app()) == "awaited"
    assert len(ticks) > 20  # the app's loop ran on while it waited half a second
    assert f"an event loop ({loop}) for 100 async jobs" in master.log()


def test_a_child_gives_back_at_once_the_jobs_its_threads_have_no_room_for(
    run_jobmaster: Run, write_config: Write, store: redis.Redis
) -> None:
    """A fetch for the loop's room may bring plain jobs: the child keeps only
    what its thread can run, and the rest goes back for the other child (held
    by the first, the second job would wait 2 s for its one thread)."""
    master = start(run_jobmaster, write_config, store, processes=2, concurrency=1)
    wait_until(lambda: len(ProcessSet(store).list()) == 3, timeout=15, message="two children")
    for n in range(2):
        async_jobs.sync_nap.enqueue(f"g{n}", 2.0)
    wait_until(
        lambda: store.llen("test:sync:started") == 2, timeout=1.5, message="both started at once"
    )
    wait_until(lambda: len(done(store, "test:sync:done")) == 2, timeout=10, message="both done")
    assert "could not give back" not in master.log()
