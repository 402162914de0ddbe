"""``jobmaster.cancel`` of waiting jobs (queue, scheduled, retry set) against a
real Redis, with no worker: removed at once, in one step, status
``cancelled``, unique lock released, a batch counts a failure. The running
case is in tests/process/test_cancel.py (a real master)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import redis

import jobmaster
from jobmaster import payload as wire
from jobmaster.api import Canceller, Queue, RetrySet, ScheduledSet, Stats
from jobmaster.api.queues import FIND_PAGE
from jobmaster.client import Client
from jobmaster.keys import Keys
from tests import jobs

pytestmark = pytest.mark.timeout(60)

K = Keys()


@pytest.fixture(autouse=True)
def _default_client(redis_url: str) -> Iterator[None]:
    jobmaster.configure(redis_url)
    yield


def requested(store: redis.Redis) -> set[str]:
    return {member.decode() for member in store.zrange(K.cancels, 0, -1)}


def test_a_queued_job_is_removed_at_once_and_marked_cancelled(
    client: Client, store: redis.Redis
) -> None:
    keep = jobs.record.enqueue("keep")
    jid = jobs.record.enqueue("cancel me")
    assert jid is not None and keep is not None

    result = Canceller(client).cancel(jid)

    assert result.cancelled and result.removed_from == "queue default"
    assert [r.jid for r in Queue("default", client)] == [keep]
    assert client.status(jid) == "cancelled"
    assert client.status(keep) == "queued"
    assert jid in requested(store)  # harmless now; a copy fetched meanwhile would meet it
    assert store.get(K.stat("cancelled")) == b"1"
    assert Stats(client).cancelled == 1 and Stats(client).as_dict()["cancelled"] == 1


def test_a_job_deep_in_a_long_queue_is_found_page_by_page(
    client: Client, store: redis.Redis
) -> None:
    target = jobs.record.options(queue="long").enqueue("target")
    assert target is not None
    filler = [
        wire.encode(wire.build("tests.record", [str(n)], {}, queue="long"))
        for n in range(3 * FIND_PAGE)
    ]
    store.lpush(K.queue("long"), *filler)  # the target is now the oldest, past 3 pages

    assert jobmaster.cancel(target) is True
    assert store.llen(K.queue("long")) == 3 * FIND_PAGE
    assert client.status(target) == "cancelled"


def test_an_argument_naming_the_jid_is_not_the_job(client: Client, store: redis.Redis) -> None:
    target = jobs.record.enqueue("target")
    assert target is not None
    decoy = jobs.record.enqueue(f'{{"jid":"{target}"}}')  # its argument holds the jid
    assert jobmaster.cancel(target)
    assert [r.jid for r in Queue("default", client)] == [decoy]


def test_a_scheduled_job_is_removed_at_once(client: Client) -> None:
    jid = jobs.record.enqueue_in(3600, "later")
    assert jid is not None and client.status(jid) == "scheduled"

    result = Canceller(client).cancel(jid)

    assert (result.cancelled, result.removed_from) == (True, "scheduled")
    assert ScheduledSet(client).size() == 0
    assert client.status(jid) == "cancelled"


def test_a_retrying_job_is_removed_from_the_retry_set(client: Client, store: redis.Redis) -> None:
    payload = wire.build("tests.fails", ["x"], {}, queue="default")
    payload.update(retry_count=1, error_class="RuntimeError", enqueued_at=time.time())
    store.zadd(K.retry, {wire.encode(payload): time.time() + 3600})
    store.set(K.status(payload["jid"]), "retrying")

    result = Canceller(client).cancel(payload["jid"])

    assert (result.cancelled, result.removed_from) == (True, "retry")
    assert RetrySet(client).size() == 0
    assert client.status(payload["jid"]) == "cancelled"


def test_an_ended_or_unknown_job_is_not_cancelled(client: Client, store: redis.Redis) -> None:
    store.set(K.status("a" * 24), "complete")
    assert jobmaster.cancel("a" * 24) is False
    assert jobmaster.cancel("b" * 24) is False  # never seen
    assert requested(store) == set()
    assert store.get(K.stat("cancelled")) is None


def test_a_second_cancel_is_no_second_count(client: Client, store: redis.Redis) -> None:
    store.set(K.status("c" * 24), "working")  # running somewhere: only the request
    first = Canceller(client).cancel("c" * 24)
    assert (first.cancelled, first.removed_from) == (True, None)
    assert jobmaster.cancel("c" * 24) is True
    assert store.get(K.stat("cancelled")) == b"1"
    assert requested(store) == {"c" * 24}


def test_a_cancelled_unique_job_frees_its_lock(client: Client, store: redis.Redis) -> None:
    jid = jobs.unique_exec.enqueue("once")
    assert jid is not None
    assert jobs.unique_exec.enqueue("once") is None  # locked
    assert jobmaster.cancel(jid)
    assert jobs.unique_exec.enqueue("once") is not None  # the lock went with it


def test_a_cancelled_batch_job_is_a_failure_of_its_batch(
    client: Client, store: redis.Redis
) -> None:
    batch = jobmaster.batch(
        on_complete=jobs.callback.s("complete"),
        on_success=jobs.callback.s("success"),
        client=client,
    )
    with batch.jobs():
        jid = jobs.member.enqueue(1)
    assert jid is not None

    assert jobmaster.cancel(jid)

    info = jobmaster.batch_status(batch.bid, client)
    assert info is not None and info["failed"] == 1 and info["pending"] == 1
    assert store.sismember(K.batch_failed(batch.bid), jid)
    # Its only job will not run: the batch is complete, and never a success.
    queued = [r.job for r in Queue("default", client)]
    assert queued == ["tests.callback"]
    assert [r.args for r in Queue("default", client)] == [["complete"]]


def test_the_request_trims_itself(client: Client, store: redis.Redis) -> None:
    store.zadd(K.cancels, {f"old{n}": 1.0 for n in range(5)})  # long expired
    store.set(K.status("d" * 24), "working")
    assert jobmaster.cancel("d" * 24)
    assert requested(store) == {"d" * 24}


def test_forged_keys_of_another_type_do_not_stop_a_cancel(
    client: Client, store: redis.Redis
) -> None:
    """SPEC §8: every key may be forged. The cancels set as a string, a queue
    and the scheduled set as other types: the cancel still finds its job."""
    store.set(K.cancels, "forged")
    store.hset(K.queue("aaa"), "forged", "1")  # listed first, not a list
    store.sadd(K.queues, "aaa")
    store.rpush(K.scheduled, "forged")
    jid = jobs.record.options(queue="zzz").enqueue("x")
    assert jid is not None
    assert Canceller(client).cancel(jid).removed_from == "queue zzz"
    assert requested(store) == {jid}  # the forged key was replaced
    scheduled = "e" * 24
    store.set(K.status(scheduled), "scheduled")
    assert Canceller(client).cancel(scheduled).cancelled  # a request, the set unreadable


def test_cancel_with_wait_is_false_for_a_running_job_that_completes_first(
    store: redis.Redis, redis_url: str
) -> None:
    """Issue 22 hole 6: the request was made, but the job ended on its own
    before its worker heard it: ``cancel(wait=)`` says False, with why."""
    jid = "c" * 24
    store.set(K.status(jid), "working", ex=60)

    def completes() -> None:
        time.sleep(0.3)
        store.set(K.status(jid), "complete", ex=60)
        store.publish(K.ended_channel(jid), "complete")

    ender = threading.Thread(target=completes)
    ender.start()
    result = Canceller(Client(redis_url)).cancel(jid, wait=5)
    ender.join()
    assert (result.cancelled, result.ended_as, result.pending) == (False, "complete", False)
    assert "ended first (complete)" in result.describe()
    store.set(K.status(jid), "working", ex=60)
    assert jobmaster.cancel(jid, Client(redis_url), wait=0.2) is False  # nobody stops it
    assert jobmaster.cancel(jid, Client(redis_url)) is True  # without wait: request made
