"""A job's status lives as long as the job waits (SPEC §11, issue 22 hole 5):
a job scheduled or retried further ahead than ``status_ttl`` was unknown
before it ran (``cancel`` said False while it stayed scheduled, ``result``
raised UnknownJob). Its status now lives through its wait, then ``status_ttl``."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
import redis

import jobmaster
from jobmaster.api import ScheduledSet
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
