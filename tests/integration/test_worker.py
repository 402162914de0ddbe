"""A worker process (threads in this test process) against a real Redis."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

from jobmaster import liveness
from jobmaster import payload as wire
from jobmaster.client import Client
from jobmaster.config import Config
from jobmaster.embedded import RedisServerProcess
from jobmaster.keys import Keys
from jobmaster.worker.process import WorkerProcess
from tests import jobs
from tests.helpers import wait_until

K = Keys()
StartWorker = Callable[[Config], WorkerProcess]


@pytest.fixture(autouse=True)
def _fresh_counts() -> None:
    jobs.COUNTS.clear()


def dead_entries(store: redis.Redis) -> list[dict[str, object]]:
    return [json.loads(raw) for raw in store.zrange(K.dead, 0, -1)]


def attempts(store: redis.Redis, marker: str) -> int:
    return int(store.hget("test:attempts", marker) or 0)


def test_ten_thousand_jobs_each_run_exactly_once(
    make_config: Callable[..., Config],
    running_worker: StartWorker,
    client: Client,
    store: redis.Redis,
) -> None:
    client.push_bulk({"job": "tests.count", "args": [[n] for n in range(10_000)]})
    worker = running_worker(make_config(concurrency=10))
    wait_until(lambda: len(jobs.COUNTS) == 10_000, timeout=90, message="10,000 jobs done")
    wait_until(lambda: store.get(K.stat("processed")) == b"10000", timeout=10)
    assert set(jobs.COUNTS.values()) == {1}, "a job ran more than once"
    assert store.llen(worker.ctx.inprogress_key) == 0
    assert store.get(K.stat("failed")) is None


def test_a_failing_job_is_retried_then_dead_with_its_error(
    make_config: Callable[..., Config],
    running_worker: StartWorker,
    client: Client,
    store: redis.Redis,
) -> None:
    client.push({"job": "tests.fails", "args": ["f"]})  # retry=2 from the job's options
    running_worker(make_config())
    wait_until(lambda: store.zcard(K.dead) == 1, timeout=20, message="job dead")
    assert attempts(store, "f") == 3  # the first run and two retries
    [entry] = dead_entries(store)
    assert entry["error_class"] == "ValueError"
    assert entry["error_message"] == "failing on purpose: f"
    assert any("failing on purpose" in line for line in entry["error_backtrace"])  # type: ignore[attr-defined]
    assert entry["retry_count"] == 3
    assert "retries exhausted" in str(entry["dead_reason"])
    assert store.zcard(K.retry) == 0
    assert store.get(K.stat("failed")) == b"3"


def test_a_flaky_job_succeeds_on_a_retry(
    make_config: Callable[..., Config],
    running_worker: StartWorker,
    client: Client,
    store: redis.Redis,
) -> None:
    client.push({"job": "tests.flaky", "args": ["fl", 2]})
    running_worker(make_config())
    wait_until(lambda: store.sismember("test:done", "fl"), timeout=20)
    assert attempts(store, "fl") == 3
    assert store.zcard(K.dead) == 0 and store.zcard(K.retry) == 0


@pytest.mark.parametrize(
    ("item", "in_dead"),
    [
        ({"job": "tests.fails", "args": ["r0"], "retry": 0}, True),
        ({"job": "tests.permanent", "args": ["r0"]}, True),
        ({"job": "tests.dropped", "args": ["r0"]}, False),
    ],
    ids=["retry=0 dead at once", "Permanent dead at once", "retry=False dropped"],
)
def test_jobs_that_must_not_be_retried(
    item: dict[str, object],
    in_dead: bool,
    make_config: Callable[..., Config],
    running_worker: StartWorker,
    client: Client,
    store: redis.Redis,
) -> None:
    client.push(item)
    running_worker(make_config())
    wait_until(lambda: store.get(K.stat("failed")) == b"1", timeout=10)
    assert attempts(store, "r0") == 1
    assert store.zcard(K.retry) == 0
    assert store.zcard(K.dead) == (1 if in_dead else 0)


GARBAGE = [
    b"not json at all",
    b"\xff\xfe\x00binary",
    b"[1, 2, 3]",
    b'"a string"',
    b"{}",
    b'{"jid": "x", "job": "tests.record", "args": "not a list", "queue": "default"}',
    b'{"jid": "x", "job": "tests.record", "args": [], "queue": "default", "kwargs": []}',
    b'{"jid": "y", "job": "os.system", "args": ["touch /tmp/pwned"], "queue": "default"}',
    b'{"jid": "z", "job": "subprocess.call", "args": [["id"]], "queue": "default"}',
    b"",
]


def test_garbage_payloads_go_to_the_dead_set_and_good_jobs_all_run(
    make_config: Callable[..., Config],
    running_worker: StartWorker,
    client: Client,
    store: redis.Redis,
) -> None:
    # Garbage first (the right end is fetched first), the good jobs behind it.
    for raw in GARBAGE:
        store.rpush(K.queue("default"), raw)
    client.push_bulk({"job": "tests.record", "args": [[f"good{n}"] for n in range(100)]})
    worker = running_worker(make_config())
    wait_until(lambda: store.scard("test:done") == 100, timeout=30, message="good jobs done")
    wait_until(lambda: store.zcard(K.dead) == len(GARBAGE), timeout=10)
    reasons = {str(e["dead_reason"]) for e in dead_entries(store)}
    assert "no job registered as 'os.system'" in reasons
    assert "no job registered as 'subprocess.call'" in reasons
    assert any(r.startswith("payload is not JSON") for r in reasons)
    assert "payload is a JSON list, not an object" in reasons
    kept = {e.get("raw") for e in dead_entries(store)}
    assert "not json at all" in kept  # the raw payload is kept for the operator
    assert any("raw_hex" in e for e in dead_entries(store))  # non-UTF-8 bytes kept exactly
    assert all(t.is_alive() for t in worker.manager.processors)
    assert store.llen(worker.ctx.inprogress_key) == 0


def test_scheduled_jobs_run_when_due_and_broken_entries_are_buried(
    make_config: Callable[..., Config],
    running_worker: StartWorker,
    client: Client,
    store: redis.Redis,
) -> None:
    store.zadd(K.scheduled, {b"broken entry": 1})
    client.push({"job": "tests.record", "args": ["later"], "at": time.time() + 0.5})
    running_worker(make_config())
    wait_until(lambda: store.zcard(K.dead) == 1, timeout=10, message="broken entry buried")
    assert not store.sismember("test:started", "later")  # not before it is due
    wait_until(lambda: store.sismember("test:done", "later"), timeout=10)
    [entry] = dead_entries(store)
    assert entry["raw"] == "broken entry" and "scheduled set" in str(entry["dead_reason"])
    assert store.zcard(K.scheduled) == 0


def test_a_paused_queue_is_skipped_until_resumed(
    make_config: Callable[..., Config],
    running_worker: StartWorker,
    client: Client,
    store: redis.Redis,
) -> None:
    store.sadd(K.paused, "slow")
    client.push({"job": "tests.record", "args": ["paused"], "queue": "slow"})
    running_worker(make_config(queues=["slow", "fast"]))
    client.push({"job": "tests.record", "args": ["served"], "queue": "fast"})
    wait_until(lambda: store.sismember("test:done", "served"), timeout=10)
    assert store.llen(K.queue("slow")) == 1
    store.srem(K.paused, "slow")
    wait_until(lambda: store.sismember("test:done", "paused"), timeout=10)


def test_stop_pushes_back_a_job_that_outlives_the_timeout(
    make_config: Callable[..., Config],
    running_worker: StartWorker,
    client: Client,
    store: redis.Redis,
) -> None:
    # Outlives the stop, and ends with the test: its thread runs on after the push-back.
    jid = client.push({"job": "tests.record", "args": ["long", 3]})
    worker = running_worker(make_config())
    wait_until(lambda: store.sismember("test:started", "long"), timeout=10)
    started = time.monotonic()
    report = worker.stop(timeout=0.5)
    assert time.monotonic() - started < 5
    assert report.requeued == [jid]
    [payload] = [json.loads(raw) for raw in store.lrange(K.queue("default"), 0, -1)]
    assert payload["jid"] == jid
    assert store.llen(worker.ctx.inprogress_key) == 0
    assert not store.exists(K.heartbeat(worker.ctx.name))
    assert not store.sismember(K.processes, worker.ctx.name)


def test_a_short_job_finishes_during_a_graceful_stop(
    make_config: Callable[..., Config],
    running_worker: StartWorker,
    client: Client,
    store: redis.Redis,
) -> None:
    client.push({"job": "tests.record", "args": ["short", 0.5]})
    worker = running_worker(make_config())
    wait_until(lambda: store.sismember("test:started", "short"), timeout=10)
    report = worker.stop(timeout=10)
    assert report.requeued == []
    assert store.sismember("test:done", "short")
    assert store.llen(K.queue("default")) == 0


@pytest.mark.parametrize("copies", [1, 2])
def test_self_check_requeues_an_entry_no_thread_is_running(
    make_config: Callable[..., Config],
    running_worker: StartWorker,
    client: Client,
    store: redis.Redis,
    copies: int,
) -> None:
    """With ``copies`` 2, the same bytes twice (a producer that retried its
    LPUSH): the check took them as one entry and requeued one copy."""
    worker = running_worker(make_config())
    worker.manager.quiet()  # nothing fetched meanwhile: the entries below stay unclaimed
    # A quiet, idle worker gives back once what its list holds (fetch.Feed's
    # sweep): let it pass first, so that what follows is the self-check's doing.
    wait_until(lambda: worker.manager.feed._swept, timeout=5, message="the quiet's sweep")
    payload = wire.build("tests.record", ["stuck"], {}, queue="default")
    jid = payload["jid"]
    raw = wire.encode(payload)
    store.lpush(worker.ctx.inprogress_key, *[raw] * copies)  # as if its ack had failed
    worker.selfcheck.step()
    assert store.llen(worker.ctx.inprogress_key) == copies  # suspect once: not yet moved
    worker.selfcheck.step()
    # Back on its queue (a thread that was already fetching as quiet began may
    # take it and give it back: wait for it to settle there).
    wait_until(
        lambda: (
            store.llen(worker.ctx.inprogress_key) == 0
            and [json.loads(r)["jid"] for r in store.lrange(K.queue("default"), 0, -1)]
            == [jid] * copies
        ),
        timeout=5,
    )
    worker.manager.resume()
    wait_until(lambda: store.sismember("test:done", "stuck"), timeout=10)


def test_orphaned_inprogress_list_is_recovered_after_its_heartbeat_expires(
    make_config: Callable[..., Config],
    running_worker: StartWorker,
    client: Client,
    store: redis.Redis,
) -> None:
    jid = client.push({"job": "tests.record", "args": ["orphan"]})
    lost = "lost-host:99:deadbeef"
    store.sadd(K.processes, lost)
    store.lpush(K.inprogress(lost), store.rpop(K.queue("default")))
    store.hset(K.heartbeat(lost), "pid", 99)
    store.pexpire(K.heartbeat(lost), 1500)  # the lost host's last heartbeat
    running_worker(make_config(heartbeat_ttl=2))
    wait_until(lambda: store.sismember("test:done", "orphan"), timeout=15)
    assert store.llen(K.inprogress(lost)) == 0
    # Forgotten after its list is requeued: the requeued job may run (on another
    # thread) before that last step, so wait for it rather than race it.
    wait_until(lambda: not store.sismember(K.processes, lost), timeout=5, message="forgotten")
    assert jid


@pytest.mark.skipif(not liveness.locus(), reason="needs Linux's /proc")
def test_a_list_whose_process_is_gone_from_this_machine_is_recovered_before_its_ttl(
    make_config: Callable[..., Config],
    running_worker: StartWorker,
    client: Client,
    store: redis.Redis,
) -> None:
    """A dead worker of this machine (its master died before reaping it) is
    recovered at the first scan; a live one, one of another machine and the
    dead child of a live master (its master requeues it) wait."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a pid that was ours and is gone
    here, ours = liveness.locus(), {"master_pid": os.getpid()}
    ours["master_started"] = liveness.started_at(os.getpid()) or 0
    owners = {
        "gone": ("here:1:dead", here, gone.pid, 1, {}),
        "alive": ("here:2:live", here, os.getpid(), liveness.started_at(os.getpid()), {}),
        "elsewhere": ("there:3:away", "another-boot/1", gone.pid, 1, {}),
        "its master's": ("here:4:child", here, gone.pid, 1, ours),  # a live master's child
    }
    for marker, (identity, locus, pid, started, master) in owners.items():
        client.push({"job": "tests.record", "args": [marker]})
        store.sadd(K.processes, identity)
        store.lpush(K.inprogress(identity), store.rpop(K.queue("default")))
        fields = {"identity": identity, "locus": locus, "pid": pid, "pid_started": started}
        store.hset(K.heartbeat(identity), mapping={**fields, **master})
        store.expire(K.heartbeat(identity), 600)  # would look alive for 10 minutes
    running_worker(make_config())
    wait_until(lambda: store.sismember("test:done", "gone"), timeout=15)
    # Gone from ``ps`` too: the scan forgets the process after it requeued its
    # list, and the requeued job may run (and be seen done) in between.
    wait_until(
        lambda: (
            not store.exists(K.heartbeat("here:1:dead"))
            and not store.sismember(K.processes, "here:1:dead")
        ),
        timeout=10,
        message="the dead process forgotten",
    )
    for identity in ("here:2:live", "there:3:away", "here:4:child"):
        assert store.llen(K.inprogress(identity)) == 1, identity
        assert store.exists(K.heartbeat(identity)), identity


