"""One fetched job as a worker process holds it, from fetch to outcome."""

from __future__ import annotations


class Unit:
    """One fetched job: the payload exactly as stored (to acknowledge it) and its queue.

    Compared by identity: two entries of the same bytes are two fetches, each
    claimed and acknowledged on its own (running.py). ``freed`` belongs to
    the I/O core: whether the runner holding it was counted free again."""

    __slots__ = ("freed", "queue", "raw")

    def __init__(self, raw: bytes, queue: str) -> None:
        self.raw = raw
        self.queue = queue
        self.freed = False

    def __repr__(self) -> str:
        return f"Unit(queue={self.queue!r}, raw={self.raw[:60]!r})"
