"""Jobs processed and failed per minute over the last hour, from the masters' samples.

Each master writes, at the start of every minute, the processed/failed
totals to ``history:<minute>`` (jobmaster.supervisor.history). A minute's
throughput is the next sample less its own; the minute running now is
measured against the live totals. A minute without both samples (no
master was running) has no value rather than a made-up zero, so a chart
can show the gap.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from jobmaster.api.base import Backend, Connection
from jobmaster.tolerant import number


@dataclass(frozen=True)
class Minute:
    start: float  # unix time the minute began
    processed: int | None  # jobs finished in it (failed ones included); None: unknown
    failed: int | None


def _sample(raw: bytes | str | None) -> tuple[int, int] | None:
    if raw is None:
        return None
    try:
        data = json.loads(raw)
        return int(number(data["processed"])), int(number(data["failed"]))
    except (ValueError, KeyError, TypeError):
        return None


def throughput(
    connection: Connection = None,
    *,
    namespace: str | None = None,
    minutes: int = 60,
    now: float | None = None,
) -> list[Minute]:
    """The last ``minutes`` minutes, oldest first, the running one last (one round trip)."""
    backend = Backend.resolve(connection, namespace)
    keys = backend.keys
    current = int((now or time.time()) // 60)
    first = current - minutes + 1
    names = [keys.history(minute) for minute in range(first, current + 1)]
    pipe = backend.redis.pipeline(transaction=False)
    pipe.mget(names)
    pipe.mget(keys.stat("processed"), keys.stat("failed"))
    raws, totals = pipe.execute()
    samples = [_sample(raw) for raw in raws]
    live = (int(number(totals[0])), int(number(totals[1])))
    ends = [*samples[1:], live]  # a minute ends where the next one's sample begins
    found = []
    for offset, (begin, end) in enumerate(zip(samples, ends, strict=True)):
        start = float((first + offset) * 60)
        if begin is None or end is None:
            found.append(Minute(start, None, None))
        else:  # max(0): a counter reset (FLUSHALL) must not plot a negative bar
            found.append(Minute(start, max(0, end[0] - begin[0]), max(0, end[1] - begin[1])))
    return found