def test_heartbeat_describes_the_process(
    make_config: Callable[..., Config],
    running_worker: StartWorker,
    store: redis.Redis,
) -> None:
    worker = running_worker(make_config(concurrency=3, queues=["a:2", "b"]))
    info = {k.decode(): v.decode() for k, v in store.hgetall(K.heartbeat(worker.ctx.name)).items()}
    assert info["identity"] == worker.ctx.name
    assert info["queues"] == "a,b" and info["concurrency"] == "3"
    assert info["busy"] == "0" and info["quiet"] == "0"
    assert int(info["pid"]) > 0 and float(info["started_at"]) > 0
    assert 0 < store.ttl(K.heartbeat(worker.ctx.name)) <= 60
    assert store.sismember(K.processes, worker.ctx.name)


def test_remote_commands_reach_the_process(
    make_config: Callable[..., Config],
    running_worker: StartWorker,
    store: redis.Redis,
) -> None:
    worker = running_worker(make_config(heartbeat_ttl=2))
    store.rpush(K.control(worker.ctx.name), "quiet", "bogus")
    assert worker.commands.get(timeout=5) == "quiet"
    assert worker.commands.empty()  # the unknown command was dropped


def test_a_redis_outage_in_the_middle_of_2000_jobs_loses_nothing(
    private_redis: RedisServerProcess,
    make_config: Callable[..., Config],
    running_worker: StartWorker,
) -> None:
    url = private_redis.url
    Client(url).push_bulk({"job": "tests.slow_count", "args": [[n, 0.002] for n in range(2000)]})
    worker = running_worker(make_config(url, concurrency=5))
    wait_until(lambda: len(jobs.COUNTS) >= 300, timeout=30, message="300 jobs done")
    private_redis.stop()
    time.sleep(3)  # the outage under test
    private_redis.start()
    wait_until(lambda: len(jobs.COUNTS) == 2000, timeout=90, message="all 2000 jobs done")
    store = private_redis.client()
    wait_until(lambda: store.llen(worker.ctx.inprogress_key) == 0, timeout=30)
    assert store.llen(K.queue("default")) == 0 and store.zcard(K.dead) == 0
    threads = [
        *worker.manager.processors,
        worker.manager.listener,
        worker.heartbeat,
        worker.poller,
        worker.selfcheck,
    ]
    assert all(thread.is_alive() for thread in threads), "a thread died of the outage"
    # Jobs finishing during the outage may run twice (at-least-once), never zero times.
    assert min(jobs.COUNTS.values()) >= 1


