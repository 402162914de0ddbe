"""Fuzzing every value the master and the children read from Redis besides payloads.

SPEC §8: every value read from Redis may be corrupt or forged (a counter
that is not a number, a heartbeat with absurd fields, a non-finite score, a
100 MB entry, a flood of control entries): no process or thread fails on
one, and no job is lost. test_fuzz_payloads.py covers the payloads; here
hypothesis writes arbitrary values everywhere else a master or a child
reads: counters, other processes' heartbeats (as hashes of any fields, or as
keys of the wrong type), control lists, the sets of queue, process and
master names, sorted-set scores, the scan lease and the recovery's silent
marks, an oversized entry at a queue's tail. Then the duties run over them,
called directly: the master's start-up orphan scan, its Redis thread's pass (control and heartbeat,
requeue of a dead child, periodic tick, history sample, masters pruned,
queue sizes for /metrics) and a child's (heartbeat step with its orphan
scan, scheduled poller step).

Each must end with: no exception out of a duty, no duty's "unexpected
error" logged (the Redis thread catches everything, so a log line is how a
bug shows), each of four real jobs (waiting in a queue, in the dead
child's in-progress list, in the child's own, in a lost host's) in exactly
one place, the child's still its own, and the lost host's recovered when
the child's scan ran, whatever the other heartbeats hold.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
import redis
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from jobmaster import payload as wire
from jobmaster.config import Config, PeriodicEntry
from jobmaster.deadset import DeadSetLimits
from jobmaster.identity import Identity
from jobmaster.keys import Keys
from jobmaster.metrics.queues import QueueWatch
from jobmaster.orphans import recover_orphans
from jobmaster.periodic import PeriodicTicker
from jobmaster.recovery import Recovery
from jobmaster.scripts import Scripts
from jobmaster.supervisor.duties import DeadChild, MasterState, RedisDuties
from jobmaster.supervisor.history import HistoryRecorder
from jobmaster.worker.context import WorkerContext
from jobmaster.worker.heartbeat import Heartbeat
from jobmaster.worker.poller import ScheduledPoller
from tests import jobs  # noqa: F401 - registers tests.record

pytestmark = pytest.mark.timeout(120)
K = Keys()
MASTER = "fuzzhost:1:0000master"
DEAD_CHILD = "fuzzhost:2:000dead0"
OTHER = "otherhost:3:00000000"  # another process: its heartbeat is what the fuzz writes
ORPHAN = "losthost:4:00000000"  # a process gone with its host: no heartbeat, a job
BIG = 2 * 1024 * 1024  # an oversized entry: big enough to notice, quick to write

values = st.one_of(
    st.binary(max_size=24),
    st.sampled_from([b"", b"nan", b"inf", b"-inf", b"1e400", b"-1", b"9" * 40, b"0x10", b"\xff"]),
    st.integers().map(lambda n: str(n).encode()),
    st.floats().map(lambda f: repr(f).encode()),
)
names = st.one_of(
    st.binary(max_size=12),
    st.text(st.characters(exclude_categories=("Cs",)), max_size=12).map(str.encode),
    st.sampled_from([OTHER.encode(), MASTER.encode(), DEAD_CHILD.encode(), b"default"]),
)
scores = st.one_of(st.floats(allow_nan=False), st.sampled_from([math.inf, -math.inf, 0.0]))
HEARTBEAT_FIELDS = [
    "identity", "locus", "pid", "pid_started", "master_pid", "master_started",
    "busy", "beat_at", "started_at", "quiet", "role", "concurrency",
]  # fmt: skip
heartbeats = st.one_of(
    st.dictionaries(st.sampled_from(HEARTBEAT_FIELDS), values, max_size=6),
    st.sampled_from(["string", "list", "zset"]),  # a key of the wrong type
)


@dataclass
class World:
    """What one example writes into Redis, besides the three real jobs."""

    counters: dict[str, bytes]
    other_heartbeat: dict[str, bytes] | str
    control: list[bytes] | str  # entries, or a wrong type
    child_control: list[bytes] | str
    members: dict[str, list[bytes]]  # set key -> members
    zsets: dict[str, list[tuple[bytes, float]]]
    lease: bytes | None
    periodic: dict[str, bytes]  # periodic:last and periodic:state of the entry "tick"
    silent: bytes | None  # the other process's silent mark
    oversized: bool


worlds = st.builds(
    World,
    counters=st.dictionaries(
        st.sampled_from(["processed", "failed", "processed:2026-12-01"]), values, max_size=3
    ),
    other_heartbeat=heartbeats,
    control=st.one_of(st.lists(values, max_size=5), st.sampled_from(["string", "zset"])),
    child_control=st.one_of(st.lists(values, max_size=5), st.just("string")),
    members=st.dictionaries(
        st.sampled_from([K.queues, K.paused, K.processes, K.masters]),
        st.lists(names, min_size=1, max_size=5),
        max_size=4,
    ),
    zsets=st.dictionaries(
        st.sampled_from([K.scheduled, K.retry, K.dead]),
        st.lists(st.tuples(values, scores), min_size=1, max_size=4),
        max_size=3,
    ),
    lease=st.none() | values,
    periodic=st.dictionaries(st.sampled_from(["last", "state"]), values, max_size=2),
    silent=st.none() | values,
    oversized=st.booleans(),
)


def write_wrong_type(store: redis.Redis, key: str, kind: str) -> None:
    if kind == "string":
        store.set(key, "x")
    elif kind == "list":
        store.rpush(key, "x")
    else:
        store.zadd(key, {"x": 1.0})


def write(store: redis.Redis, world: World, child: str) -> None:
    for name, value in world.counters.items():
        store.set(K.stat(name), value)
    write_processes(store, world, child)
    for key, members in world.members.items():
        store.sadd(key, *members)
    for key, scored in world.zsets.items():
        store.zadd(key, dict(scored))
    if world.oversized:
        store.rpush(K.queue("default"), b"{" + b" " * BIG)  # the oldest entry of a queue
        if store.type(K.control(MASTER)) in (b"list", b"none"):
            store.rpush(K.control(MASTER), b"stop" * (BIG // 4))


def write_processes(store: redis.Redis, world: World, child: str) -> None:
    """Another process's heartbeat, control lists, the scan lease, a silent mark."""
    if isinstance(world.other_heartbeat, dict):
        if world.other_heartbeat:
            store.hset(K.heartbeat(OTHER), mapping=world.other_heartbeat)  # type: ignore[arg-type]
    else:
        write_wrong_type(store, K.heartbeat(OTHER), world.other_heartbeat)
    store.sadd(K.processes, OTHER)
    for key, entries in (
        (K.control(MASTER), world.control),
        (K.control(child), world.child_control),
    ):
        if isinstance(entries, str):
            write_wrong_type(store, key, entries)
        elif entries:
            store.rpush(key, *entries)
    for kind, value in world.periodic.items():
        key = K.periodic_last if kind == "last" else K.periodic_state
        store.hset(key, "tick", value)
    if world.lease is not None:
        store.set(K.orphan_scan_lease, world.lease)
    if world.silent is not None:
        store.set(K.silent(OTHER), world.silent, px=1000)


