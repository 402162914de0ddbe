"""``jobmaster.aresult``: results.py on the asyncio client.

The same protocol, step for step (results.py's docstring): read the status
and result; if the job has not ended, set its waiter's key, SUBSCRIBE to
its ended channel, wait for the subscription's confirmation, read again,
then wait for a message, reading again every ``RECHECK_EVERY`` seconds.
Every decision (what a read means, what a failure's error is, when the
wait is over) is results.py's own function; only the Redis calls are
awaited here, so a wait never holds the event loop.
"""

from __future__ import annotations

import time
from typing import Any

import redis.asyncio
from redis import exceptions as redis_errors

from jobmaster import results
from jobmaster.aio.scripts import run
from jobmaster.errors import JobFailed, RedisPermissionError
from jobmaster.keys import Keys
from jobmaster.results import RECHECK_EVERY, Snapshot
from jobmaster.scripts import PEEK_LIST
from jobmaster.tolerant import optional_text, refused, wrong_type


async def read(connection: redis.asyncio.Redis, keys: Keys, jid: str) -> Snapshot:
    """The job's status and result, in one round trip (results.read)."""
    pipe = connection.pipeline(transaction=False)
    pipe.get(keys.status(jid))
    pipe.get(keys.result(jid))
    return results.snapshot(keys, jid, await pipe.execute(raise_on_error=False))


async def status(connection: redis.asyncio.Redis, keys: Keys, jid: str) -> str | None:
    """The job's status; None if unknown or expired (results.status)."""
    try:
        found = await connection.get(keys.status(jid))
    except redis_errors.ResponseError as error:
        if wrong_type(error):
            return None
        raise refused(error, keys.status(jid), "~" + keys.status("*")) from error
    return optional_text(found)


async def wait_for(connection: redis.asyncio.Redis, keys: Keys, jid: str, wait: float = 0) -> Any:
    """The job's return value once it is ``complete``, waiting up to ``wait``
    seconds (results.wait_for: JobFailed, ResultPending, UnknownJob)."""
    found = await wait_end(connection, keys, jid, wait)
    if found.status == "complete":
        return found.value()
    error_class, error_message = await failure(connection, keys, found)
    raise JobFailed(found.jid, str(found.status), error_class, error_message)


async def wait_end(
    connection: redis.asyncio.Redis, keys: Keys, jid: str, wait: float = 0
) -> Snapshot:
    """What Redis holds for the job once it has ended (results.wait_end)."""
    found = await read(connection, keys, jid)
    if results.first_look(found, wait):
        return found
    started = time.monotonic()
    deadline = started + float(wait)
    key, ttl = results.waiter(keys, jid, wait)
    try:
        await connection.set(key, 1, ex=ttl)
    except redis_errors.ResponseError as error:  # NOPERM: the ACL lacks the key
        raise results.waiter_refused(error, keys, key) from error
    pubsub = connection.pubsub()
    try:
        try:
            await pubsub.subscribe(keys.ended_channel(jid))
            await _confirmed(pubsub, deadline)
        except redis_errors.ResponseError as error:
            raise results.subscribe_refused(error, keys, jid) from error
        while True:
            # Read after the subscription is confirmed: an end published
            # before it is seen here, one published after it wakes us.
            found = await read(connection, keys, jid)
            left = results.left_to_wait(found, started, deadline)
            if left is None:
                return found
            await _message(pubsub, min(left, RECHECK_EVERY))
    finally:
        await pubsub.aclose()  # type: ignore[no-untyped-call]


async def _confirmed(pubsub: Any, deadline: float) -> None:
    """Wait for Redis's reply to SUBSCRIBE (results._confirmed)."""
    while time.monotonic() < deadline:
        message = await pubsub.get_message(timeout=max(0.0, deadline - time.monotonic()))
        if message is not None and message.get("type") == "subscribe":
            return


async def _message(pubsub: Any, timeout: float) -> None:
    """Until a message on the channel, or ``timeout`` seconds."""
    end = time.monotonic() + timeout
    while (left := end - time.monotonic()) > 0:
        message = await pubsub.get_message(timeout=left)
        if message is not None and message.get("type") == "message":
            return


async def failure(
    connection: redis.asyncio.Redis, keys: Keys, found: Snapshot
) -> tuple[str | None, str | None]:
    """The error class and message of a job that ended without a result
    (results.failure: its last attempt, else its dead-set entry)."""
    told = results.told_by_attempt(await newest(connection, keys, found.jid, 1), found)
    if told is not None or found.status != "dead":
        return told or (None, None)
    try:
        entry = await _dead_entry(connection, keys, found.jid)
    except RedisPermissionError as error:  # a producer's user: say so, still JobFailed
        return None, results.dead_set_refused(error)
    return results.told_by_dead_entry(entry, found.jid)


async def newest(
    connection: redis.asyncio.Redis, keys: Keys, jid: str, count: int
) -> list[dict[str, Any]] | None:
    """The job's newest ``count`` attempts (results.newest)."""
    key, grant = keys.attempts(jid), "~" + keys.attempts("*")
    pipe = connection.pipeline(transaction=False)
    results.sized_into(pipe, key)
    readable = results.worth_reading(jid, key, grant, await pipe.execute(False))
    if readable is not True:
        return readable  # [] (none) or None (too large to be a worker's)
    try:
        script = connection.register_script(PEEK_LIST)  # a SHA1 of its text, no round trip
        peeked = await run(results.peek_call(key, count), script)
    except redis_errors.ResponseError as error:
        if wrong_type(error):
            return []
        raise refused(error, key, grant) from error
    return results.peeked_attempts(peeked)


async def _dead_entry(
    connection: redis.asyncio.Redis, keys: Keys, jid: str
) -> dict[str, Any] | None:
    try:
        async for member, _ in connection.zscan_iter(
            keys.dead, match=results.dead_match(jid), count=500
        ):
            entry = results.dead_entry_of(member, jid)
            if entry is not None:
                return entry
    except redis_errors.ResponseError as error:
        if wrong_type(error):  # the dead set's key holds another type
            return None
        raise refused(error, keys.dead, "~" + keys.dead) from error
    return None
