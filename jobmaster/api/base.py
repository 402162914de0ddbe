"""What every operator API object stands on: one Redis, one namespace, the scripts.

Each API object takes a ``redis.Redis`` (with a namespace), a producer
``Client``, or nothing: then the producer's default client, the one
``jobmaster.configure`` sets (as ``jobmaster.status`` does). The API reads and
moves what workers and producers wrote; it imports nothing from the worker or
supervisor side, so a web dashboard can use it without the app's jobs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, TypeAlias

import redis

from jobmaster.client import DEFAULT_STATUS_TTL, Client, default_client
from jobmaster.keys import Keys
from jobmaster.scripts import ExpireWaiting, Scripts, Unlock
from jobmaster.tolerant import text
from jobmaster.unique import MODES

# A Backend is accepted too, so objects made from another (Queue.all) share it.
Connection: TypeAlias = "redis.Redis | Client | Backend | None"

PAGE = 500  # entries read per round trip when iterating a queue or a set


@dataclass(frozen=True)
class Backend:
    """The Redis connection, key names, scripts and status TTL an API object uses."""

    redis: redis.Redis
    keys: Keys
    scripts: Scripts
    status_ttl: int  # 0: status tracking off (a moved job's status is left alone)

    @classmethod
    def resolve(cls, connection: Connection = None, namespace: str | None = None) -> Backend:
        """A Client brings its own namespace and status TTL; a bare Redis gets the
        defaults (namespace ``jobmaster``); nothing means the default client."""
        if isinstance(connection, Backend):
            return connection
        if connection is None:
            connection = default_client()
        if isinstance(connection, Client):
            keys = Keys(namespace) if namespace else connection.keys
            return cls(connection.redis, keys, connection.scripts, connection.status_ttl)
        keys = Keys(namespace or "jobmaster")
        return cls(connection, keys, Scripts(connection), round(DEFAULT_STATUS_TTL))

    def release_unique(self, payload: dict[str, Any] | None) -> None:
        """Free the unique lock of a job that will not run (deleted), if it holds it.

        The UNLOCK script only acts when the lock still holds this jid, so a lock
        already taken by a newer job is never touched.
        """
        if not payload or payload.get("unique") not in MODES:
            return
        digest, jid = payload.get("unique_digest"), payload.get("jid")
        if isinstance(digest, str) and isinstance(jid, str):
            Unlock(lock_key=self.keys.unique(digest), jid=jid).run(self.scripts.unlock)

    def expire_waiting(self, jids: Iterable[str | None], client: Any = None) -> None:
        """Give the statuses of jobs dropped from a queue without an outcome
        (deleted, cleared) a TTL: a queued job's status has none, since it
        lives as long as its job waits (scripts.py, "Status lifetimes").
        Status tracking off here (0) still expires what workers wrote, after
        the default TTL. ``client``: a pipeline to queue the call on."""
        keys = [self.keys.status(jid) for jid in jids if jid]
        if keys:
            call = ExpireWaiting(status_keys=keys, ttl=self.status_ttl or round(DEFAULT_STATUS_TTL))
            call.run(self.scripts.expire_waiting, client=client)


def as_bytes(value: bytes | str) -> bytes:
    """Members as stored: a connection made with ``decode_responses`` returns str."""
    return value.encode() if isinstance(value, str) else value


def texts(values: Iterable[Any]) -> list[str]:
    return sorted(text(v) for v in values)


def glob_escape(value: str) -> str:
    """``value`` matched literally by SCAN's MATCH (a jid typed by an operator)."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in value)
