"""Unique jobs: at most one job with the same name and arguments at a time.

``@job(unique="until_executed")`` holds a lock from enqueue until the job
succeeds or fails for good (kept, and extended, while it waits out a retry);
``"until_started"`` until a worker starts it; a number of seconds, for that
long. The lock stores the owning jid and always has a TTL, so a lock whose
job was lost can never block the job forever. ``unique_args`` picks the
arguments that count (``lambda args, kwargs: [args[0]]``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

UNTIL_EXECUTED = "until_executed"
UNTIL_STARTED = "until_started"
MODES = (UNTIL_EXECUTED, UNTIL_STARTED)
LOCK_TTL = 24 * 3600  # seconds a lock may outlive a lost job (until_* modes)

UniqueArgs = Callable[[Sequence[Any], Mapping[str, Any]], Any]


def check_mode(unique: object) -> None:
    """Raise ValueError for anything but a mode name or a positive number of seconds."""
    if unique is None or unique in MODES:
        return
    if isinstance(unique, int | float) and not isinstance(unique, bool) and unique > 0:
        return
    raise ValueError(
        f"unique must be {UNTIL_EXECUTED!r}, {UNTIL_STARTED!r} or seconds > 0, got {unique!r}"
    )


def digest(
    job_name: str, args: Sequence[Any], kwargs: Mapping[str, Any], unique_args: UniqueArgs | None
) -> str:
    """A stable hash of the job and the arguments that make it "the same job"."""
    chosen = unique_args(args, kwargs) if unique_args else [list(args), dict(kwargs)]
    text = json.dumps([job_name, chosen], sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def lock_ttl(unique: object) -> int:
    """Seconds the lock lives: the given seconds, else a bound against lost jobs."""
    if isinstance(unique, int | float) and not isinstance(unique, bool):
        return max(1, round(unique))
    return LOCK_TTL
