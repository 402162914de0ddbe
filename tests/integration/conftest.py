"""Fixtures for integration tests: a worker process running in this test process."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from jobmaster.client import Client
from jobmaster.config import Config, load_config
from jobmaster.worker.process import WorkerProcess
from tests import jobs  # noqa: F401 - registers the test jobs


@pytest.fixture
def make_config(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Config]:
    """A config on the test's private Redis (jobs find it through the env too)."""

    def make(url: str | None = None, **overrides: Any) -> Config:
        target = url or redis_url
        monkeypatch.setenv("JOBMASTER_REDIS_URL", target)
        values = {"redis_url": target, "concurrency": 4, "poll_interval": 0.1, **overrides}
        return load_config(None, values, env={})

    return make


@pytest.fixture
def client(redis_url: str) -> Client:
    return Client(redis_url)


@pytest.fixture
def store(redis_url: str) -> redis.Redis:
    return redis.Redis.from_url(redis_url)


@pytest.fixture
def running_worker() -> Iterator[Callable[[Config], WorkerProcess]]:
    """Start WorkerProcesses; each is stopped (shutdown_timeout 5 s) at the end."""
    started: list[WorkerProcess] = []

    def start(config: Config) -> WorkerProcess:
        worker = WorkerProcess(config)
        worker.start()
        started.append(worker)
        return worker

    yield start
    for worker in started:
        if not worker.ctx.stopping.is_set():
            worker.stop(timeout=5)
