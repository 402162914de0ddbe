"""Crash requeues with the real ``jobmaster`` and a SIGKILL: to a forged queue, and
what ``current_job().attempt`` says after one.

The master's crash triage takes a job's queue from its payload. A payload
naming "weird", pushed onto ``default``, and ``SET <ns>:queue:weird x``: the
requeue removed the entry from the dead child's list, then failed its push
(WRONGTYPE), and the master logged "Redis unavailable" and then "requeued
0 job(s)": the job was in no key at all. Now it is buried with the reason
(SPEC §8: every move lands the entry or leaves it where it was).
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
import redis

from jobmaster import payload as wire
from jobmaster.client import Client
from jobmaster.keys import Keys
from tests import current_jobs
from tests.helpers import wait_until
from tests.process.conftest import JobmasterProcess, wait_for_worker

pytestmark = [pytest.mark.process, pytest.mark.timeout(90)]
K = Keys()


def running_child(store: redis.Redis) -> int:
    """The pid of the one child whose in-progress list holds a job."""
    [holder] = [key for key in store.scan_iter(match=K.inprogress("*")) if store.llen(key)]
    return int(holder.decode().rsplit(":", 2)[-2])  # <host>:<pid>:<nonce>


def test_a_sigkilled_child_s_job_whose_forged_queue_holds_a_string_goes_to_the_dead_set(
    run_jobmaster: Callable[..., JobmasterProcess],
    write_config: Callable[..., Path],
    store: redis.Redis,
) -> None:
    master = run_jobmaster("-c", str(write_config(processes=1)))
    wait_for_worker(store, master)
    store.set(K.queue("weird"), "x")
    payload = wire.build("tests.record", ["forged", 60], {}, queue="weird")
    payload["enqueued_at"] = time.time()
    store.lpush(K.queue("default"), wire.encode(payload))
    wait_until(lambda: store.sismember("test:started", "forged"), timeout=15)

    psutil.Process(running_child(store)).send_signal(signal.SIGKILL)

    wait_until(lambda: store.zcard(K.dead) == 1, timeout=15, message="buried")
    [entry] = [json.loads(raw) for raw in store.zrange(K.dead, 0, -1)]
    assert entry["jid"] == payload["jid"] and entry["crash_count"] == 1
    assert entry["dead_reason"] == f"could not be requeued: {K.queue('weird')} holds a string"
    assert store.get(K.queue("weird")) == b"x"
    assert store.llen(K.queue("default")) == 0
    assert not [key for key in store.scan_iter(match=K.inprogress("*")) if store.llen(key)]
    log = master.log()
    assert "WRONGTYPE" not in log, log
    assert f"buried jid={payload['jid']}: could not be requeued" in log
    master.signal(signal.SIGTERM)
    assert master.wait(timeout=20) == 0


def test_attempt_counts_the_run_a_sigkill_cut_short(
    run_jobmaster: Callable[..., JobmasterProcess],
    write_config: Callable[..., Path],
    store: redis.Redis,
    redis_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """SPEC §11: attempt counts runs. After a crash requeue it said 1 again."""
    monkeypatch.setenv("JOBMASTER_REDIS_URL", redis_url)  # where current_jobs.seen() reads
    app = ["tests.jobs", "tests.current_jobs"]
    master = run_jobmaster("-c", str(write_config(processes=1, app=app)))
    wait_for_worker(store, master)
    Client(redis_url).push({"job": "tests.current_then_sleeps", "args": ["killed", 60]})
    wait_until(lambda: len(current_jobs.seen("killed")) == 1, timeout=15)

    psutil.Process(running_child(store)).send_signal(signal.SIGKILL)

    wait_until(lambda: len(current_jobs.seen("killed")) == 2, timeout=15, message="ran again")
    assert [info["attempt"] for info in current_jobs.seen("killed") if info] == [1, 2]
    master.signal(signal.SIGTERM)
    assert master.wait(timeout=20) == 0