def job(name: str) -> bytes:
    return wire.encode({**wire.build("tests.record", [name], {}, queue="default"), "jid": name})


def places(store: redis.Redis, jid: str) -> list[str]:
    """Every list and sorted set holding the job (an entry with its jid)."""
    found = []
    for key in store.scan_iter(count=1000):
        kind = store.type(key)
        if kind == b"list":
            entries = store.lrange(key, 0, -1)
        elif kind == b"zset":
            entries = store.zrange(key, 0, -1)
        else:
            continue
        found += [key.decode(errors="replace") for raw in entries if jid_of(raw) == jid]
    return found


def jid_of(raw: bytes) -> object:
    try:
        entry = json.loads(raw)
    except ValueError:
        return None
    return entry.get("jid") if isinstance(entry, dict) else None


@pytest.fixture
def parts(
    make_config: Callable[..., Config],
) -> Iterator[tuple[RedisDuties, Heartbeat, ScheduledPoller]]:
    config = make_config(heartbeat_ttl=2, status_ttl=60)
    client = redis.Redis.from_url(config.redis_url)
    entry = PeriodicEntry("tick", "tests.record", every=1)
    duties = RedisDuties(
        config=config,
        client=client,
        keys=K,
        identity=MASTER,
        recovery=Recovery(client, K, Scripts(client), DeadSetLimits(100, 30), 60),
        ticker=PeriodicTicker(client, K, [entry], status_ttl=60),
        history=HistoryRecorder(client, K),
        queue_watch=QueueWatch(client, config.namespace, config.queue_names),
    )
    ctx = WorkerContext.create(config, Identity(hostname="fuzzhost", nonce="0000c0de"))
    scan = lambda: recover_orphans(ctx.recovery, ctx.name)  # noqa: E731 - the scanner's work, inline
    heartbeat = Heartbeat(ctx, dict, lambda command: None, threading.Event(), scan)
    ctx.recovery.silent_grace = 0.0  # one scan recovers (the fence: test_orphan_scan.py)
    poller = ScheduledPoller(ctx, threading.Event())
    yield duties, heartbeat, poller
    client.close()
    ctx.redis.close()


