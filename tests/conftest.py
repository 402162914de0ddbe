"""Fixtures for the whole suite: private redis-servers, ports, waiting.

Every server here is our own child on a free port: the shared Redis on its default port
must never be touched (a FLUSHALL there would wipe someone else's data).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlparse

import pytest

from jobmaster.embedded import RedisServerProcess
from tests import helpers

# Seconds a test's threads get to end after it (a processor finishing its last
# poll, a loop's wait): more means one was left running.
THREADS_END_WITHIN = 5.0


def _assert_private(url: str) -> str:
    parsed = urlparse(url)
    assert parsed.port != helpers.FORBIDDEN_PORT, f"refusing to use the shared Redis: {url}"
    return url


@pytest.fixture(scope="session", autouse=True)
def _no_default_redis() -> Iterator[None]:
    """Point the producer's environment fallbacks at a port nobody listens on.

    A test that forgets to pass its private server's URL must fail, not
    quietly write to the shared Redis (which the defaults would reach).
    """
    nowhere = "redis://127.0.0.1:1/0"
    saved = {name: os.environ.get(name) for name in ("JOBMASTER_REDIS_URL", "REDIS_URL")}
    os.environ["JOBMASTER_REDIS_URL"] = os.environ["REDIS_URL"] = nowhere
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@pytest.fixture(autouse=True)
def _no_thread_left_behind() -> Iterator[None]:
    """Fail the test that leaves one of jobmaster's threads running.

    Every flusher of every IOCore a test built ran for good: ~94 of them by
    the time tests/unit/test_fork_hygiene.py ran, which then skipped (it
    needs a process with no other thread) in every full run. A leak is a bug
    in the test or in the code, and it fails where it happens.
    """
    before = {thread.ident for thread in threading.enumerate()}
    yield

    def left() -> list[threading.Thread]:
        return [
            t
            for t in threading.enumerate()
            if t.name.startswith("jobmaster-") and t.ident not in before and t.is_alive()
        ]

    deadline = time.monotonic() + THREADS_END_WITHIN
    while left() and time.monotonic() < deadline:
        time.sleep(0.02)
    if leaked := left():
        pytest.fail(
            f"left running after the test: {sorted(t.name for t in leaked)} "
            "(stop what started them: a worker's stop(), an IOCore's close()...)"
        )


@pytest.fixture
def free_port() -> int:
    return helpers.free_port()


@pytest.fixture
def wait_until() -> Callable[..., None]:
    return helpers.wait_until


@contextlib.contextmanager
def _server(directory: Path) -> Iterator[RedisServerProcess]:
    """A private redis-server on a free port, with append-only persistence, stopped after."""
    server = RedisServerProcess(directory, port=helpers.free_port(), appendonly=True)
    _assert_private(server.url)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServerProcess]:
    """One server for the session: starting one per test would dominate the run time."""
    with _server(tmp_path_factory.mktemp("redis-session")) as server:
        yield server


@pytest.fixture
def redis_url(redis_server: RedisServerProcess) -> Iterator[str]:
    """The session server, emptied: no test sees another test's keys."""
    if not redis_server.is_running():  # a test killed it; later tests still need it
        redis_server.start()
    url = _assert_private(redis_server.url)
    with redis_server.client() as conn:
        conn.flushall()
    yield url


@pytest.fixture
def private_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServerProcess]:
    """A fresh server this test may stop, start or kill (outage tests)."""
    with _server(tmp_path_factory.mktemp("redis-private")) as server:
        yield server


@pytest.fixture
def short_tmp_dir() -> Iterator[Path]:
    """A short directory under /tmp: pytest's tmp paths can exceed the unix socket limit."""
    path = Path(tempfile.mkdtemp(prefix="jm", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
