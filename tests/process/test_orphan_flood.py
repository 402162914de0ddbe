"""A flood of forged members of the processes set (issue 22 hole 9).

The orphan scan read the whole set and made about two round trips a
member, on the master's start-up path and in a child's heartbeat thread:
with 100,000 forged members the first fork came 21 s after launch, and a
child's heartbeat key vanished for about 15 s while it scanned (long enough
for another host to recover its running jobs: a double run). Scans now go a
page at a time off those paths (orphans.py): the first fork and every beat
come while the flood is still mostly unscanned, and it is scanned anyway.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from jobmaster.keys import Keys
from tests.helpers import holds_for, wait_until
from tests.process.conftest import JobmasterProcess

pytestmark = [pytest.mark.process, pytest.mark.timeout(180)]
K = Keys()
FLOOD = 100_000


def forge(store: redis.Redis) -> None:
    for start in range(0, FLOOD, 10_000):
        members = [f"forged{n}:1:{n:08x}" for n in range(start, start + 10_000)]
        store.sadd(K.processes, *members)


def beating_child(store: redis.Redis) -> str | None:
    """A child of the master whose heartbeat key exists (the master's says which)."""
    for master in store.smembers(K.masters):
        children = store.hget(K.heartbeat(master.decode()), "children") or b""
        for child in children.decode().split(","):
            if child and store.exists(K.heartbeat(child)):
                return child
    return None


def test_a_flood_of_forged_processes_delays_neither_the_first_fork_nor_a_heartbeat(
    run_jobmaster: Callable[..., JobmasterProcess],
    write_config: Callable[..., Path],
    store: redis.Redis,
) -> None:
    forge(store)
    before = store.dbsize()  # each member the scans have judged gets a silent mark
    # heartbeat_ttl 2: a child beats every 0.7 s and scans every second.
    master = run_jobmaster("-c", str(write_config(processes=1, heartbeat_ttl=2)))
    found: list[str] = []

    def forked_and_beating() -> bool:
        assert master.popen.poll() is None, master.log()
        child = beating_child(store)
        found.extend([child] if child else [])
        return child is not None

    wait_until(forked_and_beating, timeout=60, message="a child forked and beating")
    judged = store.dbsize() - before
    assert judged < FLOOD // 2, f"the first child beat only once {judged} members were judged"

    # Its own scans (a lease a second) never hold its heartbeat up: a lapse
    # of its 2 s TTL would let another host recover its jobs.
    child = found[0]
    holds_for(8.0, lambda: store.exists(K.heartbeat(child)), "the child's heartbeat lapsed")
    # And the flood is scanned all the same: marked, then dropped a grace later.
    wait_until(
        lambda: store.scard(K.processes) < FLOOD // 2,
        timeout=90,
        message="the forged members dropped by the scans",
    )
    assert store.exists(K.heartbeat(child))