def test_any_value_where_the_master_and_children_read_crashes_nothing_and_loses_no_job(
    parts: tuple[RedisDuties, Heartbeat, ScheduledPoller],
    store: redis.Redis,
    caplog: pytest.LogCaptureFixture,
) -> None:
    duties, heartbeat, poller = parts
    child = heartbeat.ctx.name

    @settings(
        max_examples=60,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(world=worlds)
    @example(
        world=World(
            counters={"processed": b"x", "failed": b"inf"},
            other_heartbeat={"pid": b"9" * 30, "locus": b"x", "busy": b"nan"},
            control=[b"stop\n2026 forged line", b"x" * 100],
            child_control="string",
            members={K.queues: [b"\xff", b"default"], K.masters: [b"\xfe gone"]},
            zsets={K.scheduled: [(b"{}", -math.inf)], K.retry: [(b"\xff", math.inf)]},
            lease=b"\xff",
            periodic={"last": b"inf", "state": b"\xff"},
            silent=b"1",
            oversized=True,
        )
    )
    def check(world: World) -> None:
        store.flushdb()
        duties._next_control = duties._next_heartbeat = duties._next_prune = 0.0
        duties.history.last_minute = None
        if duties.queue_watch is not None:
            duties.queue_watch._read_at = -math.inf
        store.rpush(K.queue("default"), job("waiting"))
        store.rpush(K.inprogress(DEAD_CHILD), job("dead-childs"))
        store.rpush(K.inprogress(child), job("childs-own"))
        store.rpush(K.inprogress(ORPHAN), job("orphans"))
        store.sadd(K.processes, DEAD_CHILD, child, ORPHAN)
        heartbeat.beat()  # the child lives: registered and beating before the fuzz
        write(store, world, child)
        caplog.clear()
        duties.publish(MasterState(1, False, False, (child,)))
        duties.requeue(DeadChild(DEAD_CHILD, "child 2 (pid 2)", None, True, time.monotonic()))
        with caplog.at_level(logging.INFO):
            recover_orphans(duties.recovery, MASTER)  # the master's scan before it forks
            duties.run_pass(time.monotonic())
            heartbeat._next_orphan_scan = 0.0
            with contextlib.suppress(redis.RedisError):  # logged by its loop, tried again
                heartbeat.step()
            poller.step()
            duties.take_commands()
        bugs = [
            r.getMessage()
            for r in caplog.records
            if "unexpected error" in r.getMessage() or r.levelno >= logging.CRITICAL
        ]
        assert not bugs, bugs
        assert duties.pending() == ()  # the dead child's list was requeued
        assert all(len(r.getMessage()) < 2000 for r in caplog.records)
        for jid in ("waiting", "dead-childs", "childs-own", "orphans"):
            where = places(store, jid)
            assert len(where) == 1, (jid, where)
        assert places(store, "childs-own") == [K.inprogress(child)]  # a live child keeps its job
        if world.lease is None:  # the child held the scan lease: the orphan was recovered
            assert places(store, "orphans") != [K.inprogress(ORPHAN)]

    check()
