"""Cancels reaching this process: ``JobCancelled`` in the thread of a job that
``jobmaster.cancel`` asked to stop, and no start for one asked before it began.

The request is a member of the cancels set (api/cancels.py), written on any
host, and a message on the cancel channel naming the jid. This process
hears the message at once (one subscription per process, however many jobs
it runs) and, as the fallback for a message lost while its connection was
down, reads what is new in the set once a second. Both feed a local table
of requested jids. Then:

- a job whose code runs now (``running``) gets ``JobCancelled`` raised in its
  thread, as the watchdog raises ``JobTimeout`` (``PyThreadState_SetAsyncExc``):
  a pub/sub hop after the request (a second at worst, by the fallback read);
- a job about to start (fetched, or requeued after a crash, before or after
  the request) is looked up in the table (``requested``): no call at all.

Reading what is new: members are scored by Redis's clock when requested.
The read walks the set by score from where it stopped, a page at a time,
skipping within one score the members already read (``offset``): a flood
of members with one score is walked through, never read as the same page
forever. Once it reaches the end, the next read starts again a little
below the newest score seen (``OVERLAP``: requests written in the same
instant, a failover's clock), so in steady state a read is one small call.
Every value may be forged (SPEC §8): a score that is not finite or lies in
the future never moves the cursor, the work per read is bounded (the walk
goes on at the next read), and the table is bounded.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, cast

import redis

from jobmaster.api.cancels import MAX_REQUESTS
from jobmaster.errors import JobCancelled
from jobmaster.keys import Keys
from jobmaster.outage import OUTAGE_BACKOFF, OutageLog
from jobmaster.worker.watchdog import Interrupt, raise_in_thread

log = logging.getLogger("jobmaster.worker.cancels")

INTERVAL = 1.0  # seconds between fallback reads: a lost message costs at most this
STOP_NOTICE = 1.0  # seconds a stop may wait for the listener's current wait to end
PAGE = 1000  # requests read per call; more only after a flood
PAGES = MAX_REQUESTS // PAGE + 1  # calls per read at most: the walk goes on at the next one
OVERLAP = 2.0  # seconds re-read below the cursor (same-instant writes, a failover's clock)
FUTURE = 86400.0  # a score further ahead of our clock than this never moves the cursor


@dataclass(eq=False)
class Watched:
    """A job whose code runs in ``thread_id`` now (or, with ``interrupt``, on
    the event loop of that thread: an async job)."""

    jid: str
    thread_id: int
    fired: bool = False
    interrupt: Interrupt | None = None  # None: raise in ``thread_id``

    @property
    def key(self) -> object:
        return self.thread_id if self.interrupt is None else self


class CancelWatch(threading.Thread):
    def __init__(self, client: redis.Redis, keys: Keys, stop: threading.Event) -> None:
        super().__init__(name="jobmaster-cancels", daemon=True)
        self.redis = client
        self.key = keys.cancels
        self.channel = keys.cancel_channel
        self.stop_event = stop
        # Set once subscribed: a cancel published before that is only read by
        # the fallback, a second later; the process reports "started" after it.
        self.subscribed = threading.Event()
        self._requested: dict[str, float] = {}  # jid -> when requested (Redis's clock, capped)
        self._cursor = -math.inf  # the newest genuine score read
        self._low = -math.inf  # where the walk goes on: this score ...
        self._skip = 0  # ... less the members of that score it has read
        self._running: dict[object, Watched] = {}  # thread id (or an async job's Watched) -> it
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

    def watch(self, jid: str, interrupt: Interrupt | None = None) -> Watched:
        """``running`` in two calls, for the executor (which enters a job's
        scopes in one object: worker/executor.py); ``unwatch`` must follow.
        ``interrupt``: how to stop the job (None: raise in this thread)."""
        with self._lock:
            if jid in self._requested:
                raise JobCancelled(f"cancelled by jobmaster.cancel({jid!r})")
            watched = Watched(jid, threading.get_ident(), interrupt=interrupt)
            self._running[watched.key] = watched
            return watched

    def unwatch(self, watched: Watched) -> None:
        with self._lock:
            self._running.pop(watched.key, None)
            if watched.fired and watched.interrupt is None:
                # The job ended as the exception was sent: it must not
                # surface later, in the processor's own code.
                raise_in_thread(watched.thread_id, None)

    # -- the thread ----------------------------------------------------------
    def run(self) -> None:
        outage = OutageLog("cancel requests")
        while not self.stop_event.is_set():
            pubsub = self.redis.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]
            try:
                pubsub.subscribe(self.channel)
                pubsub.get_message(timeout=1.0)  # the confirmation: we are listening now
                self.subscribed.set()
                outage.succeeded(time.monotonic())
                self._listen(pubsub)
            except redis.RedisError as error:
                if self.stop_event.is_set():
                    return  # Redis going away after our stop is expected, not news
                outage.failed(error, time.monotonic())
                self.stop_event.wait(OUTAGE_BACKOFF)
            except Exception:
                log.exception("cancel requests: unexpected error; resubscribing")
                self.stop_event.wait(OUTAGE_BACKOFF)
            finally:
                with contextlib.suppress(redis.RedisError):
                    pubsub.close()

    def _listen(self, pubsub: Any) -> None:
        """Messages as they come; the fallback read at once (what was sent while
        we were not subscribed is gone) and then every ``INTERVAL``."""
        next_read = time.monotonic()
        while not self.stop_event.is_set():
            if time.monotonic() >= next_read:
                self.poll()
                next_read = time.monotonic() + INTERVAL
            # Never longer than STOP_NOTICE: the stop is noticed between waits.
            wait = min(STOP_NOTICE, max(0.0, next_read - time.monotonic()))
            message = pubsub.get_message(timeout=wait)
            if message is not None and message.get("type") == "message":
                self.heard(message["data"])

    def heard(self, data: object) -> None:
        """A message on the cancel channel: the jid it names is requested now."""
        if not isinstance(data, bytes | str):
            return
        jid = data.decode(errors="replace") if isinstance(data, bytes) else data
        with self._lock:
            self._requested[jid] = time.time()
            self._bound()
        self._fire()

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
        self._fire()

    def _fire(self) -> None:
        with self._lock:
            for watched in self._running.values():
                if not watched.fired and watched.jid in self._requested:
                    watched.fired = True
                    if watched.interrupt is not None:
                        watched.interrupt(JobCancelled)
                    else:
                        raise_in_thread(watched.thread_id, JobCancelled)
                    log.info("cancelling jid=%s", watched.jid, extra={"jid": watched.jid})

    def _read(self) -> None:
        """At most ``PAGES`` pages of the walk (see the module's docstring)."""
        for _ in range(PAGES):
            found = cast(
                "list[tuple[bytes, float]]",
                self.redis.zrange(
                    self.key,
                    f"{self._low!r}",
                    "+inf",
                    byscore=True,
                    offset=self._skip,
                    num=PAGE,
                    withscores=True,
                ),
            )
            self._take(found)
            if len(found) < PAGE:  # the end: next time from just below the newest
                self._low, self._skip = self._cursor - OVERLAP, 0
                return
            last = found[-1][1]
            same = sum(1 for _, score in found if score == last)
            if last == self._low:
                self._skip += same  # a page of one score: on past it, within it
            else:
                self._low, self._skip = last, same

    def _take(self, found: list[tuple[bytes, float]]) -> None:
        now = time.time()
        ceiling = now + FUTURE
        with self._lock:
            for member, score in found:
                jid = member.decode(errors="replace") if isinstance(member, bytes) else member
                # Kept by its score, but never newer than now: forged future
                # scores would otherwise push genuine requests out of the table.
                self._requested[jid] = min(score, now)
                if math.isfinite(score) and self._cursor < score <= ceiling:
                    self._cursor = score
            self._bound()

    def _bound(self) -> None:
        """Keep the newest ``MAX_REQUESTS`` (as Redis keeps them); under the lock."""
        if len(self._requested) > MAX_REQUESTS:
            newest = sorted(self._requested.items(), key=lambda item: -item[1])
            self._requested = dict(newest[:MAX_REQUESTS])
