"""A real master, producers and ``jobmaster check`` run as the documented ACL user.

The user is created from the ``ACL SETUSER`` line of docs/redis-deployment.md (tests/acl.py),
and the default user is switched off, so anything that connects otherwise
fails. The run covers fetch and acknowledgement, the scheduled and retry
pollers, a unique lock, a periodic entry, heartbeats, a child killed under a
job (requeue, poison pill burial) and a graceful stop; then ``ACL LOG`` must
be empty: not one command refused, not one failed login.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from jobmaster.client import Client
from jobmaster.embedded import RedisServerProcess
from jobmaster.keys import Keys
from tests import acl
from tests.helpers import wait_until
from tests.process.conftest import ROOT, JobmasterProcess, jobmaster_command, wait_for_worker

pytestmark = [pytest.mark.process, pytest.mark.timeout(90)]
K = Keys()
PASSWORD = "jm-acl-" + "5e1f0c"  # a throwaway server's
HARNESS_PASSWORD = "harness-" + "77d0a2"


@dataclass
class Users:
    jobmaster_url: str  # the documented user
    harness_url: str  # the test's own user, allowed everything
    harness: redis.Redis


@pytest.fixture
def users(private_redis: RedisServerProcess) -> Iterator[Users]:
    port = private_redis.port
    with private_redis.client() as admin:
        acl.create_user(admin, "jobmaster", PASSWORD)
        admin.execute_command(
            "ACL", "SETUSER", "harness", "on", f">{HARNESS_PASSWORD}", "~*", "&*", "+@all"
        )
    harness_url = f"redis://harness:{HARNESS_PASSWORD}@127.0.0.1:{port}/0"
    harness = redis.Redis.from_url(harness_url)
    harness.execute_command("ACL", "SETUSER", "default", "off")
    harness.acl_log_reset()
    yield Users(f"redis://jobmaster:{PASSWORD}@127.0.0.1:{port}/0", harness_url, harness)
    harness.execute_command("ACL", "SETUSER", "default", "on")  # for the fixture's SHUTDOWN
    harness.close()


def cli(*args: str, url: str) -> str:
    """``jobmaster ARGS`` as the documented user (the environment names no other URL)."""
    done = subprocess.run(
        [jobmaster_command(), *args, "--redis-url", url],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_jobmaster_runs_end_to_end_as_the_readme_acl_user(
    users: Users,
    run_jobmaster: Callable[..., JobmasterProcess],
    write_config: Callable[..., Path],
) -> None:
    store = users.harness
    config = write_config(
        redis_url=users.jobmaster_url,
        processes=1,
        max_crashes=1,
        heartbeat_ttl=5,
        periodic={"tick": {"every": 1, "job": "tests.record", "args": ["periodic"]}},
    )
    # The test jobs record their runs through JOBMASTER_REDIS_URL, as the
    # harness user (their keys are the app's, outside the rule). The master
    # takes its own URL from --redis-url, which wins over that variable.
    master = run_jobmaster(
        "-c",
        str(config),
        "--redis-url",
        users.jobmaster_url,
        env={"JOBMASTER_REDIS_URL": users.harness_url},
    )
    wait_for_worker(store, master)

    producer = Client(users.jobmaster_url)
    jid = producer.push({"job": "tests.record", "args": ["now"]})
    assert jid is not None
    producer.push({"job": "tests.record", "args": ["later"], "at": time.time() + 0.5})
    producer.push({"job": "tests.flaky", "args": ["flaky", 1]})  # fails once: the retry set
    producer.push({"job": "tests.unique_exec", "args": ["unique"]})
    producer.push_bulk({"job": "tests.record", "args": [["bulk1"], ["bulk2"]]})
    assert cli("enqueue", "tests.record", '"cli"', url=users.jobmaster_url)

    markers = {b"now", b"later", b"flaky", b"unique", b"bulk1", b"bulk2", b"cli", b"periodic"}
    try:
        wait_until(lambda: markers <= store.smembers("test:done"), timeout=30)
        # Alone, so that no other job is in the child it kills (max_crashes 1).
        producer.push({"job": "tests.kill_self", "args": ["pill"]})
        wait_until(
            lambda: b'"tests.kill_self"' in b"".join(store.zrange(K.dead, 0, -1)), timeout=20
        )
    except AssertionError:
        raise AssertionError(
            f"not run: {sorted(markers - store.smembers('test:done'))}; "
            f"dead: {store.zrange(K.dead, 0, -1)}; refused: {acl.acl_log(store)}\n{master.log()}"
        ) from None
    checked = cli("check", "-c", str(config), url=users.jobmaster_url)
    assert checked.endswith("ok\n") and "redis://jobmaster:***@" in checked
    assert "complete" in cli("status", jid, url=users.jobmaster_url)
    assert "tick: tests.record" in cli(
        "periodic", "list", "-c", str(config), url=users.jobmaster_url
    )
    master.signal(signal.SIGTERM)
    assert master.wait(timeout=30) == 0, master.log()

    assert acl.acl_log(store) == [], master.log()
    assert "NOPERM" not in master.log() and "permission" not in master.log().lower()
    outside = [key for key in store.scan_iter() if not key.startswith(K.prefix.encode())]
    assert all(key.startswith(b"test:") for key in outside), outside  # only the jobs' own keys
