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

- A busy process fetches the next job in the round trip that acknowledges
  the last one: no waiting.
- A process whose fetch found nothing sends none again until it hears of a
  push: its runners wait on their queue, its I/O core on its inbox.
- A push that may find a process asleep (PUSH, the pollers, requeues)
  publishes "N jobs arrived" on its queue's wakeup channel in the same
  script. One listener thread per process is subscribed and wakes the core:
  pickup is a pub/sub hop away (about a millisecond).
- Pub/sub is fire-and-forget (a message sent during a reconnect is lost, and
  a producer may push without publishing), so the listener also wakes the
  core once a second while its runners wait: the worst case is a second,
  and an idle process sends about one FETCH a second, plus its heartbeat
  and poller.

One round trip for every runner free. The process's I/O core (core.py)
sends the fetch: as many jobs as runners are free, or about to be (a runner
whose acknowledgement rides in the same round trip), and hands them out
through a queue the idle runners wait on. Every job in that queue is
already in our in-progress list: a crash requeues it, a stop pushes it
back, and a runner that takes one as quiet begins gives it back like any
job it fetched.

A lost reply. FETCH is not a blocking command and is never re-sent by
redis-py (workers connect with ``retry_commands=False``), so a reply lost to
the socket timeout costs at most one job sitting in our in-progress list
unrun: a Redis blocked past the timeout (a slow command, ``DEBUG SLEEP``)
still runs the FETCH when it wakes. Nothing is lost or run twice: the entry
is ours, no thread claims it, and the self-check (selfcheck.py) requeues it
once it has been unclaimed twice in a row; a quiet process gives it back as
soon as no runner holds a job (``Feed.after_round``), so a quiet pool
drains. A FETCH held by ``CLIENT PAUSE`` is dropped with the connection we
close on the timeout, so it never runs.
"""

from __future__ import annotations

import logging
import queue
import random
from collections import Counter

import redis

from jobmaster.connection import byte_list
from jobmaster.outage import OUTAGE_BACKOFF, OutageLog
from jobmaster.scripts import Fetch
from jobmaster.worker.context import WorkerContext
from jobmaster.worker.core import Call, Runner
from jobmaster.worker.running import RunningTable
from jobmaster.worker.unit import Unit

log = logging.getLogger("jobmaster.worker.fetch")


class Fetcher:
    """Builds this process's FETCH calls and reads their replies."""

    def __init__(self, ctx: WorkerContext) -> None:
        self.ctx = ctx
        weights = ctx.config.queue_weights
        self.strict = ctx.config.strict
        self.names = [name for name, _ in weights]
        # Each queue appears `weight` times: a shuffle then draws it first in
        # proportion to its weight.
        self.expanded = [name for name, weight in weights for _ in range(weight)]
        self.queue_keys = {name: ctx.keys.queue(name) for name in self.names}

    def queue_order(self) -> list[str]:
        if self.strict or len(self.names) == 1:
            return self.names
        drawn = random.sample(self.expanded, len(self.expanded))
        return list(dict.fromkeys(drawn))

    def request(self, count: int) -> Fetch:
        """The FETCH of up to ``count`` jobs, in this fetch's queue order."""
        order = self.queue_order()
        return Fetch(
            inprogress_key=self.ctx.inprogress_key,
            paused_key=self.ctx.keys.paused,
            most=count,
            queues=[(name, self.queue_keys[name]) for name in order],
        )

    @staticmethod
    def parse(reply: object) -> list[Unit]:
        """The jobs a FETCH moved into our in-progress list, oldest first."""
        if not reply or not isinstance(reply, list):
            return []
        return [
            Unit(raw=bytes(reply[i]), queue=reply[i + 1].decode()) for i in range(0, len(reply), 2)
        ]

    def fetch_many(self, count: int) -> list[Unit]:
        """One round trip of the caller's own: up to ``count`` jobs moved into
        our in-progress list (the worker's runners get theirs from ``Feed``)."""
        # No status here: a job is marked "working" as it starts (core.py).
        reply = self.request(count).run(self.ctx.scripts.fetch)
        return self.parse(reply)

    def fetch(self) -> Unit | None:
        """One job moved into our in-progress list, or None when there is none."""
        units = self.fetch_many(1)
        return units[0] if units else None


