"""One place at a time: an outcome is recorded only by the process that holds the job.

Each test here names a way a job used to end in two places: a late
acknowledgement after a stop pushed the job back, or after another process
recovered it; a claim that raced a stop; a timeout that job code swallowed.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

from jobmaster.client import Client
from jobmaster.config import Config
from jobmaster.keys import Keys
from jobmaster.worker.process import WorkerProcess
from tests.helpers import wait_until

K = Keys()
StartWorker = Callable[[Config], WorkerProcess]


def queued_jids(store: redis.Redis, queue: str = "default") -> list[str]:
    return [json.loads(raw)["jid"] for raw in store.lrange(K.queue(queue), 0, -1)]


def test_a_job_pushed_back_at_a_stop_is_not_also_recorded_when_it_fails_late(
    make_config: Callable[..., Config], client: Client, store: redis.Redis
) -> None:
    worker = WorkerProcess(make_config(concurrency=2))
    worker.start()
    jid = client.push({"job": "tests.sleeps_then_fails", "args": ["late", 1.0]})
    wait_until(lambda: store.sismember("test:started", "late"), timeout=10)
    report = worker.stop(timeout=0.2)
    assert report.requeued == [jid]
    # The job's thread goes on after the stop: wait until it has failed and
    # tried to record that.
    wait_until(lambda: store.sismember("test:ended", "late"), timeout=10)
    wait_until(lambda: worker.manager.busy == 0, timeout=10, message="its thread let go")
    assert queued_jids(store) == [jid]
    assert store.zcard(K.retry) == 0, "also in the retry set: in two places"
    assert store.get(K.status(jid)) == b"queued"
    assert store.get(K.stat("failed")) is None
    assert store.llen(worker.ctx.inprogress_key) == 0


def test_a_job_recovered_from_under_a_live_process_is_not_also_acknowledged(
    make_config: Callable[..., Config],
    running_worker: StartWorker,
    client: Client,
    store: redis.Redis,
) -> None:
    """As when a process's heartbeat expired (a long GC pause, a SIGSTOP) while
    its thread still ran the job: the recoverer holds the job now."""
    worker = running_worker(make_config(concurrency=1))
    jid = client.push({"job": "tests.record", "args": ["recovered", 1.0]})
    wait_until(lambda: store.sismember("test:started", "recovered"), timeout=10)
    worker.manager.quiet()  # so the requeued job stays queued for us to see
    report = worker.ctx.recovery.requeue_all(worker.ctx.name)
    assert report.requeued == [jid]
    wait_until(lambda: store.sismember("test:done", "recovered"), timeout=10)
    wait_until(lambda: worker.manager.busy == 0, timeout=10)
    assert queued_jids(store) == [jid]
    assert store.get(K.stat("processed")) is None, "acknowledged by the thread that lost it"
    assert store.get(K.status(jid)) == b"queued"


class StopWhenChecked(threading.Event):
    """The fetching flag, set: the first time a processor thread reads it after
    a fetch, a graceful stop begins in another thread, and the read answers
    what the flag said *before* the stop (the thread saw "fetching", then the
    stop came). The stop gets up to a second to run to its end first."""

    def __init__(self, worker: WorkerProcess) -> None:
        super().__init__()
        self.set()
        self.worker = worker
        self.armed = False
        self.stopper: threading.Thread | None = None

    def is_set(self) -> bool:
        answer = super().is_set()
        if self.armed and threading.current_thread().name.startswith("jobmaster-processor"):
            self.armed = False
            stopper = threading.Thread(target=self.worker.stop, args=(10.0,))
            stopper.start()
            # Published once started: the test joins it as soon as it sees it.
            self.stopper = stopper
            stopper.join(timeout=1.0)
        return answer


def test_a_stop_that_begins_as_a_job_is_claimed_waits_for_it(
    make_config: Callable[..., Config], client: Client, store: redis.Redis
) -> None:
    """A thread checked "fetching?" and then registered the job: a stop in
    between saw nothing running, pushed the job back, and the thread ran it
    anyway (done, and queued again). A claim is one step with the stop's
    state now: the stop waits for the job (10 s allowed) and nothing is
    pushed back."""
    worker = WorkerProcess(make_config(concurrency=1))
    trap = StopWhenChecked(worker)
    worker.manager.fetching = worker.manager.table.fetching = trap
    feed = worker.manager.feed
    deliver = feed.deliver

    def deliver_then_arm(call: Any, now: float) -> None:
        held = feed.held
        deliver(call, now)
        trap.armed = trap.armed or feed.held > held  # a job is on its way to the runner

    feed.deliver = deliver_then_arm  # type: ignore[method-assign]
    worker.start()
    jid = client.push({"job": "tests.record", "args": ["raced", 0.5]})
    wait_until(lambda: trap.stopper is not None, timeout=10, message="stop began")
    assert trap.stopper is not None
    trap.stopper.join(timeout=15)
    wait_until(lambda: worker.manager.busy == 0, timeout=10)
    assert store.hget("test:runs", "raced") == b"1"
    assert queued_jids(store) == [], "pushed back although it ran"
    assert store.get(K.stat("processed")) == b"1"
    assert store.get(K.status(jid)) == b"complete"


def test_a_timeout_is_not_swallowed_by_the_jobs_own_except_exception(
    make_config: Callable[..., Config],
    running_worker: StartWorker,
    client: Client,
    store: redis.Redis,
) -> None:
    running_worker(make_config(concurrency=1))
    started = time.monotonic()
    jid = client.push({"job": "tests.swallows_everything", "args": ["swallower", 8.0]})
    wait_until(lambda: store.zcard(K.dead) == 1, timeout=6, message="ended by its timeout")
    assert time.monotonic() - started < 6  # not its full 8 s
    assert not store.sismember("test:done", "swallower")
    [entry] = [json.loads(raw) for raw in store.zrange(K.dead, 0, -1)]
    assert (entry["jid"], entry["error_class"]) == (jid, "JobTimeout")


def test_a_counter_that_is_not_a_number_neither_loses_the_job_nor_stops_the_count(
    make_config: Callable[..., Config],
    running_worker: StartWorker,
    client: Client,
    store: redis.Redis,
) -> None:
    """INCR of a corrupt counter raised after the LREM, and Redis keeps a
    failing script's earlier writes: the job was in no place at all."""
    store.set(K.stat("processed"), "x")
    store.set(K.stat("failed"), "not a number either")
    running_worker(make_config(concurrency=1))
    # Its retry is a minute away: nothing runs it again while we look.
    jid = client.push({"job": "tests.sleeps_then_fails", "args": ["corrupt-counters", 0]})
    wait_until(lambda: store.zcard(K.retry) == 1, timeout=10, message="in the retry set")
    [entry] = [json.loads(raw) for raw in store.zrange(K.retry, 0, -1)]
    assert entry["jid"] == jid
    assert store.get(K.stat("processed")) == b"1"  # started over
    assert store.get(K.stat("failed")) == b"1"
    assert store.get(K.status(jid)) == b"retrying"


