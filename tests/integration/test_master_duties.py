"""The master's Redis thread (supervisor/duties.py) against a real private Redis.

What the unit tests' fakes cannot show: the keys it reads and writes, and
what it leaves of values others wrote.
"""

from __future__ import annotations

import json
import time
import tracemalloc
from collections.abc import Callable, Iterator

import pytest
import redis

from jobmaster.config import Config
from jobmaster.deadset import DeadSetLimits
from jobmaster.keys import Keys
from jobmaster.metrics import queues as queues_module
from jobmaster.metrics.queues import QueueWatch
from jobmaster.periodic import PeriodicTicker
from jobmaster.recovery import Recovery
from jobmaster.scripts import Scripts
from jobmaster.supervisor import duties as duties_module
from jobmaster.supervisor.duties import MasterState, RedisDuties
from jobmaster.supervisor.history import HistoryRecorder

pytestmark = pytest.mark.timeout(60)
K = Keys()
MASTER = "host:1:master"
BIG = 30 * 1024 * 1024


@pytest.fixture
def duties(make_config: Callable[..., Config]) -> Iterator[RedisDuties]:
    """A master's Redis thread, not started: the tests run its passes."""
    config = make_config()
    client = redis.Redis.from_url(config.redis_url)
    made = RedisDuties(
        config=config,
        client=client,
        keys=K,
        identity=MASTER,
        recovery=Recovery(client, K, Scripts(client), DeadSetLimits(100, 30), 60),
        ticker=PeriodicTicker(client, K, [], status_ttl=60),
        history=HistoryRecorder(client, K),
    )
    made.publish(MasterState(1, False, False, ()))
    yield made
    client.close()


def test_masters_whose_heartbeat_expired_are_pruned_from_the_set(
    duties: RedisDuties, store: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each unclean exit left its member in ``masters`` for good."""
    monkeypatch.setattr(duties_module, "PRUNE_SAMPLE", 3)  # fewer than the set: bounded
    gone = [f"host:{n}:gone" for n in range(5)]
    store.sadd(K.masters, *gone, "other:7:alive", b"\xff\xfe not text")
    store.hset(K.heartbeat("other:7:alive"), "role", "master")
    store.expire(K.heartbeat("other:7:alive"), 60)
    duties.run_pass(0.0)  # the heartbeat (ours added) and a first prune
    assert store.sismember(K.masters, MASTER)
    assert 8 - 3 <= store.scard(K.masters) < 8  # a bounded sample, of stale ones only
    assert store.sismember(K.masters, "other:7:alive")
    left = store.scard(K.masters)
    duties.run_pass(1.0)  # not due yet
    assert store.scard(K.masters) == left
    for n in range(1, 60):  # random samples: each prune removes what it drew
        duties.run_pass(n * duties_module.PRUNE_INTERVAL)
        if store.scard(K.masters) == 2:
            break
    assert store.smembers(K.masters) == {MASTER.encode(), b"other:7:alive"}


def test_a_big_oldest_job_is_never_read_whole_for_its_latency(
    make_config: Callable[..., Config], store: redis.Redis
) -> None:
    """A 100 MB job at a queue's tail, read whole by each scrape, stalled the
    master 2.2 s and grew it to 714 MB: only its two ends are read now."""
    enqueued = time.time() - 90
    big = json.dumps({"jid": "j1", "job": "tests.record", "args": ["x" * BIG]})
    store.rpush(K.queue("default"), big[:-1] + f', "enqueued_at": {enqueued}}}')  # the oldest
    store.lpush(K.queue("default"), json.dumps({"job": "tests.record", "enqueued_at": 1.0}))
    store.sadd(K.queues, "default")
    watch = QueueWatch(redis.Redis.from_url(make_config().redis_url), "jobmaster", ["default"])
    tracemalloc.start()
    try:
        watch.refresh(0.0)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert watch.latest is not None
    [queue] = watch.latest.queues
    assert (queue.name, queue.size) == ("default", 2)
    assert queue.latency == pytest.approx(90, abs=5)
    assert peak < BIG / 10, f"{peak} bytes allocated to read the queues"
    watch.redis.close()


def test_queue_labels_are_capped_and_the_rest_counted(
    make_config: Callable[..., Config], store: redis.Redis
) -> None:
    """300,000 names in the queues set made a scrape take 10.8 s."""
    names = [f"q{n:05d}" for n in range(5 * queues_module.MAX_QUEUES)]
    store.sadd(K.queues, *names)
    store.sadd(K.paused, *names[:3], "paused-only")
    store.rpush(K.queue("mine"), json.dumps({"job": "tests.record"}))
    store.sadd(K.queues, "mine")
    store.set(K.queue("q00001"), "not a list")  # read as an empty queue
    store.zadd(K.dead, {"x": float("inf")})
    watch = QueueWatch(redis.Redis.from_url(make_config().redis_url), "jobmaster", ["mine"])
    watch.refresh(0.0)
    reading = watch.latest
    assert reading is not None
    assert len(reading.queues) == queues_module.MAX_QUEUES
    assert reading.queues[0].name == "mine" and reading.queues[0].size == 1
    listed = sum(1 for q in reading.queues if q.name != "paused-only")
    assert reading.queues_unshown == len(names) + 1 - listed
    assert reading.dead_size == 1
    watch.redis.close()
