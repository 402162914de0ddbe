"""The scheduled, retry and dead sets: list, find, filter, retry, kill, delete, clear.

Members are payloads (JSON), scored by a unix time: when they are due
(scheduled, retry) or when they died (dead). Every move out of a set is one
TRANSFER script (see scripts.py), the one the scheduled poller uses: the
member leaves the set and lands in its queue (pushed like PUSH does: the
queue's end, the queues set, a wakeup, status ``queued``) atomically, and
only if it is still there, so an operator's retry racing a poller or another
operator never runs a job twice or loses it.

A member that is not a valid payload (written by hand, or by a broken
producer) is listed with its raw text and can be deleted; it cannot be
retried, since no worker could run it.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any, ClassVar

import redis

from jobmaster import payload as wire
from jobmaster.api.base import PAGE, Backend, Connection, glob_escape
from jobmaster.api.records import PEEK_BYTES, SortedEntry
from jobmaster.deadset import DeadSetLimits
from jobmaster.errors import Refused
from jobmaster.recovery import Recovery, TargetRefused
from jobmaster.scripts import Peek
from jobmaster.tolerant import wrong_type

KILLED = "killed by an operator"


class NotRunnable(Refused):
    """An entry that is not a valid payload cannot be retried: delete it instead."""


class JobSet:
    """What the three sets share; subclasses name their key."""

    kind: ClassVar[str]  # the Keys property: "scheduled", "retry" or "dead"

    def __init__(
        self,
        connection: Connection = None,
        *,
        namespace: str | None = None,
        limits: DeadSetLimits | None = None,
    ) -> None:
        self.backend = Backend.resolve(connection, namespace)
        self.key: str = getattr(self.backend.keys, self.kind)
        self.limits = limits or DeadSetLimits()  # the dead set's caps, for kill

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    def size(self) -> int:
        return int(self.backend.redis.zcard(self.key))

    def __iter__(self) -> Iterator[SortedEntry]:
        """Every entry by score, earliest first, a page at a time.

        Pages go by score, not rank: the poller removing due entries below the
        cursor meanwhile shifts ranks, and would make a walk by rank skip some.
        ``offset`` skips the members already seen at the cursor's own score.
        """
        cursor: float | str = "-inf"
        offset = 0
        while True:
            page = self._peek(cursor, "+inf", by_score=True, offset=offset, count=PAGE)
            yield from page
            if len(page) < PAGE:
                return
            last = page[-1].score
            same = sum(1 for entry in page if entry.score == last)
            offset = offset + same if cursor == last else same
            cursor = last

    def _peek(
        self,
        low: float | str,
        high: float | str,
        *,
        by_score: bool = False,
        newest_first: bool = False,
        offset: int = 0,
        count: int = 0,
    ) -> list[SortedEntry]:
        """Entries with each member cut to ``PEEK_BYTES`` (scripts.PEEK): a
        listing never reads a forged 100 MB member whole. Such an entry is
        ``truncated``; deleting or moving it finds it again by jid first."""
        if newest_first and by_score:
            low, high = high, low  # ZRANGE ... BYSCORE REV takes max first
        call = Peek(
            key=self.key,
            low=low,
            high=high,
            by_score=by_score,
            rev=newest_first,
            count=count,
            keep=PEEK_BYTES,
            offset=offset,
        )
        reply = call.run(self.backend.scripts.peek)
        return [
            SortedEntry.from_member(reply[i], float(reply[i + 2]), int(reply[i + 1]))
            for i in range(0, len(reply), 3)
        ]

    def filter(self, job: str | None = None, error: str | None = None) -> Iterator[SortedEntry]:
        """Entries of job ``job`` and/or error class ``error``."""
        return (entry for entry in self if entry.matches(job, error))

    def page(self, start: int, count: int, *, newest_first: bool = False) -> list[SortedEntry]:
        """``count`` entries from rank ``start``, by score (latest first if
        ``newest_first``): one ZRANGE, for a dashboard's pages."""
        if count <= 0 or start < 0:
            return []
        return self._peek(start, start + count - 1, newest_first=newest_first)

    def search(self, text: str, *, newest_first: bool = False) -> Iterator[SortedEntry]:
        """Entries whose job name, error class or error message contains ``text``
        (any case). Reads the whole set: fine for a dead set's 10,000 entries."""
        needle = text.casefold()
        entries = reversed(list(self)) if newest_first else iter(self)
        for entry in entries:
            fields = (entry.job, entry.error_class, entry.error_message)
            if any(needle in field.casefold() for field in fields if field):
                yield entry

    def find(self, jid: str) -> SortedEntry | None:
        """The entry of ``jid``, found with ZSCAN (no full read of a big set); None
        when the set's key was forged as another type (SPEC §8: no job there)."""
        pattern = f"*{glob_escape(jid)}*"
        try:
            for member, score in self.backend.redis.zscan_iter(self.key, match=pattern, count=PAGE):
                entry = SortedEntry.from_member(member, score)
                if entry.jid == jid:
                    return entry
        except redis.ResponseError as error:
            if not wrong_type(error):
                raise
        return None

    def _entry(self, entry: SortedEntry | str) -> SortedEntry | None:
        """The entry whole: by jid, or again by its jid when only its first
        bytes were read (a truncated one without a jid cannot be found)."""
        if isinstance(entry, str):
            return self.find(entry)
        if entry.truncated:
            return self.find(entry.jid) if entry.jid else None
        return entry

    # -- retry: back to its queue ---------------------------------------
    def retry(self, entry: SortedEntry | str) -> bool:
        """Move one entry (or the entry of a jid) to the end of its queue, now.

        False if it was no longer in the set; NotRunnable if it cannot run
        (its queue's key holds another type, say: it stays where it was).
        """
        found = self._entry(entry)
        if found is None:
            return False
        try:
            payload = wire.decode(found.raw)
        except wire.BadPayload as error:
            raise NotRunnable(f"cannot retry this entry: {error}") from None
        queue = str(payload["queue"])
        payload["enqueued_at"] = time.time()
        for field in ("dead_reason", "died_at"):  # no longer dead
            payload.pop(field, None)
        return self._transfer(found, payload, self.backend.keys.queue(queue), "back", 0, queue)

    def retry_where(self, job: str | None = None, error: str | None = None) -> int:
        """Retry every runnable entry matching the filter; returns how many moved."""
        moved = 0
        for entry in list(self.filter(job, error)):
            if entry.runnable:
                with contextlib.suppress(NotRunnable):  # it stays: the others still go
                    moved += self.retry(entry)
        return moved

    def retry_all(self) -> int:
        return self.retry_where()

    # -- delete -----------------------------------------------------------
    def delete(self, entry: SortedEntry | str) -> bool:
        """Remove one entry (or the entry of a jid); False if it was already gone."""
        found = self._entry(entry)
        if found is None or not self.backend.redis.zrem(self.key, found.raw):
            return False
        self.backend.release_unique(found.payload)  # it will not run: free its lock
        return True

    def delete_where(self, job: str | None = None, error: str | None = None) -> int:
        return sum(self.delete(entry) for entry in list(self.filter(job, error)))

    def clear(self) -> int:
        """Drop every entry; returns how many there were."""
        pipe = self.backend.redis.pipeline(transaction=True)
        pipe.zcard(self.key)
        pipe.delete(self.key)
        return int(pipe.execute()[0])

    # -- the move itself --------------------------------------------------
    def _transfer(
        self,
        entry: SortedEntry,
        payload: dict[str, Any],
        target: str,
        where: str,
        score: float,
        queue: str = "",
        status: str = "queued",
    ) -> bool:
        """One TRANSFER, the recovery's own (for the dead set, with its caps): a
        batch or chain job killed into the dead set moves its workflow with it
        (the batch counts the death, the chain stops), as a worker's would.
        NotRunnable, with the entry left where it was, when ``target`` holds
        another type."""
        backend = self.backend
        recovery = Recovery(
            backend.redis, backend.keys, backend.scripts, self.limits, backend.status_ttl
        )
        try:
            return recovery.transfer(
                self.key,
                "zset",
                entry.raw,
                payload,
                target,
                where,
                score=score,
                queue=queue,
                status=status,
            )
        except TargetRefused as refused:
            raise NotRunnable(f"cannot move this entry: {refused}") from None


