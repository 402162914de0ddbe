"""The numbers of a dashboard's front page, read in a few pipelined round trips.

The counters are the ones the FINISH script bumps with each outcome:
``stat:processed`` (every job run, failed or not), ``stat:failed`` and
``stat:expired`` (jobs fetched past their ``expires_in``, not run), in
total and per UTC day (``stat:processed:2026-11-29``). The first round trip
reads them, the sets' sizes and the names of queues; the second, each
queue's size and oldest job; then the live processes and their busy counts
as ``ProcessSet`` reads them, in bounded pages (a flood of forged members of
the process sets is never read whole).
"""

from __future__ import annotations

import datetime
import time
from dataclasses import asdict, dataclass
from typing import Any

from jobmaster.api.base import Backend, Connection, texts
from jobmaster.api.info import redis_info
from jobmaster.api.processes import ProcessSet
from jobmaster.api.queues import Queue, records_of
from jobmaster.tolerant import answers, number


@dataclass(frozen=True)
class QueueStats:
    name: str
    size: int
    latency: float  # seconds the oldest job has waited
    paused: bool


@dataclass(frozen=True)
class DayStats:
    day: datetime.date  # a UTC day
    processed: int
    failed: int


def utc_day(now: float) -> datetime.date:
    """The day the FINISH script counts a job in (UTC, as the workers do)."""
    return datetime.datetime.fromtimestamp(now, tz=datetime.timezone.utc).date()


class Stats:
    """A snapshot taken when made; ``refresh()`` takes another."""

    processed: int
    failed: int
    processed_today: int
    failed_today: int
    cancelled: int  # jobs jobmaster.cancel stopped or removed (total, counted once each)
    expired: int  # jobs not run: fetched after their expires_in (expiry.py)
    expired_today: int
    scheduled_size: int
    retry_size: int
    dead_size: int
    queues: list[QueueStats]
    busy: int  # jobs running now, by the workers' last heartbeats
    processes: int  # live worker processes (children and lone workers)
    masters: int  # live masters
    taken_at: float

    def __init__(self, connection: Connection = None, *, namespace: str | None = None) -> None:
        self.backend = Backend.resolve(connection, namespace)
        self.refresh()

    @property
    def enqueued(self) -> int:
        """Jobs waiting in every queue together."""
        return sum(q.size for q in self.queues)

    def refresh(self, now: float | None = None) -> None:
        keys, redis = self.backend.keys, self.backend.redis
        now = now or time.time()
        today = utc_day(now)
        pipe = redis.pipeline(transaction=False)
        pipe.mget(
            keys.stat("processed"),
            keys.stat("failed"),
            keys.stat_day("processed", today),
            keys.stat_day("failed", today),
            keys.stat("cancelled"),
            keys.stat("expired"),
            keys.stat_day("expired", today),
        )
        for zset in (keys.scheduled, keys.retry, keys.dead):
            pipe.zcard(zset)
        for names in (keys.queues, keys.paused):
            pipe.smembers(names)
        # A key of the wrong type (forged, or written by something else)
        # answers WRONGTYPE: read as empty, so one such key cannot take down
        # ``stats``, ``queue list`` and every page (SPEC §8).
        first = answers(pipe, [None] * 7, 0, 0, 0, set(), set())
        counters, scheduled, retry, dead, known, paused = first
        queues, paused_names = texts(set(known) | set(paused)), set(texts(paused))

        pipe = redis.pipeline(transaction=False)
        for name in queues:
            pipe.llen(keys.queue(name))
            # The oldest job, read to PEEK_BYTES only: a forged 100 MB job at a
            # queue's tail is not fetched at every refresh of the front page.
            Queue(name, self.backend).peek(-1, -1, client=pipe)
        replies = answers(pipe, *([0, []] * len(queues)))
        # The live processes as ``jobmaster ps`` reads them: in bounded pages,
        # never the process sets whole (a flood of forged members, SPEC §8).
        live = ProcessSet(self.backend).list()
        workers = [p for p in live if p.role != "master"]

        (
            self.processed,
            self.failed,
            self.processed_today,
            self.failed_today,
            self.cancelled,
            self.expired,
            self.expired_today,
        ) = (int(number(value)) for value in counters)
        self.scheduled_size, self.retry_size, self.dead_size = int(scheduled), int(retry), int(dead)
        self.queues = []
        for i, name in enumerate(queues):
            size, oldest = replies[2 * i], records_of(replies[2 * i + 1])
            latency = oldest[0].latency(now) if oldest else 0.0
            self.queues.append(QueueStats(name, int(size), latency, name in paused_names))
        self.busy = sum(p.busy for p in workers)
        self.processes = len(workers)
        self.masters = len(live) - len(workers)
        self.taken_at = now

    def history(self, days: int = 7, now: float | None = None) -> list[DayStats]:
        """Processed and failed per UTC day, today first, ``days`` days (one MGET)."""
        today = utc_day(now or time.time())
        dates = [today - datetime.timedelta(days=n) for n in range(days)]
        keys = self.backend.keys
        names = [keys.stat_day(kind, day) for day in dates for kind in ("processed", "failed")]
        values = [int(number(v)) for v in self.backend.redis.mget(names)] if names else []
        return [DayStats(day, values[2 * n], values[2 * n + 1]) for n, day in enumerate(dates)]

    def redis_info(self) -> dict[str, Any]:
        """The server's version, memory, clients and uptime (see info.py)."""
        return redis_info(self.backend.redis)

    def as_dict(self) -> dict[str, Any]:
        """Everything as plain JSON-ready values (``jobmaster stats --json``)."""
        names = [
            *("processed", "failed", "processed_today", "failed_today", "cancelled"),
            *("expired", "expired_today", "scheduled_size"),
            *("retry_size", "dead_size", "enqueued", "busy", "processes", "masters", "taken_at"),
        ]
        return {
            **{name: getattr(self, name) for name in names},
            "queues": [asdict(q) for q in self.queues],
        }
