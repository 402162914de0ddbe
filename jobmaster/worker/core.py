"""The I/O core of a worker process: the one owner of its job traffic with Redis.

Why one thread. With short jobs a process is bound by its CPU (the GIL),
not by Redis: each job thread that sent its own FETCH and FINISH, or took
turns under a send lock to share a round trip, spent its time packing
commands, checking connections out of the pool and waiting on the locks
that handed jobs and replies between threads (docs/performance.md). Here
one thread, the core, sends every script call of the job lifecycle:

- the acknowledgements (FINISH) and any other script call a job thread
  hands it (``call``): each is still its own atomic script call whose reply
  goes back to the thread that asked, through a C-level queue;
- the "working" marks of jobs running for a moment (see "Marks" below);
- the fetch: as many jobs as there are runners free, or about to be free
  (a runner whose FINISH is in this round trip), sent in the same round
  trip as those acknowledgements, and handed to the runners through the
  ``ready`` queue (a C-level ``queue.SimpleQueue``).

A job thread therefore never takes a lock to talk to Redis: it puts its
call in the core's inbox and blocks on its own reply box; the core drains
the inbox, sends what it found as one pipeline, settles the replies and
loops. Under load every round trip carries several FINISHes and the FETCH
that replaces them; idle, the core sleeps on its inbox.

The reliability contract is the one fetch.py states: every fetched job is
in this process's in-progress list before any runner sees it (a crash
requeues it, a stop pushes it back); a runner claims a job only while the
process is fetching (running.py), and gives back one it takes as quiet or a
stop begins; a fetch never takes more jobs than runners are free for them,
so a job waits in ``ready`` only until an idle runner wakes. ``barrier``
lets a stop wait for the round trip in flight: after it, no fetch is made.

Lost replies. A connection error fails every call of its round trip alike
(any of them may have run): each caller sees the error and decides, exactly
as after a lost reply of a call of its own (outcome.record re-sends FINISH,
which does nothing once its entry has left the list). A FETCH whose reply is
lost leaves its jobs in our in-progress list unclaimed: the self-check
requeues them (selfcheck.py).

Other runners. Nothing here knows a runner is a thread: a job reaches a
runner through the feed's queue, and an outcome reaches Redis as a ``Call``
handed to ``submit``, settled through ``Call.settle``. A thread's call
(``call``) waits on its reply box; an event loop's runner (async jobs) will
hand in a ``Call`` whose ``settle`` resolves a future on its loop (the core
never blocks on a loop, nor a loop on the core). Jobs of several cluster
slots will be several feeds and wires, one round trip each per round.

Marks. FETCH cannot write a fetched job's status: its key is named after
the jid, inside the payload, and a script must be given every key it
touches. So a job starting leaves its mark here (``mark``), and:

- a job that ends within MARK_DELAY has its mark dropped by its own FINISH
  (``settles``), which writes its final status: a "working" there would
  have been overwritten in the same moment, seen by no one;
- a job still running after MARK_DELAY is marked by the core, in one MARK
  call with every mark then due, ahead of the acknowledgements of that
  round trip (so a job's mark never reaches Redis after its FINISH); MARK
  writes only while the payload is still in our in-progress list, so a job
  pushed back or recovered from under us is not marked "working" again.

A job running long keeps its mark alive: its status must not expire while
it runs (SPEC §11), whatever ``status_ttl`` is. A mark's TTL is
``status_ttl`` less the time the job has run (so the TTL still tells when it
started: the Busy page's runtime) while that leaves at least two heartbeat
TTLs; past that, the heartbeat marks it again at each beat, in its own
transaction (``refresh``), with ``status_ttl`` plus one heartbeat TTL.

The job threads only set and pop dict entries for marks (atomic under the
GIL). The core looks at the marks every MARK_DELAY / 2 while some wait,
and otherwise sleeps on its inbox (a mark made while it sleeps wakes it).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import queue
import threading
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import redis
from redis.commands.core import Script

from jobmaster.scripts import FinishMany, Mark
from jobmaster.worker.wire import Wire

log = logging.getLogger("jobmaster.worker.core")

# Seconds a started job's "working" mark waits before it is sent: no-op and
# short jobs end first, and their FINISH makes it moot.
MARK_DELAY = 0.05
# The longest the core sleeps on an empty inbox: it looks at its own
# closing and at the fetch's backoff at least this often.
LONGEST_SLEEP = 1.0
# Seconds a caller waits for its reply before it looks whether the core is
# still there (it is, unless closed: then the caller sends the call itself).
REPLY_LOOK = 1.0

# Seconds the core pauses after a round failed on a bug of ours: a bug met
# at every round logs once a second, not at every round.
BUG_PAUSE = 1.0

_WAKE = object()  # look for jobs now (a push was heard, a resume, the safety tick)
_MARKED = object()  # a job started while the core napped: look at the marks


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


class Runner(Protocol):
    """What the core knows of a runner's job (fetch.Unit): whether the runner
    that held it has been counted free again (read and set by the core only)."""

    freed: bool


class Call:
    """One script call, waiting for the round trip that carries it."""

    __slots__ = ("args", "box", "error", "frees", "keys", "reply", "script", "settled")

    def __init__(
        self,
        script: Script,
        keys: Sequence[Any],
        args: Sequence[Any],
        frees: Runner | None = None,
    ) -> None:
        self.script = script
        self.keys = keys
        self.args = args
        self.frees = frees  # the runner's job this call ends (its runner is free after it)
        self.box: queue.SimpleQueue[Call] = queue.SimpleQueue()
        self.reply: Any = None
        self.error: Exception | None = None
        self.settled = False

    def settle(self, reply: Any) -> None:
        self.settled = True
        if isinstance(reply, Exception):
            self.error = reply
        else:
            self.reply = reply
        self._deliver()

    def _deliver(self) -> None:
        """Wake the caller: a thread waiting on its box."""
        self.box.put(self)


class Mailbox:
    """Replies for one event loop's coroutines, handed over in bulk.

    ``call_soon_threadsafe`` writes to the loop's wakeup pipe: a system call
    and a wakeup per reply, where a round trip settles many FINISHes at once.
    The core's thread posts each settled future here; the first post since
    the loop last emptied the box schedules one ``drain`` for all of them.
    (Under the GIL a post racing a drain at worst schedules one drain more.)
    """

    __slots__ = ("_futures", "_scheduled", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._futures: collections.deque[asyncio.Future[None]] = collections.deque()
        self._scheduled = False

    def post(self, future: asyncio.Future[None]) -> None:
        self._futures.append(future)
        if not self._scheduled:
            self._scheduled = True
            # A closed loop: the process is ending, nobody reads the reply.
            with contextlib.suppress(RuntimeError):
                self.loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        self._scheduled = False
        futures = self._futures
        while futures:
            future = futures.popleft()
            if not future.done():
                future.set_result(None)


_MAILBOXES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Mailbox] = (
    weakref.WeakKeyDictionary()
)


def mailbox_of(loop: asyncio.AbstractEventLoop) -> Mailbox:
    """The loop's mailbox (made on the loop's thread, by its first call)."""
    box = _MAILBOXES.get(loop)
    if box is None:
        box = _MAILBOXES[loop] = Mailbox(loop)
    return box


class LoopCall(Call):
    """A call made by a coroutine (``IOCore.asend``): settled on the core's
    thread, it resolves its future on the event loop's, through the loop's
    ``Mailbox``. The core never waits on the loop (a post only queues), and a
    loop blocked by a job delays only the moment its coroutine reads the reply."""

    __slots__ = ("future", "mailbox")

    def __init__(
        self,
        script: Script,
        keys: Sequence[Any],
        args: Sequence[Any],
        frees: Runner | None = None,
    ) -> None:
        super().__init__(script, keys, args, frees)
        loop = asyncio.get_running_loop()
        self.mailbox = mailbox_of(loop)
        self.future: asyncio.Future[None] = loop.create_future()

    def _deliver(self) -> None:
        self.mailbox.post(self.future)


class Merged(Call):
    """FINISH calls of several jobs sent as one FINISH_MANY; each member gets
    its own job's reply, or the call's error."""

    __slots__ = ("members",)

    def __init__(self, script: Script, members: list[Call]) -> None:
        call = FinishMany(finishes=[(member.keys, member.args) for member in members])
        super().__init__(script, call.keys(), call.argv())
        self.members = members

    def settle(self, reply: Any) -> None:
        super().settle(reply)
        if isinstance(reply, Exception) or not isinstance(reply, list):
            error = (
                reply
                if isinstance(reply, Exception)
                else redis.ResponseError(f"FINISH_MANY answered {reply!r}")
            )
            for member in self.members:
                member.settle(error)
            return
        for member, one in zip(self.members, reply, strict=True):
            member.settle(one)


class Barrier:
    """Answered once every item the inbox held before it has been handled."""

    __slots__ = ("done",)

    def __init__(self) -> None:
        self.done = threading.Event()


class Feed(Protocol):
    """The fetch side of the core (fetch.Feed): what to fetch, and where it goes.
    Every method is called by the core's thread only."""

    def due(self, now: float) -> bool:
        """A fetch is to be sent now: runners are free, the process fetches, the
        queues were not empty at the last look (or a push was heard since), and
        no outage backoff holds it."""

    def wanted(self, now: float) -> Call | None:
        """The FETCH call to send in this round trip, or None (not ``due``)."""

    def woken(self) -> None:
        """A push was heard (or a resume, or the safety tick): look again."""

    def freed(self, unit: Runner) -> None:
        """The runner of ``unit`` is free (or is about to be)."""

    def deliver(self, call: Call, now: float) -> None:
        """The fetch's reply (settled on ``call``): hand the jobs to the runners."""

    def backoff_until(self) -> float:
        """The monotonic time before which no fetch is made (0: none)."""

    def after_round(self) -> None:
        """Between round trips: what the fetch side does while no fetch is in
        flight (a quiet process gives back what no runner holds)."""

    @property
    def hungry(self) -> bool:
        """Runners are free and the last look found the queues empty."""


