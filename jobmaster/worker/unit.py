"""One fetched job as a worker process holds it, from fetch to outcome."""

from __future__ import annotations

from typing import Any


class Unit:
    """One fetched job: the payload exactly as stored (to acknowledge it) and its queue.

    Compared by identity: two entries of the same bytes are two fetches, each
    claimed and acknowledged on its own (running.py). ``freed`` belongs to
    the I/O core: whether the runner holding it was counted free again.
    ``pool``: the runners it went to (fetch.py: 0 the threads, 1 the event
    loop); ``payload``: its entry decoded, when the fetch had to read it to
    know that (read once: fetched.py takes it from here)."""

    __slots__ = ("freed", "payload", "pool", "queue", "raw")

    def __init__(self, raw: bytes, queue: str) -> None:
        self.raw = raw
        self.queue = queue
        self.freed = False
        self.pool = 0
        self.payload: dict[str, Any] | None = None

    def __repr__(self) -> str:
        return f"Unit(queue={self.queue!r}, raw={self.raw[:60]!r})"
