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
import random
from collections import Counter
from collections.abc import Callable
from typing import cast

import redis

from jobmaster.connection import byte_list
from jobmaster.outage import OUTAGE_BACKOFF, OutageLog
from jobmaster.scripts import Fetch, GiveBack
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


# Seconds before a pool whose room the fetch stopped asking for (its share
# came back as jobs of the other kind) is asked for one job again.
REPROBE = 1.0


class Pool:
    """One kind of runner of a process, as the feed counts it: its threads, or
    its event loop's room for async jobs. ``hand`` gives it fetched jobs.

    ``probe``: how many jobs a fetch asks for on this pool's account. A fetch
    cannot choose by kind, so jobs fetched for the loop's room may need
    threads (and come back at once: ``Feed.deliver``); each time that happens
    the probe halves (to 0: asked again after REPROBE), each time the pool's
    share comes back as its own kind it doubles. A pool of one kind only is
    always asked for its whole room.
    """

    __slots__ = ("capacity", "hand", "held", "probe", "reprobe_at")

    def __init__(self, capacity: int, hand: Callable[[list[Unit]], None]) -> None:
        self.capacity = capacity
        self.hand = hand
        self.held = 0  # jobs handed to it (waiting or running) not freed again
        self.probe = capacity
        self.reprobe_at = 0.0

    @property
    def free(self) -> int:
        return self.capacity - self.held

    def asked(self, now: float) -> int:
        free = self.free
        if free <= 0:
            return 0
        if self.probe == 0 and now >= self.reprobe_at:
            self.probe = 1
        return min(free, self.probe)


class Feed:
    """The I/O core's fetch duty (core.Feed) for the runners of one process.

    Every method but ``hungry`` runs on the core's thread: the counts need no
    lock. The runners are one pool (threads) or two (threads, and an event
    loop for async jobs: ``route`` says which a job needs, reading its name);
    a fetch asks for as many jobs as they have room for, and a job beyond
    the room of the pool it needs goes back to the front of its queue in the
    next moment (``after_round``), so no process holds a job it cannot run
    yet while another could.
    """

    def __init__(
        self,
        fetcher: Fetcher,
        table: RunningTable,
        pools: list[Pool],
        route: Callable[[Unit], int] | None = None,
    ) -> None:
        """``route``: the index in ``pools`` of the pool a job needs (None: one pool)."""
        self.fetcher = fetcher
        self.table = table
        self.pools = pools
        self.route = route
        self.dry = False  # the last look found every queue empty (or paused)
        self.outage = OutageLog("fetch")
        self._asked: list[int] = [0] * len(pools)
        self._surplus: list[Unit] = []  # fetched beyond its pool's room: given back
        self._backoff_until = 0.0
        self._hungry = False  # read by other threads: runners wait on a dry look
        self._swept = False  # this quiet's sweep is done (``after_round``)

    @property
    def held(self) -> int:
        """Jobs handed to runners (waiting or claimed) not counted free again."""
        return sum(pool.held for pool in self.pools)

    def _free_runners(self) -> int:
        # Not bounded by what max_jobs_per_child has left: its runners run side
        # by side up to the end, as they always have (the job whose end makes
        # the process spent quiets it; one fetched with that end is given back).
        return sum(max(0, pool.free) for pool in self.pools)

    def _wanted(self, now: float) -> int:
        self._asked = [pool.asked(now) for pool in self.pools]
        return sum(self._asked)

    def due(self, now: float) -> bool:
        return (
            not self.dry
            and now >= self._backoff_until
            and self.table.fetching.is_set()
            and not self.table.suspects_pending  # they wait for the process to clear
            and self._wanted(now) > 0
        )

    def wanted(self, now: float) -> Call | None:
        if not self.due(now):
            return None
        call = self.fetcher.request(sum(self._asked))
        return Call(self.fetcher.ctx.scripts.fetch, call.keys(), call.argv())

    def woken(self) -> None:
        self.dry = False

    def freed(self, unit: Runner) -> None:
        if not unit.freed:
            unit.freed = True
            self.pools[cast(Unit, unit).pool].held -= 1
            self._hungry = self.dry

    def deliver(self, call: Call, now: float) -> None:
        if call.error is not None:
            # One log line per outage, not one per round trip.
            self.outage.failed(call.error, now)
            self._backoff_until = now + OUTAGE_BACKOFF
            return
        self.outage.succeeded(now)
        units = self.fetcher.parse(call.reply)
        wanted = int(call.args[0])  # Fetch's ARGV[1]: the most jobs to take
        # Fewer than asked: every queue is empty (or paused) now. A push that
        # fills one is heard (a wakeup), and the safety tick looks anyway.
        self.dry = len(units) < wanted
        if self.route is None:
            only = self.pools[0]
            only.held += len(units)
            only.hand(units)
        else:
            self._sort(units, now)
        self._hungry = self.dry and self._free_runners() > 0

    def _sort(self, units: list[Unit], now: float) -> None:
        """Each job to the pool it needs, up to that pool's room; the rest to
        ``_surplus``. A pool whose share came back as the other kind is asked
        for less next time, one whose share was all its own kind for more."""
        route = cast(Callable[[Unit], int], self.route)
        shares: list[list[Unit]] = [[] for _ in self.pools]
        for unit in units:
            unit.pool = route(unit)
            shares[unit.pool].append(unit)
        surplus = False
        for pool, share in zip(self.pools, shares, strict=True):
            room = max(0, pool.free)
            if len(share) > room:
                self._surplus += share[room:]
                surplus = True
            taken = share[:room]
            pool.held += len(taken)
            if taken:
                pool.hand(taken)
        for pool, share, asked in zip(self.pools, shares, self._asked, strict=True):
            if surplus and len(share) < asked:
                pool.probe //= 2
                pool.reprobe_at = now + REPROBE
            elif share and len(share) >= asked:
                pool.probe = min(pool.capacity, max(1, pool.probe * 2))

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
        if self._surplus:
            self._give_back()
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

    def _give_back(self) -> None:
        """The jobs fetched beyond their pool's room, back to the front of their
        queues (GIVE_BACK). If Redis is away they stay in our in-progress list,
        run by no runner: the quiet's sweep or the self-check requeues them."""
        surplus, self._surplus = self._surplus, []
        ctx, keys = self.fetcher.ctx, self.fetcher.queue_keys
        call = GiveBack(
            inprogress_key=ctx.inprogress_key,
            wakeup_prefix=ctx.keys.wakeup_prefix,
            jobs=[(unit.raw, unit.queue, keys[unit.queue]) for unit in surplus],
        )
        try:
            call.run(ctx.scripts.give_back)
        except redis.RedisError as error:
            log.warning(
                "could not give back %d job(s) fetched beyond the room of their runners "
                "(%s); they stay in progress until the self-check requeues them",
                len(surplus),
                error,
            )

    @property
    def hungry(self) -> bool:
        return self._hungry
