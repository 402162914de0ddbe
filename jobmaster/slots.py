"""Which jobs a worker process has started, in memory its master reads after it dies.

Why. When a child dies, its in-progress list holds the job that killed it,
but also jobs running beside it in other threads and jobs fetched but not
started (a hand-off, a thread waiting its turn). Counting a crash against
every entry buried innocent jobs with each poison pill. The master must know
which entries had *started*, at the instant of death, and the child cannot
tell it then: a SIGKILL or an OOM kill leaves no time for a message, and a
Redis round trip per job start would cost the hot path.

How. Before forking, the master maps an anonymous shared page
(``mmap(-1, ...)`` is ``MAP_SHARED``): the child inherits it, and each of its
processor threads owns one slot. A thread marks its slot as it starts a job
and clears it as the job's code returns; a write to memory, no syscall. The
master reads the slots after it has reaped the child, when nothing writes
any more.

Layout: ``SLOT`` bytes a slot: one state byte (0 free, 1 started), then the
BLAKE2b-128 digest of the payload exactly as listed in the in-progress list
(the jid alone may be missing, or repeated, in a payload from outside).
The digest is written before the state byte is set, and the state byte is
cleared first, so a process killed between the two writes leaves a slot
that is free or names the right job: never a started slot with a stale
digest.
"""

from __future__ import annotations

import hashlib
import mmap

DIGEST = 16
SLOT = 1 + DIGEST
FREE, STARTED = 0, 1


def digest(raw: bytes) -> bytes:
    """The name of an in-progress entry in the slots: its payload's digest."""
    return hashlib.blake2b(raw, digest_size=DIGEST).digest()


class StartedSlots:
    """One slot per processor thread of a child, shared with its master."""

    def __init__(self, count: int) -> None:
        self.count = count
        self._map = mmap.mmap(-1, max(1, count) * SLOT)

    def mark(self, index: int, raw: bytes) -> None:
        """Thread ``index`` starts the job listed as ``raw``."""
        start = index * SLOT
        self._map[start + 1 : start + SLOT] = digest(raw)
        self._map[start] = STARTED

    def clear(self, index: int) -> None:
        """Thread ``index``'s job code returned (its outcome is not recorded yet:
        a crash from here on is not that job's doing)."""
        self._map[index * SLOT] = FREE

    def started(self) -> tuple[bytes, ...]:
        """Digests of the jobs started and not returned, one per busy thread (read
        after the child died)."""
        found = []
        for index in range(self.count):
            start = index * SLOT
            if self._map[start] == STARTED:
                found.append(bytes(self._map[start + 1 : start + SLOT]))
        return tuple(found)

    def close(self) -> None:
        if not self._map.closed:
            self._map.close()
