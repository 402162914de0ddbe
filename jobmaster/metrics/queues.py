"""The queue sizes ``/metrics`` shows, read off the master's loop.

A scrape is answered inside the master's loop, and that loop must never
wait on Redis (SPEC §8): a scrape that read the queues while Redis was
paused held every reap, fork and stop deadline for the socket timeout. So
the master's Redis thread (supervisor/duties.py) reads them (``refresh``)
and a scrape only takes the latest reading (``scraped``), an object
swapped whole, never changed in place.

What is read is bounded, whatever Redis holds (SPEC §8): 300,000 names in
the ``queues`` set made a scrape take 10.8 s, and a 100 MB job at a queue's
tail was read whole by each. So at most MAX_QUEUES queues are labelled
(this master's own queues first, then other names in Redis's order: one
SSCAN page when the sets are bigger than that), ``jobmaster_queues_unshown``
counts the names left out (their sizes are not read: summing them would
cost the reads this cap avoids), and of each oldest job only its two ends
(END_BYTES each, QUEUE_ENDS in scripts.py) cross the wire, for its
``enqueued_at``.

Reads follow demand: every QUEUE_STATS_TTL seconds while scrapes come,
every IDLE_INTERVAL once nobody has scraped for IDLE_AFTER, and the first
scrape after such a pause asks for a fresh read at once (it shows the
older one: a scrape never waits).
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis

from jobmaster.api.stats import QueueStats
from jobmaster.connection import byte_list
from jobmaster.keys import Keys
from jobmaster.metrics.collector import QueueSnapshot
from jobmaster.scripts import QueueEnds, Scripts

log = logging.getLogger("jobmaster.metrics.queues")

QUEUE_STATS_TTL = 2.0  # seconds between reads while someone scrapes
IDLE_AFTER = 60.0  # seconds without a scrape after which reads slow down
IDLE_INTERVAL = 30.0  # seconds between reads while nobody scrapes
REDIS_RETRY_AFTER = 5.0  # seconds without a queue read after one failed
MAX_QUEUES = 100  # queues labelled in /metrics; the rest are counted
END_BYTES = 512  # bytes of each end of a queue's oldest job read for its latency
ENQUEUED_AT = re.compile(rb'"enqueued_at"\s*:\s*(-?[0-9][0-9.eE+-]{0,40})')


@dataclass(frozen=True)
class QueueReading:
    """One bounded read of the queues (a ``QueueSnapshot``)."""

    queues: list[QueueStats]
    queues_unshown: int  # names in the queues set not labelled (MAX_QUEUES)
    scheduled_size: int
    retry_size: int
    dead_size: int


class QueueWatch:
    """Each attribute has one writer: ``_scraped_at`` the loop's thread, the
    rest the Redis thread; so the two need no lock."""

    def __init__(self, client: redis.Redis, namespace: str, own: Sequence[str] = ()) -> None:
        self.redis = client
        self.keys = Keys(namespace)
        self.own = list(dict.fromkeys(own))[:MAX_QUEUES]  # this master's queues: shown first
        self._ends = Scripts(client).queue_ends
        # None: not read yet, or the last read failed (jobmaster_redis_up 0).
        self.latest: QueueSnapshot | None = None
        self._scraped_at = -math.inf
        self._read_at = -math.inf
        self._failing = False  # logged once per outage, not once per read

    def scraped(self, now: float) -> QueueSnapshot | None:
        """The latest reading, for a scrape (the loop's thread); never reads Redis."""
        self._scraped_at = now
        return self.latest

    def due(self, now: float) -> bool:
        if self._failing:
            return now - self._read_at >= REDIS_RETRY_AFTER
        idle = now - self._scraped_at > IDLE_AFTER
        return now - self._read_at >= (IDLE_INTERVAL if idle else QUEUE_STATS_TTL)

    def refresh(self, now: float) -> None:
        """Read the queues (the Redis thread); a Redis error is logged once per outage."""
        self._read_at = now
        try:
            stats = self.read(time.time())  # a new object: a scrape may hold the last one
        except redis.RedisError as error:
            self.latest = None
            if not self._failing:
                self._failing = True
                log.warning(
                    "metrics: cannot read the queues from Redis (%s); next try in %.0fs",
                    error,
                    REDIS_RETRY_AFTER,
                )
            return
        if self._failing:
            self._failing = False
            log.info("metrics: reading the queues from Redis again")
        self.latest = stats

    def read(self, now: float) -> QueueReading:
        """Three round trips, each bounded: the sets' sizes; the names shown;
        their lengths, oldest jobs' ends and paused flags."""
        keys = self.keys
        pipe = self.redis.pipeline(transaction=False)
        for zset in (keys.scheduled, keys.retry, keys.dead):
            pipe.zcard(zset)
        pipe.scard(keys.queues)
        pipe.scard(keys.paused)
        scheduled, retry, dead, known, paused = (int(n) for n in pipe.execute())
        names = self._names(known, paused)
        if not names:
            return QueueReading([], known, scheduled, retry, dead)
        pipe = self.redis.pipeline(transaction=False)
        QueueEnds(queue_keys=[keys.queue(n) for n in names], keep=END_BYTES).run(
            self._ends, client=pipe
        )
        pipe.smismember(keys.paused, names)
        pipe.smismember(keys.queues, names)
        ends, flags, listed = pipe.execute()
        queues = [
            QueueStats(
                name, int(ends[4 * i]), _latency(ends[4 * i + 2 : 4 * i + 4], now), bool(flag)
            )
            for i, (name, flag) in enumerate(zip(names, flags, strict=True))
        ]
        unshown = max(0, known - sum(int(n) for n in listed))
        return QueueReading(queues, unshown, scheduled, retry, dead)

    def _names(self, known: int, paused: int) -> list[str]:
        """This master's queues, then others up to MAX_QUEUES, sorted: every
        name when the sets are small, else one SSCAN page of each."""
        found: list[bytes] = []
        for key, size in ((self.keys.queues, known), (self.keys.paused, paused)):
            if size <= MAX_QUEUES:
                found += byte_list(self.redis.smembers(key))
            elif size:
                found += byte_list(self.redis.sscan(key, 0, count=MAX_QUEUES)[1])
        others = sorted({_name(raw) for raw in found} - set(self.own))
        return [*self.own, *others][:MAX_QUEUES]


def _name(raw: bytes) -> str:
    return raw.decode(errors="replace")


def _latency(ends: list[Any], now: float) -> float:
    """Seconds the oldest job has waited, from the two ends of its entry (0 if unknown)."""
    for piece in ends:
        match = ENQUEUED_AT.search(piece) if isinstance(piece, bytes) else None
        if match is not None:
            try:
                enqueued = float(match.group(1))
            except ValueError:
                continue
            if math.isfinite(enqueued):
                return max(0.0, now - enqueued)
    return 0.0
