"""A job's status lives as long as the job waits (SPEC §11, issue 22 hole 5):
a job scheduled or retried further ahead than ``status_ttl`` was unknown
before it ran (``cancel`` said False while it stayed scheduled, ``result``
raised UnknownJob). Its status now lives through its wait, then ``status_ttl``;
the same for a job waiting in a queue or running."""

from __future__ import annotations

import time
from collections.abc import Callable
from unittest.mock import patch

import pytest
import redis

import jobmaster
from jobmaster.api import Queue, ScheduledSet
from jobmaster.client import Client
from jobmaster.config import Config
from jobmaster.errors import ResultPending
from jobmaster.keys import Keys
from jobmaster.worker.process import WorkerProcess
from tests import jobs
from tests.helpers import wait_until

pytestmark = pytest.mark.timeout(60)
K = Keys()
DAY = 86400


def test_a_job_scheduled_past_status_ttl_is_still_known_and_cancellable(
    redis_url: str, store: redis.Redis
) -> None:
    """The issue's reproduction: status_ttl 2, enqueue_in(30), 3 s later."""
    client = Client(redis_url, status_ttl=2)
    jid = client.push({"job": "tests.record", "args": ["later"], "at": time.time() + 30})
    assert jid is not None
    assert store.ttl(K.status(jid)) >= 30
    time.sleep(3)  # past the old TTL (status_ttl from the enqueue): the point of the test
    with pytest.raises(ResultPending):
        client.result(jid)
    assert jobmaster.cancel(jid, client) is True
    assert ScheduledSet(client).size() == 0


def test_every_way_of_scheduling_keeps_the_status_through_the_wait(
    redis_url: str, store: redis.Redis
) -> None:
    jobmaster.configure(redis_url)  # the default client: status_ttl one day
    plain = jobs.record.enqueue_in(2 * DAY, "plain")
    unique = jobs.unique_exec.enqueue_in(2 * DAY, "unique")
    batch = jobmaster.batch()
    with batch.jobs():
        member = jobs.member.enqueue_in(2 * DAY, 1)
    for jid in (plain, unique, member):
        assert jid is not None
        assert store.get(K.status(jid)) == b"scheduled"
        assert store.ttl(K.status(jid)) > 3 * DAY - 60, jid


def test_a_retry_keeps_its_status_through_its_backoff(
    make_config: Callable[..., Config],
    running_worker: Callable[[Config], WorkerProcess],
    client: Client,
    store: redis.Redis,
) -> None:
    running_worker(make_config(status_ttl=5))
    jid = jobs.sleeps_then_fails.enqueue("retried", 0.0)  # backoff 60 s
    assert jid is not None
    wait_until(lambda: store.get(K.status(jid)) == b"retrying", timeout=10, message="retrying")
    assert store.ttl(K.status(jid)) >= 60
    assert store.ttl(K.attempts(jid)) >= 60  # its history with it


def test_a_job_waiting_in_a_queue_past_status_ttl_is_still_known_and_cancellable(
    redis_url: str, store: redis.Redis
) -> None:
    """The rest of hole 5: a queued job's status counted status_ttl from its
    push, so a queue backed up longer than that made it unknown."""
    client = Client(redis_url, status_ttl=2)
    jid = client.push({"job": "tests.record", "args": ["waits"], "queue": "backlog"})
    assert jid is not None
    time.sleep(3)  # past the old TTL: the point of the test
    assert client.status(jid) == "queued"
    with pytest.raises(ResultPending):
        client.result(jid)
    assert jobmaster.cancel(jid, client) is True
    assert store.ttl(K.status(jid)) > 0  # its end is kept status_ttl, no longer


def test_every_way_into_a_queue_leaves_a_status_without_ttl(
    redis_url: str, store: redis.Redis
) -> None:
    jobmaster.configure(redis_url)
    plain = jobs.record.enqueue("plain")
    unique = jobs.unique_exec.enqueue("unique")
    batch = jobmaster.batch()
    with batch.jobs():
        member = jobs.member.enqueue(1)
    for jid in (plain, unique, member):
        assert jid is not None
        assert store.get(K.status(jid)) == b"queued"
        assert store.ttl(K.status(jid)) == -1, jid


def test_a_job_running_past_status_ttl_keeps_its_status(
    make_config: Callable[..., Config],
    running_worker: Callable[[Config], WorkerProcess],
    client: Client,
    store: redis.Redis,
) -> None:
    """A mark's TTL was status_ttl less its run: a job running longer was
    unknown while it ran. With heartbeat_ttl 2 the mark (status_ttl + 2 s)
    lasts 3 s: only the heartbeat's refresh keeps it past that."""
    running_worker(make_config(status_ttl=1, heartbeat_ttl=2))
    jid = jobs.slow_count.enqueue(7, 6.0)
    assert jid is not None
    wait_until(lambda: store.get(K.status(jid)) == b"working", timeout=10, message="working")
    time.sleep(4.5)  # past status_ttl and the first mark's TTL: the point of the test
    assert client.status(jid) == "working"
    with pytest.raises(ResultPending):
        client.result(jid)
    wait_until(lambda: store.get(K.status(jid)) == b"complete", timeout=10, message="complete")
    assert 0 < store.ttl(K.status(jid)) <= 1  # status_ttl from its end


def test_deleting_or_clearing_queued_jobs_gives_their_statuses_a_ttl(
    redis_url: str, store: redis.Redis
) -> None:
    """A queued status has no TTL: what drops a queued job without an outcome
    must give it one, or it would outlive its job for good."""
    client = Client(redis_url, status_ttl=50)
    jids = [client.push({"job": "tests.record", "args": [n], "queue": "gone"}) for n in range(7)]
    queue = Queue("gone", client)
    assert queue.delete(str(jids[0])) is True
    store.lpush(K.queue("gone"), b"x" * 100_000)  # forged: no jid, read in part
    with patch("jobmaster.api.queues.PAGE", 3):  # several pages
        assert queue.clear() == 7
    assert queue.size() == 0
    for jid in jids:
        assert 0 < store.ttl(K.status(str(jid))) <= 50, jid
    assert "gone" not in {q.name for q in Queue.all(client)}


def test_a_queued_status_gets_a_ttl_where_the_job_ends_untracked(
    make_config: Callable[..., Config],
    running_worker: Callable[[Config], WorkerProcess],
    redis_url: str,
    store: redis.Redis,
) -> None:
    """A producer that keeps statuses wrote "queued" with no TTL; a worker, or
    a canceller, that keeps none (track_status off) still gives it one when
    the job leaves its queue, or it would outlive the job for good."""
    tracked = Client(redis_url, status_ttl=DAY)
    kept = tracked.push({"job": "tests.record", "args": ["cancelled"], "queue": "held"})
    assert kept is not None
    assert jobmaster.cancel(kept, Client(redis_url, status_ttl=0)) is True
    assert store.llen(K.queue("held")) == 0 and store.ttl(K.status(kept)) != -1
    running_worker(make_config(track_status=False))
    ran = tracked.push({"job": "tests.record", "args": ["untracked"]})
    assert ran is not None
    wait_until(lambda: store.ttl(K.status(ran)) != -1, timeout=10, message="given a TTL")
    assert store.sismember("test:started", "untracked")
