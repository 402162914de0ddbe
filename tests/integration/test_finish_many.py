"""FINISH_MANY: the acknowledgements of one round trip as one script call,
each job recorded exactly as FINISH records it, the counters added up once."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import pytest
import redis

from jobmaster.client import Client
from jobmaster.config import Config
from jobmaster.keys import Keys
from jobmaster.worker.context import WorkerContext
from jobmaster.worker.core import Call
from jobmaster.worker.executor import execute
from jobmaster.worker.fetch import Fetcher
from jobmaster.worker.outcome import finish_call

K = Keys()


@pytest.fixture
def ctx(make_config: Callable[..., Config]) -> Iterator[WorkerContext]:
    made = WorkerContext.create(make_config(status_ttl=60))
    yield made
    made.core.close()
    made.redis.close()


def acknowledge_together(ctx: WorkerContext, client: Client, markers: list[str]) -> list[Call]:
    """Run a ``tests.record`` job per marker, then send their FINISHes in one round trip."""
    client.push_bulk({"job": "tests.record", "args": [[m] for m in markers]})
    calls = []
    for unit in Fetcher(ctx).fetch_many(len(markers)):
        script, call, _, _ = finish_call(ctx, unit.raw, execute(unit, ctx), unit.queue)
        calls.append(Call(script, call.keys(), call.argv()))
    ctx.core._send(calls)
    return calls


def test_each_job_is_recorded_and_the_counters_move_once_by_the_sum(
    ctx: WorkerContext, client: Client, store: redis.Redis
) -> None:
    calls = acknowledge_together(ctx, client, ["a", "b", "c"])
    assert [call.reply for call in calls] == [1, 1, 1]
    assert store.llen(ctx.inprogress_key) == 0
    assert store.get(K.stat("processed")) == b"3"
    day_keys = [key for key in store.keys(K.stat("processed") + ":*")]
    assert len(day_keys) == 1 and store.get(day_keys[0]) == b"3"
    assert store.ttl(day_keys[0]) > 0  # a per-day counter gets its TTL as it is made
    for call in calls:
        jid = json.loads(call.args[0])["jid"]
        assert store.get(K.status(jid)) == b"complete"
        assert len(store.lrange(K.attempts(jid), 0, -1)) == 1


def test_a_job_no_longer_listed_records_nothing_and_the_others_still_do(
    ctx: WorkerContext, client: Client, store: redis.Redis
) -> None:
    client.push_bulk({"job": "tests.record", "args": [["kept"], ["taken"]]})
    calls = []
    for unit in Fetcher(ctx).fetch_many(2):
        script, call, _, _ = finish_call(ctx, unit.raw, execute(unit, ctx), unit.queue)
        calls.append(Call(script, call.keys(), call.argv()))
    store.lrem(ctx.inprogress_key, 1, calls[1].args[0])  # pushed back from under us
    ctx.core._send(calls)
    assert [call.reply for call in calls] == [1, 0]
    assert store.get(K.stat("processed")) == b"1"  # the one recorded only


def test_a_counter_that_is_not_a_number_starts_over_at_the_round_trips_count(
    ctx: WorkerContext, client: Client, store: redis.Redis
) -> None:
    store.set(K.stat("processed"), "not a number")
    calls = acknowledge_together(ctx, client, ["x", "y"])
    assert [call.reply for call in calls] == [1, 1]
    assert store.get(K.stat("processed")) == b"2"