def test_an_outcome_that_cannot_be_stored_leaves_the_job_held_not_lost(
    make_config: Callable[..., Config],
    client: Client,
    store: redis.Redis,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The retry set's key holds a string, and so does the dead set's (where a
    retry that cannot land goes: test_moves.py): nothing is written, and the
    entry stays in the in-progress list (requeued by the self-check)."""
    from jobmaster.worker import outcome as outcomes

    store.set(K.retry, "not a sorted set")
    store.set(K.dead, "not a sorted set either")
    worker = WorkerProcess(make_config(concurrency=1))
    client.push({"job": "tests.fails", "args": ["unstorable"]})
    [unit] = worker.manager.fetcher.fetch_many(1)
    failed = outcomes.decide_failure(
        json.loads(unit.raw), RuntimeError("boom"), None, time.time(), 2
    )
    monkeypatch.setattr(outcomes, "RECORD_ATTEMPTS_FOR", 0.0)  # one try
    assert outcomes.record(worker.ctx, unit.raw, failed) is False
    assert store.lrange(worker.ctx.inprogress_key, 0, -1) == [unit.raw]
    assert store.get(K.stat("processed")) is None  # nothing of it was written


def test_a_corrupt_batch_neither_loses_its_job_nor_fails_the_acknowledgement(
    make_config: Callable[..., Config],
    running_worker: StartWorker,
    client: Client,
    store: redis.Redis,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A batch whose ``pending`` is not a number: the workflow step failed the
    script after the job had left the in-progress list (Redis keeps a failing
    script's earlier writes), so the worker took its outcome for unrecorded,
    sent it again, and said "not recorded" of a job that was; its hook never
    ran."""
    import jobmaster
    from tests import jobs

    batch = jobmaster.batch(client=client)
    batch.add(jobs.member.s(1))
    store.hset(K.batch(batch.bid), "pending", "not a number")
    worker = running_worker(make_config(concurrency=1))
    wait_until(lambda: store.get(K.stat("processed")) == b"1", timeout=10, message="recorded")
    wait_until(lambda: worker.manager.busy == 0, timeout=10, message="its thread done with it")
    assert store.llen(worker.ctx.inprogress_key) == 0
    [status] = [store.get(key) for key in store.keys(K.status("*"))]
    assert status == b"complete"
    refused = [r for r in caplog.records if "could not record" in r.getMessage()]
    refused += [r for r in caplog.records if "not recorded" in r.getMessage()]
    assert refused == []
