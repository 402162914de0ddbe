"""The API the dashboard added: pages of queues and sets, search, the jobs running
now, and the per-minute throughput from the masters' samples."""

from __future__ import annotations

import json

import pytest
import redis

from jobmaster import payload as wire
from jobmaster.api import DeadSet, ProcessSet, Queue, RetrySet, throughput
from jobmaster.client import Client
from jobmaster.keys import Keys
from jobmaster.supervisor.history import HISTORY_TTL, HistoryRecorder

pytestmark = pytest.mark.timeout(30)
K = Keys()


@pytest.fixture
def conn(redis_url: str) -> redis.Redis:
    return redis.Redis.from_url(redis_url)


def entry(job: str, n: int, error: str = "ValueError", message: str = "boom") -> bytes:
    payload = wire.build(job, [n], {}, queue="default")
    payload |= {"error_class": error, "error_message": message}
    return wire.encode(payload)


def test_set_pages_by_rank_either_way(conn: redis.Redis) -> None:
    conn.zadd(K.dead, {entry("tests.count", n): 100 + n for n in range(7)})
    dead = DeadSet(conn)
    assert [e.args[0] for e in dead.page(0, 3)] == [0, 1, 2]
    assert [e.args[0] for e in dead.page(6, 3)] == [6]
    assert [e.args[0] for e in dead.page(0, 3, newest_first=True)] == [6, 5, 4]
    assert dead.page(0, 0) == []
    assert dead.page(-1, 3) == []


def test_search_matches_job_name_or_error_in_any_case(conn: redis.Redis) -> None:
    conn.zadd(K.retry, {entry("app.mail.send", 1, "TimeoutError", "SMTP slow"): 1})
    conn.zadd(K.retry, {entry("app.billing.charge", 2, "CardDeclined", "no funds"): 2})
    conn.zadd(K.retry, {b"not json at all": 3})
    retry = RetrySet(conn)
    assert [e.job for e in retry.search("MAIL")] == ["app.mail.send"]
    assert [e.job for e in retry.search("timeout")] == ["app.mail.send"]
    assert [e.job for e in retry.search("funds")] == ["app.billing.charge"]
    assert [e.job for e in retry.search("app.", newest_first=True)] == [
        "app.billing.charge",
        "app.mail.send",
    ]


def test_queue_pages_newest_first(conn: redis.Redis) -> None:
    client = Client(connection=conn)
    for n in range(5):
        client.push({"job": "tests.count", "args": [n]})
    queue = Queue("default", conn)
    assert [r.args[0] for r in queue.page(0, 2)] == [4, 3]
    assert [r.args[0] for r in queue.page(4, 2)] == [0]


def test_running_jobs_with_runtime_from_their_status(conn: redis.Redis) -> None:
    identity = "host:42:abc"
    conn.hset(K.heartbeat(identity), mapping={"pid": 42, "master_pid": 1, "busy": 1})
    conn.sadd(K.processes, identity)
    payload = wire.build("tests.record", ["x"], {}, queue="default")
    conn.rpush(K.inprogress(identity), wire.encode(payload))
    client = Client(connection=conn, status_ttl=1000)
    # FETCH set "working" with the status TTL 30 s ago: 970 s are left.
    conn.set(K.status(str(payload["jid"])), "working", px=970_000)
    [running] = ProcessSet(client).running()
    assert running.identity == identity
    assert running.record.jid == payload["jid"]
    assert running.runtime == pytest.approx(30, abs=2)
    untracked = Client(connection=conn, status_ttl=0)
    assert ProcessSet(untracked).running()[0].runtime is None
    # A mark renewed past status_ttl (worker/core.py: status_ttl + a heartbeat
    # TTL) tells no start: no runtime rather than a wrong one.
    conn.set(K.status(str(payload["jid"])), "working", px=1_060_000)
    assert ProcessSet(client).running()[0].runtime is None


def test_throughput_per_minute_from_samples(conn: redis.Redis) -> None:
    now = 60 * 1_000_000 + 30.0  # 30 s into a minute
    minute = int(now // 60)
    for back, (processed, failed) in {3: (10, 1), 2: (25, 1), 1: (25, 4)}.items():
        sample = json.dumps({"at": 0, "processed": processed, "failed": failed})
        conn.set(K.history(minute - back), sample)
    conn.set(K.history(minute), json.dumps({"processed": 40, "failed": 4}))
    conn.set(K.stat("processed"), 47)
    conn.set(K.stat("failed"), 5)
    found = throughput(conn, minutes=5, now=now)
    assert [m.start for m in found] == [(minute - n) * 60.0 for n in range(4, -1, -1)]
    assert [(m.processed, m.failed) for m in found] == [
        (None, None),  # no sample at its start
        (15, 0),
        (0, 3),
        (15, 0),
        (7, 1),  # the minute running now, against the live totals
    ]


def test_recorder_samples_once_a_minute_and_first_master_wins(conn: redis.Redis) -> None:
    conn.set(K.stat("processed"), 5)
    first, second = HistoryRecorder(conn, K), HistoryRecorder(conn, K)
    now = 60 * 2_000_000 + 1.0
    assert first.tick(now)
    assert not first.tick(now + 30)  # same minute: no command at all
    conn.set(K.stat("processed"), 9)
    assert second.tick(now + 2)  # another master, same minute: NX keeps the first
    stored = json.loads(conn.get(K.history(int(now // 60))) or b"{}")
    assert (stored["processed"], stored["failed"]) == (5, 0)
    assert 0 < conn.ttl(K.history(int(now // 60))) <= HISTORY_TTL
    assert first.tick(now + 60)
    assert json.loads(conn.get(K.history(int(now // 60) + 1)) or b"{}")["processed"] == 9


def test_recorder_survives_redis_being_away() -> None:
    nowhere = redis.Redis(port=1, socket_connect_timeout=0.2)
    recorder = HistoryRecorder(nowhere, K)
    assert recorder.tick(120.0)  # tried, logged, no exception
    assert not recorder.tick(121.0)  # and not again this minute
