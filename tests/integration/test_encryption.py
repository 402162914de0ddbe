"""Encrypted arguments end to end: sealed in Redis, opened only in the worker."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import pytest
import redis

import jobmaster
from jobmaster import crypto
from jobmaster import payload as wire
from jobmaster.client import Client
from jobmaster.config import Config
from jobmaster.crypto import Keyring
from jobmaster.errors import JobmasterError
from jobmaster.keys import Keys
from jobmaster.worker.process import WorkerProcess
from tests import jobs
from tests.helpers import wait_until

K = Keys()
KEY = "the-current-key-0123456789abcdef"
OLD_KEY = "the-retired-key-0123456789abcdef"
UNKNOWN_KEY = "nobody-has-this-key-0123456789ab"
PLAIN = "4242-4242-4242-4242"  # what must never be stored in clear
StartWorker = Callable[[Config], WorkerProcess]


@pytest.fixture(autouse=True)
def _producer(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # Any client built from the environment must find the private server too.
    monkeypatch.setenv("JOBMASTER_REDIS_URL", redis_url)
    monkeypatch.setattr(jobmaster.client, "_default", None)  # restored after the test
    jobmaster.configure(redis_url, secret_key=KEY)
    yield
    crypto.set_keys(None)


def everything_stored(store: redis.Redis) -> bytes:
    """Every job payload in Redis: queues, scheduled, retry and dead sets."""
    raws = [raw for queue in ("default",) for raw in store.lrange(K.queue(queue), 0, -1)]
    for zset in (K.scheduled, K.retry, K.dead):
        raws += store.zrange(zset, 0, -1)
    return b"\n".join(raws)


def test_the_stored_payload_is_sealed_and_the_job_gets_its_arguments(
    make_config: Callable[..., Config], running_worker: StartWorker, store: redis.Redis
) -> None:
    jobs.encrypted.enqueue("marker-now", card=PLAIN)
    jobs.encrypted.enqueue_in(0.2, "marker-later", card=PLAIN)
    [raw] = store.lrange(K.queue("default"), 0, -1)
    payload = json.loads(raw)
    assert payload["args"] == [] and payload["kwargs"] == {}
    assert payload["encrypted"].startswith("jm1.")
    assert PLAIN.encode() not in everything_stored(store) and b"marker-now" not in raw
    running_worker(make_config(secret_key=[KEY]))
    wait_until(lambda: store.hlen("test:encrypted") == 2, timeout=10, message="both ran")
    ran = store.hgetall("test:encrypted")
    assert ran == {b"marker-now": PLAIN.encode(), b"marker-later": PLAIN.encode()}


def test_a_retried_then_dead_job_stays_sealed(
    make_config: Callable[..., Config], running_worker: StartWorker, store: redis.Redis
) -> None:
    jobs.encrypted.enqueue("fails", card=PLAIN, fail=True)  # retry=1, backoff=0
    running_worker(make_config(secret_key=[KEY]))
    wait_until(lambda: store.zcard(K.dead) == 1, timeout=20, message="job dead")
    assert int(store.hget("test:attempts", "fails") or 0) == 2  # opened on the retry too
    [entry] = [json.loads(raw) for raw in store.zrange(K.dead, 0, -1)]
    assert entry["args"] == [] and "encrypted" in entry
    assert PLAIN.encode() not in everything_stored(store)


def test_rotation_a_job_sealed_with_the_old_key_still_runs(
    make_config: Callable[..., Config],
    running_worker: StartWorker,
    store: redis.Redis,
    redis_url: str,
) -> None:
    jobmaster.configure(redis_url, secret_key=[OLD_KEY])
    jobs.encrypted.enqueue("old", card=PLAIN)
    running_worker(make_config(secret_key=[KEY, OLD_KEY]))
    wait_until(lambda: store.hget("test:encrypted", "old") == PLAIN.encode(), timeout=10)


def test_a_job_sealed_with_an_unknown_key_is_dead_and_the_worker_goes_on(
    make_config: Callable[..., Config],
    running_worker: StartWorker,
    client: Client,
    store: redis.Redis,
) -> None:
    stranger = wire.build("tests.encrypted", [], {}, queue="default")
    context = f"{stranger['jid']}\n{stranger['job']}"
    stranger["encrypted"] = Keyring([UNKNOWN_KEY]).seal(["x"], {"card": PLAIN}, context)
    client.push_payloads([stranger])
    running_worker(make_config(secret_key=[KEY]))
    wait_until(lambda: store.zcard(K.dead) == 1, timeout=10, message="stranger buried")
    [entry] = [json.loads(raw) for raw in store.zrange(K.dead, 0, -1)]
    assert entry["jid"] == stranger["jid"] and entry["encrypted"] == stranger["encrypted"]
    reason = str(entry["dead_reason"])
    assert reason.startswith("cannot decrypt the arguments: sealed with key id ")
    assert UNKNOWN_KEY not in reason and KEY not in reason and PLAIN not in reason
    jobs.encrypted.enqueue("after", card="fine")  # the worker keeps running jobs
    wait_until(lambda: store.hget("test:encrypted", "after") == b"fine", timeout=10)
    assert store.hget("test:attempts", "x") is None  # the stranger never ran


def stored_anywhere(store: redis.Redis) -> bytes:
    """Every value in the namespace, strings, lists and sorted sets alike."""
    found = []
    for key in store.scan_iter(match="jobmaster:*"):
        kind = store.type(key)
        if kind == b"string":
            found.append(store.get(key) or b"")
        elif kind == b"list":
            found += store.lrange(key, 0, -1)
        elif kind == b"zset":
            found += store.zrange(key, 0, -1)
    return b"\n".join(found)


def test_the_result_and_the_error_text_are_sealed_too(
    make_config: Callable[..., Config],
    running_worker: StartWorker,
    store: redis.Redis,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 23, item 3: a job returning its sealed argument stored it in clear
    under result:<jid>, and error messages in attempts and the dead set were
    clear; now only the name, queue, jid, times and error class are."""
    done = jobs.encrypted_echo.enqueue(PLAIN)
    failed = jobs.encrypted_echo.enqueue(PLAIN, fail=True)
    running_worker(make_config(secret_key=[KEY]))
    assert jobmaster.result(done, wait=10) == {"card": PLAIN}  # opened for the producer
    with pytest.raises(jobmaster.JobFailed) as raised:
        jobmaster.result(failed, wait=10)
    assert raised.value.error_class == "ValueError"
    assert PLAIN in str(raised.value.error_message)  # opened with the key
    assert PLAIN.encode() not in stored_anywhere(store)
    assert PLAIN not in caplog.text and "ValueError: (sealed)" in caplog.text  # nor logged
    assert store.get(K.result(done)).startswith(b"jm1.")
    [attempt] = jobmaster.attempts(failed)
    assert attempt["error_class"] == "ValueError" and PLAIN not in str(attempt)
    assert attempt["job"] == "tests.encrypted_echo" and attempt["queue"] == "default"
    crypto.set_keys([UNKNOWN_KEY])  # a producer with another key: told, not shown
    with pytest.raises(jobmaster.JobFailed) as unopened:
        jobmaster.result(failed)
    assert "sealed" in str(unopened.value.error_message)
    with pytest.raises(JobmasterError, match=f"cannot decrypt the result of job {done}"):
        jobmaster.result(done)
