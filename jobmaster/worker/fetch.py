"""Reliable fetch: taking a job from a queue without ever holding it only in memory.

The move. One FETCH script (scripts.py) picks the first queue, in this
fetch's order, that is not paused and not empty, and LMOVEs its oldest job
into this process's in-progress list, atomically. From then on the job is in
Redis under our identity until FINISH records its outcome; if the process
dies, the master (or, for a lost host, any worker once our heartbeat
expires) moves it back. That is the at-least-once guarantee.

The order. With ``strict``, queues are tried as listed. Otherwise each fetch
draws a weighted random order (``critical:3`` is first three times as often
as a weight-1 queue), so no queue starves.

Pickup without hot polling. A blocking pop cannot do this: BLMOVE watches one
list, and we fetch from several queues with weights. Polling fast enough for
millisecond latency would cost hundreds of commands a second per idle
process. Instead:

- A busy thread fetches again the moment it finishes a job: no waiting.
- A thread that found nothing sleeps on an in-process ``WorkSignal``,
  sending nothing to Redis.
- Every push (PUSH, the pollers, requeues) publishes "N jobs arrived" on its
  queue's wakeup channel in the same script. One listener thread per process
  is subscribed and wakes up to N sleepers: pickup is a pub/sub hop away
  (about a millisecond).
- When a fetch leaves more jobs in the queue, it wakes one more sleeper, so a
  burst fans out over the idle threads without a message per job.
- Pub/sub is fire-and-forget (a message sent during a reconnect is lost, and
  a producer may push without publishing), so the listener also wakes one
  idle thread once a second: the worst case is a second, and an idle process
  sends about one FETCH a second, plus its heartbeat and poller.

One round trip for every thread waiting. When several threads want a job
at the same moment (a burst, or short jobs: each thread fetches again as it
finishes), the first one to get the fetch lock asks FETCH for as many jobs
as threads are waiting, keeps one and leaves the rest in a hand-off list
that the waiting threads take from in turn, without a round trip each. The
hand-off never holds more jobs than threads waiting for it, so every job in
it is taken within moments, and each is already in our in-progress list:
a crash requeues it, a stop pushes it back, and a thread that takes one as
quiet begins gives it back like any job it fetched.

A lost reply. FETCH is not a blocking command and is never re-sent by
redis-py (workers connect with ``retry_commands=False``), so a reply lost to
the socket timeout costs at most one job sitting in our in-progress list
unrun: a Redis blocked past the timeout (a slow command, ``DEBUG SLEEP``)
still runs the FETCH when it wakes. Nothing is lost or run twice: the entry
is ours, no thread claims it, and the self-check (selfcheck.py) requeues it
once it has been unclaimed twice in a row; a quiet process gives it back as
soon as no job runs and no fetch is in flight (``Manager.sweep_unclaimed``),
so a quiet pool drains. A FETCH held by ``CLIENT PAUSE`` is dropped with
the connection we close on the timeout, so it never runs.
"""

from __future__ import annotations

import collections
import random
import threading
from dataclasses import dataclass

from jobmaster.scripts import Fetch
from jobmaster.worker.context import WorkerContext
from jobmaster.worker.wakeup import WorkSignal


@dataclass(frozen=True, eq=False)
class Unit:
    """One fetched job: the payload exactly as stored (to acknowledge it) and its queue.

    Compared by identity: two entries of the same bytes are two fetches, each
    claimed and acknowledged on its own (running.py)."""

    raw: bytes
    queue: str


class Fetcher:
    """Fetches for the processor threads of one process."""

    def __init__(self, ctx: WorkerContext, signal: WorkSignal) -> None:
        self.ctx = ctx
        self.signal = signal
        weights = ctx.config.queue_weights
        self.strict = ctx.config.strict
        self.names = [name for name, _ in weights]
        # Each queue appears `weight` times: a shuffle then draws it first in
        # proportion to its weight.
        self.expanded = [name for name, weight in weights for _ in range(weight)]
        self.queue_keys = {name: ctx.keys.queue(name) for name in self.names}
        self._lock = threading.Lock()  # one FETCH at a time; the others wait for its jobs
        self._count_lock = threading.Lock()
        self._waiting = 0  # threads inside fetch(), the one fetching included
        self._handoff: collections.deque[Unit] = collections.deque()

    def queue_order(self) -> list[str]:
        if self.strict or len(self.names) == 1:
            return self.names
        drawn = random.sample(self.expanded, len(self.expanded))
        return list(dict.fromkeys(drawn))

    def fetch(self) -> Unit | None:
        """A job moved into our in-progress list (by this thread's round trip or
        another's that fetched for it too), or None when there is none."""
        with self._count_lock:
            self._waiting += 1
        try:
            with self._lock:
                if self._handoff:
                    return self._handoff.popleft()
                with self._count_lock:
                    wanted = self._waiting
                units = self.fetch_many(wanted)
                if not units:
                    return None
                self._handoff.extend(units[1:])
                return units[0]
        finally:
            with self._count_lock:
                self._waiting -= 1

    def fetch_many(self, count: int) -> list[Unit]:
        """One round trip: up to ``count`` jobs moved into our in-progress list."""
        order = self.queue_order()
        call = Fetch(
            inprogress_key=self.ctx.inprogress_key,
            paused_key=self.ctx.keys.paused,
            most=count,
            queues=[(name, self.queue_keys[name]) for name in order],
        )
        # No status here: a job is marked "working" as it starts (acks.py).
        result = call.run(self.ctx.scripts.fetch)
        if not result:
            return []
        if int(result[0]) > 0:
            self.signal.notify(1)  # more are waiting: wake one more idle thread
        pairs = result[1:]
        return [
            Unit(raw=bytes(pairs[i]), queue=pairs[i + 1].decode()) for i in range(0, len(pairs), 2)
        ]