class IOCore:
    """The job lifecycle's Redis traffic of one process, on one thread."""

    def __init__(
        self,
        client: redis.Redis,
        marking: Marking | None = None,
        finishes: tuple[Script, Script] | None = None,
    ) -> None:
        """``finishes``: FINISH and FINISH_MANY, to send the FINISH calls of a
        round trip as one FINISH_MANY (None: each is sent as it is)."""
        self.client = client
        self.marking = marking
        self.finishes = finishes
        # The core thread's own connection; a call sent by its caller (no core
        # running) goes through the client's pool instead.
        self.wire: Wire | None = Wire(client) if hasattr(client, "connection_pool") else None
        self.feed: Feed | None = None
        self._inbox: queue.SimpleQueue[object] = queue.SimpleQueue()
        # status key -> (monotonic time the job started, its payload as fetched)
        self._marks: dict[str, tuple[float, bytes]] = {}
        self._working: dict[str, tuple[float, bytes]] = {}  # marked, not ended yet
        self._napping = False  # sleeping on the inbox with no mark pending
        self._start_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = threading.Event()

    # -- what job threads (and the manager) ask -------------------------------
    def attach(self, feed: Feed) -> None:
        """Fetch for the runners too (a worker process's manager); before ``start``."""
        self.feed = feed

    def start(self) -> None:
        with self._start_lock:  # in the process that runs jobs, once
            if self._thread is None and not self._closed.is_set():
                self._thread = threading.Thread(
                    target=self._run, name="jobmaster-core", daemon=True
                )
                self._thread.start()

    def call(
        self,
        script: Script,
        keys: Sequence[Any],
        args: Sequence[Any],
        *,
        settles: str | None = None,
        frees: Runner | None = None,
    ) -> Any:
        """``script(keys, args)`` in the core's next round trip; its reply, or
        its error raised here.

        ``settles``: the status key this call writes (a FINISH): a "working"
        mark still waiting for it is dropped. ``frees``: the job of the
        calling runner that this call ends: the round trip that carries it
        also fetches the runner's next job.
        """
        call = Call(script, keys, args, frees)
        self.send(call, settles)
        if call.error is not None:
            raise call.error
        return call.reply

    def send(self, call: Call, settles: str | None = None) -> None:
        """``call`` in the core's next round trip, waiting here until it is
        settled (its ``reply`` or ``error`` set); ``settles`` as for ``call``."""
        if settles is not None:
            self._marks.pop(settles, None)
        if self.submit(call):
            self._await(call)

    async def asend(self, call: LoopCall, settles: str | None = None) -> None:
        """``send`` for a coroutine on an event loop: the loop runs on while the
        call waits for its round trip (``LoopCall`` resolves its future on the
        loop's thread)."""
        if settles is not None:
            self._marks.pop(settles, None)
        if not self.submit(call):
            return  # sent and settled here: no core runs (a stop's last moment)
        if not self._closed.is_set():
            # Put before the core was closed: its last drain, which follows
            # the close, settles it (``_round``). No timer per call.
            await call.future
            return
        while True:
            try:
                await asyncio.wait_for(asyncio.shield(call.future), REPLY_LOOK)
                return
            except asyncio.TimeoutError:
                thread = self._thread
                if thread is None or thread.is_alive():
                    continue
            if not call.settled:  # the core ended without taking it (see ``_await``)
                self._send_pooled([call])
            return

    def submit(self, call: Call) -> bool:
        """Hand ``call`` to the core's next round trip, without waiting; True
        if the core took it, False if it was sent (and settled) here: no core
        runs (a context used outside a worker process: tests, tools) or no
        longer."""
        if self._thread is None or self._closed.is_set():
            self._send_pooled([call])
            return False
        self._inbox.put(call)
        return True

    def _await(self, call: Call) -> None:
        while True:
            try:
                call.box.get(timeout=REPLY_LOOK)
                return
            except queue.Empty:
                thread = self._thread
                if thread is None or thread.is_alive():
                    continue
            # The core is gone (closed): it settled everything it took from
            # its inbox before it ended, so this call was never sent.
            try:
                call.box.get_nowait()
            except queue.Empty:
                self._send_pooled([call])
            return

    def wake(self) -> None:
        """Look for jobs now (a push was heard, a resume, the safety tick)."""
        self._inbox.put(_WAKE)

    def free(self, unit: Runner) -> None:
        """The runner of ``unit`` is done with it (if no FINISH said so already)."""
        self._inbox.put(unit)

    @property
    def hungry(self) -> bool:
        """Runners wait for jobs that the last look did not find (the wakeup
        listener's safety tick wakes the core only then)."""
        feed = self.feed
        return feed is not None and feed.hungry

    def barrier(self, timeout: float) -> bool:
        """Wait until the core has handled everything handed to it so far (its
        round trip in flight included); False after ``timeout``."""
        thread = self._thread
        if thread is None or not thread.is_alive():
            return True
        barrier = Barrier()
        self._inbox.put(barrier)
        return barrier.done.wait(timeout)

    def mark(self, status_key: str, raw: bytes) -> None:
        """A job started: mark it "working" unless it ends first (see above)."""
        if self.marking is None:
            return
        self._marks[status_key] = (time.monotonic(), raw)
        # Woken only from a nap (a second without jobs): waking it for every
        # mark cost a GIL hand-off per job, a measurable loss on no-op jobs.
        if self._napping:
            self._inbox.put(_MARKED)
        if self._thread is None:
            self.start()

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

    def close(self, timeout: float = 2.0) -> None:
        """At the worker's stop, after its last job: the core ends, once it has
        sent what it holds; a call made later is sent by its own thread."""
        self._closed.set()
        self._inbox.put(_WAKE)
        thread = self._thread
        if thread is None and self.wire is not None:
            self.wire.drop()  # used by a caller on this thread (tests), never by a core
        elif thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    # -- the core's thread -----------------------------------------------------
    def _run(self) -> None:
        while True:
            items = self._collect()
            try:
                if not self._round(items):
                    return
            except Exception as error:  # never end the thread: callers would wait for nothing
                log.exception("I/O core: unexpected error; carrying on")
                # Its callers see a lost round trip (any call may have run) and
                # decide as after one: outcome.record sends its FINISH again.
                lost = redis.RedisError(f"the I/O core failed: {error!r}")
                for item in items:
                    if isinstance(item, Call) and not item.settled:
                        item.settle(lost)
                    elif isinstance(item, Barrier):
                        item.done.set()
                time.sleep(BUG_PAUSE)

    def _round(self, items: list[object]) -> bool:
        """One round trip for ``items`` (and the marks and fetch due). False once
        closed."""
        calls, barriers = self._sort(items)
        feed = self.feed
        now = time.monotonic()
        marks = self._due_marks(now)
        fetch = feed.wanted(now) if feed is not None and not self._closed.is_set() else None
        batch = ([marks] if marks is not None else []) + calls
        if fetch is not None:
            batch.append(fetch)
        if batch:
            self._send(batch)
        if fetch is not None and feed is not None:
            feed.deliver(fetch, time.monotonic())
        if feed is not None:
            feed.after_round()
        if marks is not None and marks.error is not None:
            log.debug("could not mark jobs working: %s", marks.error)
        for barrier in barriers:
            barrier.done.set()
        if not self._closed.is_set():
            return True
        # Settle whatever came meanwhile; a call put after this last look is
        # sent by its caller (``_await``), the core being gone.
        late_calls, late_barriers = self._sort(self._drain([]))
        if late_calls:
            self._send(late_calls)
        for barrier in late_barriers:
            barrier.done.set()
        if self.wire is not None:
            self.wire.drop()
        return False

    def _sort(self, items: list[object]) -> tuple[list[Call], list[Barrier]]:
        """The calls and barriers among ``items``; wake-ups and freed runners
        are told to the feed on the way."""
        calls: list[Call] = []
        barriers: list[Barrier] = []
        feed = self.feed
        for item in items:
            if isinstance(item, Call):
                calls.append(item)
                if item.frees is not None and feed is not None:
                    feed.freed(item.frees)
            elif isinstance(item, Barrier):
                barriers.append(item)
            elif item is _WAKE:
                if feed is not None:
                    feed.woken()
            elif item is not _MARKED and feed is not None:
                feed.freed(item)  # type: ignore[arg-type]  # a runner's unit (``free``)
        return calls, barriers

    def _collect(self) -> list[object]:
        """Everything in the inbox, after waiting for the first item as long as
        nothing is due (a fetch, a mark)."""
        items: list[object] = []
        timeout = self._sleep_for()
        if timeout > 0:
            # A mark wakes a napping core (``mark``): set before the last look
            # at the marks, so a mark made meanwhile is seen or wakes it.
            self._napping = not self._marks
            if self._marks:
                timeout = min(timeout, MARK_DELAY / 2)
            try:
                items.append(self._inbox.get(timeout=timeout))
            except queue.Empty:
                pass
            finally:
                self._napping = False
        return self._drain(items)

    def _drain(self, items: list[object]) -> list[object]:
        while True:
            try:
                items.append(self._inbox.get_nowait())
            except queue.Empty:
                return items

    def _sleep_for(self) -> float:
        """How long the core may wait on its inbox now (0: go at once)."""
        if self._closed.is_set():
            return 0.0
        now = time.monotonic()
        feed = self.feed
        if feed is not None and feed.due(now):
            return 0.0
        if self._marks:
            return MARK_DELAY / 2
        timeout = LONGEST_SLEEP
        if feed is not None:
            until = feed.backoff_until()
            if until > now:
                timeout = min(timeout, until - now)
        return timeout

    def _due_marks(self, now: float) -> Call | None:
        """One MARK call for the marks older than MARK_DELAY (taken out), if any."""
        marking = self.marking
        if marking is None or not self._marks:
            return None
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

    def _merged(self, calls: list[Call]) -> list[Call]:
        """``calls`` with their FINISHes (two or more) made one FINISH_MANY, in
        the place of the first: jobs' outcomes are independent of each other,
        and what goes before them (marks) and after them (the fetch) stays."""
        if self.finishes is None:
            return calls
        finish, finish_many = self.finishes
        group = [call for call in calls if call.script is finish]
        if len(group) < 2:
            return calls
        merged: list[Call] = []
        for call in calls:
            if call is group[0]:
                merged.append(Merged(finish_many, group))
            elif call.script is not finish:
                merged.append(call)
        return merged

    def _send(self, calls: list[Call]) -> None:
        """On the core's thread: one round trip for ``calls`` on its own
        connection (wire.py); each is settled with its reply or error."""
        calls = self._merged(calls)
        if self.wire is None:
            self._send_pooled(calls)
            return
        replies = self.wire.round_trip([(call.script.sha, call.keys, call.args) for call in calls])
        for call, reply in zip(calls, replies, strict=True):
            if isinstance(reply, redis.exceptions.NoScriptError):
                # A Redis restarted (or replaced) since the script was loaded:
                # the call did not run; Script loads it and calls again.
                self._send_pooled([call])
            else:
                call.settle(reply)

    def _send_pooled(self, calls: list[Call]) -> None:
        """One round trip for ``calls`` through the client's pool (any thread)."""
        calls = self._merged(calls)
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
                self._send_pooled([call])
            else:
                call.settle(reply)
