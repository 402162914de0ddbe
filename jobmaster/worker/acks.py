"""Acknowledgements of jobs that end at the same moment, sent in one round trip.

With short jobs, several processor threads finish within the same
millisecond, and each FINISH is a round trip of its own: the threads queue on
the connection pool and on the GIL to send what one pipeline could carry.
Here, the first thread to reach the send lock sends every FINISH queued by
then as one pipeline (one round trip); the others find their reply waiting.

Nothing about a FINISH changes: each is its own script call (atomic on its
own), its reply goes to the thread that asked, and a connection error fails
every call of the round trip alike, since any of them may have run: each
thread's ``record`` then sends its own again, exactly as after a lost reply
of a single call (FINISH does nothing once its entry has left the list).

"Working" marks go out here too. FETCH cannot write a fetched job's
status: its key is named after the jid, inside the payload, and a script
must be given every key it touches. A round trip of its own after each
fetch would cost a round trip a job on the hot path (throughput is
round-trip bound). So a job starting leaves its mark here (``mark``), and:

- a job that ends within MARK_DELAY has its mark dropped by its own FINISH
  (``settles``), which writes its final status: a "working" there would
  have been overwritten in the same moment, seen by no one;
- a job still running after MARK_DELAY is marked by the flusher thread, in
  one MARK call with every mark then due, sent with the acknowledgements
  queued at that moment: nothing a job thread waits for, and little for
  Redis next to jobs that long.

A job running long keeps its mark alive: its status must not expire while it
runs (SPEC §11), whatever ``status_ttl`` is. A mark's TTL is ``status_ttl``
less the time the job has run (so the TTL still tells when it started: the
Busy page's runtime) while that leaves at least two heartbeat TTLs; past
that, the heartbeat marks it again at each beat, in its own transaction
(``refresh``: no round trip of its own), with ``status_ttl`` plus one
heartbeat TTL. A process whose heartbeat stops that long is presumed dead,
and whoever recovers its jobs rewrites their statuses. Marked jobs are kept
in ``_working`` until they end (``ended``): one dict pop per job end.

The job threads only set and pop a dict entry (atomic under the GIL: no
lock on the hot path, which measurably slowed no-op jobs). The flusher
sends under the send lock, like the FINISHes, so a job's mark never reaches
Redis after its FINISH; and MARK writes only while the payload is still in
our in-progress list, so a job pushed back or recovered from under us is
not marked "working" again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis
from redis.commands.core import Script

from jobmaster.scripts import Mark

log = logging.getLogger("jobmaster.worker.acks")

# Seconds a started job's "working" mark waits before it is sent: no-op and
# short jobs end first, and their FINISH makes it moot.
MARK_DELAY = 0.05
# Seconds without a job starting after which the flusher stops looking every
# MARK_DELAY / 2 and sleeps until the next mark wakes it.
FLUSHER_NAP_AFTER = 1.0


@dataclass(frozen=True)
class Marking:
    """Where and how long the "working" marks go (status tracking on)."""

    script: Script  # MARK
    inprogress_key: str
    status_ttl: int  # seconds
    horizon: int  # seconds: the heartbeat TTL (see above)

    def ttl_ms(self, running: float) -> int:
        """The TTL of the mark of a job that has run ``running`` seconds."""
        exact = self.status_ttl * 1000 - round(running * 1000)
        if exact >= 2 * self.horizon * 1000:
            return exact
        return (self.status_ttl + self.horizon) * 1000

    def refreshed(self, running: float) -> bool:
        """A job that has run this long gets its mark again at each beat."""
        return self.status_ttl - running < 2 * self.horizon


class Call:
    """One script call waiting for the round trip that carries it."""

    __slots__ = ("args", "done", "error", "keys", "reply", "script")

    def __init__(self, script: Script, keys: Sequence[Any], args: Sequence[Any]) -> None:
        self.script = script
        self.keys = keys
        self.args = args
        self.done = False
        self.reply: Any = None
        self.error: BaseException | None = None

    def settle(self, reply: Any) -> None:
        if isinstance(reply, BaseException):
            self.error = reply
        else:
            self.reply = reply
        self.done = True


class Acks:
    """Sends the script calls of the threads of one process, combined."""

    def __init__(self, client: redis.Redis, marking: Marking | None = None) -> None:
        self.client = client
        self.marking = marking
        self._send_lock = threading.Lock()  # one round trip at a time
        self._queue_lock = threading.Lock()
        self._queued: list[Call] = []
        # status key -> (monotonic time the job started, its payload as fetched)
        self._marks: dict[str, tuple[float, bytes]] = {}
        self._working: dict[str, tuple[float, bytes]] = {}  # marked, not ended yet
        self._marks_waiting = threading.Event()  # wakes a napping flusher
        self._napping = False  # the flusher sleeps until a mark comes
        self._flusher_lock = threading.Lock()
        self._flusher: threading.Thread | None = None
        # Set by close(): the flusher ends. It ran for good, one per Acks: a
        # test suite that built workers in process kept ~94 of them running.
        self._closed = threading.Event()

    def call(
        self,
        script: Script,
        keys: Sequence[Any],
        args: Sequence[Any],
        *,
        settles: str | None = None,
    ) -> Any:
        """``script(keys, args)``, possibly in the same round trip as other threads'.

        ``settles``: the status key this call writes (a FINISH): a "working"
        mark still waiting for it is dropped.
        """
        if settles is not None:
            self._marks.pop(settles, None)
        call = Call(script, keys, args)
        with self._queue_lock:
            self._queued.append(call)
        with self._send_lock:
            if not call.done:
                self._send_queued()
        if call.error is not None:
            raise call.error
        return call.reply

    def mark(self, status_key: str, raw: bytes) -> None:
        """A job started: mark it "working" unless it ends first (see above)."""
        if self.marking is None:
            return
        self._marks[status_key] = (time.monotonic(), raw)
        # Woken only from a nap (a second without jobs): waking it for every
        # mark cost a GIL hand-off per job, a measurable loss on no-op jobs.
        if self._napping:
            self._marks_waiting.set()
        if self._flusher is None:
            self._start_flusher()

    def ended(self, status_key: str) -> None:
        """A job's code returned: its mark, sent or not, is no longer kept alive.
        In this order: ``_due_marks`` adds to ``_working`` before it takes the
        mark out of ``_marks``, so one of the two pops here sees it."""
        self._marks.pop(status_key, None)
        self._working.pop(status_key, None)

    def refresh(self, pipe: Any) -> None:
        """Queue, on the heartbeat's ``pipe``, one MARK for the jobs running so
        long that their mark needs renewing (none: nothing is queued)."""
        marking = self.marking
        if marking is None or not self._working:
            return
        now = time.monotonic()
        due = [
            (key, raw, marking.ttl_ms(now - started))
            for key, (started, raw) in list(self._working.items())
            if marking.refreshed(now - started)
        ]
        if due:
            Mark(inprogress_key=marking.inprogress_key, marks=due).run(marking.script, pipe)

    def _start_flusher(self) -> None:
        with self._flusher_lock:  # in the process that runs jobs, once
            if self._flusher is None:
                self._flusher = threading.Thread(
                    target=self._flush_marks, name="jobmaster-status-marks", daemon=True
                )
                self._flusher.start()

    def close(self, timeout: float = 2.0) -> None:
        """At the worker's stop, after its last job: the flusher ends (its marks
        are moot: each job left has its outcome or was pushed back)."""
        self._closed.set()
        self._marks_waiting.set()  # from its nap
        flusher = self._flusher
        if flusher is not None and flusher is not threading.current_thread():
            flusher.join(timeout)

    def _flush_marks(self) -> None:
        """The flusher thread: sends each mark once it is MARK_DELAY old (checked
        every MARK_DELAY / 2 while jobs start, asleep after a second without)."""
        last_mark = time.monotonic()
        while not self._closed.is_set():
            try:
                now = time.monotonic()
                if self._marks:
                    last_mark = now
                elif now - last_mark > FLUSHER_NAP_AFTER:
                    self._nap()
                    last_mark = time.monotonic()
                    continue
                oldest = min((started for started, _ in list(self._marks.values())), default=now)
                if now - oldest >= MARK_DELAY:
                    with self._send_lock:
                        self._send_queued(self._due_marks())
                self._closed.wait(MARK_DELAY / 2)
            except Exception:  # never end the thread: marks would pile up unsent
                log.exception("could not send the working marks")
                self._closed.wait(MARK_DELAY)

    def _nap(self) -> None:
        """Sleep until a mark comes. ``_napping`` is set before the last look at
        the marks, so a mark made meanwhile either is seen or sets the event."""
        self._napping = True
        self._marks_waiting.clear()
        if not self._marks and not self._closed.is_set():
            self._marks_waiting.wait()
        self._napping = False

    def _send_queued(self, marks: Call | None = None) -> None:
        """Under the send lock: every call queued (after ``marks``, if any)."""
        with self._queue_lock:
            calls, self._queued = self._queued, []
        if marks is not None:
            calls.insert(0, marks)  # before any FINISH of the same job
        if calls:
            self._send(calls)
        if marks is not None and marks.error is not None:
            log.debug("could not mark jobs working: %s", marks.error)

    def _due_marks(self) -> Call | None:
        """One MARK call for the marks older than MARK_DELAY (taken out), if any."""
        marking = self.marking
        if marking is None:
            return None
        now = time.monotonic()
        due: list[tuple[str, bytes, int]] = []
        for key, entry in list(self._marks.items()):
            started, raw = entry
            if now - started < MARK_DELAY:
                continue
            self._working[key] = entry  # before the pop: see ``ended``
            taken = self._marks.pop(key, None)
            if taken is not entry:  # dropped by its FINISH since, or marked anew
                if self._working.get(key) is entry:
                    self._working.pop(key, None)
                if taken is not None:
                    self._marks.setdefault(key, taken)
                continue
            due.append((key, raw, max(1, marking.ttl_ms(now - started))))
        if not due:
            return None
        call = Mark(inprogress_key=marking.inprogress_key, marks=due)
        return Call(marking.script, call.keys(), call.argv())

    def _send(self, calls: list[Call]) -> None:
        if len(calls) == 1:
            only = calls[0]
            try:
                only.settle(only.script(keys=only.keys, args=only.args, client=self.client))
            except redis.RedisError as error:
                only.settle(error)
            return
        pipe = self.client.pipeline(transaction=False)
        for call in calls:
            pipe.evalsha(call.script.sha, len(call.keys), *call.keys, *call.args)
        try:
            replies = pipe.execute(raise_on_error=False)
        except redis.RedisError as error:
            for call in calls:
                call.settle(error)
            return
        for call, reply in zip(calls, replies, strict=True):
            if isinstance(reply, redis.exceptions.NoScriptError):
                # A Redis restarted (or replaced) since the script was loaded:
                # the call did not run; Script loads it and calls again.
                self._send([call])
            else:
                call.settle(reply)
