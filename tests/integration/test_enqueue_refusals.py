"""The producer's pushes land whole or not at all (SPEC §8: every value may be forged).

A Lua script is not rolled back when one of its commands fails: the writes
before it stay. PUSH did its SADD to the set of queue names after its LPUSH,
so a forged set made ``enqueue`` raise for jobs that were queued (a producer
that retries doubles them); PUSH_UNIQUE and PERIODIC took their unique lock
before an LPUSH that a queue key of another type refuses, so the lock stayed
held with no job. A queue key of another type now fails the push before any
write, naming the key; the set of queue names, only an index, never fails it.
"""

from __future__ import annotations

import logging

import pytest
import redis

import jobmaster
import jobmaster.client
from jobmaster import payload as wire
from jobmaster.client import Client
from jobmaster.connection import connect
from jobmaster.errors import EnqueueError
from jobmaster.keys import Keys
from jobmaster.periodic import PeriodicTicker
from jobmaster.workflows.chain import chain
from jobmaster.workflows.signature import Signature
from tests import jobs
from tests.integration.test_periodic import T0, entry

pytestmark = pytest.mark.timeout(30)
K = Keys()


@pytest.fixture
def producer(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The job API's default client on this test's Redis."""
    monkeypatch.setattr(jobmaster.client, "_default", None)
    jobmaster.configure(redis_url)


def forge(store: redis.Redis, key: str) -> None:
    store.set(key, "forged")


def test_a_forged_set_of_queue_names_does_not_fail_a_push(
    client: Client, store: redis.Redis
) -> None:
    forge(store, K.queues)
    jid = client.push({"job": "tests.record", "args": ["a"]})
    assert jid is not None
    assert store.llen(K.queue("default")) == 1
    assert store.get(K.status(jid)) == b"queued"
    client.push_bulk({"job": "tests.record", "args": [["b"], ["c"]]})
    assert store.llen(K.queue("default")) == 3


def test_a_forged_set_of_queue_names_does_not_fail_a_unique_push(
    producer: None, store: redis.Redis
) -> None:
    forge(store, K.queues)
    assert jobs.unique_exec.enqueue("u") is not None
    assert store.llen(K.queue("default")) == 1


def test_a_queue_key_of_another_type_fails_the_push_whole_naming_it(
    client: Client, store: redis.Redis
) -> None:
    forge(store, K.queue("weird"))
    with pytest.raises(EnqueueError, match=f"{K.queue('weird')} holds a string"):
        client.push({"job": "tests.record", "args": ["a"], "queue": "weird"})
    assert store.get(K.queue("weird")) == b"forged"
    assert not store.exists(K.queues)
    assert not store.keys(K.status("*"))


def test_a_push_to_two_queues_writes_nothing_when_one_refuses(
    client: Client, store: redis.Redis
) -> None:
    forge(store, K.queue("weird"))
    both = [
        wire.build("tests.record", ["a"], {}, queue="default"),
        wire.build("tests.record", ["b"], {}, queue="weird"),
    ]
    with pytest.raises(EnqueueError, match=f"{K.queue('weird')} holds a string"):
        client.push_payloads(both)
    assert not store.exists(K.queue("default"))
    assert not store.keys(K.status("*"))


def test_a_chain_whose_first_queue_refuses_leaves_no_chain(
    client: Client, store: redis.Redis
) -> None:
    forge(store, K.queue("weird"))
    with pytest.raises(EnqueueError, match=f"{K.queue('weird')} holds a string"):
        first = Signature("tests.record", ("a",), options={"queue": "weird"})
        chain(first, jobs.record.s("b"), client=client)
    assert not store.keys(K.chain("*"))


@pytest.mark.parametrize("later", [False, True], ids=["now", "scheduled"])
def test_a_refused_unique_push_leaves_no_lock(
    producer: None, store: redis.Redis, later: bool
) -> None:
    forge(store, K.scheduled if later else K.queue("default"))
    with pytest.raises(EnqueueError, match="holds a string"):
        if later:
            jobs.unique_exec.enqueue_in(60, "u")
        else:
            jobs.unique_exec.enqueue("u")
    assert not store.keys(K.unique("*"))
    store.delete(K.scheduled, K.queue("default"))
    # Nothing holds the lock: the same job is accepted at once once the key is mended.
    assert jobs.unique_exec.enqueue("u") is not None


def test_a_periodic_entry_whose_queue_refuses_takes_no_lock_and_claims_no_slot(
    redis_url: str, store: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    forge(store, K.queue("weird"))
    refused = entry(name="refused", queue="weird", unique=True)
    fine = entry(name="fine", args=["f"])
    ticker = PeriodicTicker(connect(redis_url, retry_commands=False), K, [refused, fine])
    with caplog.at_level(logging.ERROR, logger="jobmaster.periodic"):
        enqueued = ticker.tick(T0)
        ticker.tick(T0 + 1)
    assert enqueued == ["fine"]  # one forged queue holds up no other entry
    assert not store.keys(K.unique("*"))
    assert store.hget(K.periodic_last, "refused") is None
    assert store.get(K.queue("weird")) == b"forged"
    errors = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert len(errors) == 1 and f"{K.queue('weird')} holds a string" in errors[0]
    store.delete(K.queue("weird"))
    assert ticker.tick(T0 + 2) == ["refused", "fine"]


def test_a_forged_set_of_queue_names_does_not_fail_a_periodic_entry(
    redis_url: str, store: redis.Redis
) -> None:
    forge(store, K.queues)
    ticker = PeriodicTicker(connect(redis_url, retry_commands=False), K, [entry()])
    assert ticker.tick(T0) == ["tick"]
    assert store.llen(K.queue("default")) == 1
