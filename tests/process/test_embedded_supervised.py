"""The embedded Redis supervised like a child (issue 22 hole 10).

The master's loop restarted a dead embedded server itself (blocking the loop
up to 30 s), and a restart that failed killed the master: a damaged AOF
manifest made it exit rc=1 within 0.1 s of the server's SIGKILL. Now a
thread of its own restarts it, with backoff (embedded_watch.py).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from jobmaster.client import Client
from jobmaster.keys import Keys
from tests.helpers import wait_until
from tests.process.conftest import JobmasterProcess

pytestmark = [pytest.mark.process, pytest.mark.timeout(120)]
K = Keys()
NO_URL = {"JOBMASTER_REDIS_URL": "", "REDIS_URL": ""}  # the file's "embedded"


def start(
    run: Callable[..., JobmasterProcess], write: Callable[..., Path], data_dir: Path
) -> tuple[JobmasterProcess, redis.Redis]:
    config = write(redis_url="embedded", data_dir=str(data_dir), processes=1)
    master = run("-c", str(config), env=NO_URL)
    wait_until(lambda: "started: queues" in master.log(), timeout=30, message="worker up")
    return master, redis.Redis(unix_socket_path=str(data_dir / "redis.sock"))


def server_pid(store: redis.Redis) -> int | None:
    try:
        return int(store.info("server")["process_id"])
    except (redis.RedisError, OSError):
        return None


def processed(store: redis.Redis) -> int:
    try:
        return int(store.get(K.stat("processed")) or 0)
    except (redis.RedisError, OSError):
        return -1


def test_a_sigkilled_embedded_redis_comes_back_and_jobs_go_on(
    run_jobmaster: Callable[..., JobmasterProcess],
    write_config: Callable[..., Path],
    short_tmp_dir: Path,
) -> None:
    master, store = start(run_jobmaster, write_config, short_tmp_dir)
    producer = Client("embedded", data_dir=short_tmp_dir)
    producer.push({"job": "tests.count", "args": [1]})
    wait_until(lambda: processed(store) == 1, timeout=15, message="the first job ran")
    killed = server_pid(store)
    assert killed is not None
    os.kill(killed, signal.SIGKILL)

    wait_until(
        lambda: server_pid(store) not in (None, killed), timeout=30, message="the server back"
    )
    producer.push({"job": "tests.count", "args": [2]})
    wait_until(lambda: processed(store) == 2, timeout=30, message="a job after the restart")
    assert master.popen.poll() is None
    assert "Embedded redis-server died" in master.log()


def test_a_restart_that_fails_is_retried_with_backoff_and_the_master_stays_up(
    run_jobmaster: Callable[..., JobmasterProcess],
    write_config: Callable[..., Path],
    short_tmp_dir: Path,
) -> None:
    master, store = start(run_jobmaster, write_config, short_tmp_dir)
    [manifest] = (short_tmp_dir / "appendonlydir").glob("*.manifest")
    intact = manifest.read_bytes()
    manifest.write_bytes(b"this is no manifest\n")  # read only when the server starts
    killed = server_pid(store)
    assert killed is not None
    os.kill(killed, signal.SIGKILL)

    def failures() -> int:
        return master.log().count("embedded redis-server could not be restarted")

    wait_until(lambda: failures() >= 3, timeout=40, message="three failed restarts")
    log = master.log()
    assert master.popen.poll() is None, log  # the master stays up
    # Backing off (it died soon after its start: 1 s, then doubled), not a loop.
    assert "trying again in 2s" in log and "trying again in 4s" in log, log
    assert "Invalid AOF manifest" in log  # why, from the server's own log

    manifest.write_bytes(intact)  # repaired: the next try brings it back
    wait_until(lambda: server_pid(store) is not None, timeout=40, message="the server back")
    producer = Client("embedded", data_dir=short_tmp_dir)
    producer.push({"job": "tests.count", "args": [1]})
    wait_until(lambda: processed(store) >= 1, timeout=30, message="jobs go on")
    assert master.popen.poll() is None
