"""PUSH wakes workers only when a worker may be asleep: when it made its queue non-empty.

A worker thread sleeps only after a fetch found its queues empty, so the
push that fills an empty queue PUBLISHes (the subscriber below stands for
a sleeping worker's listener and hears it at once), and a push onto a queue
that already holds jobs publishes nothing. Each test ends its "nothing was
published" check with a marker of its own on the channel: Redis delivers a
channel's messages in the order they were published, so the first message
after a push being the marker means the push published nothing.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import redis

from jobmaster.api.queues import Queue
from jobmaster.client import Client
from jobmaster.keys import Keys
from jobmaster.scripts import Push, Scripts

K = Keys()
CHANNEL = K.wakeup_channel("q")
WAIT = 10.0  # seconds: a bound for a message already sent, never a sleep


@pytest.fixture
def listener(store: redis.Redis) -> Iterator[redis.client.PubSub]:
    pubsub = store.pubsub()  # type: ignore[no-untyped-call]
    pubsub.subscribe(CHANNEL)
    confirmed = pubsub.get_message(timeout=WAIT)  # subscribed from here on
    assert confirmed is not None and confirmed["type"] == "subscribe"
    yield pubsub
    pubsub.close()


def next_message(pubsub: redis.client.PubSub) -> bytes:
    message = pubsub.get_message(timeout=WAIT)
    assert message is not None and message["type"] == "message", message
    return bytes(message["data"])


def nothing_published(store: redis.Redis, pubsub: redis.client.PubSub) -> bool:
    store.publish(CHANNEL, b"marker")
    return next_message(pubsub) == b"marker"


def push(scripts: Scripts, count: int = 1) -> int:
    payloads = [json.dumps({"n": n}).encode() for n in range(count)]
    result = Push(K.queue("q"), K.queues, "q", CHANNEL, 0, payloads).run(scripts.push)
    return int(result)


def test_a_push_into_an_empty_queue_wakes_a_sleeper_at_once(
    store: redis.Redis, listener: redis.client.PubSub
) -> None:
    assert push(Scripts(store)) == 1
    assert next_message(listener) == b"1"  # no one-second fallback needed


def test_a_push_onto_a_queue_holding_jobs_publishes_nothing(
    store: redis.Redis, listener: redis.client.PubSub
) -> None:
    scripts = Scripts(store)
    push(scripts)
    assert next_message(listener) == b"1"
    assert push(scripts) == 1 and push(scripts, 3) == 3
    assert nothing_published(store, listener)
    assert store.llen(K.queue("q")) == 5


def test_a_queue_emptied_by_fetches_wakes_again_on_its_next_push(
    store: redis.Redis, listener: redis.client.PubSub
) -> None:
    scripts = Scripts(store)
    push(scripts, 2)
    assert next_message(listener) == b"2"
    store.rpop(K.queue("q"), 2)  # the workers took both
    push(scripts)
    assert next_message(listener) == b"1"


def test_a_bulk_push_publishes_its_count_once_and_only_into_an_empty_queue(
    store: redis.Redis, listener: redis.client.PubSub
) -> None:
    """More than one LPUSH chunk (500 a chunk): the length after the last one decides."""
    scripts = Scripts(store)
    assert push(scripts, 1200) == 1200
    assert next_message(listener) == b"1200"
    assert nothing_published(store, listener)  # one message, not one per chunk
    assert push(scripts, 1200) == 1200
    assert nothing_published(store, listener)


def test_the_client_keeps_the_rule_on_its_lean_path_and_its_pipelined_one(
    store: redis.Redis, client: Client, listener: redis.client.PubSub
) -> None:
    client.push({"job": "x.y", "queue": "q"})
    assert next_message(listener) == b"1"
    client.push({"job": "x.y", "queue": "q"})
    client.push_bulk({"job": "x.y", "queue": "q", "args": [[n] for n in range(2500)]})
    assert nothing_published(store, listener)
    store.delete(K.queue("q"))
    client.push_bulk({"job": "x.y", "queue": "q", "args": [[n] for n in range(2500)]})
    # 1,000 a call (BULK_CHUNK): only the call that found the queue empty publishes.
    assert next_message(listener) == b"1000"
    assert nothing_published(store, listener)
    assert store.llen(K.queue("q")) == 2500


def test_a_forged_queue_key_is_still_refused_whole_and_named(store: redis.Redis) -> None:
    """The key's type is no longer read before the LPUSH: the refused LPUSH is the check."""
    store.set(K.queue("q"), "forged")
    with pytest.raises(redis.ResponseError, match=f"WRONGTYPE {K.queue('q')} holds a string"):
        push(Scripts(store), 700)
    assert store.get(K.queue("q")) == b"forged" and not store.exists(K.queues)


def test_the_queue_joins_the_set_of_queues_on_the_push_that_fills_it(
    store: redis.Redis, client: Client
) -> None:
    """Only then: a queue holding jobs is in the set (it leaves it only empty)."""

    def sadds() -> int:
        return int(store.info("commandstats").get("cmdstat_sadd", {"calls": 0})["calls"])

    client.push({"job": "x.y", "queue": "q"})
    assert store.smembers(K.queues) == {b"q"}
    before = sadds()
    client.push({"job": "x.y", "queue": "q"})
    assert sadds() == before
    assert Queue("q", client).clear() == 2
    assert store.smembers(K.queues) == set()
    client.push({"job": "x.y", "queue": "q"})
    assert store.smembers(K.queues) == {b"q"}
