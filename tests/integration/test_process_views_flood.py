"""``jobmaster ps``, the Busy page and ``ProcessSet`` read the process sets in pages.

SPEC §8: nothing reads a shared set whole when it need not. The views read
the masters and processes sets with SMEMBERS and then a heartbeat per
member: 100,000 forged members made each view 100,000 round-trip commands
and the whole set in memory. Now a view reads pages (SSCAN), at most
``EXAMINED`` members a set and ``LISTED`` live processes, passes over
members that are no identity without a round trip, and says what it
skipped. Measured in Redis's own command counts, not wall-clock.
"""

from __future__ import annotations

import json
import time

import pytest
import redis
from click.testing import CliRunner

from jobmaster.api.processes import EXAMINED, LISTED, PAGE, ProcessSet, identity_of
from jobmaster.cli import main
from jobmaster.keys import Keys

pytestmark = pytest.mark.timeout(60)
K = Keys()
FLOOD = 100_000
MASTER = "realhost:42:c0ffee00"


def flood(store: redis.Redis) -> None:
    """Half junk (no identity: bytes, blanks, braces), half well-formed fakes."""
    pipe = store.pipeline(transaction=False)
    for start in range(0, FLOOD, 5000):
        members: list[bytes] = []
        for n in range(start, start + 5000):
            if n % 2:
                members.append(f"forged:{n}:ab".encode())
            else:
                members.append(b"\xff junk {%d}" % n)
        pipe.sadd(K.processes, *members)
    pipe.execute()


def live_master(store: redis.Redis) -> None:
    store.sadd(K.masters, MASTER)
    store.hset(
        K.heartbeat(MASTER),
        mapping={"role": "master", "hostname": "realhost", "pid": 42, "beat_at": time.time()},
    )


def commands(store: redis.Redis) -> dict[str, int]:
    stats = store.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}


def test_identities_are_told_from_junk_without_redis() -> None:
    assert identity_of(b"web-1:4242:1a2b3c4d") == "web-1:4242:1a2b3c4d"
    assert identity_of("host:1:master") == "host:1:master"  # what the tests' identities look like
    for junk in (b"\xff", b"a b:1:c", b"{x}:1:c", b"h:pid:n", b"h:1", b"x" * 2000, b""):
        assert identity_of(junk) is None


def test_a_flood_of_forged_members_costs_a_bounded_number_of_commands(
    store: redis.Redis,
) -> None:
    flood(store)
    live_master(store)
    store.config_resetstat()
    processes = ProcessSet(store).list()
    used = commands(store)
    assert [p.identity for p in processes] == [MASTER]
    assert used.get("smembers", 0) == 0
    # Each set read to EXAMINED members at most (SSCAN's COUNT is a hint: a
    # page may hold a few more), a heartbeat read only for an identity.
    assert used.get("sscan", 0) <= 2 + 2 * (EXAMINED // PAGE)
    assert used.get("hgetall", 0) <= (EXAMINED + PAGE) // 2 + 1
    listing = ProcessSet(store).listing()
    assert listing.examined <= EXAMINED + PAGE + 1
    assert listing.strangers > 0 and listing.silent > 0
    assert listing.unread >= FLOOD - EXAMINED - PAGE
    notes = listing.notes()
    assert any("no identity: skipped" in note for note in notes)
    assert any(f"of {FLOOD + 1} member(s)" in note for note in notes)


def test_ps_and_the_busy_page_say_what_they_skipped(store: redis.Redis, redis_url: str) -> None:
    flood(store)
    live_master(store)
    store.config_resetstat()
    result = CliRunner().invoke(main, ["ps", "--redis-url", redis_url])
    assert result.exit_code == 0, result.output
    assert MASTER in result.stdout
    assert "not read" in result.stderr and "no identity: skipped" in result.stderr
    listed = CliRunner().invoke(main, ["ps", "--json", "--redis-url", redis_url])
    assert [p["identity"] for p in json.loads(listed.stdout)] == [MASTER]
    assert commands(store).get("hgetall", 0) <= 2 * (EXAMINED + PAGE)  # both runs


def test_a_view_lists_at_most_listed_live_processes(store: redis.Redis) -> None:
    pipe = store.pipeline(transaction=False)
    for n in range(LISTED + 50):
        identity = f"host:{n + 1}:live"
        pipe.sadd(K.processes, identity)
        pipe.hset(K.heartbeat(identity), mapping={"pid": n + 1, "beat_at": time.time()})
    pipe.execute()
    listing = ProcessSet(store).listing()
    assert len(listing.processes) == LISTED
    assert f"only the first {LISTED} live processes are shown" in listing.notes()


def test_prune_reads_in_pages_and_drops_junk_and_the_silent(store: redis.Redis) -> None:
    flood(store)
    live_master(store)
    store.config_resetstat()
    assert ProcessSet(store).prune() == FLOOD
    assert commands(store).get("smembers", 0) == 0
    assert store.scard(K.processes) == 0
    assert store.smembers(K.masters) == {MASTER.encode()}


def test_the_busy_page_lists_the_live_master_and_says_what_it_skipped(
    store: redis.Redis, redis_url: str
) -> None:
    from starlette.testclient import TestClient

    from jobmaster.config import load_config
    from jobmaster.web import create_app

    flood(store)
    live_master(store)
    store.config_resetstat()
    app = create_app(load_config(None, {"redis_url": redis_url}))
    with TestClient(app, base_url="http://localhost") as web:
        page = web.get("/busy")
    assert page.status_code == 200
    assert MASTER in page.text
    assert "no identity: skipped" in page.text and "not read" in page.text
    assert commands(store).get("hgetall", 0) <= EXAMINED + PAGE


def test_the_front_page_numbers_read_the_process_sets_in_pages(store: redis.Redis) -> None:
    from jobmaster.api import Stats

    flood(store)
    live_master(store)
    store.config_resetstat()
    stats = Stats(store)
    assert (stats.masters, stats.processes, stats.busy) == (1, 0, 0)
    used = commands(store)
    assert used.get("smembers", 0) <= 2  # the queue names and the paused set only
    assert used.get("hget", 0) + used.get("exists", 0) == 0
    assert used.get("hgetall", 0) <= (EXAMINED + PAGE) // 2 + 1
