"""Lifecycle hooks, current_job() and expiry in a real master and its children."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

import jobmaster
from jobmaster import exitcodes
from jobmaster.api import Stats
from jobmaster.client import Client
from jobmaster.keys import Keys
from tests import current_jobs
from tests.helpers import holds_for, wait_until
from tests.process.conftest import JobmasterProcess
from tests.process.test_master import working_children
from tests.process.test_metrics import Scraper

pytestmark = [pytest.mark.process, pytest.mark.timeout(120)]
K = Keys()
Run = Callable[..., JobmasterProcess]
Write = Callable[..., Path]
APP = ["tests.jobs", "tests.current_jobs", "tests.lifecycle_app"]


def pids(store: redis.Redis, key: str) -> set[int]:
    return {int(pid) for pid in store.smembers(key)}


def test_each_child_reopens_its_pool_and_flushes_on_a_graceful_stop(
    run_jobmaster: Run, write_config: Write, store: redis.Redis, redis_url: str
) -> None:
    master = run_jobmaster("-c", str(write_config(app=APP, processes=2)))
    children = set(working_children(store, master, 2))
    # on_master_start: once, in the master, before any child.
    assert [int(pid) for pid in store.lrange("test:lifecycle:master_start", 0, -1)] == [master.pid]
    # on_child_start: once per child, in the child (its own pid, not the master's).
    assert pids(store, "test:lifecycle:child_start") == children
    assert master.pid not in children
    for pid in children:  # several hooks of a kind: in registration order
        order = [v.decode() for v in store.lrange(f"test:lifecycle:order:{pid}", 0, -1)]
        assert order == ["reopen_pool", "second_start_hook"]

    client = Client(redis_url)
    markers = [f"p{n}" for n in range(20)]
    for marker in markers:
        client.push({"job": "tests.lifecycle.use_pool", "args": [marker]})
    wait_until(lambda: store.hlen("test:lifecycle:ran") == len(markers), timeout=30)
    ran_in = {int(pid) for pid in store.hvals("test:lifecycle:ran")}
    assert ran_in <= children  # every job ran on the pool its own child opened
    assert store.zcard(K.dead) == 0 and store.zcard(K.retry) == 0

    assert store.scard("test:lifecycle:child_stop") == 0  # only at the end
    master.signal(signal.SIGTERM)
    assert master.wait(timeout=30) == exitcodes.OK
    assert pids(store, "test:lifecycle:child_stop") == children  # each, after its last job
    assert store.llen("test:lifecycle:master_start") == 1


def test_a_child_start_hook_that_raises_backs_off_and_loses_no_job(
    run_jobmaster: Run, write_config: Write, store: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    broken = tmp_path / "database-down"
    broken.touch()
    client = Client(redis_url)
    client.push({"job": "tests.lifecycle.use_pool", "args": ["waiting"]})
    config = write_config(app=APP, processes=1)
    master = run_jobmaster("-c", str(config), env={"LIFECYCLE_FAIL_FILE": str(broken)})

    def failures() -> int:
        assert master.popen.poll() is None, f"master exited:\n{master.log()}"
        return int(store.get("test:lifecycle:start_failures") or 0)

    wait_until(lambda: failures() >= 4, timeout=30, message="four failed child starts")
    log = master.log()
    assert "on_child_start hook tests.lifecycle_app.reopen_pool failed" in log
    assert "Traceback" in log and "ConnectionError: the database is not up yet" in log
    assert "exit code 5 (an on_child_start hook failed)" in log
    # The crash-loop backoff: each restart waits longer (0.1 s, 0.2 s, 0.4 s...).
    assert "restarting in 0.1s" in log and "restarting in 0.4s" in log
    # Nothing was fetched: the job waits in its queue, in no in-progress list.
    assert store.llen(K.queue("default")) == 1
    assert store.keys(K.inprogress("*")) == []
    assert store.hlen("test:lifecycle:ran") == 0

    broken.unlink()  # the database is back
    wait_until(lambda: store.hget("test:lifecycle:ran", "waiting"), timeout=30)
    assert master.popen.poll() is None  # the master survived it all
    master.signal(signal.SIGTERM)
    assert master.wait(timeout=30) == exitcodes.OK


def test_the_master_warns_about_threads_its_start_hook_started(
    run_jobmaster: Run, write_config: Write, store: redis.Redis
) -> None:
    """The thread check runs after on_master_start, where an SDK starts its sender."""
    config = write_config(app=APP, processes=1)
    master = run_jobmaster("-c", str(config), env={"LIFECYCLE_THREAD": "1"})
    working_children(store, master, 1)
    log = master.log()
    assert "the app started 1 thread(s) before fork (app-sender)" in log
    master.signal(signal.SIGTERM)
    assert master.wait(timeout=30) == exitcodes.OK


def test_a_master_start_hook_that_raises_stops_the_master_before_any_fork(
    run_jobmaster: Run, write_config: Write, store: redis.Redis
) -> None:
    config = write_config(app=APP, processes=2)
    master = run_jobmaster("-c", str(config), env={"LIFECYCLE_MASTER_FAIL": "1"})
    assert master.wait(timeout=30) == exitcodes.RUNTIME_FAILURE
    log = master.log()
    assert "on_master_start hook tests.lifecycle_app.announce_master failed" in log
    assert "Traceback" in log and "RuntimeError: the cache to warm is unreachable" in log
    assert store.scard("test:lifecycle:child_start") == 0  # no child was forked
    assert store.keys(K.heartbeat("*")) == []


def test_current_job_inside_real_children(
    run_jobmaster: Run,
    write_config: Write,
    store: redis.Redis,
    redis_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("JOBMASTER_REDIS_URL", redis_url)  # where current_jobs.seen() reads
    master = run_jobmaster("-c", str(write_config(app=APP, processes=1)))
    working_children(store, master, 1)
    jobmaster.configure(redis_url)
    jid = current_jobs.current.enqueue("retried", fail_first=True)
    batch = jobmaster.batch(description="current")
    with batch.jobs():
        in_batch = current_jobs.current.enqueue("batched")
    wait_until(lambda: len(current_jobs.seen("retried")) == 2, timeout=30)
    wait_until(lambda: len(current_jobs.seen("batched")) == 1, timeout=30)
    first, second = current_jobs.seen("retried")
    assert first is not None and second is not None
    assert (first["jid"], first["name"], first["queue"]) == (jid, "tests.current", "default")
    assert (first["attempt"], second["attempt"]) == (1, 2)
    assert first["batch_id"] is None
    [batched] = current_jobs.seen("batched")
    assert batched is not None
    assert (batched["jid"], batched["batch_id"], batched["attempt"]) == (in_batch, batch.bid, 1)
    master.signal(signal.SIGTERM)
    assert master.wait(timeout=30) == exitcodes.OK


def test_a_job_fetched_after_its_expiry_is_not_run(
    run_jobmaster: Run, write_config: Write, store: redis.Redis, redis_url: str, free_port: int
) -> None:
    config = write_config(app=APP, processes=1, log_format="json", metrics_port=free_port)
    master = run_jobmaster("-c", str(config))
    working_children(store, master, 1)
    client = Client(redis_url)
    late = client.push(
        {"job": "tests.record", "args": ["late"], "created_at": time.time() - 600, "expires_in": 60}
    )
    client.push({"job": "tests.record", "args": ["after"]})  # runs: the worker went on
    wait_until(lambda: store.sismember("test:done", "after"), timeout=30)
    wait_until(lambda: client.status(late or "") == "expired", timeout=10)
    holds_for(0.5, lambda: not store.sismember("test:started", "late"))
    lines = [json.loads(line) for line in master.log().splitlines() if line.startswith("{")]
    [expired] = [line for line in lines if line.get("event") == "job.expired"]
    assert (expired["jid"], expired["job"], expired["queue"]) == (late, "tests.record", "default")
    assert not [
        line for line in lines if line.get("jid") == late and line["event"] != "job.expired"
    ]
    stats = Stats(store)
    assert (stats.expired, stats.processed) == (1, 1)
    assert all(store.llen(key) == 0 for key in store.keys(K.inprogress("*")))
    for zset in (K.retry, K.dead, K.scheduled):
        assert store.zcard(zset) == 0
    metrics, record = Scraper(free_port, master), {"job": "tests.record", "queue": "default"}
    metrics.wait_for(lambda m: m.get("jobmaster_jobs_expired_total", **record) == 1, "expired")
    assert metrics.get("jobmaster_jobs_processed_total", **record) == 1  # "after" only
    master.signal(signal.SIGTERM)
    assert master.wait(timeout=30) == exitcodes.OK
