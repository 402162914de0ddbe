"""The heartbeat: this process's info in Redis, remote commands, orphan recovery.

Duties, each on its own period:
- write the info hash (identity, host, pid, queues, busy, quiet...) with a
  TTL of ``heartbeat_ttl``, so operators see us and others know we live;
- read our control list (``quiet``, ``resume``, ``stop``) in the same round
  trip, so a remote command is acted on within one beat;
- every half TTL, requeue the in-progress lists of processes whose
  heartbeat has expired (a lost host's jobs are not lost with it), or whose
  process is provably gone from this machine (liveness.py). One process at
  a time does it: each scan reads every heartbeat, so N processes each
  scanning would cost N squared reads a period. Whoever takes the scan lease
  (``SET NX PX`` the interval, riding in the beat's own transaction: no
  extra round trip) scans; the others try again an interval later. The
  lease lasts one interval and every process tries once an interval, so a
  scan still runs every interval (plus at most a beat) while any process
  lives, and a lost host's jobs are recovered within about heartbeat_ttl +
  the interval, as when everyone scanned. The scan itself runs on a thread
  of its own (``on_lease``: worker/orphan_scan.py), never in this one: a
  flood of members must not hold up our own beat. The master's scan at its
  start (``recover_left_behind``) takes no lease;
- keep the "working" status of jobs running long alive (worker/core.py), in
  the beat's own transaction;
- delete our ``silent`` mark at each beat: a scan that found our heartbeat
  missing (deleted by someone) waits a grace for us, and our beat tells it
  we live (recovery.py's fence);
- notice a Redis replaced by an empty one (server_watch.py) and say so;
- keep our heartbeat alive while Redis is out of memory: the info hash
  cannot be rewritten then (HSET and any MULTI are refused), but EXPIRE is
  never refused, and without it our running jobs would be recovered (run
  twice) by other processes once the TTL ran out.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable

import redis

from jobmaster import control, liveness
from jobmaster.worker.context import WorkerContext
from jobmaster.worker.loop import run_periodically
from jobmaster.worker.server_watch import ServerWatch

log = logging.getLogger("jobmaster.worker.heartbeat")


class Heartbeat(threading.Thread):
    def __init__(
        self,
        ctx: WorkerContext,
        info: Callable[[], dict[str, str | int | float]],
        on_command: Callable[[str], None],
        stop: threading.Event,
        on_lease: Callable[[], None] = lambda: None,
    ) -> None:
        """``on_lease``: called when this process took the orphan scan lease;
        it must only hand the scan over (worker/orphan_scan.py), not run it."""
        super().__init__(name="jobmaster-heartbeat", daemon=True)
        self.ctx = ctx
        self.info = info
        self.on_command = on_command
        self.on_lease = on_lease
        self.stop_event = stop
        ttl = ctx.config.heartbeat_ttl
        self.interval = liveness.beat_interval(ttl)
        self.orphan_interval = max(1.0, ttl / 2)
        self.started_at = time.time()
        # Where this process lives, so that another process of this machine can
        # tell at once that it died (liveness.py); none off Linux.
        self.locus: dict[str, str | int | float] = {}
        started = liveness.started_at(ctx.identity.pid)
        if liveness.locus() and started is not None:
            self.locus = {"locus": liveness.locus(), "pid_started": started}
            master = ctx.identity.master_pid
            master_started = liveness.started_at(master) if master is not None else None
            if master_started is not None:  # else never judged: "don't know"
                self.locus["master_started"] = master_started
        self._next_orphan_scan = 0.0
        self.server = ServerWatch(ctx.redis, ctx.config.redis_url_masked)

    def beat(self, claim_scan: bool = False) -> bool:
        """One heartbeat: info with TTL, owner registration, pending commands.

        With ``claim_scan``, also try to take the orphan scan lease, in the same
        transaction; True if we hold it now (then we scan).
        """
        ctx, keys = self.ctx, self.ctx.keys
        fields: dict[str, str | int | float] = {
            "identity": ctx.name,
            "hostname": socket.gethostname(),
            "pid": ctx.identity.pid,
            "queues": ",".join(ctx.config.queue_names),
            "concurrency": ctx.config.concurrency,
            "started_at": self.started_at,
            "beat_at": time.time(),
        }
        if ctx.identity.master_pid is not None:
            fields["master_pid"] = ctx.identity.master_pid
            fields["index"] = ctx.identity.index or 0
        fields.update(self.locus)
        fields.update(self.info())
        key = keys.heartbeat(ctx.name)
        pipe = ctx.redis.pipeline(transaction=True)
        pipe.sadd(keys.processes, ctx.name)  # 0: we were registered already
        pipe.hset(key, mapping=dict(fields))  # type: ignore[arg-type]
        pipe.expire(key, self.ttl)
        # We live: a scan that found our heartbeat missing (deleted by someone)
        # starts counting again, so our jobs are never recovered while we beat.
        pipe.delete(keys.silent(ctx.name))
        control.pop(pipe, keys.control(ctx.name))  # read and remove, bounded
        if claim_scan:
            lease_ms = max(1, round(self.orphan_interval * 1000))
            pipe.set(keys.orphan_scan_lease, ctx.name, nx=True, px=lease_ms)
        own = len(pipe)
        # Jobs running long keep their "working" status alive (core.py); its
        # failure (our in-progress list forged as another type) is not the beat's.
        ctx.core.refresh(pipe)
        try:
            replies = pipe.execute(raise_on_error=False)
            failed = next((r for r in replies[:own] if isinstance(r, Exception)), None)
            if failed is not None:
                raise failed
            added, _, _, _, commands, *rest = replies[:own]
        except redis.exceptions.OutOfMemoryError:
            self.server.beat_failed()
            self.keep_alive()
            raise  # logged once per outage by the loop
        except redis.RedisError:
            self.server.beat_failed()
            raise
        for reply in replies[own:]:
            if isinstance(reply, Exception):
                log.warning("could not keep running jobs' status alive: %s", reply)
        self.dispatch(commands)
        self.server.beat_done(was_registered=not added)
        return bool(claim_scan and rest[0])

    @property
    def ttl(self) -> int:
        return max(1, round(self.ctx.config.heartbeat_ttl))

    def keep_alive(self) -> None:
        """Redis is out of memory: extend the heartbeat we have and read our
        commands, with the two commands it still accepts (outside a MULTI,
        which it refuses whole)."""
        ctx = self.ctx
        pipe = ctx.redis.pipeline(transaction=False)
        pipe.expire(ctx.keys.heartbeat(ctx.name), self.ttl)
        pipe.delete(ctx.keys.silent(ctx.name))  # never refused: it frees memory
        control.pop(pipe, ctx.keys.control(ctx.name))
        self.dispatch(pipe.execute()[2])

    def dispatch(self, reply: object) -> None:
        """Act on the commands of one control read (control.py parses it)."""
        for command in control.parse(reply, self.ctx.name):
            log.info("remote command: %s", command)
            self.on_command(command)

    def step(self) -> float:
        now = time.monotonic()
        due = now >= self._next_orphan_scan
        leased = self.beat(claim_scan=due)  # raises: tried again at the next beat
        if due:  # leased or not: the holder scans for this interval
            self._next_orphan_scan = now + self.orphan_interval
        if leased:
            self.on_lease()
        return self.interval

    def run(self) -> None:
        run_periodically("heartbeat", self.step, self.interval, self.stop_event)

    def clear(self) -> None:
        """Remove our heartbeat at a clean stop, so we vanish from ``ps`` at once."""
        self.ctx.redis.delete(self.ctx.keys.heartbeat(self.ctx.name))
        self.ctx.recovery.forget(self.ctx.name)
