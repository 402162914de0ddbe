"""The queue sizes ``/metrics`` shows, read off the master's loop.

A scrape is answered inside the master's loop, and that loop must never
wait on Redis (SPEC §8): a scrape that read the queues while Redis was
paused held every reap, fork and stop deadline for the socket timeout. So
the master's Redis thread (supervisor/duties.py) reads them (``refresh``)
and a scrape only takes the latest reading (``scraped``), an object
swapped whole, never changed in place.

Reads follow demand: every QUEUE_STATS_TTL seconds while scrapes come,
every IDLE_INTERVAL once nobody has scraped for IDLE_AFTER, and the first
scrape after such a pause asks for a fresh read at once (it shows the
older one: a scrape never waits).
"""

from __future__ import annotations

import logging
import math

import redis

from jobmaster.api.base import Backend
from jobmaster.api.stats import Stats
from jobmaster.metrics.collector import QueueSnapshot

log = logging.getLogger("jobmaster.metrics.queues")

QUEUE_STATS_TTL = 2.0  # seconds between reads while someone scrapes
IDLE_AFTER = 60.0  # seconds without a scrape after which reads slow down
IDLE_INTERVAL = 30.0  # seconds between reads while nobody scrapes
REDIS_RETRY_AFTER = 5.0  # seconds without a queue read after one failed


class QueueWatch:
    """Each attribute has one writer: ``_scraped_at`` the loop's thread, the
    rest the Redis thread; so the two need no lock."""

    def __init__(self, client: redis.Redis, namespace: str) -> None:
        self.backend = Backend.resolve(client, namespace)
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
            stats = Stats(self.backend)  # a new object: a scrape may hold the last one
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
