"""Everything the master asks of Redis, done on one thread of its own.

The master's loop reaps, forks, handles signals and enforces stop
deadlines, and none of that may wait on Redis (SPEC §8): with Redis paused
past the socket timeout, a SIGKILLed child went unreplaced for 10 s and a
stop overran its deadline by 10 s a call. So every Redis duty of the
master is here, run by ``RedisDuties``'s thread, pass after pass:

- requeue: a dead child's in-progress list back to its queues (or, past
  max_crashes, to the dead set: the master built the triage), then its
  heartbeat deleted and its registration dropped; in the order the
  children died, retried with a backoff until Redis answers, at most
  PASS_BUDGET seconds of it per pass so the control list keeps its turn;
- control and heartbeat: every CONTROL_INTERVAL one bounded read of the
  master's remote control list (control.py), and, every beat interval, the master's heartbeat in
  the same round trip, written from the ``MasterState`` the loop published;
- at start, the orphan scan of workers gone from this machine
  (``recover_left_behind``), one page per pass (orphans.py): a flood of
  forged members delays neither the first fork nor a requeue;
- every PRUNE_INTERVAL, members of the ``masters`` set whose heartbeat
  has expired removed (each unclean exit left one behind for good), at most
  PRUNE_SAMPLE a time;
- the periodic jobs due, and the dashboard's per-minute history sample;
- the queue sizes ``/metrics`` shows (metrics/queues.py), while scraped;
- at a stop (``finish``): the requeues left, then the heartbeat cleared,
  within the time the loop grants. What Redis did not take by then stays
  in its in-progress list, recovered as after a crash (recovery.py).

What the loop and this thread share, and nothing else: the requeue deque
(the loop appends, the thread pops), the published ``MasterState``
(immutable, swapped whole), two outgoing queues (remote commands and
requeue reports, for the loop to act on and count) and a wakeup pipe whose
read end is in the loop's ``select``, so a remote stop acts at once.

Fork safety. The master forks while this thread runs; the child is a copy
of the master with the main thread only, so anything this thread held at
that instant stays held in the child. The child never uses what the thread
uses: it opens its own Redis connections after fork (``spawn._child_main``;
redis-py's pool checks its pid, and takes its ``_fork_lock``, only when
used, and the child never uses the master's pool), closes the wakeup pipe
(``fds``), and ends with ``os._exit``, so no finalizer of the master's
objects runs in it (``gc.freeze`` keeps them from being collected). What
both do use is logging: CPython re-creates the handlers' locks in a child,
but not what a handler holds in the middle of a line (a stream's lock, a
half-sent record), so ``fork_child`` holds every handler's lock across
fork (``log.handlers_held``): the thread is never mid-line then. Everything the thread runs is
imported, and has run once, before the first fork (start-up's Redis
calls), so no import lock is held either; the start-up orphan scan, which
may run beside the first fork, is imported with this module and uses only
this thread's connections. The thread starts with the
master's signals blocked: every signal goes to the main thread, as before
the thread existed.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import redis

from jobmaster import control
from jobmaster.config import Config
from jobmaster.connection import byte_list, wait_for_redis
from jobmaster.keys import Keys
from jobmaster.liveness import beat_interval
from jobmaster.metrics.queues import QueueWatch
from jobmaster.orphans import OrphanSweep
from jobmaster.outage import OutageLog
from jobmaster.periodic import PeriodicTicker
from jobmaster.recovery import Recovery, RecoveryReport, Triage
from jobmaster.signals import MASTER_SIGNALS, blocked
from jobmaster.supervisor.history import HistoryRecorder

log = logging.getLogger("jobmaster.supervisor.duties")

# Seconds between reads of the remote control list: "ctl" must act within 1 s,
# with room for a loaded machine; an idle master pays 4 LPOPs a second for it.
CONTROL_INTERVAL = 0.25
PASS_BUDGET = 1.0  # seconds of requeues per pass before the other duties' turn
RETRY_FIRST, RETRY_MAX = 0.25, 2.0  # backoff of a failed requeue, doubled each time
LONGEST_WAIT = 1.0  # the thread's idle wait: periodic slots are due to the second
LATE = 1.0  # a requeue this long after the death says why in its log line
# The masters set is pruned this often, of at most this many random members a
# time: two round trips a minute, bounded even if the set was flooded.
PRUNE_INTERVAL, PRUNE_SAMPLE = 60.0, 200

T = TypeVar("T")


@dataclass(frozen=True)
class MasterState:
    """What the master's heartbeat shows, published by the loop each pass."""

    wanted: int
    quiet: bool
    stopping: bool
    children: tuple[str, ...]  # identities
    # The container's (our cgroup's) memory limit and usage, for ps and the
    # dashboard (0: none found / not sampled).
    memory_limit_mb: float = 0.0
    memory_used_mb: float = 0.0