def test_a_job_fetched_as_quiet_begins_is_given_back_not_started(
    make_config: Callable[..., Config], client: Client, store: redis.Redis
) -> None:
    # Patched before start: a thread already inside the real fetch would race it.
    worker = WorkerProcess(make_config(concurrency=1))
    feed = worker.manager.feed
    deliver = feed.deliver

    def deliver_after_quiet(call: Any, now: float) -> None:
        if call.reply:
            worker.manager.quiet()  # quiet arrives while the fetch was in flight
        deliver(call, now)

    feed.deliver = deliver_after_quiet  # type: ignore[method-assign]
    worker.start()
    try:
        jid = client.push({"job": "tests.record", "args": ["given-back"]})
        wait_until(lambda: worker.manager.quiet_now, timeout=10, message="fetched, then quiet")
        wait_until(lambda: store.llen(worker.ctx.inprogress_key) == 0, timeout=10)
        assert json.loads(store.lindex(K.queue("default"), 0))["jid"] == jid
        assert not started_marker(store, "given-back")
        assert worker.manager.busy == 0
    finally:
        worker.stop(timeout=5)


def started_marker(store: redis.Redis, marker: str) -> bool:
    return bool(store.sismember("test:started", marker))


def test_drain_runs_queued_and_scheduled_jobs_in_process(
    client: Client, store: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    from jobmaster import testing

    monkeypatch.setattr(jobs, "store", lambda: store)
    client.push_bulk({"job": "tests.record", "args": [["d1"], ["d2"]]})
    client.push({"job": "tests.record", "args": ["d3"], "at": time.time() + 3600})
    assert testing.drain(client) == 3
    assert store.smembers("test:done") == {b"d1", b"d2", b"d3"}
    assert testing.drain(client) == 0


def test_a_spinning_job_is_interrupted_by_its_timeout_and_retried(
    make_config: Callable[..., Config],
    running_worker: StartWorker,
    client: Client,
    store: redis.Redis,
) -> None:
    client.push({"job": "tests.spin", "args": ["spinner"]})  # timeout=1, retry=1
    worker = running_worker(make_config(concurrency=2))
    wait_until(lambda: store.zcard(K.dead) == 1, timeout=20, message="spinner dead")
    assert attempts(store, "spinner") == 2  # the first run and its retry
    [entry] = dead_entries(store)
    assert entry["error_class"] == "JobTimeout"
    assert entry["error_message"] == "ran past its timeout of 1s"
    assert all(t.is_alive() for t in worker.manager.processors)
    wait_until(lambda: worker.manager.busy == 0, timeout=5, message="its thread let go")


def test_hooks_run_once_on_success_and_on_failing_for_good(
    make_config: Callable[..., Config],
    running_worker: StartWorker,
    client: Client,
    store: redis.Redis,
) -> None:
    ok = client.push({"job": "tests.hooked", "args": ["ok", False]})
    client.push({"job": "tests.hooked", "args": ["bad", True]})  # retry=1: fails twice
    client.push({"job": "tests.bad_hook", "args": ["after-bad-hook"]})
    client.push({"job": "tests.record", "args": ["later"]})
    running_worker(make_config(concurrency=1))
    wait_until(lambda: store.hget("test:hooks", "failure:bad") == b"KeyError", timeout=20)
    wait_until(lambda: store.sismember("test:done", "later"), timeout=10)
    assert store.hget("test:hooks", "success:ok") == ok.encode()
    assert attempts(store, "bad") == 2
    assert store.hget("test:hooks", "success:bad") is None
    assert store.hget("test:hooks", "failure:ok") is None
    # A hook that raises is logged; its job still counts as done, the worker goes on.
    assert store.hget("test:hooks", "raising") == b"1"
    assert store.sismember("test:done", "after-bad-hook")
