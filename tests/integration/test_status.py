"""A job's status and attempts history, through a worker on a real Redis."""

from __future__ import annotations

import time
from collections.abc import Callable

import redis

from jobmaster.client import Client
from jobmaster.config import Config
from jobmaster.keys import Keys
from jobmaster.worker.process import WorkerProcess
from tests.helpers import wait_until

K = Keys()
StartWorker = Callable[[Config], WorkerProcess]


def test_a_job_goes_queued_working_complete_with_one_attempt(
    make_config: Callable[..., Config],
    running_worker: StartWorker,
    client: Client,
    store: redis.Redis,
) -> None:
    jid = client.push({"job": "tests.record", "args": ["st", 0.5]})
    assert client.status(jid) == "queued"
    worker = running_worker(make_config())
    wait_until(lambda: client.status(jid) == "working", timeout=10)
    wait_until(lambda: client.status(jid) == "complete", timeout=10)
    [attempt] = client.attempts(jid)
    assert attempt["outcome"] == "complete" and attempt["worker"] == worker.ctx.name
    assert attempt["ended_at"] - attempt["started_at"] >= 0.5
    assert attempt["error_class"] is None
    assert 0 < store.ttl(K.status(jid)) <= 86400


def test_failures_show_retrying_then_dead_with_every_attempt(
    make_config: Callable[..., Config],
    running_worker: StartWorker,
    client: Client,
) -> None:
    jid = client.push({"job": "tests.fails", "args": ["sd"]})  # retry=2, backoff=0
    running_worker(make_config())
    wait_until(lambda: client.status(jid) == "dead", timeout=20)
    tries = client.attempts(jid)
    assert [a["outcome"] for a in tries] == ["retrying", "retrying", "dead"]
    assert {a["error_class"] for a in tries} == {"ValueError"}
    assert tries[0]["error_message"] == "failing on purpose: sd"


def test_a_dropped_job_is_failed_and_a_scheduled_one_scheduled(
    make_config: Callable[..., Config],
    running_worker: StartWorker,
    client: Client,
) -> None:
    dropped = client.push({"job": "tests.dropped", "args": ["x"]})
    later = client.push({"job": "tests.record", "args": ["later"], "at": time.time() + 3600})
    assert client.status(later) == "scheduled"
    running_worker(make_config())
    wait_until(lambda: client.status(dropped) == "failed", timeout=10)
    assert client.status("0" * 24) is None  # never seen


def test_a_job_pushed_back_at_stop_is_queued_again(
    make_config: Callable[..., Config],
    running_worker: StartWorker,
    client: Client,
) -> None:
    # Long enough to outlive the stop, short enough to end with the test (its
    # thread runs on after the push-back: the suite fails on a thread left running).
    jid = client.push({"job": "tests.record", "args": ["back", 3]})
    worker = running_worker(make_config())
    wait_until(lambda: client.status(jid) == "working", timeout=10)
    worker.stop(timeout=0.2)
    assert client.status(jid) == "queued"


def test_status_tracking_can_be_turned_off(
    make_config: Callable[..., Config],
    running_worker: StartWorker,
    redis_url: str,
    store: redis.Redis,
) -> None:
    quiet_client = Client(redis_url, status_ttl=0)
    jid = quiet_client.push({"job": "tests.record", "args": ["untracked"]})
    running_worker(make_config(track_status=False))
    wait_until(lambda: store.sismember("test:done", "untracked"), timeout=10)
    assert store.keys(K.status("*")) == [] and store.keys(K.attempts("*")) == []
    assert quiet_client.status(jid) is None
