"""Every move of an entry between keys lands it or leaves it where it was (SPEC §8).

A Lua script is not rolled back when a command in it fails: the writes made
before the failure stay. TRANSFER and BURY removed the entry first and then
pushed it, so a target key holding another type (``SET <ns>:queue:weird x``,
and a payload that names ``"queue": "weird"``) made the push fail after the
removal: the job was in no key at all. Each test here is one way in: a crash
requeue, a stop's push-back, the poller, a retry or burial recorded by
FINISH, an operator's retry, and the dead set itself of another type.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable

import pytest
import redis

import jobmaster
import jobmaster.client
from jobmaster import payload as wire
from jobmaster.api.sorted_sets import DeadSet, NotRunnable
from jobmaster.client import Client
from jobmaster.config import Config
from jobmaster.deadset import DeadSetLimits
from jobmaster.identity import Identity
from jobmaster.keys import Keys
from jobmaster.poison import crash_triage
from jobmaster.recovery import Recovery
from jobmaster.scripts import Scripts
from jobmaster.worker import outcome
from jobmaster.worker.context import WorkerContext
from jobmaster.worker.outcome import decide_failure, record
from jobmaster.worker.poller import BATCH, ScheduledPoller
from jobmaster.worker.process import WorkerProcess
from tests.helpers import wait_until

pytestmark = pytest.mark.timeout(60)
K = Keys()
DYING = K.inprogress("host:1:dying")


def _failed(payload: dict[str, object], error: BaseException) -> None:
    """Never run here: the hook runs later, in a worker."""


@jobmaster.job(name="tests.moves.hooked", unique="until_executed", on_failure=_failed)
def hooked(marker: str) -> None:
    """A unique job with an on_failure hook: a burial frees its lock, queues its hook."""


@pytest.fixture
def recovery(store: redis.Redis) -> Recovery:
    return Recovery(store, K, Scripts(store), DeadSetLimits(), status_ttl=60)


@pytest.fixture
def ctx(make_config: Callable[..., Config], store: redis.Redis) -> WorkerContext:
    """A worker process's context, without its threads."""
    return WorkerContext(
        config=make_config(),
        identity=Identity(nonce="moves"),
        redis=store,
        keys=K,
        scripts=Scripts(store),
    )


def in_progress(store: redis.Redis, key: str, queue: str = "weird", **fields: object) -> bytes:
    """A job running in the process of ``key``: its payload names ``queue``."""
    payload = wire.build("tests.record", ["moved"], {}, queue=queue)
    payload.update(fields, enqueued_at=time.time())
    raw = wire.encode(payload)
    store.lpush(key, raw)
    return raw


def dead(store: redis.Redis) -> list[dict[str, object]]:
    return [json.loads(raw) for raw in store.zrange(K.dead, 0, -1)]


def test_a_crash_requeue_to_a_queue_of_another_type_buries_the_job_with_the_reason(
    store: redis.Redis, recovery: Recovery
) -> None:
    """The master's triage takes the queue from the payload: a forged name."""
    store.set(K.queue("weird"), "x")
    raw = in_progress(store, DYING)
    jid = json.loads(raw)["jid"]

    report = recovery.requeue(DYING, [raw], triage=crash_triage(3, "", "SIGKILL"))

    assert (report.requeued, report.buried) == ([], [jid])
    [entry] = dead(store)
    assert entry["jid"] == jid and entry["crash_count"] == 1
    assert entry["dead_reason"] == f"could not be requeued: {K.queue('weird')} holds a string"
    assert store.llen(DYING) == 0
    assert store.get(K.queue("weird")) == b"x"  # the forged key is left alone
    assert store.get(K.status(jid)) == b"dead"


def test_a_push_back_to_a_queue_of_another_type_buries_the_job(
    store: redis.Redis, recovery: Recovery
) -> None:
    """A stop pushes back to the queue a job was fetched from (``queues``)."""
    store.zadd(K.queue("default"), {"x": 1})
    raw = in_progress(store, DYING, queue="default")

    report = recovery.requeue(DYING, [raw], queues={raw: "default"})

    assert len(report.buried) == 1 and not report.requeued
    assert dead(store)[0]["dead_reason"] == (
        f"could not be requeued: {K.queue('default')} holds a zset"
    )
    assert store.llen(DYING) == 0


def test_a_move_whose_dead_set_is_of_another_type_too_leaves_the_entry_where_it_was(
    store: redis.Redis, recovery: Recovery, caplog: pytest.LogCaptureFixture
) -> None:
    store.set(K.queue("weird"), "x")
    store.set(K.dead, "not a sorted set")
    raw = in_progress(store, DYING)

    report = recovery.requeue(DYING, [raw], triage=crash_triage(3, "", "SIGKILL"))

    assert not report
    assert store.lrange(DYING, 0, -1) == [raw]
    [line] = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert f"{K.dead} holds a string" in line.getMessage()
    assert f"left in {DYING}" in line.getMessage()


