"""The jobs of one worker process, from fetch to outcome, and who may record them.

One object owns the table and every move of a job through it, under one
lock, because each of the holes it closes was a check made apart from its
act:

- claim: a fetched job enters the table only while the process is fetching.
  ``quiet`` and ``close`` change that state under the same lock, so a
  thread either claims a job before a stop looks at the table (and the stop
  waits for it), or finds the process quiet and gives the job back. Checking
  "fetching?" and then registering left a window in which a stop saw nothing
  running, pushed the job back, and the thread then ran it.
- start / end: a job's code runs between them; its thread's slot in the
  started slots (slots.py) names it meanwhile, so the master blames a crash
  only on jobs that were running. A crash suspect (``crash_suspect`` in its
  payload: it was running beside others when a child died) starts only when
  nothing runs in this process but suspects of its own group (poison.py:
  one half of the jobs that died together), and nothing else starts beside
  it: each further crash halves the jobs the culprit may be among.
- may_record: only a job still ours is recorded. ``close`` (a stop pushing
  back what still runs) and ``abandon`` (the watchdog recorded a stuck job)
  take jobs away from their threads; such a thread finishes its call and
  records nothing. FINISH checks the in-progress list too, so a push back
  racing a record leaves the job in one place whichever lands first.
- finished: the thread is done with the job, counted for max_jobs_per_child
  (``spent`` once this process has done its ``max_jobs``).

Claims are kept by fetch (the ``Unit`` object), not by the payload's bytes.
Two entries of the same bytes (a producer that retried its LPUSH, SPEC §4)
are two fetches: keyed by bytes, the second claim overwrote the first, its
thread was told the job was no longer ours, and one copy stayed in the
in-progress list until the self-check ran it a third time. Each copy's
FINISH removes one entry (LREM count 1), whichever it is.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable

from jobmaster.poison import SUSPECT
from jobmaster.slots import StartedSlots, digest
from jobmaster.worker.unit import Unit

SUSPECT_MARK = f'"{SUSPECT}":'.encode()  # as recovery writes it (payload.encode)
ALONE = b"true"  # a suspect to run with no other job beside it


def suspect_group(raw: bytes) -> bytes | None:
    """A job requeued as a crash suspect (poison.py) runs only beside jobs of
    its group (``ALONE``: beside none); None for any other job.

    A byte search, not a decode, on the hot path: only recovery writes the
    field, compactly encoded. A false match (the text in a job's arguments)
    only makes that job run apart once.
    """
    at = raw.find(SUSPECT_MARK)
    if at < 0:
        return None
    value = raw[at + len(SUSPECT_MARK) :]
    if value.startswith(b'"'):
        end = value.find(b'"', 1)
        return value[1:end] if end > 1 else ALONE
    return ALONE


def is_suspect(raw: bytes) -> bool:
    return suspect_group(raw) is not None


class RunningTable:
    def __init__(
        self,
        fetching: threading.Event,
        stopping: threading.Event,
        slots: StartedSlots | None = None,
        max_jobs: int = 0,
    ) -> None:
        self.fetching = fetching
        self.stopping = stopping
        self.slots = slots
        self._lock = threading.Condition()
        self._claimed: set[Unit] = set()  # by fetch: Unit compares by identity
        self._taken: set[Unit] = set()  # claimed, but no longer ours to record
        self._started: dict[int, bytes] = {}  # thread slot -> payload, job code running
        self._suspects_waiting = 0  # crash suspects waiting for their turn
        self._suspects_running = 0
        self._suspect_group: bytes | None = None  # of the suspects running
        self.completed = 0  # jobs finished (any outcome), for max_jobs_per_child
        # Stop fetching the moment this many jobs are done (0 = no limit):
        # checked as each job ends, so a busy child doesn't overshoot.
        self.max_jobs = max_jobs
        self.leaving = False  # being recycled: quiet for good (``leave``)

    # -- fetching state ------------------------------------------------------
    def quiet(self) -> bool:
        """Stop claiming; True if the process was fetching until now."""
        with self._lock:
            was = self.fetching.is_set()
            self.fetching.clear()
            return was

    def leave(self) -> bool:
        """Stop claiming for good (a recycle): no resume sets it fetching again,
        whoever sends the CONT or the remote ``resume``. True if it was fetching."""
        with self._lock:
            self.leaving = True
            was = self.fetching.is_set()
            self.fetching.clear()
            return was

    def resume(self) -> bool:
        """Claim again (not once stopping, leaving or spent); True if the process
        was quiet."""
        with self._lock:
            if self.fetching.is_set() or self.stopping.is_set() or self.leaving or self.spent:
                return False
            self.fetching.set()
            return True

    def close(self) -> list[Unit]:
        """A stop: claim nothing more, and take every claimed job from its thread
        (it is about to be pushed back). Returns those jobs."""
        with self._lock:
            self.fetching.clear()
            self.stopping.set()
            self._taken.update(self._claimed)
            self._lock.notify_all()  # threads waiting to start a job give up
            return list(self._claimed)

    # -- one job's way -------------------------------------------------------
    def claim(self, unit: Unit) -> bool:
        """Hold a fetched job, unless quiet or a stop began (then give it back)."""
        with self._lock:
            if not self.fetching.is_set() or self.stopping.is_set():
                return False
            self._claimed.add(unit)
            return True

    def start(self, unit: Unit, slot: int, *, wait: bool = True) -> bool | None:
        """Its code is about to run in ``slot``; False if a stop began while
        it waited for its turn (it is not run: the stop pushes it back).

        ``wait=False`` (the event loop, which must never block): None instead
        of waiting when it is not its turn (a crash suspect runs apart); the
        caller waits in a thread and calls again."""
        group = suspect_group(unit.raw)
        with self._lock:
            if not wait and unit not in self._taken and not self._may_start(group):
                return None
            if group is not None:
                self._suspects_waiting += 1
            try:
                while not self._may_start(group) and not self.stopping.is_set():
                    self._lock.wait(0.5)
            finally:
                if group is not None:
                    self._suspects_waiting -= 1
            if unit in self._taken:
                return False
            if group is not None:
                self._suspect_group = group
                self._suspects_running += 1
            self._started[slot] = unit.raw
            if self.slots is not None and slot < self.slots.count:
                self.slots.mark(slot, unit.raw)
            return True

    def _may_start(self, group: bytes | None) -> bool:
        """Under the lock: whether a job of this suspect group (None: no suspect)
        may start now. Suspects run only beside their own group, and nothing
        starts while suspects run or wait (they would never get the process
        to themselves)."""
        if group is None:
            return not self._suspects_running and not self._suspects_waiting
        if not self._started:
            return True
        return (
            group != ALONE
            and group == self._suspect_group
            and self._suspects_running == len(self._started)
        )

    def end(self, unit: Unit, slot: int) -> None:
        """Its code returned (or raised): a crash from now on is not its doing."""
        with self._lock:
            if self.slots is not None and slot < self.slots.count:
                self.slots.clear(slot)
            if self._started.pop(slot, None) is not None and is_suspect(unit.raw):
                self._suspects_running -= 1
                if not self._suspects_running:
                    self._suspect_group = None
            self._lock.notify_all()

    def may_record(self, unit: Unit) -> bool:
        with self._lock:
            return unit in self._claimed and unit not in self._taken

    def abandon(self, unit: Unit) -> None:
        """The watchdog records a stuck job itself: its thread must not."""
        with self._lock:
            if unit in self._claimed:
                self._taken.add(unit)
        self.finished(unit)

    def finished(self, unit: Unit) -> bool:
        """The thread is done with the job; True the first time (it counts)."""
        with self._lock:
            if unit not in self._claimed:
                return False  # abandoned earlier: already counted
            self._claimed.discard(unit)
            self._taken.discard(unit)
            self.completed += 1
            self._lock.notify_all()
            return True

    # -- what others read ----------------------------------------------------
    @property
    def spent(self) -> bool:
        """This process has done its ``max_jobs``: time to stop fetching."""
        return bool(self.max_jobs) and self.completed >= self.max_jobs

    @property
    def suspects_pending(self) -> bool:
        """A crash suspect waits for its turn or runs: a job fetched now would
        only wait behind it (up to ``async_concurrency`` of them, with an event
        loop) while another process could run it. Read without the lock: a
        stale answer delays a fetch by one look of the core."""
        return bool(self._suspects_waiting or self._suspects_running)

    @property
    def busy(self) -> int:
        return len(self._claimed)

    def claimed(self) -> Counter[bytes]:
        """How many claims each payload has now (two for two copies of one)."""
        with self._lock:
            return Counter(unit.raw for unit in self._claimed)

    def started_digests(self) -> tuple[bytes, ...]:
        """The jobs whose code runs now, as the started slots name them."""
        with self._lock:
            return tuple(digest(raw) for raw in self._started.values())

    def wait_idle(self, deadline: float, interrupted: Callable[[], bool] = lambda: False) -> bool:
        """Wait until no job is claimed, the monotonic ``deadline`` passes or
        ``interrupted()``; True if idle."""
        with self._lock:
            while self._claimed and not interrupted():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._lock.wait(min(left, 0.1))
            return not self._claimed
