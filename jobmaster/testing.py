"""Helpers for users' own test suites.

``inline()`` makes ``enqueue`` run the job at once, in this process (its
arguments round-tripped through JSON, as a worker would see them).
``drain()`` runs, in this process, every job waiting in the default
client's queues (and, by default, every scheduled one), until none is left.
Exceptions from jobs propagate, so a failing job fails the test.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from jobmaster import crypto, registry
from jobmaster import payload as wire
from jobmaster.client import Client, default_client
from jobmaster.connection import byte_list
from jobmaster.job import INLINE


@contextlib.contextmanager
def inline() -> Iterator[None]:
    """Within the block, ``enqueue`` (and ``enqueue_in``/``_at``) runs jobs inline."""
    INLINE.depth += 1
    try:
        yield
    finally:
        INLINE.depth -= 1


def drain(client: Client | None = None, *, include_scheduled: bool = True) -> int:
    """Run every queued job in process, including jobs they enqueue; returns how many ran."""
    client = client or default_client()
    keys, ran = client.keys, 0
    while True:
        if include_scheduled:
            for zset in (keys.scheduled, keys.retry):
                for raw in byte_list(client.redis.zrange(zset, 0, -1)):
                    if client.redis.zrem(zset, raw):
                        client.push_payloads([wire.decode(raw)])
        popped = None
        for name in sorted(byte_list(client.redis.smembers(keys.queues))):
            popped = client.redis.rpop(keys.queue(name.decode()))
            if popped is not None:
                break
        if popped is None:
            return ran
        payload = wire.decode(bytes(popped))  # type: ignore[arg-type]
        job = registry.lookup(payload["job"])
        if job is None:
            raise LookupError(f"no job registered as {payload['job']!r}")
        args, kwargs = crypto.arguments(payload)  # an encrypt=True job's, opened
        job.func(*args, **kwargs)
        ran += 1