def test_a_move_lands_whatever_type_the_set_of_queue_names_has(
    store: redis.Redis, recovery: Recovery
) -> None:
    """That set only lists queues for the dashboard: it must not fail a move
    (the entry had landed, but the script's error made the master retry)."""
    store.set(K.queues, "x")
    raw = in_progress(store, DYING, queue="default")

    report = recovery.requeue(DYING, [raw])

    assert report.requeued == [json.loads(raw)["jid"]]
    assert store.lrange(K.queue("default"), 0, -1) == [raw]


def test_a_burial_goes_through_a_forged_lock_and_a_hook_queue_of_another_type(
    store: redis.Redis,
    recovery: Recovery,
    caplog: pytest.LogCaptureFixture,
    redis_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The hook job goes to the job's own queue, the one that refused it."""
    monkeypatch.setattr(jobmaster.client, "_default", None)
    jobmaster.configure(redis_url)
    jid = hooked.options(queue="weird").enqueue("pill")
    raw = store.rpop(K.queue("weird"))
    assert jid is not None and raw is not None
    store.lpush(DYING, raw)
    [lock] = store.keys(K.unique("*"))
    store.delete(K.queue("weird"))
    store.set(K.queue("weird"), "x")
    store.delete(lock)
    store.hset(lock, "forged", "1")

    report = recovery.requeue(DYING, [raw], triage=crash_triage(3, "", "SIGKILL"))

    assert report.buried == [jid]
    assert [entry["jid"] for entry in dead(store)] == [jid]
    assert store.llen(DYING) == 0
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert any(f"hook job was not queued: {K.queue('weird')} is not a list" in e for e in errors)


def test_the_poller_buries_a_due_job_whose_queue_is_of_another_type(
    store: redis.Redis, ctx: WorkerContext
) -> None:
    store.set(K.queue("weird"), "x")
    payload = wire.build("tests.record", ["later"], {}, queue="weird")
    store.zadd(K.scheduled, {wire.encode(payload): time.time() - 1})

    ScheduledPoller(ctx, ctx.stopping).enqueue_due(K.scheduled)

    assert store.zcard(K.scheduled) == 0
    [entry] = dead(store)
    assert entry["jid"] == payload["jid"]
    assert entry["dead_reason"] == f"could not be requeued: {K.queue('weird')} holds a string"


def test_the_poller_passes_over_entries_that_can_land_nowhere(
    store: redis.Redis, ctx: WorkerContext
) -> None:
    """Queue and dead set both of another type: the entries stay due, and a
    full page of them does not make the poll turn forever."""
    store.set(K.queue("weird"), "x")
    store.set(K.dead, "x")
    now = time.time()
    for n in range(BATCH + 5):
        payload = wire.build("tests.record", [n], {}, queue="weird")
        store.zadd(K.scheduled, {wire.encode(payload): now - 1})

    assert ScheduledPoller(ctx, ctx.stopping).enqueue_due(K.scheduled) == 0

    assert store.zcard(K.scheduled) == BATCH + 5


@pytest.mark.parametrize("kind", ["retry", "deferred"])
def test_a_retry_whose_set_is_of_another_type_goes_to_the_dead_set_at_once(
    store: redis.Redis, ctx: WorkerContext, kind: str
) -> None:
    """FINISH put the entry back in the in-progress list and failed; record()
    retried it for 30 s, gave up, and the self-check ran the job again a
    minute later, forever: it could never land."""
    target = K.retry if kind == "retry" else K.scheduled
    store.set(target, "x")
    raw = in_progress(store, ctx.inprogress_key, queue="default")
    payload = wire.decode(raw)
    failure = decide_failure(payload, ValueError("boom"), 0.0, time.time())
    if kind == "deferred":
        failure = outcome.Outcome(
            outcome.Kind.DEFERRED, failure.jid, failure.job, stored=payload, score=time.time()
        )
    started = time.monotonic()

    assert record(ctx, raw, failure)

    assert time.monotonic() - started < 5
    assert store.llen(ctx.inprogress_key) == 0
    [entry] = dead(store)
    assert entry["jid"] == payload["jid"]
    what = "retry" if kind == "retry" else "deferral"
    assert entry["dead_reason"] == f"its {what} could not be stored: {target} holds a string"
    assert store.get(K.status(str(payload["jid"]))) == b"dead"


def test_a_death_whose_dead_set_is_of_another_type_stays_in_progress_and_says_so(
    store: redis.Redis, ctx: WorkerContext, caplog: pytest.LogCaptureFixture
) -> None:
    store.set(K.dead, "x")
    raw = in_progress(store, ctx.inprogress_key, queue="default", retry=0)
    failure = decide_failure(wire.decode(raw), ValueError("boom"), 0.0, time.time())
    assert failure.kind == "dead"
    started = time.monotonic()

    assert not record(ctx, raw, failure)

    assert time.monotonic() - started < 5
    assert store.lrange(ctx.inprogress_key, 0, -1) == [raw]
    assert any(
        f"{K.dead} holds a string" in r.getMessage() for r in caplog.records if r.levelno >= 40
    )


def test_an_operator_s_retry_to_a_queue_of_another_type_leaves_the_entry_dead(
    store: redis.Redis, client: Client
) -> None:
    store.set(K.queue("weird"), "x")
    payload = wire.build("tests.record", ["dead"], {}, queue="weird")
    raw = wire.encode({**payload, "dead_reason": "test", "died_at": time.time()})
    store.zadd(K.dead, {raw: time.time()})

    with pytest.raises(NotRunnable, match="holds a string"):
        DeadSet(client).retry(str(payload["jid"]))

    assert store.zrange(K.dead, 0, -1) == [raw]
    assert DeadSet(client).retry_all() == 0
    assert store.zrange(K.dead, 0, -1) == [raw]


def test_a_chain_s_next_step_whose_queue_refuses_it_is_buried_not_lost(
    make_config: Callable[..., Config],
    running_worker: Callable[[Config], WorkerProcess],
    client: Client,
    store: redis.Redis,
) -> None:
    """FINISH_STEP pushes the next step as the first one ends. Its LPUSH into a
    queue key holding a string failed inside the trapped workflow step: the
    step was never anywhere. It now waits in the scheduled set (due at once),
    where the poller buries it with the reason."""
    from tests import jobs

    store.set(K.queue("weird"), "x")
    running_worker(make_config(concurrency=2))
    jobmaster.chain(
        jobs.step.s("first"), jobs.step.options(queue="weird").s("second"), client=client
    )

    wait_until(lambda: store.zcard(K.dead) == 1, timeout=10, message="the next step buried")
    [entry] = dead(store)
    assert entry["args"][0] == "second"
    assert entry["dead_reason"] == f"could not be requeued: {K.queue('weird')} holds a string"
    assert store.zcard(K.scheduled) == 0


def test_a_chain_s_next_step_refused_by_its_queue_and_the_scheduled_set_is_buried(
    make_config: Callable[..., Config], client: Client, store: redis.Redis
) -> None:
    """push_job's fallback for a queue that refuses the next step is the
    scheduled set; with that set forged too, its ZADD failed inside the trapped
    workflow step and the step was in no key. It goes to the dead set, with
    the reason, instead."""
    from jobmaster import testing
    from tests import jobs

    cid = jobmaster.chain(
        jobs.step.s("first"), jobs.step.options(queue="weird").s("second"), client=client
    )
    store.set(K.queue("weird"), "x")
    store.set(K.scheduled, "x")
    testing.work(make_config(), include_scheduled=False)
    [entry] = dead(store)
    assert entry["args"][0] == "second"
    assert entry["dead_reason"] == f"could not be queued: {K.scheduled} holds a string"
    assert store.get(K.status(str(entry["jid"]))) == b"dead"
    status = jobmaster.chain_status(cid, client)
    assert status is not None and status["done"] == 1


def test_a_batch_callback_refused_by_its_queue_and_the_scheduled_set_is_buried(
    make_config: Callable[..., Config],
    client: Client,
    store: redis.Redis,
    redis_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from jobmaster import testing
    from tests import jobs

    monkeypatch.setattr(jobmaster.client, "_default", None)
    jobmaster.configure(redis_url)
    batch = jobmaster.batch(on_complete=jobs.callback.options(queue="weird").s("done"))
    with batch.jobs():
        jobs.step.enqueue("b1")
    store.set(K.queue("weird"), "x")
    store.set(K.scheduled, "x")
    testing.work(make_config(), include_scheduled=False)
    [entry] = dead(store)
    assert entry["job"] == "tests.callback" and entry["args"][0] == "done"
    assert entry["dead_reason"] == f"could not be queued: {K.scheduled} holds a string"


def test_a_batch_refuses_a_forged_scheduled_set_before_any_write(
    store: redis.Redis, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """BATCH_ADD has no dead set to fall back on: it refuses whole, naming the key."""
    from jobmaster.errors import EnqueueError
    from tests import jobs

    monkeypatch.setattr(jobmaster.client, "_default", None)
    jobmaster.configure(redis_url)
    store.set(K.scheduled, "x")
    batch = jobmaster.batch(on_complete=jobs.callback.s("done"))
    with pytest.raises(EnqueueError, match=f"{K.scheduled} holds a string"), batch.jobs():
        jobs.step.enqueue("b1")
    assert store.keys(f"{K.prefix}batch*") == []
    assert store.keys(K.queue("*")) == []
