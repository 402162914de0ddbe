"""Reading what Redis holds when any of it may be forged (SPEC §8).

One place for the rules every reader follows, the operator API's, the
dashboard's, ``jobmaster status``'s and ``jobmaster.result``'s alike:

- a number is finite or it is the default (``number``), a time is one a
  date can be shown for or None (``moment``);
- text is decoded with replacement (``text``);
- a key someone overwrote with another type (WRONGTYPE) reads as absent
  (``absent``, ``answers``), but a permission error is an error: Redis
  refusing a read (NOPERM) must never pass for "no such job" or "no
  result", so it is raised as ``RedisPermissionError`` naming the key and
  the grant that is missing.

This module is below the producer (results.py, client.py) and the operator
API: it imports neither.
"""

from __future__ import annotations

import math
from typing import Any, cast

from redis import exceptions as redis_errors

from jobmaster.errors import RedisPermissionError

# The last second of year 9999: the latest unix time datetime (so every
# formatter of the CLI and the dashboard) can show.
LATEST = 253_402_300_799.0


def number(value: Any, default: float = 0.0) -> float:
    """A counter or hash field as a finite float (missing, unreadable, NaN or
    infinite: ``default``).

    Every number read from Redis for display goes through here (or
    ``moment``): anyone who can write to Redis can set ``inf`` or ``nan``,
    and ``int()`` of either, or a date of it, raises (SPEC §8).
    """
    try:
        found = float(cast(Any, value)) if value is not None else default
    except (TypeError, ValueError, OverflowError):
        return default
    return found if math.isfinite(found) else default


def moment(value: Any) -> float | None:
    """A unix time read from Redis, or None when unknown: unreadable, not
    finite, or outside the years 1970-9999 that dates can be shown for."""
    if isinstance(value, bool):
        return None
    found = number(value, -1.0)
    return found if 0.0 <= found <= LATEST else None


def text(value: Any) -> str:
    """A hash field or set member as text, whatever the connection decodes."""
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def optional_text(value: Any) -> str | None:
    """``text``, None kept None (a field that is not there)."""
    return None if value is None else text(value)


def wrong_type(error: BaseException) -> bool:
    """Redis refused a command on a key of another type (forged): read as absent.
    Inside a script (PEEK_LIST) the same error comes back wrapped."""
    return isinstance(error, redis_errors.ResponseError) and "WRONGTYPE" in str(error)


def absent(reply: Any, key: str, grant: str, default: Any = None) -> Any:
    """One reply of a pipeline run with ``raise_on_error=False``: ``default`` for
    WRONGTYPE, ``RedisPermissionError`` for NOPERM (``grant``: what the ACL
    user needs, as the recipe in docs/redis-deployment.md spells it), any
    other refusal raised as it is."""
    if not isinstance(reply, redis_errors.ResponseError):
        return reply
    if wrong_type(reply):
        return default
    raise refused(reply, key, grant) from reply


def refused(error: redis_errors.ResponseError, what: str, grant: str) -> Exception:
    """``error`` as raised to the caller: a NOPERM says which key (or channel,
    or command) and which grant; anything else stays as it is."""
    if isinstance(error, redis_errors.NoPermissionError) or str(error).startswith("NOPERM"):
        return RedisPermissionError(what, grant, str(error))
    return error


def answers(pipe: Any, *defaults: Any) -> list[Any]:
    """A pipeline's replies, each command Redis refused with WRONGTYPE (a key
    that someone overwrote with another type) replaced by its default (None
    past the defaults given), so one such key cannot take down a listing or
    a page (SPEC §8). A permission error, a lost connection still raise."""
    replies = pipe.execute(raise_on_error=False)
    found = []
    for i, reply in enumerate(replies):
        if isinstance(reply, redis_errors.ResponseError) and not wrong_type(reply):
            raise reply
        default = defaults[i] if i < len(defaults) else None
        found.append(default if isinstance(reply, redis_errors.ResponseError) else reply)
    return found
