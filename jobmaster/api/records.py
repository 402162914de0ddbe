"""One job as an operator sees it: in a queue, or in a sorted set with its score.

A record keeps the exact bytes it was read as (``raw``): deleting or moving
it names that member, so an entry that is not even JSON can still be listed
and deleted. Reading never raises: garbage has ``payload = None`` and shows
its raw text.

Anyone who can write to Redis can plant a 100 MB entry; parsing it whole
made the dashboard grow to 4.4 GB. So a record is bounded: lists read only
the first ``PEEK_BYTES`` of each entry (scripts.PEEK cuts them in Redis, and
``size`` keeps the full length), an entry longer than ``PARSE_BYTES`` is never
JSON-parsed (its jid, job and queue are picked from its first bytes, for
display and to find it again), and its text is shown to ``SHOW_CHARS``.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass
from typing import Any

from jobmaster import payload as wire
from jobmaster.tolerant import moment, number

PEEK_BYTES = 64 * 1024  # of each entry a listing reads: a page of 500 is 32 MB at most
PARSE_BYTES = 1024 * 1024  # the longest entry JSON-parsed (about 5x that in objects)
SHOW_CHARS = 64 * 1024  # of an entry's text (or pretty payload) shown
# A top-level string field near the start of an entry too long to parse.
_HINT = re.compile(rb'"(jid|job|queue)":\s*"([^"\\]{1,200})"')


@dataclass(frozen=True)
class JobRecord:
    raw: bytes  # as stored, or its first PEEK_BYTES when ``truncated``
    payload: dict[str, Any] | None  # None: not a JSON object, or too long to parse
    size: int = -1  # the entry's full length in bytes (-1: len(raw))

    @classmethod
    def parse(cls, raw: bytes | str, size: int | None = None) -> JobRecord:
        data = raw.encode() if isinstance(raw, str) else raw
        full = max(len(data), size or 0)
        value = None
        if len(data) == full <= PARSE_BYTES:  # whole, and bounded: see the docstring
            try:
                value = wire.strict_loads(data)
            except (ValueError, UnicodeDecodeError):
                value = None
        return cls(data, value if isinstance(value, dict) else None, full)

    @property
    def length(self) -> int:
        """The entry's full length in bytes."""
        return max(self.size, len(self.raw))

    @property
    def truncated(self) -> bool:
        """Only the first bytes were read (``raw`` cannot name the member)."""
        return self.length > len(self.raw)

    @property
    def oversized(self) -> bool:
        """Read in part, or too long to parse: ``payload`` is None whatever it
        holds, and jid, job and queue come from its first bytes."""
        return self.truncated or self.length > PARSE_BYTES

    def _str(self, name: str) -> str | None:
        if self.payload is None and self.oversized:
            hint = next(
                (m for m in _HINT.finditer(self.raw[:PEEK_BYTES]) if m[1] == name.encode()), None
            )
            return hint[2].decode(errors="replace") if hint else None
        value = (self.payload or {}).get(name)
        return value if isinstance(value, str) else None

    def _float(self, name: str) -> float | None:
        value = (self.payload or {}).get(name)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        found = number(value, math.nan)  # an int too big for a float: unknown
        return None if math.isnan(found) else found

    def _moment(self, name: str) -> float | None:
        """A time field, None unless a date can be shown for it (see ``moment``)."""
        return moment(self._float(name))

    @property
    def jid(self) -> str | None:
        return self._str("jid")

    @property
    def job(self) -> str | None:
        return self._str("job")

    @property
    def queue(self) -> str | None:
        return self._str("queue")

    @property
    def args(self) -> list[Any]:
        value = (self.payload or {}).get("args")
        return value if isinstance(value, list) else []

    @property
    def kwargs(self) -> dict[str, Any]:
        value = (self.payload or {}).get("kwargs")
        return value if isinstance(value, dict) else {}

    @property
    def created_at(self) -> float | None:
        return self._moment("created_at")

    @property
    def enqueued_at(self) -> float | None:
        return self._moment("enqueued_at")

    @property
    def error_class(self) -> str | None:
        return self._str("error_class")

    @property
    def error_message(self) -> str | None:
        return self._str("error_message")

    @property
    def backtrace(self) -> list[str]:
        """The last lines of the failure's traceback, as the worker kept them."""
        value = (self.payload or {}).get("error_backtrace")
        return [str(line) for line in value] if isinstance(value, list) else []

    @property
    def retry_count(self) -> int:
        return int(self._float("retry_count") or 0)

    @property
    def retries(self) -> int:
        """The retries made: ``retry_count`` counts failures, and the first
        failure came from the first run, not a retry (a job with ``retry=1``
        dies after 2 failures, 1 retry)."""
        return max(0, self.retry_count - 1)

    @property
    def failed_at(self) -> float | None:
        return self._moment("failed_at")

    @property
    def died_at(self) -> float | None:
        return self._moment("died_at")

    @property
    def dead_reason(self) -> str | None:
        return self._str("dead_reason")

    @property
    def text(self) -> str:
        """The entry as stored, readable even when it is not UTF-8; to
        ``SHOW_CHARS``, then its full size."""
        shown = self.raw[:SHOW_CHARS].decode(errors="backslashreplace")
        if self.length > SHOW_CHARS:
            shown += f"… (truncated: {self.length:,} bytes in all)"
        return shown

    @property
    def runnable(self) -> bool:
        """Whether a worker could run it (the wire format's required fields);
        unknown, so False, when only its first bytes were read."""
        if self.truncated:
            return False
        try:
            wire.decode(self.raw)
        except wire.BadPayload:
            return False
        return True

    def latency(self, now: float | None = None) -> float:
        """Seconds since it was enqueued (0 if unknown)."""
        enqueued = self.enqueued_at
        return max(0.0, (now or time.time()) - enqueued) if enqueued is not None else 0.0

    def matches(self, job: str | None = None, error: str | None = None) -> bool:
        """Filter by job name and error class (``None``: any)."""
        return (job is None or self.job == job) and (error is None or self.error_class == error)

    def as_dict(self) -> dict[str, Any]:
        """For ``--json`` output: the payload, or the raw text of garbage (cut
        to ``SHOW_CHARS``, with ``size``, when longer)."""
        if self.payload is not None:
            return {"payload": self.payload}
        return {"raw": self.text, **({"size": self.length} if self.length > SHOW_CHARS else {})}


@dataclass(frozen=True)
class SortedEntry(JobRecord):
    """An entry of the scheduled, retry or dead set; ``score`` is a unix time:
    when it is due (scheduled, retry) or when it died (dead), as stored (it
    may be ``inf`` or ``-inf``: anyone who can write to Redis can set it)."""

    score: float = 0.0

    @classmethod
    def from_member(cls, raw: bytes | str, score: float, size: int | None = None) -> SortedEntry:
        record = JobRecord.parse(raw, size)
        return cls(record.raw, record.payload, record.size, float(score))

    @property
    def at(self) -> float | None:
        """The score as a time to show; None when no date can be shown for it."""
        return moment(self.score)

    def as_dict(self) -> dict[str, Any]:
        # JSON has no infinity: a non-finite score is written as text ("inf").
        score = self.score if math.isfinite(self.score) else str(self.score)
        return {"score": score, **super().as_dict()}
