"""``jobmaster.cancel`` of running jobs against real ``jobmaster`` masters: the
job's thread gets JobCancelled within a second (its ``except Exception``
does not stop it), status ``cancelled``, never retried, never dead, its
batch counts a failure; the cancel reaches a job on another master (another
host: nothing but Redis is shared), and ``jobmaster cancel JID`` does the
same from a shell. Waiting jobs: tests/integration/test_cancel.py."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

import jobmaster
from jobmaster import exitcodes
from jobmaster.api import BatchSet, DeadSet, ProcessSet, RetrySet
from jobmaster.client import Client
from tests import jobs
from tests.helpers import holds_for, wait_until
from tests.process.conftest import ROOT, JobmasterProcess, jobmaster_command, wait_for_worker

pytestmark = [pytest.mark.process, pytest.mark.timeout(120)]
Run = Callable[..., JobmasterProcess]
Write = Callable[..., Path]


@pytest.fixture(autouse=True)
def _default_client(redis_url: str) -> Iterator[None]:
    """``.enqueue`` goes through the default client: this test's Redis."""
    jobmaster.configure(redis_url)
    yield


def start_master(run: Run, write: Write, store: redis.Redis) -> JobmasterProcess:
    master = run("-c", str(write(processes=2)))
    wait_for_worker(store, master)
    return master


def running_on(store: redis.Redis, jid: str) -> str | None:
    """The worker identity whose in-progress list holds ``jid``, if it is working."""
    if store.get(jobmaster.keys.Keys().status(jid)) != b"working":
        return None
    for job in ProcessSet(store).running():
        if job.record.jid == jid:
            return job.identity
    return None


def ended_within(store: redis.Redis, marker: str, since: float) -> float:
    """Seconds from ``since`` to the job's own note of its end."""
    wait_until(lambda: store.hexists("test:ended_at", marker), timeout=10, message="job ended")
    return float(store.hget("test:ended_at", marker) or 0) - since


def test_a_running_job_stops_within_a_second_and_is_not_retried(
    run_jobmaster: Run, write_config: Write, store: redis.Redis, redis_url: str
) -> None:
    master = start_master(run_jobmaster, write_config, store)
    client = Client(redis_url)
    jid = jobs.stubborn.options(retry=3).enqueue("long", 60.0)
    assert jid is not None
    wait_until(lambda: running_on(store, jid), timeout=20, message="the job running")

    asked = time.time()
    assert jobmaster.cancel(jid, client) is True
    took = ended_within(store, "long", asked)

    assert took < 1.5, f"the job stopped {took:.2f}s after the cancel"
    wait_until(lambda: client.status(jid) == "cancelled", timeout=5, message="status cancelled")
    attempts = client.attempts(jid)
    assert [a["outcome"] for a in attempts] == ["cancelled"]
    assert attempts[0]["error_class"] == "JobCancelled"
    assert not store.sismember("test:done", "long")
    holds_for(1.5, lambda: store.hget("test:attempts", "long") == b"1", "it ran again")
    assert RetrySet(client).size() == 0 and DeadSet(client).size() == 0
    assert ProcessSet(store).running() == []  # acknowledged: out of the in-progress list
    assert f"jid={jid}" in master.log() and "cancelled after" in master.log()
    assert jobmaster.cancel(jid, client) is False  # it has ended


def test_cancel_with_wait_says_true_only_for_a_job_its_worker_stopped(
    run_jobmaster: Run, write_config: Write, store: redis.Redis, redis_url: str
) -> None:
    """Issue 22 hole 6: 0.5 s jobs cancelled as they start. The worker hears the
    request at once (not at its next once-a-second read): each one stops, and
    ``cancel(wait=5)`` answers True exactly when its final status is cancelled."""
    start_master(run_jobmaster, write_config, store)
    client = Client(redis_url)
    answers = []
    for n in range(6):
        jid = jobs.stubborn.options(retry=0).enqueue(f"short{n}", 0.5)
        assert jid is not None
        wait_until(lambda jid=jid: running_on(store, jid), timeout=20, message="running")
        answer = jobmaster.cancel(jid, client, wait=5)
        answers.append((answer, client.status(jid)))
    assert all(said == (status == "cancelled") for said, status in answers), answers
    assert answers == [(True, "cancelled")] * 6, answers