class Feed:
    """The I/O core's fetch duty (core.Feed) for the runners of one process.

    Every method but ``hungry`` runs on the core's thread: the counts need no
    lock. ``held`` counts the jobs handed to runners (in ``ready`` or
    claimed) whose runner has not been counted free again.
    """

    def __init__(
        self,
        fetcher: Fetcher,
        table: RunningTable,
        ready: queue.SimpleQueue[Unit | None],
        runners: int,
    ) -> None:
        self.fetcher = fetcher
        self.table = table
        self.ready = ready
        self.runners = runners
        self.held = 0
        self.dry = False  # the last look found every queue empty (or paused)
        self.outage = OutageLog("fetch")
        self._backoff_until = 0.0
        self._hungry = False  # read by other threads: runners wait on a dry look
        self._swept = False  # this quiet's sweep is done (``after_round``)

    def _free_runners(self) -> int:
        # Not bounded by what max_jobs_per_child has left: its runners run side
        # by side up to the end, as they always have (the job whose end makes
        # the process spent quiets it; one fetched with that end is given back).
        return self.runners - self.held

    def due(self, now: float) -> bool:
        return (
            not self.dry
            and now >= self._backoff_until
            and self.table.fetching.is_set()
            and self._free_runners() > 0
        )

    def wanted(self, now: float) -> Call | None:
        if not self.due(now):
            return None
        call = self.fetcher.request(self._free_runners())
        return Call(self.fetcher.ctx.scripts.fetch, call.keys(), call.argv())

    def woken(self) -> None:
        self.dry = False

    def freed(self, unit: Runner) -> None:
        if not unit.freed:
            unit.freed = True
            self.held -= 1
            self._hungry = self.dry

    def deliver(self, call: Call, now: float) -> None:
        if call.error is not None:
            # One log line per outage, not one per round trip.
            self.outage.failed(call.error, now)
            self._backoff_until = now + OUTAGE_BACKOFF
            return
        self.outage.succeeded(now)
        units = self.fetcher.parse(call.reply)
        self.held += len(units)
        wanted = int(call.args[0])  # Fetch's ARGV[1]: the most jobs to take
        # Fewer than asked: every queue is empty (or paused) now. A push that
        # fills one is heard (a wakeup), and the safety tick looks anyway.
        self.dry = len(units) < wanted
        self._hungry = self.dry and self._free_runners() > 0
        for unit in units:
            self.ready.put(unit)

    def backoff_until(self) -> float:
        return self._backoff_until

    def after_round(self) -> None:
        """Once per quiet, when no runner holds a job: give back whatever our
        in-progress list still holds.

        Such an entry is run by no runner and never will be: a FETCH whose
        reply was lost (Redis stalled past the socket timeout, and ran it once
        awake) moved it here after we gave up on it. The self-check would
        requeue it, but only after two of its checks (20 to 60 s): a quiet pool
        held a job it never ran, and an operator waiting for it to drain (before
        a deploy) waited that long. Run on the core's thread, between its round
        trips: no fetch is in flight, and none begins until it is done.
        """
        table = self.table
        if table.fetching.is_set():
            self._swept = False  # the next quiet sweeps again
            return
        if self._swept or self.held or table.stopping.is_set():  # halt pushes back all
            return
        ctx = self.fetcher.ctx
        try:
            listed = Counter(byte_list(ctx.redis.lrange(ctx.inprogress_key, 0, -1)))
            report = ctx.recovery.requeue(ctx.inprogress_key, (listed - table.claimed()).elements())
        except redis.RedisError as error:  # tried again after the next round
            log.debug("quiet: could not look at our in-progress list (%s)", error)
            return
        self._swept = True
        if report.requeued or report.buried:
            log.warning(
                "quiet: gave back %d in-progress job(s) that no thread was running: %s",
                len(report.requeued) + len(report.buried),
                ", ".join(report.requeued + report.buried),
            )

    @property
    def hungry(self) -> bool:
        return self._hungry
