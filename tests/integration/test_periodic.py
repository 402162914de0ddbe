"""Periodic entries on a real private Redis: one enqueue per slot across masters.

Time is passed to ``tick`` explicitly: ten simulated seconds take no real time.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from jobmaster import exitcodes
from jobmaster import payload as wire
from jobmaster.client import Client
from jobmaster.config import Config, PeriodicEntry, load_config
from jobmaster.connection import connect
from jobmaster.embedded import RedisServerProcess
from jobmaster.keys import Keys
from jobmaster.periodic import (
    PeriodicTicker,
    UnknownPeriodicEntry,
    disable,
    enable,
    list_periodic,
)
from tests.helpers import wait_until

K = Keys()
T0 = 1_700_000_000.0  # a whole second: slots of `every = 1` fall on it


def entry(**options: Any) -> PeriodicEntry:
    values: dict[str, Any] = {"name": "tick", "job": "tests.record", "every": 1, "args": ["t"]}
    return PeriodicEntry(**{**values, **options})


def master(url: str, *entries: PeriodicEntry) -> PeriodicTicker:
    """A ticker as a master builds it (its own connection, no command retries)."""
    return PeriodicTicker(connect(url, retry_commands=False), K, entries)


def queued(store: redis.Redis, queue: str = "default") -> list[dict[str, Any]]:
    """The payloads waiting in ``queue``, oldest first."""
    return [wire.decode(raw) for raw in reversed(store.lrange(K.queue(queue), 0, -1))]


def config_with(url: str, *entries: PeriodicEntry) -> Config:
    config = load_config(None, {"redis_url": url}, env={})
    return dataclasses.replace(config, periodic={e.name: e for e in entries})


@pytest.fixture
def store(redis_url: str) -> redis.Redis:
    return redis.Redis.from_url(redis_url)


def test_two_masters_enqueue_each_slot_once(redis_url: str, store: redis.Redis) -> None:
    first, second = master(redis_url, entry()), master(redis_url, entry())
    enqueued: list[str] = []
    # Ten seconds of ticks from both, several per second, at different phases.
    for step in range(41):
        now = T0 + step * 0.25
        enqueued += first.tick(now)
        enqueued += second.tick(now + 0.1)
    jobs = queued(store)
    slots = [job["periodic_slot"] for job in jobs]
    assert slots == [int(T0) + n for n in range(11)]  # T0..T0+10, each once, in order
    assert len(enqueued) == 11
    assert all(job["periodic"] == "tick" and job["args"] == ["t"] for job in jobs)
    assert all(job["job"] == "tests.record" and job["queue"] == "default" for job in jobs)
    assert len({job["jid"] for job in jobs}) == 11
    assert store.hget(K.periodic_last, "tick") == str(int(T0) + 10).encode()
    assert store.smembers(K.queues) == {b"default"}


def test_the_claim_is_atomic_when_masters_read_at_once(redis_url: str, store: redis.Redis) -> None:
    # Both masters read "nothing enqueued yet" before either pushes: the
    # script, not that read, decides who enqueues each slot.
    first, second = master(redis_url, entry()), master(redis_url, entry())
    tick = entry()
    assert first._enqueue(tick, [T0, T0 + 1], T0 + 1) == ["tick", "tick"]
    assert second._enqueue(tick, [T0, T0 + 1], T0 + 1) == []
    assert second._enqueue(tick, [T0, T0 + 1, T0 + 2], T0 + 2) == ["tick"]
    assert [job["periodic_slot"] for job in queued(store)] == [int(T0) + n for n in range(3)]


def test_the_push_wakes_the_queue(redis_url: str, store: redis.Redis) -> None:
    pubsub = store.pubsub()  # type: ignore[no-untyped-call]
    pubsub.subscribe(K.wakeup_channel("low"))
    assert pubsub.get_message(timeout=5)["type"] == "subscribe"
    assert master(redis_url, entry(queue="low")).tick(T0) == ["tick"]
    message = pubsub.get_message(timeout=5)
    assert message is not None and message["data"] == b"1"
    pubsub.close()


def test_a_disabled_entry_enqueues_nothing(redis_url: str, store: redis.Redis) -> None:
    off = entry(name="off", enabled=False)
    ticker = master(redis_url, off, entry())
    assert ticker.tick(T0) == ["tick"]
    config = config_with(redis_url, off, entry())
    disable("tick", config)
    assert ticker.tick(T0 + 1) == []
    assert [job["periodic_slot"] for job in queued(store)] == [int(T0)]
    enable("off", config)  # a runtime enable wins over the config
    assert ticker.tick(T0 + 2) == ["off"]


def test_catch_up_after_every_master_was_down(redis_url: str, store: redis.Redis) -> None:
    hourly = entry(every=3600, catch_up=True)
    start = 3600 * (T0 // 3600)
    assert master(redis_url, hourly).tick(start + 1) == ["tick"]
    # No master for three and a half hours; a new one starts.
    assert master(redis_url, hourly).tick(start + 3.5 * 3600) == ["tick"] * 3
    slots = [job["periodic_slot"] for job in queued(store)]
    assert slots == [start + n * 3600 for n in range(4)]


def test_without_catch_up_missed_slots_are_skipped(redis_url: str, store: redis.Redis) -> None:
    hourly = entry(every=3600)
    start = 3600 * (T0 // 3600)
    assert master(redis_url, hourly).tick(start + 1) == ["tick"]
    assert master(redis_url, hourly).tick(start + 3.5 * 3600) == []
    assert master(redis_url, hourly).tick(start + 4 * 3600 + 0.5) == ["tick"]
    assert [job["periodic_slot"] for job in queued(store)] == [start, start + 4 * 3600]


def test_catch_up_is_capped(
    redis_url: str, store: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    assert master(redis_url, entry(catch_up=True)).tick(T0) == ["tick"]
    with caplog.at_level(logging.WARNING, logger="jobmaster.periodic"):
        assert len(master(redis_url, entry(catch_up=True)).tick(T0 + 1000)) == 100
    assert "more than 100 slots due" in caplog.text
    slots = [job["periodic_slot"] for job in queued(store)]
    assert slots == [int(T0)] + [int(T0) + n for n in range(901, 1001)]


def test_a_redis_outage_is_logged_once_and_retried(
    private_redis: RedisServerProcess, caplog: pytest.LogCaptureFixture
) -> None:
    ticker = master(private_redis.url, entry())
    assert ticker.tick(T0) == ["tick"]
    private_redis.stop()
    with caplog.at_level(logging.INFO, logger="jobmaster.periodic"):
        assert ticker.tick(T0 + 1) == []
        assert ticker.tick(T0 + 2) == []
        private_redis.start()
        # The slots that came due during the outage were seen by a running master.
        assert ticker.tick(T0 + 3) == ["tick"] * 3
    warnings = [r for r in caplog.records if "Redis unavailable" in r.getMessage()]
    assert len(warnings) == 1
    assert "Redis reachable again" in caplog.text
    with private_redis.client() as conn:
        slots = [
            wire.decode(raw)["periodic_slot"] for raw in conn.lrange(K.queue("default"), 0, -1)
        ]
    assert sorted(slots) == [int(T0) + n for n in range(4)]


def test_list_enable_disable(redis_url: str) -> None:
    nightly = PeriodicEntry(name="nightly", job="app.nightly", cron="0 3 * * *", queue="low")
    config = config_with(redis_url, nightly, entry())
    assert master(redis_url, nightly, entry()).tick(T0) == ["tick"]
    rows = {row["name"]: row for row in list_periodic(config, now=T0 + 0.5)}
    assert rows["tick"] == {
        "name": "tick",
        "job": "tests.record",
        "schedule": "every 1s",
        "queue": "default",
        "enabled": True,
        "override": None,
        "catch_up": False,
        "last_run": T0,
        "next_run": T0 + 1,
    }
    assert rows["nightly"]["schedule"] == "cron 0 3 * * * (UTC)"
    assert rows["nightly"]["last_run"] is None
    disable("nightly", config)
    # A client without the config sees the entries the master registered.
    client = Client(redis_url)
    rows = {row["name"]: row for row in list_periodic(client)}
    assert set(rows) == {"nightly", "tick"}
    assert (rows["nightly"]["enabled"], rows["nightly"]["override"]) == (False, "disabled")
    assert rows["nightly"]["next_run"] is None
    enable("nightly", client)
    assert next(r for r in list_periodic(client) if r["name"] == "nightly")["enabled"]
    with pytest.raises(UnknownPeriodicEntry, match="no periodic entry named 'nope'"):
        disable("nope", client)
    with pytest.raises(UnknownPeriodicEntry):
        enable("nope", config)


def test_enabling_a_catch_up_entry_skips_the_disabled_time(
    redis_url: str, store: redis.Redis
) -> None:
    now = time.time()  # enable() reads the clock
    minutely = entry(every=60, catch_up=True)
    config = config_with(redis_url, minutely)
    store.hset(K.periodic_last, "tick", str(60 * int((now - 3600) // 60)))  # an hour ago
    disable("tick", config)
    enable("tick", config)
    master(redis_url, minutely).tick(time.time())
    assert len(queued(store)) <= 1  # not the hour's 60 slots: at most a fresh one


def test_the_periodic_command(redis_url: str, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from jobmaster.cli import main

    path = tmp_path / "jobmaster.toml"
    path.write_text(
        f'redis_url = "{redis_url}"\n[periodic.tick]\nevery = 60\njob = "tests.record"\n'
    )
    # The file names the Redis: the environment (which outranks it) must not.
    runner = CliRunner(env={"JOBMASTER_REDIS_URL": "", "REDIS_URL": ""})
    listed = runner.invoke(main, ["periodic", "list", "-c", str(path), "--json"])
    assert listed.exit_code == 0, listed.output
    assert [(r["name"], r["enabled"]) for r in json.loads(listed.output)] == [("tick", True)]
    disabled = runner.invoke(main, ["periodic", "disable", "tick", "-c", str(path)])
    assert (disabled.exit_code, disabled.output) == (0, "tick: disabled\n")
    text = runner.invoke(main, ["periodic", "list", "-c", str(path)])
    assert text.output.startswith(
        "tick: tests.record on default, every 60s, disabled (at run time)"
    )
    unknown = runner.invoke(main, ["periodic", "enable", "nope", "-c", str(path)])
    assert unknown.exit_code == exitcodes.NOT_FOUND
    assert unknown.output == "jobmaster: no periodic entry named 'nope' (known: tick)\n"


def test_a_unique_entry_skips_slots_while_its_last_run_is_queued_or_running(
    redis_url: str, store: redis.Redis, make_config: Any, running_worker: Any
) -> None:
    ticker = master(redis_url, entry(unique=True))
    assert ticker.tick(T0) == ["tick"]
    assert ticker.tick(T0 + 1) == []  # the T0 run has not run yet: this slot is skipped
    assert len(queued(store)) == 1
    running_worker(make_config())
    wait_until(lambda: store.sismember("test:done", "t"), timeout=10)
    wait_until(lambda: not store.keys(K.unique("*")), timeout=5, message="lock released")
    assert ticker.tick(T0 + 2) == ["tick"]  # done: the next slot runs again
    assert store.hget(K.periodic_last, "tick") == b"%d" % (T0 + 2)