class KillableSet(JobSet):
    """The scheduled and retry sets: their jobs can also be sent to the dead set."""

    def kill(self, entry: SortedEntry | str) -> bool:
        """Move one entry to the dead set now (within its caps), as an operator's
        decision; False if it was no longer here. A garbage entry is buried whole."""
        found = self._entry(entry)
        if found is None:
            return False
        now = time.time()
        payload = found.payload or wire.buried(found.raw, KILLED, None)
        payload = {**payload, "dead_reason": KILLED, "died_at": now}
        payload.setdefault("jid", wire.new_jid())
        if self._transfer(found, payload, self.backend.keys.dead, "zset", now, status="dead"):
            self.backend.release_unique(payload)
            return True
        return False

    def kill_where(self, job: str | None = None, error: str | None = None) -> int:
        """Kill every entry matching the filter (all, without one); returns how many went."""
        return sum(self.kill(entry) for entry in list(self.filter(job, error)))


class ScheduledSet(KillableSet):
    """Jobs enqueued for later (``enqueue_in``/``enqueue_at``), scored by when due."""

    kind = "scheduled"


class RetrySet(KillableSet):
    """Failed jobs waiting out their backoff, scored by their next attempt."""

    kind = "retry"


class DeadSet(JobSet):
    """Jobs that will not run again unless retried, scored by their death.

    Capped like the workers cap it (deadset.py): pass ``limits`` to match the
    config's ``dead_max_jobs``/``dead_max_days``.
    """

    kind = "dead"

    def trim(self, now: float | None = None) -> int:
        """Apply the caps: drop entries older than ``max_days``, then the oldest
        beyond ``max_jobs``; returns how many went."""
        cutoff = self.limits.cutoff(now or time.time())
        pipe = self.backend.redis.pipeline(transaction=True)
        pipe.zremrangebyscore(self.key, "-inf", f"({cutoff}")
        pipe.zremrangebyrank(self.key, 0, -self.limits.max_jobs - 1)
        old, extra = pipe.execute()
        return int(old) + int(extra)