def test_a_cancel_reaches_a_job_on_another_master(
    run_jobmaster: Run, write_config: Write, store: redis.Redis, redis_url: str
) -> None:
    """Two masters (two hosts: they share nothing but Redis), each serving a
    queue of its own so that each runs jobs; the cancels are sent from here."""
    for queue in ("a", "b"):
        master = run_jobmaster("-c", str(write_config(processes=2, queues=[queue])))
        wait_for_worker(store, master)
    client = Client(redis_url)
    jids = [
        str(jobs.stubborn.options(queue=q).enqueue(f"{q}{n}", 60.0)) for q in "ab" for n in (1, 2)
    ]
    wait_until(
        lambda: all(running_on(store, j) for j in jids), timeout=20, message="4 jobs running"
    )

    asked = time.time()
    assert all(jobmaster.cancel(j, client) for j in jids)
    for marker in ("a1", "a2", "b1", "b2"):
        took = ended_within(store, marker, asked)
        assert took < 1.5, f"{marker} stopped {took:.2f}s after the cancel"
    wait_until(
        lambda: [client.status(j) for j in jids] == ["cancelled"] * 4,
        timeout=5,
        message="all cancelled",
    )


def test_a_cancelled_batch_job_is_a_failure_of_its_batch(
    run_jobmaster: Run, write_config: Write, store: redis.Redis, redis_url: str
) -> None:
    start_master(run_jobmaster, write_config, store)
    client = Client(redis_url)
    batch = jobmaster.batch(
        on_complete=jobs.callback.s("complete"),
        on_success=jobs.callback.s("success"),
        client=client,
    )
    with batch.jobs():
        quick = jobs.record.enqueue("quick")
        long = jobs.stubborn.enqueue("in-batch", 60.0)
    assert quick and long
    wait_until(lambda: running_on(store, long), timeout=20, message="the batch job running")
    assert jobmaster.cancel(long, client)
    wait_until(
        lambda: store.lrange("test:callbacks", 0, -1) == [f"complete:{batch.bid}".encode()],
        timeout=10,
        message="on_complete fired",
    )
    info = BatchSet(client).get(batch.bid)
    assert info is not None and (info.failed, info.succeeded) == (1, 1)
    holds_for(1.0, lambda: store.llen("test:callbacks") == 1, "on_success fired")


def test_jobmaster_cancel_from_a_shell_stops_a_running_job(
    run_jobmaster: Run, write_config: Write, store: redis.Redis, redis_url: str
) -> None:
    config = write_config(processes=1)
    master = run_jobmaster("-c", str(config))
    wait_for_worker(store, master)
    jid = jobs.stubborn.enqueue("shell", 60.0)
    assert jid is not None
    wait_until(lambda: running_on(store, jid), timeout=20, message="the job running")

    def cancel(*args: str) -> subprocess.CompletedProcess[str]:
        command = [jobmaster_command(), "cancel", jid, "-c", str(config), *args]
        env = {**os.environ, "JOBMASTER_REDIS_URL": "", "REDIS_URL": ""}  # the file's Redis
        return subprocess.run(
            command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=30, check=False
        )

    sent = cancel("--json")  # waits (5 s by default) for the worker to confirm
    assert sent.returncode == 0, sent.stderr
    assert json.loads(sent.stdout) == {
        "jid": jid,
        "cancelled": True,
        "status": "working",
        "removed_from": None,
        "ended_as": "cancelled",
        "pending": False,
    }
    client = Client(redis_url)
    assert client.status(jid) == "cancelled"
    late = cancel()
    assert late.returncode == exitcodes.REFUSED
    assert late.stderr == f"jobmaster: {jid}: not cancelled, it has already ended (cancelled)\n"
