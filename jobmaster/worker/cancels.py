"""Cancels reaching this process: ``JobCancelled`` in the thread of a job that
``jobmaster.cancel`` asked to stop, and no start for one asked before it began.

The request is a member of the cancels set (api/cancels.py), written on any
host. Once a second this process reads what is new in it, in one call
however many jobs it runs (a per-job look would cost a round trip for
every job, on the hot path, for a request that is rare), into a local table
of requested jids. Then:

- a job whose code runs now (``running``) gets ``JobCancelled`` raised in its
  thread, as the watchdog raises ``JobTimeout`` (``PyThreadState_SetAsyncExc``):
  at most a second after the request, plus the read;
- a job about to start (fetched, or requeued after a crash, before or after
  the request) is looked up in the table (``requested``): no call at all.

Reading what is new: members are scored by Redis's clock when requested, so
each read asks for scores from the last one seen on (less ``OVERLAP``, for
requests written in the same instant, seen twice at worst): nothing is
missed and nothing is read twice in steady state. Every value may be forged
(SPEC §8): a score that is not finite or lies in the far future never moves
the cursor (it would hide every later request), and the table is bounded.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import cast

import redis

from jobmaster.api.cancels import MAX_REQUESTS
from jobmaster.errors import JobCancelled
from jobmaster.keys import Keys
from jobmaster.worker.loop import run_periodically
from jobmaster.worker.watchdog import raise_in_thread

log = logging.getLogger("jobmaster.worker.cancels")

INTERVAL = 1.0  # seconds between reads: a running job stops within about this
PAGE = 1000  # requests read per call; more only after a flood
OVERLAP = 2.0  # seconds re-read below the cursor (same-instant writes, a failover's clock)
FUTURE = 86400.0  # a score further ahead of our clock than this is forged: ignored


@dataclass
class Watched:
    """A job whose code runs in ``thread_id`` now."""

    jid: str
    thread_id: int
    fired: bool = False


class CancelWatch(threading.Thread):
    def __init__(self, client: redis.Redis, keys: Keys, stop: threading.Event) -> None:
        super().__init__(name="jobmaster-cancels", daemon=True)
        self.redis = client
        self.key = keys.cancels
        self.stop_event = stop
        self._requested: dict[str, float] = {}  # jid -> when requested (Redis's clock)
        self._cursor = -math.inf
        self._running: dict[int, Watched] = {}  # thread id -> its job
        self._lock = threading.Lock()

    # -- the job's side ------------------------------------------------------
    def requested(self, jid: str) -> bool:
        """Whether a cancel of ``jid`` has been read (a job about to start)."""
        with self._lock:
            return jid in self._requested

    @contextmanager
    def running(self, jid: str) -> Iterator[None]:
        """The block runs job ``jid``'s code: a cancel read meanwhile raises
        ``JobCancelled`` in it (at once if it was read already)."""
        watched = self.watch(jid)
        try:
            yield
        finally:
            self.unwatch(watched)

    def watch(self, jid: str) -> Watched:
        """``running`` in two calls, for the executor (which enters a job's
        scopes in one object: worker/executor.py); ``unwatch`` must follow."""
        with self._lock:
            if jid in self._requested:
                raise JobCancelled(f"cancelled by jobmaster.cancel({jid!r})")
            watched = Watched(jid, threading.get_ident())
            self._running[watched.thread_id] = watched
            return watched

    def unwatch(self, watched: Watched) -> None:
        with self._lock:
            self._running.pop(watched.thread_id, None)
            if watched.fired:
                # The job ended as the exception was sent: it must not
                # surface later, in the processor's own code.
                raise_in_thread(watched.thread_id, None)

    # -- the thread ----------------------------------------------------------
    def run(self) -> None:
        # The first read at once: a job fetched as this process starts may
        # have been cancelled long ago (requeued after a crash).
        run_periodically("cancel requests", self.poll, INTERVAL, self.stop_event)

    def catch_up(self) -> None:
        """The first read, before this process fetches: a job requeued after a
        crash may have been cancelled meanwhile. A cancels key someone made of
        another type (WRONGTYPE) must not stop the process from starting."""
        try:
            self.poll()
        except redis.ResponseError as error:
            log.warning("could not read the cancel requests (%s); carrying on", error)

    def poll(self) -> None:
        """Read what is new, and stop the running jobs it names."""
        self._read()
        with self._lock:
            for watched in self._running.values():
                if not watched.fired and watched.jid in self._requested:
                    watched.fired = True
                    raise_in_thread(watched.thread_id, JobCancelled)
                    log.info("cancelling jid=%s", watched.jid, extra={"jid": watched.jid})

    def _read(self) -> None:
        low = self._cursor - OVERLAP
        ceiling = time.time() + FUTURE
        for _ in range(MAX_REQUESTS // PAGE + 1):  # bounded, even against a flood
            found = cast(
                "list[tuple[bytes, float]]",
                self.redis.zrange(
                    self.key, f"{low!r}", "+inf", byscore=True, offset=0, num=PAGE, withscores=True
                ),
            )
            with self._lock:
                for member, score in found:
                    jid = member.decode(errors="replace") if isinstance(member, bytes) else member
                    self._requested[jid] = score
                    if math.isfinite(score) and self._cursor < score <= ceiling:
                        self._cursor = score
                if len(self._requested) > MAX_REQUESTS:  # the newest, as Redis keeps them
                    newest = sorted(self._requested.items(), key=lambda item: -item[1])
                    self._requested = dict(newest[:MAX_REQUESTS])
            if len(found) < PAGE:
                return
            last = found[-1][1]
            if not (math.isfinite(last) and last > low):
                return  # a page of one score (or of forged ones): read on next time
            low = last
