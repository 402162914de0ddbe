"""A child being recycled is a state of its own (SPEC §7): a TERM reaches it,
and a CONT or a remote resume never sets it fetching again."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from jobmaster.client import Client
from jobmaster.keys import Keys
from tests.helpers import wait_until
from tests.process.conftest import ROOT, JobmasterProcess, jobmaster_command
from tests.process.test_master import inprogress_owner, working_children

pytestmark = pytest.mark.process
K = Keys()
Run = Callable[..., JobmasterProcess]
Write = Callable[..., Path]
# The run: 1 process x 2 threads, recycled after each job, with a
# recycle's grace (30 s) ten times a stop's.
RECYCLING = {
    "app": ["tests.jobs", "tests.recycle_jobs"],
    "processes": 1,
    "concurrency": 2,
    "shutdown_timeout": 3,
    "memory_grace": 30,
    "max_jobs_per_child": 1,
}


def recycling(store: redis.Redis, master: JobmasterProcess, redis_url: str) -> int:
    """One child x 2 threads at max_jobs_per_child = 1: a 25 s job, and a quick
    one whose end recycles the child while the long one runs. Returns the
    recycling child's pid, once its replacement is up."""
    working_children(store, master, 1)
    client = Client(redis_url)
    long = client.push({"job": "tests.ran_by", "args": ["long", 25]})
    wait_until(lambda: store.sismember("test:started", "long"), timeout=20, message="long job")
    old = inprogress_owner(store, long)
    assert old is not None
    client.push({"job": "tests.ran_by", "args": ["quick"]})
    wait_until(lambda: "recycling it (replacement first)" in master.log(), timeout=20)
    wait_until(lambda: len(working_children(store, master, 2)) == 2, timeout=30)
    return old


@pytest.mark.timeout(90)
def test_a_term_reaches_a_child_being_recycled(
    run_jobmaster: Run, write_config: Write, store: redis.Redis, redis_url: str
) -> None:
    """Hole 1: the master waited for the recycle's 30 s grace (it exited after
    23 s) while a platform's KILL comes after shutdown_timeout."""
    config = write_config(**RECYCLING)
    master = run_jobmaster("-c", str(config))
    recycling(store, master, redis_url)
    time.sleep(1.5)
    began = time.monotonic()
    master.signal(signal.SIGTERM)
    assert master.wait(timeout=40) == 0
    took = time.monotonic() - began
    assert took < 3 + 3.5, f"the master took {took:.1f}s to stop:\n{master.log()}"
    # Pushed back, not lost, not run to its end, not counted as a crash.
    assert store.hget("test:runs", "long") is None
    [raw] = store.lrange(K.queue("default"), 0, -1)
    assert b'"long"' in raw and b"crash_count" not in raw


@pytest.mark.timeout(150)
@pytest.mark.parametrize("resume", ["CONT", "ctl resume"])
def test_a_recycling_child_never_fetches_again_after_a_resume(
    resume: str, run_jobmaster: Run, write_config: Write, store: redis.Redis, redis_url: str
) -> None:
    """Hole 2: the master forwarded CONT to every child, and the recycling one
    logged "resumed: fetching again" and ran new jobs."""
    config = write_config(**RECYCLING)
    master = run_jobmaster("-c", str(config))
    old = recycling(store, master, redis_url)
    master.signal(signal.SIGTSTP)
    wait_until(lambda: "quieting children" in master.log(), timeout=10)
    if resume == "CONT":
        master.signal(signal.SIGCONT)
    else:
        subprocess.run(
            [jobmaster_command(), "ctl", "resume", "--all"],
            cwd=ROOT,
            env={"JOBMASTER_REDIS_URL": redis_url, "PATH": "/usr/bin:/bin"},
            check=True,
            capture_output=True,
            timeout=30,
        )
    wait_until(lambda: "resuming children" in master.log(), timeout=10)
    markers = [f"after{n}" for n in range(6)]
    Client(redis_url).push_bulk({"job": "tests.ran_by", "args": [[m] for m in markers]})
    # Each child runs one or two jobs, then is recycled and replaced: forks
    # under a loaded machine's CPU, hence the generous wait.
    try:
        wait_until(lambda: store.scard("test:done") >= 7, timeout=90)
    except AssertionError as slow:
        done = store.smembers("test:done")
        raise AssertionError(f"6 new jobs not done: {done}\n{master.log()}") from slow
    ran_by = {k.decode(): int(v) for k, v in store.hgetall("test:ran_by").items()}
    assert [m for m in markers if ran_by[m] == old] == [], master.log()
    assert f"pid={old} " not in "".join(
        line for line in master.log().splitlines(True) if "resumed: fetching again" in line
    )
    master.signal(signal.SIGTERM)
    assert master.wait(timeout=30) == 0
