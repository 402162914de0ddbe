"""Remote control lists hold forged entries: read bounded, logged safely.

A review pushed three 200 MB entries onto a master's control list: it grew
to 1.4 GB and wrote 1 GB of log; a newline in an entry forged a log line.
Here the master's Redis thread and a child's heartbeat read lists holding
big entries, newlines, floods and a key that is not a list, against a real
private Redis: only real commands are acted on, each read is bounded, and
every log line stays one short line.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import pytest
import redis

from jobmaster import control
from jobmaster.config import Config
from jobmaster.deadset import DeadSetLimits
from jobmaster.identity import Identity
from jobmaster.keys import Keys
from jobmaster.periodic import PeriodicTicker
from jobmaster.recovery import Recovery
from jobmaster.scripts import Scripts
from jobmaster.supervisor.duties import MasterState, RedisDuties
from jobmaster.supervisor.history import HistoryRecorder
from jobmaster.worker.context import WorkerContext
from jobmaster.worker.heartbeat import Heartbeat

pytestmark = pytest.mark.timeout(60)
K = Keys()
BIG = 8 * 1024 * 1024  # big enough to show in memory and logs, quick to push
MASTER = "host:1:master"
FORGED = [
    b"x" * BIG,
    b"stop" + b" " * BIG,  # a command followed by a lot: not a command
    b"quiet\n2026-12-01 INFO jobmaster.supervisor: forged line",
    b"\x1b]52;c;ZXZpbA==\x07",
    b"resume",
    b"x" * BIG,
    b"stop",
]


def lines_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "jobmaster.control"]


def assert_short_single_lines(messages: list[str]) -> None:
    assert messages
    for message in messages:
        assert len(message) < 300, message[:300]
        assert "\n" not in message and "\x1b" not in message, message


def test_the_masters_thread_acts_on_real_commands_only_and_reads_a_bound(
    make_config: Callable[..., Config], store: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    config = make_config()
    client = redis.Redis.from_url(config.redis_url)
    scripts = Scripts(client)
    duties = RedisDuties(
        config=config,
        client=client,
        keys=K,
        identity=MASTER,
        recovery=Recovery(client, K, scripts, DeadSetLimits(100, 30), 60),
        ticker=PeriodicTicker(client, K, [], status_ttl=60),
        history=HistoryRecorder(client, K),
    )
    duties.publish(MasterState(1, False, False, ()))
    store.rpush(K.control(MASTER), *FORGED)
    store.rpush(K.control(MASTER), *[b"junk %d" % i for i in range(control.BATCH)])
    caplog.set_level(logging.INFO)
    duties.talk(0.0)
    assert duties.take_commands() == ["resume", "stop"]
    messages = lines_of(caplog)
    assert_short_single_lines(messages)
    assert len(messages) == control.LOGGED + 1  # three shown, the rest counted
    assert f"({BIG} bytes)" in messages[0]
    assert store.llen(K.control(MASTER)) == len(FORGED)  # BATCH a look: the rest next time
    assert store.exists(K.heartbeat(MASTER))  # written in the same round trip
    client.close()


def test_a_childs_heartbeat_survives_a_control_key_that_is_not_a_list(
    make_config: Callable[..., Config], store: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    ctx = WorkerContext.create(make_config(), Identity(hostname="host", nonce="0000c0de"))
    got: list[str] = []
    beat = Heartbeat(ctx, dict, got.append, threading.Event())
    store.set(K.control(ctx.name), b"x" * BIG)
    caplog.set_level(logging.INFO)
    beat.beat()  # raised WRONGTYPE at every beat before: no command ever read again
    assert store.exists(K.heartbeat(ctx.name))
    assert not store.exists(K.control(ctx.name))
    store.rpush(K.control(ctx.name), *FORGED)
    beat.beat()
    assert got == ["resume", "stop"]
    assert_short_single_lines(lines_of(caplog))
    ctx.redis.close()


def test_the_reply_of_one_read_is_bounded_whatever_the_list_holds(store: redis.Redis) -> None:
    key = K.control("host:2:flood")
    store.rpush(key, *[b"y" * 100_000] * (control.BATCH + 5))
    pipe = store.pipeline()
    control.pop(pipe, key)
    (reply,) = pipe.execute()
    assert len(reply) == 2 * control.BATCH
    assert sum(len(part) for part in reply[1::2]) <= control.BATCH * control.ENTRY_BYTES
    assert store.llen(key) == 5
