"""The I/O core's own connection to Redis: script calls packed and read without
redis-py's command layer.

Why. In the profile of a child at full speed, redis-py's own work for the
core's pipelines (checking a connection out of the pool and back, with a
``getpid`` check each way, building a Pipeline and its command stack,
packing each command through a generator, the retry wrapper) was a fifth of
the child's GIL time. The core is one thread with one round trip at a time,
so it holds one connection for good and speaks to it directly: each call is
one ``hiredis.pack_command``, a round trip is one ``sendall`` of their
concatenation, then one ``read_response`` per call.

What stays redis-py's: the connection itself (its socket, TLS, unix socket,
Sentinel discovery, AUTH and HELLO on connect, the reply parser and its
mapping of error replies to exceptions), taken from the client's pool once.

Errors. An error reply (a script's error, NOSCRIPT) is that call's reply:
the stream stays in step; a READONLY one (a primary demoted by a failover)
also drops the connection, so the next round trip finds the new primary. A
connection error or timeout drops the connection (the next round trip makes
a new one) and fails every call whose reply was not read yet: each may have
run, as after any lost reply.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import hiredis
import redis
from redis.connection import Connection


class Wire:
    """One connection of ``client``'s pool, held for the core's life."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self._connection: Connection | None = None

    def _ready(self) -> Connection:
        connection = self._connection
        if connection is None:
            # Checked out once and never returned: it counts in the pool's cap
            # (context.BACKGROUND_THREADS, "I/O core").
            connection = self.client.connection_pool.get_connection()
            self._connection = connection
        return connection

    def round_trip(self, calls: Sequence[tuple[str, Sequence[Any], Sequence[Any]]]) -> list[Any]:
        """EVALSHA each ``(sha, keys, args)`` in one round trip: each one's reply,
        or the exception that stands for it (an error reply, or the connection
        error that lost it)."""
        packed = b"".join(
            hiredis.pack_command(("EVALSHA", sha, len(keys), *keys, *args))
            for sha, keys, args in calls
        )
        replies: list[Any] = []
        try:
            connection = self._ready()
            connection.send_packed_command([packed], check_health=False)  # type: ignore[no-untyped-call]
            for _ in calls:
                try:
                    replies.append(connection.read_response())
                except redis.ResponseError as error:
                    replies.append(error)
        except (redis.ConnectionError, redis.TimeoutError, OSError) as error:
            self.drop()
            lost = error if isinstance(error, redis.RedisError) else redis.ConnectionError(error)
            replies.extend(lost for _ in range(len(calls) - len(replies)))
        if any(isinstance(reply, redis.ReadOnlyError) for reply in replies):
            # A primary demoted by a failover: the next round trip reconnects,
            # through Sentinel to the promoted one (as redis-py's pool does).
            self.drop()
        return replies

    def drop(self) -> None:
        """Close the connection (after an error, or at the core's end)."""
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.disconnect()  # type: ignore[no-untyped-call]
            self.client.connection_pool.release(connection)
