"""The operator's Python API (jobmaster.api) against a real Redis and worker."""

from __future__ import annotations

import datetime
import os
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

from jobmaster import client as client_module
from jobmaster import payload as wire
from jobmaster.api import (
    DayStats,
    DeadSet,
    JobSet,
    NotRunnable,
    ProcessSet,
    Queue,
    RetrySet,
    ScheduledSet,
    Stats,
    redis_info,
)
from jobmaster.api.sorted_sets import KILLED
from jobmaster.client import Client
from jobmaster.config import Config
from jobmaster.deadset import DAY, DeadSetLimits
from jobmaster.keys import Keys
from jobmaster.worker.process import WorkerProcess
from tests import jobs
from tests.helpers import holds_for, wait_until

K = Keys()
StartWorker = Callable[[Config], WorkerProcess]
FAR = 4_000_000_000.0  # a score no poller reaches during a test


def job(name: str = "tests.record", *args: Any, queue: str = "default", **extra: Any) -> dict:
    built = wire.build(name, list(args), {}, queue=queue, extra=extra)
    built.setdefault("enqueued_at", time.time())
    return built


def lpush(store: redis.Redis, *payloads: dict) -> list[str]:
    for payload in payloads:
        store.lpush(K.queue(payload["queue"]), wire.encode(payload))
        store.sadd(K.queues, payload["queue"])
    return [p["jid"] for p in payloads]


def zadd(store: redis.Redis, key: str, payload: dict | bytes, score: float = FAR) -> str | None:
    member = payload if isinstance(payload, bytes) else wire.encode(payload)
    store.zadd(key, {member: score})
    return None if isinstance(payload, bytes) else str(payload["jid"])


def done(marker: str) -> bool:
    return bool(jobs.store().sismember("test:done", marker))


# -- queues -------------------------------------------------------------------
def test_queue_size_latency_and_entries_newest_first_with_garbage_shown_raw(
    store: redis.Redis,
) -> None:
    now = time.time()
    old, new = job("tests.record", "a", enqueued_at=now - 30), job("tests.record", "b")
    lpush(store, old, new)
    store.lpush(K.queue("default"), b"\xffnot json")
    queue = Queue("default", store)
    assert queue.size() == 3
    assert 29.5 <= queue.latency() < 40  # the oldest job's age
    garbage, second, first = list(queue)
    assert garbage.payload is None and garbage.jid is None
    assert garbage.text == "\\xffnot json" and garbage.as_dict() == {"raw": "\\xffnot json"}
    assert [second.jid, first.jid] == [new["jid"], old["jid"]]
    assert first.args == ["a"] and first.job == "tests.record"
    assert [q.name for q in Queue.all(store)] == ["default"]
    assert Queue("empty", store).latency() == 0.0


def test_queue_iterates_every_page_and_finds_deletes_and_clears(
    store: redis.Redis, client: Client
) -> None:
    jids = client.push_bulk({"job": "tests.record", "args": [[n] for n in range(1200)]})
    store.lpush(K.queue("default"), b"garbage")
    queue = Queue("default", client)  # a Client works as the connection too
    records = list(queue)
    assert len(records) == 1201 and len({r.raw for r in records}) == 1201
    oldest = queue.find(jids[0])  # the last entry of the last page
    assert oldest is not None and oldest.args == [0]
    assert queue.delete(jids[0]) and not queue.delete(jids[0])
    assert queue.find(jids[0]) is None
    junk = next(r for r in queue if r.payload is None)
    assert queue.delete(junk) and queue.size() == 1199
    assert queue.clear() == 1199 and queue.size() == 0
    assert Queue.all(store) == []  # cleared: no longer a known queue


def test_a_paused_queue_is_not_fetched_until_resumed(
    make_config: Callable[..., Config], running_worker: StartWorker, store: redis.Redis
) -> None:
    queue = Queue("default", store)
    queue.pause()
    assert queue.is_paused() and [q.name for q in Queue.all(store)] == ["default"]
    running_worker(make_config())
    lpush(store, job("tests.record", "paused"))
    holds_for(1.0, lambda: queue.size() == 1 and not done("paused"))
    queue.resume()
    assert not queue.is_paused()
    wait_until(lambda: done("paused"), timeout=5, message="the job of a resumed queue ran")


