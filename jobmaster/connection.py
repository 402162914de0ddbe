"""Opening Redis connections, and the version check.

One place decides timeouts, what ``redis_url = "embedded"`` means, and how
TLS, credentials and Sentinel (a ``RedisTarget``) become a client, so
producers, workers and the CLI reach the same server the same way.
"""

from __future__ import annotations

import logging
import ssl
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, cast

import redis
import redis.asyncio
from redis.asyncio.retry import Retry as AsyncRetry
from redis.asyncio.sentinel import Sentinel as AsyncSentinel
from redis.backoff import NoBackoff
from redis.retry import Retry
from redis.sentinel import Sentinel

from jobmaster.embedded import embedded_url
from jobmaster.errors import RedisVersionError
from jobmaster.redis_target import RedisTarget

T = TypeVar("T")
log = logging.getLogger("jobmaster.connection")

MIN_REDIS_VERSION = (6, 2)
ASYNC_CONNECTIONS = 32  # per asyncio client: see aconnect
EMBEDDED = "embedded"


def resolve_url(redis_url: str, data_dir: str | Path) -> str:
    """The real URL: ``embedded`` becomes the unix socket in ``data_dir``."""
    if redis_url == EMBEDDED:
        return embedded_url(Path(data_dir).absolute())
    return redis_url


def connect(
    target: RedisTarget | str,
    *,
    data_dir: str | Path = ".jobmaster",
    max_connections: int | None = None,
    retry_commands: bool = True,
) -> redis.Redis:
    """A client speaking bytes (payloads are kept exactly as stored).

    ``target`` is a URL (``data_dir`` then says where ``embedded`` lives) or
    a ``RedisTarget`` with credentials, TLS and Sentinel from the settings.
    Timeouts are bounded so that a call made while Redis is away fails within
    seconds and the calling loop can log and back off instead of hanging.
    Workers pass ``retry_commands=False``: a command redis-py re-sent after a
    lost reply could move a second job into the in-progress list; the
    worker's own loops retry where that is safe. ``max_connections`` caps the
    pool, which then raises rather than opens one more (redis-py never blocks).
    """
    if isinstance(target, str):
        target = RedisTarget(url=target, data_dir=str(data_dir))
    options = _options(target, max_connections)
    if not retry_commands:
        options["retry"] = Retry(NoBackoff(), 0)
    if target.sentinels:
        return _through_sentinels(target, options)
    # Options in the URL's query string win over these, as redis-py documents.
    return redis.Redis.from_url(resolve_url(target.url, target.data_dir), **options)


def _options(target: RedisTarget, max_connections: int | None = None) -> dict[str, Any]:
    """The client options both kinds of client get: timeouts, credentials, TLS."""
    options: dict[str, Any] = {
        "socket_timeout": 10.0,
        "socket_connect_timeout": 3.0,
        "health_check_interval": 30,
    }
    if max_connections is not None:
        options["max_connections"] = max_connections
    options.update(target.client_options())
    return options


def aconnect(target: RedisTarget) -> redis.asyncio.Redis:
    """An asyncio client (``redis.asyncio``) on ``target``, made as ``connect``
    makes a sync one (timeouts, credentials, TLS, Sentinel, ``embedded``), for
    the ``a*`` producer calls (aio/client.py).

    Commands are never re-sent by redis-py: a PUSH whose reply was lost may
    have run, and running it again would enqueue the job twice (the sync
    producer's pusher.py makes the same choice). A connection the server
    closed while idle is still replaced before anything is sent on it (the
    pool's check when a connection is taken).

    At most ``ASYNC_CONNECTIONS`` connections per client (so per event
    loop): a burst of concurrent calls waits for a free one, where redis-py's
    default pool opened one per call in flight (10,000 ``aenqueue`` gathered
    at once meant 10,000 connections, past Redis's ``maxclients``). Behind
    Sentinel the pool is redis-py's Sentinel pool, which has no such bound.
    """
    options = _options(target)
    options["retry"] = AsyncRetry(NoBackoff(), 0)
    if target.sentinels:
        asked, primary = _sentinel_options(target, options)
        sentinel = AsyncSentinel(target.sentinel_addresses, sentinel_kwargs=asked)  # type: ignore[no-untyped-call]
        client: redis.asyncio.Redis = sentinel.master_for(target.sentinel_master, **primary)
        return client
    pool = redis.asyncio.BlockingConnectionPool.from_url(
        resolve_url(target.url, target.data_dir),
        max_connections=ASYNC_CONNECTIONS,
        timeout=options["socket_timeout"],
        **options,
    )
    return redis.asyncio.Redis.from_pool(pool)


