"""A queue as an operator sees it: size, latency, entries, pause, clear.

Producers LPUSH and workers take from the right, so the oldest job (the next
to run) is the list's last element. Iteration goes newest first, by index
from the left: a push during the walk shifts entries towards the right (at
worst one is seen twice), while a fetch from the right shifts nothing, so no
entry that stays queued is ever skipped (walking from the right, a fetch
would make the walk skip entries).

Pausing adds the name to ``keys.paused``, which the FETCH script already
skips: workers leave a paused queue's jobs where they are.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any, cast

from jobmaster.api.base import PAGE, Backend, Connection, as_bytes, texts
from jobmaster.api.records import PEEK_BYTES, JobRecord
from jobmaster.connection import byte_list
from jobmaster.scripts import FindQueued, PeekList, PopOldest

FIND_PAGE = 1000  # queue entries FIND_QUEUED looks at per call (a short step for Redis)


class Queue:
    def __init__(
        self, name: str, connection: Connection = None, *, namespace: str | None = None
    ) -> None:
        self.name = name
        self.backend = Backend.resolve(connection, namespace)
        self.key = self.backend.keys.queue(name)

    def __repr__(self) -> str:
        return f"Queue({self.name!r})"

    @classmethod
    def all(cls, connection: Connection = None, *, namespace: str | None = None) -> list[Queue]:
        """Every known queue: pushed to at least once (``keys.queues``), or paused."""
        backend = Backend.resolve(connection, namespace)
        pipe = backend.redis.pipeline(transaction=False)
        pipe.smembers(backend.keys.queues)
        pipe.smembers(backend.keys.paused)
        known, paused = pipe.execute()
        return [cls(name, backend) for name in texts(known | paused)]

    def size(self) -> int:
        return int(self.backend.redis.llen(self.key))

    def latency(self, now: float | None = None) -> float:
        """Age in seconds of the oldest job (0 when empty, unreadable or too long)."""
        oldest = self.peek(-1, -1)
        return oldest[0].latency(now or time.time()) if oldest else 0.0

    def peek(self, start: int, stop: int, client: Any = None) -> list[JobRecord]:
        """LRANGE's jobs, each read to ``PEEK_BYTES`` only (scripts.PEEK_LIST): a
        forged 100 MB job is not fetched whole to list a page or a latency.
        ``client``: a pipeline to queue the call on (then the reply is
        ``records_of`` the pipeline's result)."""
        call = PeekList(key=self.key, start=start, stop=stop, keep=PEEK_BYTES)
        reply = call.run(self.backend.scripts.peek_list, client=client)
        return records_of(reply) if client is None else []

    def __iter__(self) -> Iterator[JobRecord]:
        """Every entry, newest first, read a page at a time."""
        start, previous = 0, set[bytes]()
        while True:
            page = byte_list(self.backend.redis.lrange(self.key, start, start + PAGE - 1))
            for raw in map(as_bytes, page):
                if raw not in previous:  # shifted here by pushes since the last page
                    yield JobRecord.parse(raw)
            if len(page) < PAGE:
                return
            start += PAGE
            previous = set(map(as_bytes, page))

    def page(self, start: int, count: int) -> list[JobRecord]:
        """``count`` jobs from position ``start``, newest first (one LRANGE)."""
        if count <= 0 or start < 0:
            return []
        return self.peek(start, start + count - 1)

    def locate(self, jid: str, keep: int = PEEK_BYTES) -> tuple[bytes, int] | None:
        """The job's entry, searched a page at a time inside Redis (FIND_QUEUED:
        only the entry found crosses the wire), cut to its first ``keep`` bytes
        (0: whole, as a removal needs it), and its full length; None if it is
        not queued here."""
        start = 0
        while start >= 0:
            find = FindQueued(queue_key=self.key, jid=jid, start=start, size=FIND_PAGE, keep=keep)
            reply = find.run(self.backend.scripts.find_queued)
            if len(reply) == 1:
                start = int(reply[0])
                continue
            raw = reply[1] if isinstance(reply[1], bytes) else str(reply[1]).encode()
            return raw, int(reply[2])
        return None

    def find(self, jid: str) -> JobRecord | None:
        return next((record for record in self if record.jid == jid), None)

    def delete(self, record: JobRecord | str) -> bool:
        """Remove one job (a record, or a jid); False if it was no longer queued.
        A record read only in part is found whole again by its jid first."""
        if isinstance(record, JobRecord) and record.truncated:
            record = record.jid or ""
        found = self.find(record) if isinstance(record, str) else record
        if found is None:
            return False
        member = cast(str, found.raw)  # redis-py's stubs say str; bytes are sent as they are
        if not self.backend.redis.lrem(self.key, 1, member):
            return False
        self.backend.expire_waiting([found.jid])  # its "queued" status has no TTL
        self.backend.release_unique(found.payload)
        return True

    def clear(self) -> int:
        """Drop every job the queue holds now; returns how many there were.

        Taken from the fetch end a page at a time (POP_OLDEST, each entry read
        to ``PEEK_BYTES`` only), so that each dropped job's "queued" status,
        which has no TTL while its job waits, gets one (``expire_waiting``):
        else it would outlive the job for good. Jobs pushed meanwhile stay.
        The name leaves ``keys.queues`` as well (the next push adds it back); a
        paused queue stays paused. Unique locks of the dropped jobs are left to
        expire.
        """
        backend = self.backend
        left, dropped = self.size(), 0
        while left > 0:
            call = PopOldest(queue_key=self.key, most=min(PAGE, left), keep=PEEK_BYTES)
            records = records_of(call.run(backend.scripts.pop_oldest))
            if not records:
                break
            backend.expire_waiting(record.jid for record in records)
            dropped += len(records)
            left -= len(records)
        pipe = backend.redis.pipeline(transaction=True)
        pipe.llen(self.key)
        pipe.srem(backend.keys.queues, self.name)
        if not pipe.execute()[0]:
            return dropped
        backend.redis.sadd(backend.keys.queues, self.name)  # pushed to meanwhile
        return dropped

    def pause(self) -> None:
        """Workers stop fetching from it (jobs already running finish)."""
        self.backend.redis.sadd(self.backend.keys.paused, self.name)

    def resume(self) -> None:
        """Workers fetch from it again; idle ones are woken up at once."""
        keys = self.backend.keys
        waiting = self.size()
        pipe = self.backend.redis.pipeline(transaction=True)
        pipe.srem(keys.paused, self.name)
        if waiting:  # "N jobs arrived": as a push would say it
            pipe.publish(keys.wakeup_channel(self.name), waiting)
        pipe.execute()

    def is_paused(self) -> bool:
        return bool(self.backend.redis.sismember(self.backend.keys.paused, self.name))


def find_queued(
    backend: Backend, jid: str, keep: int = PEEK_BYTES
) -> tuple[Queue, bytes, int] | None:
    """The queue that holds the job, its entry (its first ``keep`` bytes; 0:
    whole) and the entry's full length: ``Queue.locate`` over the queues jobs
    were pushed to (a paused one too: not ``Queue.all``, which also reads the
    paused set, a key the producer's ACL user may not read)."""
    for queue in (
        Queue(name, backend) for name in texts(backend.redis.smembers(backend.keys.queues))
    ):
        found = queue.locate(jid, keep)
        if found is not None:
            return queue, *found
    return None


def records_of(reply: Any) -> list[JobRecord]:
    """PEEK_LIST's reply as records (first bytes, full length, ...)."""
    return [JobRecord.parse(as_bytes(reply[i]), int(reply[i + 1])) for i in range(0, len(reply), 2)]