def shown(state: MasterState) -> tuple[object, ...]:
    """What of a state ``ps`` and the dashboard show (memory is sampled: it
    changes at every pass, and waits for its beat)."""
    return (state.wanted, state.quiet, state.stopping, state.children)


@dataclass(frozen=True)
class DeadChild:
    """A reaped child whose in-progress list is to be requeued."""

    identity: str
    name: str  # "child 2 (pid 1234)", for the log line
    triage: Triage | None  # built by the master: crash counts and causes, or None
    crashed: bool  # died unasked: its result is logged even when nothing was left
    died_at: float  # monotonic


class RedisDuties:
    def __init__(
        self,
        *,
        config: Config,
        client: redis.Redis,
        keys: Keys,
        identity: str,
        recovery: Recovery,
        ticker: PeriodicTicker,
        history: HistoryRecorder,
        queue_watch: QueueWatch | None = None,
        max_child_mb: float = 0.0,
    ) -> None:
        self.config = config
        self.redis = client
        self.keys = keys
        self.identity = identity
        self.recovery = recovery
        self.ticker = ticker
        self.history = history
        self.queue_watch = queue_watch
        self.max_child_mb = max_child_mb  # the dashboard's memory bars
        self.started_at = time.time()
        self.outage = OutageLog("master")
        self._requeues: collections.deque[DeadChild] = collections.deque()
        self._state: MasterState | None = None
        self._written: MasterState | None = None  # the state of the last heartbeat
        self._commands: queue.SimpleQueue[str] = queue.SimpleQueue()
        self._reports: queue.SimpleQueue[RecoveryReport] = queue.SimpleQueue()
        self._wake = threading.Event()  # wakes the thread: a requeue, a stop
        self._finish_by: float | None = None  # monotonic, once the loop is done
        self._thread: threading.Thread | None = None
        self._sweep: OrphanSweep | None = None  # the start-up scan, while it goes on
        self._next_control = 0.0
        self._next_heartbeat = 0.0
        self._next_prune = 0.0
        self._retry_at = 0.0
        self._retry_delay = 0.0
        # Wakes the loop's select: a remote command, a requeue to count.
        self._pipe = os.pipe()
        for fd in self._pipe:
            os.set_blocking(fd, False)

    # -- start-up, before any fork: the only Redis the master's own thread waits on --
    def wait_for_redis(self) -> None:
        wait_for_redis(self.redis, self.config.redis_url_masked)

    def recover_left_behind(self) -> None:
        """At start: have the thread requeue the lists of workers gone from this machine.

        A master that was killed (or crashed) in the moment after one of its
        children died never requeued that child's list; the child's
        heartbeat still looks alive for up to heartbeat_ttl. Its process is
        provably gone (liveness.py), so the restarted master requeues the
        list, as the dead master would have done. Other hosts' workers are
        left to their heartbeats. The scan runs on the thread, a page per
        pass, not here: read whole before the first fork, 100,000 forged
        members of the processes set held that fork back 21 s.
        """
        self._sweep = OrphanSweep(self.recovery, self.identity)

    # -- the loop's side -------------------------------------------------------
    def start(self) -> None:
        """Start the thread, with the master's signals blocked in it (it inherits the mask)."""
        with blocked(MASTER_SIGNALS):
            self._thread = threading.Thread(
                target=self._run, name="jobmaster-redis-duties", daemon=True
            )
            self._thread.start()

    def ensure_running(self) -> None:
        """Each pass of the loop: a thread that died (a bug; each pass catches
        everything) is logged and started again, never silently missed."""
        thread = self._thread
        if thread is not None and not thread.is_alive() and self._finish_by is None:
            log.error("the master's Redis thread died; starting it again")
            self.start()

    def publish(self, state: MasterState) -> None:
        """The loop's state as of this pass. One that changed what ``ps`` shows
        (children forked or gone, quiet, resumed, stopping) is written at the
        thread's next pass, not at the next beat: ``ps`` showed a new master
        as 0/0, its children as "(no master)", and a quiet seconds late. The
        thread does the writing; the loop only wakes it."""
        previous, self._state = self._state, state  # swapped whole
        if previous is None or shown(previous) != shown(state):
            self._wake.set()

    def requeue(self, dead: DeadChild) -> None:
        """Hand over a dead child's list; requeued as soon as Redis answers."""
        self._requeues.append(dead)
        self._wake.set()

    def pending(self) -> tuple[DeadChild, ...]:
        return tuple(self._requeues)

    @property
    def wakeup_fd(self) -> int:
        return self._pipe[0]

    def fds(self) -> list[int]:
        """What a forked child must close: the pipe is the master's alone."""
        return list(self._pipe)

    def drain_wakeup(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while os.read(self._pipe[0], 512):
                pass

    def take_commands(self) -> list[str]:
        return _drain(self._commands)

    def take_reports(self) -> list[RecoveryReport]:
        return _drain(self._reports)

    def finish(self, grace: float) -> tuple[DeadChild, ...]:
        """At the stop, once every child is gone: let the thread requeue what is
        left and clear the heartbeat for at most ``grace`` seconds; returns the
        dead children whose lists are still to be requeued (the thread may still
        be in a Redis call: it is a daemon, and the process exits anyway)."""
        self._finish_by = time.monotonic() + grace
        self._wake.set()
        if self._thread is not None:
            self._thread.join(grace)
        else:
            self._finish()  # never started (tests): the same work, in this thread
        left = self.pending()
        if left:
            log.warning(
                "Redis did not answer within %.0fs: the jobs of %s stay in their "
                "in-progress lists, recovered as after a crash (the next master's "
                "start-up scan, or a worker's orphan scan)",
                grace,
                ", ".join(dead.name for dead in left),
            )
        return left

    # -- the thread ----------------------------------------------------------------
    def _run(self) -> None:
        while self._finish_by is None:
            self._wake.clear()  # before the pass: a requeue handed over during it wakes the wait
            self.run_pass(time.monotonic())
            if self._finish_by is None:  # else its wake may be the one just cleared
                self._wake.wait(self._next_wait(time.monotonic()))
        self._finish()

    def run_pass(self, now: float) -> None:
        """One turn of every duty; a bug in one is logged and the others go on."""
        if self._requeues and now >= self._retry_at:
            _guarded("requeue", lambda: self.requeue_due(now + PASS_BUDGET))
        _guarded("control", lambda: self.talk(now))
        if self._sweep is not None:
            _guarded("orphan scan", self.sweep_step)
        state = self._state
        if state is not None and not state.stopping:
            _guarded("periodic", lambda: self.ticker.tick(time.time()))
            _guarded("history", lambda: self.history.tick(time.time()))
            if self.outage.failing_since is None and now >= self._next_prune:
                _guarded("masters", lambda: self.prune_masters(now))
        watch = self.queue_watch
        if watch is not None and self.outage.failing_since is None and watch.due(now):
            _guarded("metrics", lambda: watch.refresh(now))

    def sweep_step(self) -> None:
        """One page of the start-up scan; a Redis error: the same page next pass."""
        sweep = self._sweep
        if sweep is None:
            return
        try:
            done = sweep.step()
        except redis.RedisError as error:  # the children's own scans will do it too
            self.outage.failed(error, time.monotonic())
            return
        if done:
            self._sweep = None

    def _next_wait(self, now: float) -> float:
        if self._sweep is not None and self.outage.failing_since is None:
            return 0.0  # the next page at once: the other duties had their turn
        waits = [LONGEST_WAIT, self._next_control - now]
        if self._requeues:
            waits.append(self._retry_at - now)
        return max(0.0, min(waits))

    def _finish(self) -> None:
        """Requeue what is left until the loop's deadline, then clear the heartbeat."""
        deadline = self._finish_by or time.monotonic()
        while self._requeues and time.monotonic() < deadline:
            try:
                self.requeue_due(deadline)
            except Exception:
                log.exception("requeue at the stop: unexpected error")
            if self._requeues:
                time.sleep(min(RETRY_FIRST, max(0.0, deadline - time.monotonic())))
        with contextlib.suppress(redis.RedisError):  # it expires by itself
            self.redis.delete(self.keys.heartbeat(self.identity))
            self.redis.srem(self.keys.masters, self.identity)

    # -- requeues ----------------------------------------------------------------
    def requeue_due(self, until: float) -> list[RecoveryReport]:
        """Requeue dead children's lists in order until done, ``until`` (monotonic)
        or a Redis error (then the first one left is retried after a backoff)."""
        done: list[RecoveryReport] = []
        while self._requeues and time.monotonic() < until:
            dead = self._requeues[0]
            try:
                report = self.recovery.requeue_all(dead.identity, triage=dead.triage)
                self.redis.delete(self.keys.heartbeat(dead.identity))
                self.recovery.forget(dead.identity)
            except redis.RedisError as error:
                self.outage.failed(error, time.monotonic())
                self._back_off()
                return done
            except Exception:  # a bug: loud, but not every pass
                log.exception("%s: could not requeue its jobs; trying again", dead.name)
                self._back_off(RETRY_MAX)
                return done
            self._requeues.popleft()
            self._retry_delay = 0.0
            self.outage.succeeded(time.monotonic())
            self._reports.put(report)
            self._wake_loop()
            self._log_requeue(dead, report)
            done.append(report)
        return done

    def _back_off(self, delay: float = 0.0) -> None:
        self._retry_delay = min(RETRY_MAX, max(RETRY_FIRST, delay, 2 * self._retry_delay))
        self._retry_at = time.monotonic() + self._retry_delay

    def _log_requeue(self, dead: DeadChild, report: RecoveryReport) -> None:
        if not (report or dead.crashed):
            return  # a child that stopped as asked pushed its jobs back itself
        what = [f"{len(report.requeued)} job(s)"]
        if report.buried:
            # Poison pills, or jobs their queue refused: each burial's line says why.
            what.append(f"{len(report.buried)} to the dead set")
        late = time.monotonic() - dead.died_at
        after = f" ({late:.1f}s after its death: Redis did not answer)" if late > LATE else ""
        level = logging.WARNING if report.buried else logging.INFO
        log.log(level, "%s: requeued %s%s", dead.name, ", ".join(what), after)

    # -- control list and heartbeat -------------------------------------------------
    def talk(self, now: float) -> None:
        state = self._state
        written = self._written
        changed = state is not None and (written is None or shown(state) != shown(written))
        if now < self._next_control and not changed:
            return
        self._next_control = now + CONTROL_INTERVAL
        beat = state is not None and (now >= self._next_heartbeat or changed)
        try:
            # The control read takes and removes in one script. MULTI only
            # with the heartbeat: its hash must never exist without its TTL,
            # or the master would look alive forever.
            pipe = self.redis.pipeline(transaction=beat)
            control.pop(pipe, self.keys.control(self.identity))
            if state is not None and beat:
                self._queue_heartbeat(pipe, state)
            reply = pipe.execute()[0]
        except redis.RedisError as error:
            self.outage.failed(error, time.monotonic())
            return
        if self.outage.failing_since is not None:
            self._retry_at = 0.0  # Redis answers again: a requeue goes at the next pass
        self.outage.succeeded(time.monotonic())
        if beat:
            self._next_heartbeat = now + beat_interval(self.config.heartbeat_ttl)
            self._written = state
        commands = control.parse(reply, "master")
        for command in commands:
            self._commands.put(command)
        if commands:
            self._wake_loop()

    def _queue_heartbeat(self, pipe: redis.client.Pipeline, state: MasterState) -> None:
        key = self.keys.heartbeat(self.identity)
        pipe.sadd(self.keys.masters, self.identity)
        pipe.hset(
            key,
            mapping={
                "identity": self.identity,
                "role": "master",
                "pid": os.getpid(),
                "hostname": self.identity.split(":", 1)[0],
                "queues": ",".join(self.config.queue_names),
                "concurrency": self.config.concurrency,
                "processes": state.wanted,
                "max_child_mb": self.max_child_mb,
                "memory_limit_mb": round(state.memory_limit_mb, 1),
                "memory_used_mb": round(state.memory_used_mb, 1),
                "children": ",".join(state.children),
                "quiet": int(state.quiet),
                "started_at": self.started_at,
                "beat_at": time.time(),
            },
        )
        pipe.expire(key, max(1, round(self.config.heartbeat_ttl)))

    def prune_masters(self, now: float) -> list[str]:
        """Remove members of the masters set whose heartbeat has expired; the
        ones removed. A master re-adds itself at each heartbeat (SADD with the
        HSET, in one MULTI), so one removed between our EXISTS and SREM, as it
        started, is back within a beat."""
        self._next_prune = now + PRUNE_INTERVAL
        try:
            members = byte_list(self.redis.srandmember(self.keys.masters, PRUNE_SAMPLE) or [])
            names = [m.decode(errors="replace") for m in members]
            pipe = self.redis.pipeline(transaction=False)
            for name in names:
                pipe.exists(self.keys.heartbeat(name))
            stale = [
                m
                for m, name, up in zip(members, names, pipe.execute(), strict=True)
                if not up and name != self.identity
            ]
            if stale:
                self.redis.srem(self.keys.masters, *stale)
        except redis.RedisError as error:
            self.outage.failed(error, time.monotonic())
            return []
        return [m.decode(errors="replace") for m in stale]

    def _wake_loop(self) -> None:
        with contextlib.suppress(BlockingIOError):  # full: the loop wakes anyway
            os.write(self._pipe[1], b"!")


def _guarded(what: str, duty: Callable[[], object]) -> None:
    """Run one duty; anything but a Redis error (each duty handles its own) is a
    bug, logged with its traceback, and the thread goes on: it protects every job."""
    try:
        duty()
    except Exception:
        log.exception("master's Redis thread, %s: unexpected error; carrying on", what)


def _drain(source: queue.SimpleQueue[T]) -> list[T]:
    taken = []
    with contextlib.suppress(queue.Empty):
        while True:
            taken.append(source.get_nowait())
    return taken
