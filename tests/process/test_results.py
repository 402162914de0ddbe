"""``jobmaster.result`` against a real master: real jobs return, fail, run long,
return what JSON cannot encode, and keep their results ``result_ttl`` seconds.
"""

from __future__ import annotations

import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

import jobmaster
from jobmaster.client import Client
from jobmaster.keys import Keys
from tests import result_jobs
from tests.helpers import wait_until
from tests.process.conftest import JobmasterProcess, jobmaster_command, wait_for_worker

pytestmark = [pytest.mark.process, pytest.mark.timeout(120)]
K = Keys()
Run = Callable[..., JobmasterProcess]
Write = Callable[..., Path]


@pytest.fixture
def master(
    run_jobmaster: Run, write_config: Write, store: redis.Redis
) -> Iterator[JobmasterProcess]:
    config = write_config(processes=1, app=["tests.jobs", "tests.result_jobs"])
    process = run_jobmaster("-c", str(config))
    wait_for_worker(store, process)
    yield process


@pytest.fixture
def client(redis_url: str) -> Client:
    return Client(redis_url)


def calls(store: redis.Redis) -> Counter[str]:
    stats = store.info("commandstats")
    return Counter({name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()})


def test_a_jobs_return_value_is_its_result(
    master: JobmasterProcess, client: Client, redis_url: str, store: redis.Redis
) -> None:
    jid = client.push({"job": "tests.results.add", "args": [2, 3]})
    assert jid is not None
    assert client.result(jid, wait=30) == {"sum": 5}
    assert client.status(jid) == "complete"
    assert 86000 < store.ttl(K.result(jid)) <= 86400  # kept as long as its status
    shown = subprocess.run(
        [jobmaster_command(), "status", jid, "--redis-url", redis_url],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    assert f"{jid}: complete" in shown and '  result: {"sum":5}' in shown
    none = client.push({"job": "tests.results.nothing"})
    assert none is not None
    assert client.result(none, wait=30) is None
    assert not store.exists(K.result(none))  # None stores nothing


def test_a_dead_job_raises_job_failed(master: JobmasterProcess, client: Client) -> None:
    jid = client.push({"job": "tests.results.fails", "args": ["no result for you"]})
    assert jid is not None
    with pytest.raises(jobmaster.JobFailed) as raised:
        client.result(jid, wait=30)
    assert raised.value.status == "dead"
    assert raised.value.error_class == "ValueError"
    assert raised.value.error_message == "no result for you"


def test_pending_and_unknown(master: JobmasterProcess, client: Client) -> None:
    jid = client.push({"job": "tests.results.slow", "args": [30]})
    assert jid is not None
    wait_until(lambda: client.status(jid) == "working", timeout=20)
    started = time.monotonic()
    with pytest.raises(jobmaster.ResultPending) as pending:
        client.result(jid, wait=1)
    assert isinstance(pending.value, TimeoutError) and pending.value.status == "working"
    assert 1 <= time.monotonic() - started < 5
    with pytest.raises(jobmaster.UnknownJob) as unknown:
        client.result("0" * 24, wait=1)
    assert isinstance(unknown.value, LookupError)


def test_waiting_for_a_running_job_is_not_polling(
    master: JobmasterProcess, client: Client, store: redis.Redis
) -> None:
    jid = client.push({"job": "tests.results.slow", "args": [3]})
    assert jid is not None
    wait_until(lambda: client.status(jid) == "working", timeout=20)
    before = calls(store)
    started = time.monotonic()
    assert client.result(jid, wait=30) == "slept 3"
    waited = time.monotonic() - started
    spent = calls(store) - before
    assert waited > 1.5  # it did wait
    # Our reads (3 commands each): before, once subscribed, once woken; the
    # worker issues none of these. A 10 ms poll would be hundreds.
    assert spent["lindex"] <= 3 and spent["subscribe"] == 1, spent


def test_a_return_value_json_cannot_encode_completes_with_none_and_a_log_line(
    master: JobmasterProcess, client: Client
) -> None:
    jid = client.push({"job": "tests.results.not_json"})
    assert jid is not None
    assert client.result(jid, wait=30) is None
    assert client.status(jid) == "complete"
    assert [a["outcome"] for a in client.attempts(jid)] == ["complete"]
    wait_until(
        lambda: f"result of jid={jid} job=tests.results.not_json not kept" in master.log(),
        timeout=10,
    )
    assert "its return value['when'] is a date" in master.log()


def test_result_ttl_is_honoured(
    master: JobmasterProcess, client: Client, store: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(result_jobs.brief, "client", client)
    jid = result_jobs.brief.enqueue()  # @job(result_ttl=2)
    assert jid is not None
    assert client.result(jid, wait=30) == "soon gone"
    assert 0 < store.ttl(K.status(jid)) <= 2 and 0 < store.ttl(K.result(jid)) <= 2
    wait_until(lambda: client.status(jid) is None, timeout=10)
    with pytest.raises(jobmaster.UnknownJob):
        client.result(jid)
    monkeypatch.setattr(result_jobs.add, "client", client)
    longer = result_jobs.add.options(result_ttl=600).enqueue(1, 1)
    assert longer is not None
    assert client.result(longer, wait=30) == {"sum": 2}
    assert 590 < store.ttl(K.result(longer)) <= 600
    assert 590 < store.ttl(K.attempts(longer)) <= 600


def test_a_running_job_cancelled_raises_job_failed_cancelled(
    master: JobmasterProcess, client: Client
) -> None:
    jid = client.push({"job": "tests.results.slow", "args": [30]})
    assert jid is not None
    wait_until(lambda: client.status(jid) == "working", timeout=20)
    assert jobmaster.cancel(jid, client)
    started = time.monotonic()
    with pytest.raises(jobmaster.JobFailed) as raised:
        client.result(jid, wait=30)
    assert raised.value.status == "cancelled"
    assert time.monotonic() - started < 5  # within the cancel watch's second, plus a hop


def test_an_expired_job_raises_job_failed_expired(
    master: JobmasterProcess, client: Client, store: redis.Redis
) -> None:
    # expires_in 1 ms: already past when a worker fetches it, so not run, status expired.
    jid = client.push({"job": "tests.results.add", "args": [1, 1], "expires_in": 0.001})
    assert jid is not None
    with pytest.raises(jobmaster.JobFailed) as raised:
        client.result(jid, wait=30)
    assert raised.value.status == "expired"
    assert not store.exists(K.result(jid))
