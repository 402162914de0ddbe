"""The I/O core's own connection: replies in order, error replies kept to their
call, a lost connection failing what it carried and coming back by itself."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from jobmaster.worker.wire import Wire

ECHO = "return ARGV[1]"
FAIL = "return redis.error_reply('ERR told to fail')"


@pytest.fixture
def wire(store: redis.Redis) -> Iterator[Wire]:
    made = Wire(store)
    yield made
    made.drop()


def test_a_round_trip_answers_each_call_and_keeps_an_error_to_its_own(
    wire: Wire, store: redis.Redis
) -> None:
    echo, fail = store.script_load(ECHO), store.script_load(FAIL)
    replies = wire.round_trip(
        [(echo, ["k"], [b"one"]), (fail, [], []), (echo, [], [2.5]), ("0" * 40, [], [])]
    )
    assert replies[0] == b"one" and replies[2] == b"2.5"
    assert isinstance(replies[1], redis.ResponseError) and "told to fail" in str(replies[1])
    assert isinstance(replies[3], redis.exceptions.NoScriptError)
    assert wire.round_trip([(echo, [], [b"in step"])]) == [b"in step"]  # the stream stays in step


def test_a_lost_connection_fails_its_calls_and_the_next_round_trip_reconnects(
    wire: Wire, store: redis.Redis
) -> None:
    echo = store.script_load(ECHO)
    assert wire.round_trip([(echo, [], [b"first"])]) == [b"first"]
    store.client_kill_filter(_type="normal", skipme=True)  # every client but this admin one
    lost = wire.round_trip([(echo, [], [b"a"]), (echo, [], [b"b"])])
    assert all(isinstance(reply, redis.ConnectionError) for reply in lost), lost
    assert wire.round_trip([(echo, [], [b"back"])]) == [b"back"]


def test_a_readonly_reply_drops_the_connection_for_the_promoted_primary(
    wire: Wire, store: redis.Redis
) -> None:
    """A primary demoted by a failover answers READONLY: the call gets it, and
    the next round trip goes out on a new connection (Sentinel's pool then
    points it at the promoted primary), not the demoted one forever."""
    readonly = store.script_load("return redis.error_reply('READONLY demoted')")
    echo = store.script_load(ECHO)
    first = wire._ready()
    first.connect()
    socket_before = first._sock
    [reply] = wire.round_trip([(readonly, [], [])])
    assert isinstance(reply, redis.ReadOnlyError)
    assert wire._connection is None  # dropped
    assert wire.round_trip([(echo, [], [b"next"])]) == [b"next"]
    assert wire._connection is not None and wire._connection._sock is not socket_before
