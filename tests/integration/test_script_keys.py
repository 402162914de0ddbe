"""Every key a Lua script touches is one it was given in KEYS.

Redis's rule for scripts (what Redis Cluster routes by, and checks): a key
built inside a script from a prefix works today only because every key of a
namespace shares its hash tag. This test drives every script of scripts.py
the way jobmaster calls it, against a real private Redis watched by MONITOR,
which shows each EVALSHA with its KEYS and then each command the script ran;
Redis itself (``COMMAND GETKEYS``) says which arguments of those commands are
keys. A script that touches a key it was not given fails here, and so does a
script added to scripts.py that no step below runs.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest
import redis

import jobmaster
from jobmaster import control
from jobmaster.api import DeadSet, Queue
from jobmaster.client import Client
from jobmaster.config import Config, PeriodicEntry
from jobmaster.deadset import DeadSetLimits
from jobmaster.keys import Keys
from jobmaster.metrics.queues import QueueWatch
from jobmaster.middleware.base import JobContext
from jobmaster.middleware.rate_limit import RateLimit
from jobmaster.orphans import recover_orphans
from jobmaster.periodic import PeriodicTicker
from jobmaster.poison import crash_triage
from jobmaster.recovery import Recovery
from jobmaster.scripts import GiveBack
from jobmaster.worker.context import WorkerContext
from jobmaster.worker.core import Call
from jobmaster.worker.executor import execute
from jobmaster.worker.fetch import Fetcher
from jobmaster.worker.outcome import finish_call, record
from tests import jobs
from tests.helpers import wait_until
from tests.integration.test_bury import unique_hooked

K = Keys()
END = "jobmaster-script-keys-end"
ARGUMENT = re.compile(rb'"((?:[^"\\]|\\.)*)"')
ESCAPES = {b"n": b"\n", b"r": b"\r", b"t": b"\t", b"a": b"\a", b"b": b"\b"}


def unquote(text: bytes) -> bytes:
    """One MONITOR argument as sent (Redis prints it with ``sdscatrepr``)."""
    out, i = bytearray(), 0
    while i < len(text):
        if text[i : i + 1] != b"\\":
            out += text[i : i + 1]
            i += 1
        elif text[i + 1 : i + 2] == b"x":
            out.append(int(text[i + 2 : i + 4], 16))
            i += 4
        else:
            out += ESCAPES.get(text[i + 1 : i + 2], text[i + 1 : i + 2])
            i += 2
    return bytes(out)


@dataclass
class Watched:
    """What MONITOR showed: (run by a script?, command and arguments), in order."""

    conn: redis.Redis
    lines: list[tuple[bool, list[bytes]]] = field(default_factory=list)
    reader: threading.Thread | None = None

    def stop(self) -> None:
        """Until every command sent before this call is in ``lines``."""
        if self.reader is not None and self.reader.is_alive():
            self.conn.echo(END)
            self.reader.join(10)

    def undeclared(self) -> tuple[list[tuple[bytes, str]], set[bytes]]:
        """(the script's sha, "COMMAND key") of each key a script touched without
        having it in KEYS; and the shas of the scripts that ran a command."""
        self.stop()
        found: list[tuple[bytes, str]] = []
        ran: set[bytes] = set()
        declared: set[bytes] = set()
        sha = b""
        for from_script, words in self.lines:
            if not from_script and words and words[0].upper() == b"EVALSHA":
                sha, declared = words[1], set(words[3 : 3 + int(words[2])])
            elif from_script:
                ran.add(sha)
                found += [
                    (sha, f"{words[0].decode()} {key!r}")
                    for key in keys_of(self.conn, words)
                    if key not in declared
                ]
        return found, ran


def keys_of(conn: redis.Redis, words: list[bytes]) -> list[bytes]:
    """The arguments of one command that are keys, as Redis itself says."""
    try:
        return [k if isinstance(k, bytes) else k.encode() for k in conn.command_getkeys(*words)]
    except redis.ResponseError:  # "The command has no key arguments" (PUBLISH...)
        return []


@pytest.fixture
def watched(redis_url: str) -> Iterator[Watched]:
    conn = redis.Redis.from_url(redis_url)
    seen = Watched(conn)
    monitor = redis.Redis.from_url(redis_url).monitor()

    def read() -> None:
        with monitor:
            while True:
                line = monitor.connection.read_response()
                head, _, _ = line.partition(b'"')
                words = [unquote(w) for w in ARGUMENT.findall(line)]
                if words == [b"ECHO", END.encode()]:
                    return
                seen.lines.append((head.rstrip().endswith(b"lua]"), words))

    seen.reader = threading.Thread(target=read, daemon=True)
    seen.reader.start()
    marker = "jobmaster-script-keys-start"
    wait_until(
        lambda: conn.echo(marker) and any(w == [b"ECHO", marker.encode()] for _, w in seen.lines),
        timeout=5,
    )
    yield seen
    seen.stop()
    conn.close()


@pytest.fixture(autouse=True)
def _default_client(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jobmaster.client, "_default", None)
    jobmaster.configure(redis_url)


def run_everything(ctx: WorkerContext, client: Client, store: redis.Redis) -> None:
    """Every script, called by the code that calls it in production."""
    client.push({"job": "tests.record", "args": ["slow", 0.2]})  # PUSH; runs long enough for MARK
    assert jobs.unique_started.enqueue("u") is not None  # PUSH_UNIQUE; UNLOCK as it starts
    b = jobmaster.batch(
        on_complete=jobs.callback.s("complete"),
        on_success=jobs.callback.s("success"),
        on_death=jobs.callback.s("death"),
    )
    with b.jobs():  # BATCH_ADD
        jobs.member.enqueue(1)
        jobs.member.enqueue(2, fail=True)  # dead (retry 0): fires on_death
        later = jobs.member.enqueue_in(3600, 3)  # scheduled
    jobmaster.chain(jobs.step.s("a"), jobs.step.s("b"), on_failure=jobs.callback.s("chain"))
    fetcher = Fetcher(ctx)
    while (unit := fetcher.fetch()) is not None:  # FETCH
        outcome = execute(unit, ctx)  # UNLOCK of an until_started job, as it starts
        record(ctx, unit.raw, outcome)  # FINISH, FINISH_STEP; MARK rides with them
    assert store.lrange("test:callbacks", 0, -1) == [f"death:{b.bid}".encode()]
    b.cancel()  # BATCH_CANCEL
    # FINISH_MANY: the I/O core's round trip of two jobs' acknowledgements.
    client.push_bulk({"job": "tests.record", "args": [["many-1"], ["many-2"]]})
    calls = []
    for unit in fetcher.fetch_many(2):
        script, call, _, _ = finish_call(ctx, unit.raw, execute(unit, ctx))
        calls.append(Call(script, call.keys(), call.argv()))
    ctx.core._send(calls)
    assert [call.reply for call in calls] == [1, 1]

    # A fetch beyond the room of the runners its jobs need, given back (GIVE_BACK).
    client.push({"job": "tests.record", "args": ["given back"]})
    given = Fetcher(ctx).fetch_many(1)
    GiveBack(
        inprogress_key=ctx.inprogress_key,
        wakeup_prefix=K.wakeup_prefix,
        jobs=[(unit.raw, unit.queue, K.queue(unit.queue)) for unit in given],
    ).run(client.scripts.give_back)
    assert store.lrem(K.queue("default"), 1, given[0].raw) == 1  # back, and gone again

    # The master's recovery: a requeue (TRANSFER), a poison pill (BURY), one in a
    # batch (BURY_STEP), from a batch made by id that adds to it (BATCH_ADD again).
    recovery = Recovery(store, K, client.scripts, DeadSetLimits(100, 30), status_ttl=60)
    dying = K.inprogress("host:1:dying")
    client.push({"job": "tests.record", "args": ["requeued"]})
    unique_hooked.enqueue("pill")
    jobmaster.Batch(b.bid).add(jobs.member.s(4))
    for _ in range(3):
        store.lmove(K.queue("default"), dying, "RIGHT", "LEFT")
    entries = store.lrange(dying, 0, -1)
    survivor = [raw for raw in entries if b"requeued" in raw]
    recovery.requeue(dying, survivor)
    pills = [raw for raw in entries if raw not in survivor]
    recovery.requeue(dying, pills, triage=crash_triage(1, "", "SIGKILL"))
    assert store.zcard(K.dead) == 3  # member 2, the pill, member 4
    # The orphan scan (JUDGE_ORPHANS): a silent member fenced, then recovered.
    store.sadd(K.processes, "host:1:silent")
    fenced = Recovery(store, K, client.scripts, DeadSetLimits(100, 30), 60, silent_grace=0.01)
    recover_orphans(fenced, "host:1:me")
    time.sleep(0.02)  # the grace: its mark is old enough now
    recover_orphans(fenced, "host:1:me")
    assert not store.sismember(K.processes, "host:1:silent")
    assert len(DeadSet(client).page(0, 10)) == 3  # PEEK: the operator's listings
    Queue("default", client).page(0, 10)  # PEEK_LIST: a queue's page
    # Dropping queued jobs: a delete and a clear (POP_OLDEST) give their
    # statuses a TTL (EXPIRE_WAITING).
    Queue("gone", client).delete(str(client.push({"job": "tests.record", "queue": "gone"})))
    client.push({"job": "tests.record", "args": ["cleared"], "queue": "gone"})
    assert Queue("gone", client).clear() == 1

    entry = PeriodicEntry("tick", "tests.record", every=1, unique=True)
    PeriodicTicker(store, K, [entry], status_ttl=60).tick(time.time())  # PERIODIC

    # jobmaster.cancel: the request (CANCEL_REQUEST), a queued job looked for in
    # Redis (FIND_QUEUED) and removed (CANCEL), a batch job's removal (CANCEL_STEP).
    assert jobmaster.cancel(str(jobs.record.enqueue("cancelled")))
    assert jobmaster.cancel(str(later))

    store.rpush(K.control("host:1:master"), "quiet")  # CONTROL_POP, as the heartbeats read
    pipe = store.pipeline()
    control.pop(pipe, K.control("host:1:master"))
    assert pipe.execute() == [[5, b"quiet"]]
    watch = QueueWatch(store, "jobmaster", ["default"])  # QUEUE_ENDS, for /metrics
    watch.refresh(0.0)
    assert watch.latest is not None
    limiter = RateLimit("api", limit=5, per=60)  # RATE_COUNT, the rate limiter's window
    limiter.admit(JobContext({"jid": "j"}, "default", "host:1", store, K, client.scripts))


def test_every_key_a_script_touches_was_declared_in_keys(
    watched: Watched,
    make_config: Callable[..., Config],
    client: Client,
    store: redis.Redis,
) -> None:
    ctx = WorkerContext.create(make_config(status_ttl=60))
    try:
        run_everything(ctx, client, store)
    finally:
        ctx.core.close()  # its status-marks flusher
        ctx.redis.close()
    undeclared, ran = watched.undeclared()
    names = {script.sha.encode(): name for name, script in vars(client.scripts).items()}
    report = sorted({f"{names.get(sha, sha)}: {what}" for sha, what in undeclared})
    assert not report, "keys touched but not given in KEYS:\n" + "\n".join(report)
    assert set(names) <= ran, f"never run here: {[names[s] for s in set(names) - ran]}"


def test_the_check_catches_a_key_built_inside_a_script(
    watched: Watched, store: redis.Redis
) -> None:
    sneaky = store.register_script("redis.call('SET', ARGV[1] .. 'x', 1) return 1")
    sneaky(keys=[K.queues], args=[K.prefix])
    undeclared, _ = watched.undeclared()
    assert [what for _, what in undeclared] == [f"SET {(K.prefix + 'x').encode()!r}"]
