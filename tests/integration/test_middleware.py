"""Middleware around enqueue and execution, with a real worker."""

from __future__ import annotations

import itertools
import json
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from jobmaster import middleware
from jobmaster.client import Client
from jobmaster.config import Config
from jobmaster.keys import Keys
from jobmaster.middleware import JobContext, Middleware
from jobmaster.worker.process import WorkerProcess
from tests import middleware_jobs  # noqa: F401 - registers the jobs
from tests.helpers import wait_until

K = Keys()
StartWorker = Callable[[Config], WorkerProcess]


@pytest.fixture(autouse=True)
def _no_global_middleware() -> Iterator[None]:
    middleware.clear()
    yield
    middleware.clear()


def test_rate_limit_holds_jobs_back_without_counting_an_attempt(
    make_config: Callable[..., Config],
    running_worker: StartWorker,
    client: Client,
    store: redis.Redis,
) -> None:
    jids = client.push_bulk({"job": "tests.rate_limited", "args": [[f"r{n}"] for n in range(6)]})
    running_worker(make_config(concurrency=4))
    wait_until(lambda: store.scard("test:done") == 6, timeout=30, message="all 6 ran")
    # The job body marks itself done before its acknowledgement counts it processed.
    wait_until(lambda: store.get(K.stat("processed")) == b"6", timeout=10, message="6 counted")
    admitted = Counter(int(raw) for raw in store.lrange("test:windows", 0, -1))
    assert sum(admitted.values()) == 6
    assert max(admitted.values()) <= 2, admitted  # never more than 2 in one 1 s window
    assert len(admitted) >= 3, admitted  # so 6 starts took at least 3 windows
    assert store.get(K.stat("failed")) is None  # held back is not failed
    assert store.get(K.stat("processed")) == b"6"  # nor counted as a run
    for jid in jids:
        assert len(client.attempts(jid)) == 1  # one attempt each, deferrals not counted


def test_without_overlapping_runs_jobs_one_at_a_time(
    make_config: Callable[..., Config],
    running_worker: StartWorker,
    client: Client,
    store: redis.Redis,
) -> None:
    client.push_bulk({"job": "tests.exclusive", "args": [["e1"], ["e2"], ["e3"]]})
    running_worker(make_config(concurrency=3))
    wait_until(lambda: store.scard("test:done") == 3, timeout=30)
    intervals = sorted(
        tuple(float(t) for t in raw.decode().split(":"))
        for raw in store.lrange("test:intervals", 0, -1)
    )
    for (_, end), (start, _) in itertools.pairwise(intervals):
        assert start >= end, f"overlap: {intervals}"
    # Released after each run: the release follows the job body's last write, so wait for it.
    wait_until(lambda: store.keys(f"{K.prefix}overlap:*") == [], timeout=10, message="released")


class Counting(Middleware):
    def __init__(self, store: redis.Redis) -> None:
        self.store = store

    def before_process(self, job: JobContext) -> None:
        self.store.rpush("test:mw", f"before:{job.job}")

    def after_process(self, job: JobContext, error: BaseException | None) -> None:
        self.store.rpush("test:mw", f"after:{type(error).__name__ if error else 'ok'}")


class Broken(Middleware):
    def before_process(self, job: JobContext) -> None:
        raise RuntimeError("a broken middleware")


def test_global_middleware_wraps_every_job_and_a_broken_one_is_only_logged(
    make_config: Callable[..., Config],
    running_worker: StartWorker,
    client: Client,
    store: redis.Redis,
    caplog: pytest.LogCaptureFixture,
) -> None:
    middleware.add(Broken())
    middleware.add(Counting(store))
    client.push({"job": "tests.record", "args": ["wrapped"]})
    client.push({"job": "tests.permanent", "args": ["boom"]})
    running_worker(make_config(concurrency=1))
    wait_until(lambda: store.llen("test:mw") == 4, timeout=10)
    assert store.sismember("test:done", "wrapped")
    calls = sorted(raw.decode() for raw in store.lrange("test:mw", 0, -1))
    assert calls == ["after:Permanent", "after:ok", "before:tests.permanent", "before:tests.record"]
    assert "middleware Broken failed before" in caplog.text


class Tagging(Middleware):
    def before_enqueue(self, payload: dict[str, Any]) -> dict[str, Any] | None:
        if payload["args"] == ["drop me"]:
            return None
        return {**payload, "tenant": "acme"}


def test_client_middleware_changes_or_drops_what_is_pushed(
    client: Client, store: redis.Redis
) -> None:
    middleware.add(Tagging())
    assert client.push({"job": "tests.record", "args": ["drop me"]}) is None
    jid = client.push({"job": "tests.record", "args": ["keep me"]})
    [payload] = [json.loads(raw) for raw in store.lrange(K.queue("default"), 0, -1)]
    assert payload["jid"] == jid and payload["tenant"] == "acme"


def test_middleware_named_in_the_config_is_installed(tmp_path: Any) -> None:
    from jobmaster.app import load_app
    from jobmaster.config import load_config
    from jobmaster.errors import ConfigError

    config = load_config(None, {"middleware": ["tests.integration.test_middleware:Broken"]}, env={})
    load_app(config)
    assert [type(m).__name__ for m in middleware.installed()] == ["Broken"]
    bad = load_config(None, {"middleware": ["tests.nowhere:Nothing"]}, env={})
    with pytest.raises(ConfigError, match=r"middleware 'tests\.nowhere:Nothing'"):
        load_app(bad)
