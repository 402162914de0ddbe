"""Crash-loop protection: children that die right after start come back slower.

Without it a child that cannot start (Redis refusing connections, a bad
deploy) is forked hundreds of times a second, burning the CPU the rest of
the pool needs and flooding the log.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

log = logging.getLogger("jobmaster.supervisor.backoff")

FIRST_DELAY = 0.1
MAX_DELAY = 30.0
# Seconds a child must have been *ready* (serving) for its death not to count
# as "right after start". Measured from ready, not from fork: a child that
# served for a few seconds and was then OOM-killed is replaced at once, while
# one that never gets ready (or dies as it does) backs off.
HEALTHY_AFTER = 1.0


@dataclass
class CrashBackoff:
    """Per child slot: how long to wait before the next fork."""

    failures: int = 0

    def delay_after_death(self, served: float) -> float:
        """Seconds to wait before replacing a child that served ``served`` seconds
        (0 if it never reported ready)."""
        if served >= HEALTHY_AFTER:
            self.failures = 0
            return 0.0
        # Capped count: a deploy that cannot start crash-loops all night, and
        # 2.0 ** 1024 would overflow and take the master down with it.
        self.failures = min(self.failures + 1, 32)
        return float(min(FIRST_DELAY * 2.0 ** (self.failures - 1), MAX_DELAY))


@dataclass
class Respawns:
    """Every slot's backoff, and when each empty slot may be forked again."""

    backoff: dict[int, CrashBackoff] = field(default_factory=dict)
    at: dict[int, float] = field(default_factory=dict)  # slot -> monotonic

    def after_death(self, index: int, served: float, now: float) -> float:
        """A child of slot ``index`` died unasked: seconds before its replacement."""
        delay = self.backoff.setdefault(index, CrashBackoff()).delay_after_death(served)
        if delay:
            self.at[index] = now + delay
            log.warning(
                "child %d ended %.1fs after it was ready: restarting in %.1fs", index, served, delay
            )
        return delay

    def waiting(self, index: int, now: float) -> bool:
        return self.at.get(index, 0.0) > now

    def forked(self, index: int) -> None:
        self.at.pop(index, None)

    def prune(self, wanted: int, filled: set[int]) -> None:
        """Forget slots no longer wanted (TTOU) or already filled: they would
        never be forked, and their past time would make the loop's wait spin."""
        for index in list(self.at):
            if index > wanted or index in filled:
                del self.at[index]

    def next_due(self) -> float | None:
        return min(self.at.values(), default=None)

    def clear(self) -> None:
        """A fresh start (HUP): every slot forked at once, from the first delay."""
        self.backoff.clear()
        self.at.clear()
