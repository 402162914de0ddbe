"""Async jobs (SPEC 12) in real processes, at their edges: who is blamed when
a job blocks the event loop the others share, and a lone worker's exit."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

import jobmaster
from jobmaster.client import Client
from tests import async_jobs
from tests.helpers import wait_until
from tests.process.conftest import JobmasterProcess, wait_for_worker

pytestmark = [pytest.mark.process, pytest.mark.timeout(120)]
Run = Callable[..., JobmasterProcess]
Write = Callable[..., Path]


@pytest.fixture(autouse=True)
def _default_client(redis_url: str) -> Iterator[None]:
    jobmaster.configure(redis_url)
    yield


def test_a_job_whose_timeout_cannot_land_while_another_blocks_the_loop_is_not_called_stuck(
    run_jobmaster: Run, write_config: Write, store: redis.Redis, redis_url: str
) -> None:
    """``forever`` (timeout 1 s) awaits; ``blocker`` then holds the loop 4 s.
    The cancel of ``forever``'s timeout cannot run before the loop is free:
    the job itself would stop at once. The watchdog gave up on it all the
    same after ``timeout_grace``: it was recorded as "stuck outside Python"
    (a failure of its own, dead with retry=0), and its child recycled, while
    the job blocking the loop was not named."""
    settings: dict[str, object] = {
        "app": ["tests.async_jobs"],
        "processes": 1,
        "concurrency": 2,
        "timeout_grace": 1,
    }
    master = run_jobmaster("-c", str(write_config(**settings)))
    wait_for_worker(store, master)
    jid = async_jobs.forever.options(retry=0).enqueue("innocent")
    wait_until(lambda: store.llen("test:async:started") == 1, timeout=15, message="it runs")
    async_jobs.blocker.enqueue("culprit", 4.0)
    client = Client(redis_url)
    wait_until(lambda: client.status(jid) == "dead", timeout=20, message="its timeout")
    [attempt] = client.attempts(str(jid))
    assert attempt["error_class"] == "JobTimeout"
    assert "ran past its timeout of 1s" in attempt["error_message"], attempt["error_message"]
    assert "stuck past its timeout" not in master.log()


def test_a_lone_worker_exits_at_its_stop_while_an_async_job_waits_in_a_thread(
    run_jobmaster: Run, write_config: Write, store: redis.Redis
) -> None:
    """``jobmaster worker`` ends with ``sys.exit``: Python then joins every
    thread of every ThreadPoolExecutor, the loop's included, so a job's
    ``asyncio.to_thread`` call still running (a long request, a sleep) held
    the process after its stop (its job already pushed back) until that call
    returned."""
    config = write_config(app=["tests.async_jobs"], shutdown_timeout=1)
    process = run_jobmaster("worker", "-c", str(config))
    wait_for_worker(store, process)
    async_jobs.threaded_wait.enqueue("held", 15.0)
    wait_until(lambda: store.llen("test:async:started") == 1, timeout=15, message="it waits")
    begun = time.monotonic()
    process.signal(signal.SIGTERM)
    assert process.wait(timeout=8) == 0
    assert time.monotonic() - begun < 1 + 5, "the stop waited for the job's thread"
    assert "1 job(s) pushed back" in process.log()
    assert "exiting without waiting for 1 thread(s) still in an async job's" in process.log()
