"""Expiry: a job not started within ``expires_in`` seconds of its creation is not run.

Some work is worthless late: a "your code is 4711" SMS an hour after the
login, a cache warm-up for a page already served. ``expires_in`` travels in
the payload (seconds from ``created_at``, which the producer sets), so a
worker decides from the payload alone, with no clock but its own: a job
fetched after ``created_at + expires_in`` ends with status ``expired``,
a ``job.expired`` log line and the ``expired`` counter, and goes to no set.
The same holds for its retries: they count from the same ``created_at``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, TypeGuard

FIELD = "expires_in"
STATUS = "expired"


def check_expires_in(value: object) -> None:
    """Raise ValueError unless ``value`` is None or seconds > 0."""
    if value is None:
        return
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise ValueError(f"expires_in must be seconds > 0, got {value!r}")


def expires_at(payload: Mapping[str, Any]) -> float | None:
    """Unix time after which the job is not run; None if it never expires.

    Read from Redis, so anything may be there (SPEC §8): a field that is not
    a positive finite number, or no ``created_at`` to count from, means no
    expiry: the job runs, as it would have without the field.
    """
    seconds, created = payload.get(FIELD), payload.get("created_at")
    if not (_number(seconds) and _number(created)) or seconds <= 0:
        return None
    return created + seconds


def expired(payload: Mapping[str, Any], now: float) -> bool:
    """Whether a job fetched at ``now`` is too late to run."""
    deadline = expires_at(payload)
    return deadline is not None and now > deadline


def _number(value: object) -> TypeGuard[float]:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
