"""One (job, queue) pair's counts, and the snapshot a child sends to the master.

Shared by both ends so that the wire format is defined once. A snapshot is
compact JSON::

    {"v": 1, "pid": 4107, "busy": 2, "threads": 5,
     "jobs": [["myapp.jobs.charge", "default", 918, 7, 41.2, [0, 3, ...]], ...]}

each job entry being job, queue, processed, failed, the sum of the observed
durations, one count per bucket of ``BUCKETS`` plus a last one for longer
runs, and (optional, last) the jobs not run because they expired. The
counts are cumulative since the child started.
"""

from __future__ import annotations

import bisect
import json
import math
from dataclasses import dataclass, field
from typing import Any

VERSION = 1

# Upper bounds in seconds of the duration histogram. Prometheus' default
# buckets stop at 10 s; background jobs commonly run for minutes.
BUCKETS: tuple[float, ...] = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
    1800.0,
    3600.0,
)

Key = tuple[str, str]  # (job, queue)


def _zeros() -> list[int]:
    return [0] * (len(BUCKETS) + 1)


@dataclass
class Series:
    """Counts of one (job, queue): runs, failures, and the duration histogram."""

    processed: int = 0  # every run, failed ones included (as `jobmaster stats` counts)
    failed: int = 0
    duration_sum: float = 0.0
    buckets: list[int] = field(default_factory=_zeros)  # per bucket, not cumulative
    expired: int = 0  # fetched past their expires_in: not run, not in processed

    def observe(self, failed: bool, seconds: float | None) -> None:
        self.processed += 1
        self.failed += int(failed)
        if seconds is not None:
            seconds = max(0.0, seconds)  # wall clock: a step back must not count negative
            self.duration_sum += seconds
            self.buckets[bisect.bisect_left(BUCKETS, seconds)] += 1

    def add(self, other: Series) -> None:
        self.processed += other.processed
        self.failed += other.failed
        self.duration_sum += other.duration_sum
        self.buckets = [a + b for a, b in zip(self.buckets, other.buckets, strict=True)]
        self.expired += other.expired

    def copy(self) -> Series:
        return Series(
            self.processed, self.failed, self.duration_sum, list(self.buckets), self.expired
        )

    def cumulative(self) -> list[tuple[str, float]]:
        """Buckets as Prometheus wants them: ``(le, runs no longer than le)``, ``+Inf`` last."""
        result, running = [], 0
        for bound, count in zip([*map(str, BUCKETS), "+Inf"], self.buckets, strict=True):
            running += count
            result.append((bound, float(running)))
        return result


@dataclass
class Report:
    """What one child said last: its cumulative counts and its busy threads now."""

    pid: int
    busy: int = 0
    threads: int = 0
    jobs: dict[Key, Series] = field(default_factory=dict)


def encode(report: Report) -> bytes:
    jobs = [
        [job, queue, s.processed, s.failed, s.duration_sum, s.buckets, s.expired]
        for (job, queue), s in report.jobs.items()
    ]
    body = {"v": VERSION, "pid": report.pid, "busy": report.busy, "threads": report.threads}
    return json.dumps({**body, "jobs": jobs}, separators=(",", ":")).encode()


def decode(data: bytes) -> Report | None:
    """The report in ``data``, or None if it is not one (never raises)."""
    try:
        body = json.loads(data)
        if not isinstance(body, dict) or body.get("v") != VERSION:
            return None
        report = Report(_count(body["pid"]), _count(body["busy"]), _count(body["threads"]))
        for entry in body["jobs"]:
            job, queue, processed, failed, total, buckets, *more = entry
            if len(more) > 1:
                return None
            expired = _count(more[0]) if more else 0
            if not (isinstance(job, str) and isinstance(queue, str)):
                return None
            counts = [_count(n) for n in buckets]
            if len(counts) != len(BUCKETS) + 1:
                return None
            report.jobs[(job, queue)] = Series(
                _count(processed), _count(failed), _seconds(total), counts, expired
            )
        return report
    except (ValueError, TypeError, KeyError):
        return None


def _count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"not a count: {value!r}")
    return value


def _seconds(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"not a number: {value!r}")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"not a duration: {value!r}")
    return float(value)
