"""How long the dead set keeps what it holds.

Capped by count and by age so that a flood of failures (a bad deploy) cannot
grow Redis until it runs out of memory and stops taking new jobs.
"""

from __future__ import annotations

from dataclasses import dataclass

DAY = 24 * 3600


@dataclass(frozen=True)
class DeadSetLimits:
    max_jobs: int = 10_000
    max_days: float = 180.0

    def cutoff(self, now: float) -> float:
        """Entries that died before this unix time are trimmed."""
        return now - self.max_days * DAY