# How long a sentinel may take: one that is down is skipped for the next one,
# and each new connection asks them for the primary's address.
SENTINEL_TIMEOUTS = {"socket_connect_timeout": 1.0, "socket_timeout": 3.0}


def _through_sentinels(target: RedisTarget, options: dict[str, Any]) -> redis.Redis:
    """A client whose pool asks the sentinels for the primary's address on each new
    connection; a connection error, or a READONLY reply from a demoted primary,
    drops the connection, so the next command reaches the promoted replica."""
    asked, primary = _sentinel_options(target, options)
    sentinel = Sentinel(target.sentinel_addresses, sentinel_kwargs=asked)  # type: ignore[no-untyped-call]
    client: redis.Redis = sentinel.master_for(target.sentinel_master, **primary)  # type: ignore[no-untyped-call]
    return client


def _sentinel_options(
    target: RedisTarget, options: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """What the sentinels are asked with, and the options of the primary's
    connections (the URL's user, password, database and query options)."""
    from_url = redis.connection.parse_url(target.url)  # type: ignore[no-untyped-call]
    for where in ("host", "port", "path", "connection_class"):
        from_url.pop(where, None)  # the sentinels say where the primary is
    if target.uses_tls:
        options["ssl"] = True  # SentinelConnectionPool's switch to TLS connections
    return {**SENTINEL_TIMEOUTS, **target.sentinel_options()}, {**options, **from_url}


OUT_OF_MEMORY = (
    "Redis is out of memory: its used memory is over 'maxmemory', so it refuses writes; "
    "free memory in Redis or raise maxmemory"
)


def describe_error(error: Exception) -> str:
    """A Redis error as one readable line for logs and EnqueueError.

    redis-py strips the ``OOM`` code from an out-of-memory refusal, leaving
    "command not allowed when used memory > 'maxmemory'." (and, from a
    pipeline, the whole command with its payload): say what it means instead.
    """
    if isinstance(error, redis.exceptions.OutOfMemoryError):
        return OUT_OF_MEMORY
    text = str(error) or type(error).__name__
    if isinstance(error.__cause__ or error.__context__, ssl.SSLCertVerificationError):
        return f"{text} (TLS: is redis_ssl_ca_certs the CA that signed the server's certificate?)"
    return text


def byte_list(reply: Any) -> list[bytes]:
    """A list reply of a client made by ``connect`` (bytes, not str), typed as such."""
    return cast(list[bytes], list(reply))


def server_version(client: redis.Redis) -> tuple[int, ...]:
    """The server's version as a tuple of ints, from INFO server."""
    info = client.info("server")
    text = str(info.get("redis_version", "0"))
    return tuple(int(part) for part in text.split(".") if part.isdigit())


def wait_for_redis(client: redis.Redis, shown_url: str, timeout: float = 30.0) -> tuple[int, ...]:
    """Check the version, waiting up to ``timeout`` for a Redis that is still booting
    (on a platform, the app and its Redis add-on often start together)."""
    return when_reachable(lambda: check_version(client), shown_url, timeout)


def when_reachable(call: Callable[[], T], shown_url: str, timeout: float = 30.0) -> T:
    """``call()``, retried once a second for up to ``timeout`` while Redis is
    unreachable or still loading its data after a restart (BusyLoadingError,
    a ConnectionError: INFO answers during loading, the first write does
    not), so a process starting at that moment waits instead of dying."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return call()
        except (redis.ConnectionError, redis.TimeoutError) as error:
            if time.monotonic() > deadline:
                raise
            log.warning("waiting for Redis at %s: %s", shown_url, error)
            time.sleep(1.0)


def check_version(client: redis.Redis) -> tuple[int, ...]:
    """Refuse a server older than 6.2: LMOVE, which reliable fetch is built on, is 6.2."""
    version = server_version(client)
    if version < MIN_REDIS_VERSION:
        shown = ".".join(map(str, version)) or "unknown"
        raise RedisVersionError(
            f"Redis {shown} is too old: jobmaster needs Redis 6.2 or newer (for LMOVE)"
        )
    return version
