"""How long a failed job waits before its next attempt."""

from __future__ import annotations

import random
from collections.abc import Callable

Backoff = float | int | Callable[[int], float]

DEFAULT_RETRY = 25


def default_backoff(count: int) -> float:
    """``count**4 + 15`` seconds plus jitter, for the ``count``-th failure.

    The quartic curve spreads 25 retries over about three weeks; the jitter,
    growing with the count, keeps jobs that failed together (a flaky API)
    from coming back together and failing together again.
    """
    return float(count**4 + 15 + random.uniform(0, 10 * (count + 1)))


def retry_delay(count: int, backoff: Backoff | None) -> float:
    """Seconds to wait after the ``count``-th failure (1 for the first)."""
    if backoff is None:
        return default_backoff(count)
    if callable(backoff):
        return max(0.0, float(backoff(count)))
    return max(0.0, float(backoff))
