"""The producer side against a real Redis: wire format, bulk, scheduling, errors."""

from __future__ import annotations

import json
import time

import pytest
import redis

import jobmaster
from jobmaster.client import Client
from jobmaster.errors import EnqueueError
from jobmaster.keys import Keys
from tests import jobs

KEYS = Keys()


def queued(store: redis.Redis, queue: str = "default") -> list[dict[str, object]]:
    return [json.loads(raw) for raw in store.lrange(KEYS.queue(queue), 0, -1)]


def test_push_writes_the_documented_wire_format(client: Client, store: redis.Redis) -> None:
    jid = client.push(
        {
            "job": "myapp.send",
            "args": [1, "x"],
            "kwargs": {"a": True},
            "queue": "mail",
            "retry": 3,
            "trace_id": "abc",
        }
    )
    [payload] = queued(store, "mail")
    assert payload["jid"] == jid and len(jid) == 24 and int(jid, 16) >= 0
    assert payload["job"] == "myapp.send"
    assert payload["args"] == [1, "x"] and payload["kwargs"] == {"a": True}
    assert payload["queue"] == "mail" and payload["retry"] == 3
    assert payload["trace_id"] == "abc"  # extra fields are kept
    assert payload["created_at"] <= payload["enqueued_at"] <= time.time()
    assert store.smembers(KEYS.queues) == {b"mail"}


def test_push_without_retry_leaves_it_to_the_job(client: Client, store: redis.Redis) -> None:
    client.push({"job": "x.y", "args": []})
    assert "retry" not in queued(store)[0]


def test_push_bulk_chunks_and_keeps_order(client: Client, store: redis.Redis) -> None:
    jids = client.push_bulk({"job": "x.y", "args": [[n] for n in range(2500)], "queue": "bulk"})
    assert len(set(jids)) == 2500
    # Producers LPUSH and workers take from the right: the right end is the oldest.
    oldest_first = list(reversed(queued(store, "bulk")))
    assert [p["args"] for p in oldest_first] == [[n] for n in range(2500)]
    assert [p["jid"] for p in oldest_first] == jids


def test_push_bulk_rejects_a_flat_args_list(client: Client) -> None:
    with pytest.raises(TypeError, match="list of argument lists"):
        client.push_bulk({"job": "x.y", "args": [1, 2, 3]})


def test_push_publishes_a_wakeup_with_the_count(client: Client, store: redis.Redis) -> None:
    pubsub = store.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(KEYS.wakeup_channel("default"))
    client.push_bulk({"job": "x.y", "args": [[1], [2], [3]]})
    deadline = time.monotonic() + 5
    message = None
    while message is None and time.monotonic() < deadline:
        message = pubsub.get_message(timeout=0.5)
    assert message is not None and int(message["data"]) == 3
    pubsub.close()


def test_job_enqueue_in_and_at_use_the_scheduled_set(
    client: Client, store: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jobs.record, "client", client)
    before = time.time()
    jid = jobs.record.enqueue_in(60, "later")
    [(raw, score)] = store.zrange(KEYS.scheduled, 0, -1, withscores=True)
    assert json.loads(raw)["jid"] == jid
    assert before + 59 < score < time.time() + 61
    jobs.record.enqueue_at(time.time() - 5, "past")  # already due: straight to the queue
    assert [p["args"] for p in queued(store)] == [["past"]]


def test_options_override_the_queue_and_retry(
    client: Client, store: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jobs.record, "client", client)
    jobs.record.options(queue="critical", retry=0).enqueue("x")
    [payload] = queued(store, "critical")
    assert payload["retry"] == 0 and payload["job"] == "tests.record"


def test_configure_sets_the_default_client(
    redis_url: str, store: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jobmaster.client, "_default", None)  # restored after the test
    jobmaster.configure(redis_url)
    jid = jobs.record.enqueue("via-default")
    assert queued(store)[0]["jid"] == jid


def test_enqueue_raises_enqueue_error_when_redis_is_down(free_port: int) -> None:
    client = Client(f"redis://127.0.0.1:{free_port}/0")
    with pytest.raises(EnqueueError, match=r"could not enqueue x\.y"):
        client.push({"job": "x.y", "args": []})
