"""Per-minute samples of the processed/failed totals, for the dashboard's chart.

The dashboard is another process (often on another host), so what it plots
must be in Redis. Once a minute each master copies the two totals the FINISH
script bumps into ``history:<minute>`` with ``SET NX``: the first master to
get there writes the sample, the others change nothing, and the key expires
after two hours. The chart's bars are the differences between consecutive
samples (jobmaster.api.history). A sample is taken at the first loop pass of
its minute, so it is at most a pass (about a second) late.

Never raises: a Redis error only costs this minute's sample (the loop's own
outage log already reports Redis being away).
"""

from __future__ import annotations

import json
import logging

import redis

from jobmaster.keys import Keys

log = logging.getLogger("jobmaster.supervisor.history")

HISTORY_TTL = 7200  # seconds a sample is kept: the chart shows the last hour


class HistoryRecorder:
    def __init__(self, redis_client: redis.Redis, keys: Keys) -> None:
        self.redis = redis_client
        self.keys = keys
        self.last_minute: int | None = None

    def tick(self, now: float) -> bool:
        """Record this minute's sample unless done already; True if a write was tried."""
        minute = int(now // 60)
        if minute == self.last_minute:
            return False
        self.last_minute = minute  # one try per minute, even while Redis is away
        try:
            processed, failed = self.redis.mget(
                self.keys.stat("processed"), self.keys.stat("failed")
            )
            sample = json.dumps(
                {"at": now, "processed": _total(processed), "failed": _total(failed)}
            )
            self.redis.set(self.keys.history(minute), sample, nx=True, ex=HISTORY_TTL)
        except redis.RedisError as error:
            log.debug("history: no sample for this minute: %s", error)
        return True


def _total(value: bytes | str | None) -> int:
    """A counter as stored; one that is not a whole number (written by
    something else) counts as 0 rather than stop the sample, every minute."""
    text = value.decode(errors="replace") if isinstance(value, bytes) else value
    if text is None or not text.isascii() or not text.isdigit() or len(text) > 19:
        return 0
    return int(text)
