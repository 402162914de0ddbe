"""The real master and its child when Redis is replaced by an empty one."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from jobmaster import exitcodes
from jobmaster.client import Client
from jobmaster.embedded import RedisServerProcess
from jobmaster.keys import Keys
from tests.helpers import wait_until
from tests.process.conftest import JobmasterProcess
from tests.redis_trouble import replace_with_an_empty_one

K = Keys()


def identities(store: redis.Redis, role: str) -> list[str]:
    """Identities of the live heartbeats of masters (``role="master"``) or children."""
    found = []
    for key in store.scan_iter(match=K.heartbeat("*")):
        if (store.hget(key, "role") == b"master") == (role == "master"):
            found.append(key.decode().rsplit("heartbeat:", 1)[1])
    return found


def registered(store: redis.Redis) -> bool:
    """A master and a child have a heartbeat and are in their registration sets."""
    masters, children = identities(store, "master"), identities(store, "child")
    return bool(
        masters
        and children
        and store.sismember(K.masters, masters[0])
        and store.sismember(K.processes, children[0])
    )


@pytest.mark.timeout(60)
def test_master_and_child_carry_on_when_redis_is_replaced_by_an_empty_one(
    private_redis: RedisServerProcess,
    write_config: Callable[..., Path],
    run_jobmaster: Callable[..., JobmasterProcess],
) -> None:
    url = private_redis.url
    store = private_redis.client()
    config = write_config(redis_url=url, processes=1, concurrency=2, heartbeat_ttl=3)
    master = run_jobmaster("-c", str(config), env={"JOBMASTER_REDIS_URL": url})
    Client(url).push({"job": "tests.record", "args": ["before"]})
    wait_until(lambda: store.sismember("test:done", "before"), timeout=20, message="first job")
    wait_until(lambda: registered(store), timeout=10, message="registered before")
    [master_identity] = identities(store, "master")

    replace_with_an_empty_one(private_redis)
    assert not store.exists("test:runs")  # the old data is gone

    # The child fetches new jobs (its scripts reloaded on NOSCRIPT) ...
    Client(url).push({"job": "tests.record", "args": ["after"]})
    wait_until(lambda: store.sismember("test:done", "after"), timeout=15, message="job after")
    # ... both processes register again (the master beats every 5 s) ...
    wait_until(lambda: registered(store), timeout=10, message="registered after")
    assert identities(store, "master") == [master_identity]
    # ... and the master reads its remote control list on the new server.
    store.rpush(K.control(master_identity), "stop")
    assert master.wait(timeout=20) == exitcodes.REMOTE_STOP, master.log()
    log = master.log()
    assert log.count("was replaced or emptied (run_id ") == 1, log
    assert "Traceback" not in log, log
    assert store.hget("test:runs", "after") == b"1"