def test_deleting_a_unique_job_frees_its_lock(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(client_module, "_default", client)  # what the job API pushes with
    jid = jobs.unique_exec.enqueue_in(3600, "u")
    assert jid is not None and jobs.unique_exec.enqueue_in(3600, "u") is None
    scheduled = ScheduledSet()  # no connection: the default client
    assert scheduled.delete(jid) and scheduled.size() == 0
    assert jobs.unique_exec.enqueue_in(3600, "u") is not None  # the lock went with it


# -- the sorted sets -------------------------------------------------------------
def test_set_entries_carry_score_error_and_retry_count_and_are_found_by_jid(
    store: redis.Redis,
) -> None:
    first = job("tests.fails", "x", error_class="ValueError", error_message="bad", retry_count=3)
    second = job("tests.record", "y", error_class="KeyError", retry_count=1, failed_at=5.0)
    zadd(store, K.retry, first, 100.0)
    zadd(store, K.retry, second, 200.0)
    zadd(store, K.retry, b"{not json", 300.0)
    retries = RetrySet(store)
    assert retries.size() == 3
    a, b, junk = list(retries)
    assert (a.at, a.jid, a.job, a.error_class, a.error_message, a.retry_count) == (
        100.0,
        first["jid"],
        "tests.fails",
        "ValueError",
        "bad",
        3,
    )
    assert (b.at, b.error_class, b.retry_count, b.failed_at) == (200.0, "KeyError", 1, 5.0)
    assert junk.payload is None and junk.text == "{not json" and junk.at == 300.0
    found = retries.find(second["jid"])
    assert found is not None and found.args == ["y"]
    assert retries.find("0" * 24) is None and retries.find("*") is None


def test_iteration_by_score_sees_every_entry_across_pages_with_equal_scores(
    store: redis.Redis,
) -> None:
    store.zadd(K.scheduled, {wire.encode(job("tests.record", n)): 7.0 for n in range(1100)})
    seen = [entry.args[0] for entry in ScheduledSet(store)]
    assert sorted(seen) == list(range(1100))


@pytest.mark.parametrize("kind", [ScheduledSet, RetrySet, DeadSet])
def test_retry_moves_the_entry_to_its_queue_atomically_and_the_job_runs(
    kind: type[JobSet],
    make_config: Callable[..., Config],
    running_worker: StartWorker,
    store: redis.Redis,
    client: Client,
) -> None:
    marker = f"retried-{kind.kind}"
    entry = job("tests.record", marker, queue="other", retry_count=2, died_at=1.0)
    entry["dead_reason"] = "retries exhausted"
    jid = zadd(store, getattr(K, kind.kind), entry)
    assert jid is not None
    pubsub = store.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(K.wakeup_channel("other"))
    pubsub.get_message(timeout=1)  # the subscription itself
    before = time.time()
    zset = kind(client)
    assert zset.retry(jid)
    assert zset.size() == 0 and not zset.retry(jid)  # gone: a second retry moves nothing
    [queued] = list(Queue("other", store))
    assert queued.jid == jid and queued.retry_count == 2  # the retry history stays
    assert queued.enqueued_at is not None and queued.enqueued_at >= before
    assert queued.dead_reason is None and queued.died_at is None  # no longer dead
    assert store.sismember(K.queues, "other")
    assert client.status(jid) == "queued"
    message = pubsub.get_message(timeout=2)
    assert message is not None and message["data"] == b"1"  # idle workers woken
    pubsub.close()
    running_worker(make_config(queues=["other"]))
    wait_until(lambda: done(marker), timeout=10, message="the retried job ran")


def test_filters_and_retrying_or_deleting_what_matches(store: redis.Redis) -> None:
    for n in range(2):
        zadd(store, K.dead, job("tests.record", n, error_class="ValueError"), 10.0 + n)
    zadd(store, K.dead, job("tests.fails", "f", error_class="KeyError"), 20.0)
    zadd(store, K.dead, b"\x00garbage", 30.0)
    dead = DeadSet(store)
    assert len(list(dead.filter(job="tests.record"))) == 2
    assert [e.job for e in dead.filter(error="KeyError")] == ["tests.fails"]
    assert [e.args for e in dead.filter(job="tests.record", error="KeyError")] == []
    assert dead.retry_where(error="ValueError") == 2
    assert Queue("default", store).size() == 2
    assert dead.delete_where(job="tests.fails") == 1
    [junk] = list(dead)
    with pytest.raises(NotRunnable):
        dead.retry(junk)
    assert dead.retry_all() == 0 and dead.size() == 1  # garbage is never pushed to a queue
    assert dead.delete(junk) and dead.size() == 0


def test_clear_and_delete_by_jid(store: redis.Redis) -> None:
    jids = [zadd(store, K.scheduled, job("tests.record", n), 10.0 + n) for n in range(3)]
    scheduled = ScheduledSet(store)
    assert scheduled.delete(str(jids[1])) and not scheduled.delete(str(jids[1]))
    assert [e.jid for e in scheduled] == [jids[0], jids[2]]
    assert scheduled.clear() == 2 and scheduled.size() == 0 and not store.exists(K.scheduled)


def test_kill_buries_within_the_dead_set_caps_and_trim_applies_them(
    store: redis.Redis, client: Client
) -> None:
    now = time.time()
    zadd(store, K.dead, job("tests.record", "oldest"), now - 20)
    zadd(store, K.dead, job("tests.record", "older"), now - 10)
    jid = zadd(store, K.retry, job("tests.fails", "k"))
    zadd(store, K.retry, b"junk")
    retries = RetrySet(client, limits=DeadSetLimits(max_jobs=2, max_days=180))
    assert retries.kill(str(jid))
    dead = DeadSet(store)
    assert [e.args for e in dead] == [["older"], ["k"]]  # capped at 2: the oldest went
    killed = dead.find(str(jid))
    assert killed is not None and killed.dead_reason == KILLED and killed.died_at is not None
    assert client.status(str(jid)) == "dead"
    [junk] = list(retries)
    assert retries.kill(junk) and retries.size() == 0  # garbage is buried with its raw text
    buried = [e for e in DeadSet(store) if e.job is None]
    assert buried and buried[0].payload is not None and buried[0].payload["raw"] == "junk"

    ancient = zadd(store, K.dead, job("tests.record", "ancient"), now - 181 * DAY)
    assert DeadSet(store, limits=DeadSetLimits(max_jobs=2, max_days=180)).trim(now) == 1
    assert dead.find(str(ancient)) is None and dead.size() == 2  # too old: gone
    assert DeadSet(store, limits=DeadSetLimits(max_jobs=1)).trim(now) == 1
    assert [e.job for e in dead] == [None]  # beyond 1 job: the oldest went, the newest stays


# -- processes -------------------------------------------------------------------
def test_process_set_lists_a_worker_and_sends_it_commands(
    make_config: Callable[..., Config], running_worker: StartWorker, store: redis.Redis
) -> None:
    worker = running_worker(make_config(heartbeat_ttl=3))  # a beat a second
    processes = ProcessSet(store)
    [me] = processes.list()
    assert (me.identity, me.role, me.pid) == (worker.ctx.name, "worker", os.getpid())
    assert me.queues == ["default"] and me.concurrency == 4 and not me.quiet
    assert me.memory_mb is not None and me.master is None and me.index is None

    # Read from its control list by its heartbeat (here no main thread acts on
    # them: tests/process/test_api_processes.py checks the effect on a master).
    assert processes.quiet(worker.ctx.name)
    assert worker.commands.get(timeout=5) == "quiet"
    assert processes.resume_all() == 1
    assert worker.commands.get(timeout=5) == "resume"
    assert not processes.quiet("nobody:1:00") and not store.exists(K.control("nobody:1:00"))
    with pytest.raises(ValueError, match="unknown command"):
        processes.send(worker.ctx.name, "explode")

    worker.manager.quiet()
    wait_until(lambda: processes.list()[0].quiet, timeout=5, message="heartbeat says quiet")


def test_prune_forgets_expired_processes_but_not_a_list_holding_jobs(store: redis.Redis) -> None:
    store.hset(K.heartbeat("live:1:aa"), mapping={"pid": 1, "master_pid": 9, "index": 1})
    store.hset(K.heartbeat("boss:9:ff"), mapping={"pid": 9, "role": "master"})
    store.sadd(K.processes, "live:1:aa", "gone:2:bb", "held:3:cc")
    store.rpush(K.inprogress("held:3:cc"), b"{}")  # orphan recovery must requeue it first
    store.sadd(K.masters, "boss:9:ff", "ghost:4:dd")
    processes = ProcessSet(store)
    assert processes.prune() == 2
    assert store.smembers(K.processes) == {b"live:1:aa", b"held:3:cc"}
    assert store.smembers(K.masters) == {b"boss:9:ff"}
    assert [(p.identity, p.role) for p in processes] == [
        ("boss:9:ff", "master"),
        ("live:1:aa", "child"),  # no master lists it as a child: after the masters
    ]


# -- stats and the server --------------------------------------------------------
def test_stats_after_running_jobs(
    make_config: Callable[..., Config],
    running_worker: StartWorker,
    store: redis.Redis,
    client: Client,
) -> None:
    for n in range(3):
        client.push({"job": "tests.record", "args": [f"ok{n}"]})
    for n in range(2):
        client.push({"job": "tests.permanent", "args": [f"bad{n}"]})  # dead at once
    client.push({"job": "tests.record", "args": ["later"], "at": time.time() + 3600})
    Queue("low", store).pause()
    lpush(store, job("tests.record", "w", queue="low", enqueued_at=time.time() - 30))
    lpush(store, job("tests.record", "w2", queue="low"))
    running_worker(make_config(heartbeat_ttl=3))
    wait_until(lambda: Stats(store).processed == 5, timeout=10, message="5 jobs processed")
    stats = Stats(client)
    assert (stats.processed, stats.failed) == (5, 2)
    assert (stats.processed_today, stats.failed_today) == (5, 2)
    assert (stats.scheduled_size, stats.retry_size, stats.dead_size) == (1, 0, 2)
    assert (stats.processes, stats.masters, stats.enqueued) == (1, 0, 2)
    [default, low] = stats.queues
    assert (default.name, default.size, default.paused) == ("default", 0, False)
    assert (low.name, low.size, low.paused) == ("low", 2, True) and 29.5 <= low.latency < 40
    today = datetime.datetime.now(datetime.timezone.utc).date()
    assert stats.history(2) == [
        DayStats(today, 5, 2),
        DayStats(today - datetime.timedelta(days=1), 0, 0),
    ]
    assert stats.as_dict()["queues"][1]["size"] == 2

    client.push({"job": "tests.record", "args": ["busy", 3.0]})
    wait_until(lambda: Stats(store).busy == 1, timeout=5, message="one job running")


def test_redis_info_reports_version_memory_and_a_risky_eviction_policy(
    store: redis.Redis,
) -> None:
    info = redis_info(store)
    assert info["version"] == store.info("server")["redis_version"]
    assert info["mode"] == "standalone" and info["role"] == "master"
    assert info["used_memory"] > 0 and info["used_memory_human"].endswith(("K", "M"))
    assert info["connected_clients"] >= 1 and info["uptime_seconds"] >= 0
    assert info["warnings"] == []
    store.config_set("maxmemory-policy", "allkeys-lru")
    try:
        assert "allkeys-lru" in Stats(store).redis_info()["warnings"][0]
    finally:
        store.config_set("maxmemory-policy", info["maxmemory_policy"])
