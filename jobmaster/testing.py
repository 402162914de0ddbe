"""Helpers for users' own test suites.

``inline()`` makes ``enqueue`` run the job at once, in this process (its
arguments round-tripped through JSON, as a worker would see them).
``drain()`` runs, in this process, every job waiting in the default
client's queues (and, by default, every scheduled one), until none is left.
An ``async def`` job runs to its end on an event loop of its own, under
all three (from an async test too: on a thread of its own then).
Exceptions from jobs propagate, so a failing job fails the test.
``work()`` runs them as a worker does instead: each outcome recorded by the
worker's own scripts (retries, dead set, status, hooks), so chains move on
and batches call back. It is the worker's code, not a copy: what passes
under ``work()`` passes under ``jobmaster``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import threading
from collections import Counter
from collections.abc import Iterator

from jobmaster import crypto, registry
from jobmaster import payload as wire
from jobmaster.client import Client, default_client
from jobmaster.config import Config
from jobmaster.connection import byte_list
from jobmaster.current import running_job
from jobmaster.identity import Identity
from jobmaster.job import INLINE
from jobmaster.worker.context import WorkerContext
from jobmaster.worker.coroutines import run_coroutine
from jobmaster.worker.executor import Executor
from jobmaster.worker.fetch import Fetcher
from jobmaster.worker.outcome import record, run_hook
from jobmaster.worker.poller import ScheduledPoller

WORK_LIMIT = 10_000  # jobs one work() call may run before it calls it a loop


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
    keys, ran, ctx = client.keys, 0, _context(client, None)
    while True:
        if include_scheduled:
            _release_scheduled(ctx)
        popped, queue = None, ""
        for name in sorted(byte_list(client.redis.smembers(keys.queues))):
            queue = name.decode()
            popped = client.redis.rpop(keys.queue(queue))
            if popped is not None:
                break
        if popped is None:
            return ran
        payload = wire.decode(bytes(popped))  # type: ignore[arg-type]
        job = registry.lookup(payload["job"])
        if job is None:
            raise LookupError(f"no job registered as {payload['job']!r}")
        # An encrypt=True job's, opened; refused in clear, as a worker refuses it.
        args, kwargs = crypto.arguments(payload, sealed=job.job_options.encrypt)
        with running_job(payload, queue):  # jobmaster.current_job() as in a worker
            returned = job.func(*args, **kwargs)
            if job.is_async:  # to its end on a loop of its own (coroutines.py)
                run_coroutine(returned)
        ran += 1


def _release_scheduled(ctx: WorkerContext) -> None:
    """Every scheduled job and retry onto its queue now, due or not, as the
    poller moves them: each in one TRANSFER, or buried with the reason if its
    queue refuses it (a ZREM, then a push that failed, lost it)."""
    poller = ScheduledPoller(ctx, threading.Event())
    for zset in (ctx.keys.scheduled, ctx.keys.retry):
        poller.enqueue_due(zset, until=math.inf)


def _context(client: Client, config: Config | None) -> WorkerContext:
    """A worker process's context on ``client``'s Redis: ``config``'s settings,
    else the client's namespace and status tracking."""
    if config is None:
        settings = Config(namespace=client.keys.namespace)
        settings.track_status = client.status_ttl > 0
        settings.status_ttl = float(client.status_ttl or settings.status_ttl)
    else:
        settings = dataclasses.replace(config)  # its queues are set by work(), not the caller's
    return WorkerContext(
        config=settings,
        identity=Identity(),
        redis=client.redis,
        keys=client.keys,
        scripts=client.scripts,
    )


def work(
    config: Config | None = None,
    *,
    include_scheduled: bool = True,
    limit: int = WORK_LIMIT,
) -> Counter[str]:
    """Run every waiting job, one at a time in this thread, as a worker would,
    until none is left; returns how many ended each way (``done``, ``retry``,
    ``dead``, ``dropped``, ``deferred``, ``skipped``, ``expired``).

    Jobs are fetched and acknowledged by the worker's scripts from every
    known queue not paused, so their outcomes are kept as in production: a
    failing job goes to the retry set and, once out of retries, to the dead
    set; statuses, attempts and counters are written; hooks run; a chain's
    next step and a batch's callbacks are pushed, and run in turn. With
    ``include_scheduled`` (the default), scheduled jobs and retries run at
    once instead of at their time, so a job that always fails ends in the
    dead set within the call. A job's exception does not propagate: read the
    outcome (``Counter``), ``client.status(jid)`` or the dead set.

    ``config`` gives the Redis, namespace and settings (status tracking,
    dead-set limits); without it, the default client's Redis and namespace.
    Raises RuntimeError after ``limit`` jobs, where jobs keep coming (one
    that enqueues itself, or is deferred again and again).
    """
    client = Client.from_config(config) if config is not None else default_client()
    ctx = _context(client, config)
    try:  # each call's I/O core ends with it (one leaked per call)
        return _work(ctx, client, ctx.config, include_scheduled, limit)
    finally:
        ctx.core.close()


def _work(
    ctx: WorkerContext, client: Client, settings: Config, include_scheduled: bool, limit: int
) -> Counter[str]:
    executor = Executor.of(ctx)
    ended: Counter[str] = Counter()
    while ended.total() < limit:
        if include_scheduled:
            _release_scheduled(ctx)
        # Every queue known now, in name order: a chain step or a callback
        # may have gone to a queue that did not exist a moment ago.
        known = byte_list(client.redis.smembers(client.keys.queues))
        settings.queues, settings.strict = sorted(name.decode() for name in known), True
        if not settings.queues:
            return ended
        fetcher = Fetcher(ctx)
        unit = fetcher.fetch()
        if unit is None:
            return ended
        outcome = executor.run(unit)
        if record(ctx, unit.raw, outcome):
            run_hook(outcome)
        ended[outcome.kind.value] += 1
    raise RuntimeError(
        f"work(): {limit} jobs run and more keep coming (a job that enqueues itself, "
        f"or one deferred again and again?): {dict(ended)}"
    )
