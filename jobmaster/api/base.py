"""What every operator API object stands on: one Redis, one namespace, the scripts.

Each API object takes a ``redis.Redis`` (with a namespace), a producer
``Client``, or nothing: then the producer's default client, the one
``jobmaster.configure`` sets (as ``jobmaster.status`` does). The API reads and
moves what workers and producers wrote; it imports nothing from the worker or
supervisor side, so a web dashboard can use it without the app's jobs.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, TypeAlias, cast

import redis
from redis import exceptions as redis_errors

from jobmaster.client import DEFAULT_STATUS_TTL, Client, default_client
from jobmaster.keys import Keys
from jobmaster.scripts import Scripts, Unlock
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


def as_bytes(value: bytes | str) -> bytes:
    """Members as stored: a connection made with ``decode_responses`` returns str."""
    return value.encode() if isinstance(value, str) else value


def text(value: Any) -> str:
    """A hash field or set member as text, whatever the connection decodes."""
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def texts(values: Iterable[Any]) -> list[str]:
    return sorted(text(v) for v in values)


# The last second of year 9999: the latest unix time datetime (so every
# formatter of the CLI and the dashboard) can show.
LATEST = 253_402_300_799.0


def number(value: Any, default: float = 0.0) -> float:
    """A counter or hash field as a finite float (missing, unreadable, NaN or
    infinite: ``default``).

    Every number the operator API reads from Redis for display goes through
    here (or ``moment``): anyone who can write to Redis can set ``inf`` or
    ``nan``, and ``int()`` of either, or a date of it, raises (SPEC §8).
    """
    try:
        found = float(cast(Any, value)) if value is not None else default
    except (TypeError, ValueError, OverflowError):
        return default
    return found if math.isfinite(found) else default


def moment(value: Any) -> float | None:
    """A unix time read from Redis, or None when unknown: unreadable, not
    finite, or outside the years 1970-9999 that dates can be shown for."""
    found = number(value, -1.0)
    return found if 0.0 <= found <= LATEST else None


def glob_escape(value: str) -> str:
    """``value`` matched literally by SCAN's MATCH (a jid typed by an operator)."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in value)


def answers(pipe: Any, *defaults: Any) -> list[Any]:
    """A pipeline's replies, each command Redis refused (WRONGTYPE: a key that
    someone overwrote with another type) replaced by its default (None past
    the defaults given), so one such key cannot take down a listing or a
    page (SPEC §8). A lost connection still raises."""
    replies = pipe.execute(raise_on_error=False)
    return [
        (defaults[i] if i < len(defaults) else None)
        if isinstance(reply, redis_errors.ResponseError)
        else reply
        for i, reply in enumerate(replies)
    ]
