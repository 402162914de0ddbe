"""The heartbeat: this process's info in Redis, remote commands, orphan recovery.

Duties, each on its own period:
- write the info hash (identity, host, pid, queues, busy, quiet...) with a
  TTL of ``heartbeat_ttl``, so operators see us and others know we live;
- read our control list (``quiet``, ``resume``, ``stop``) in the same round
  trip, so a remote command is acted on within one beat;
- every half TTL, requeue the in-progress lists of processes whose
  heartbeat has expired: a lost host's jobs are not lost with it.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable

from jobmaster.worker.context import WorkerContext
from jobmaster.worker.loop import run_periodically

log = logging.getLogger("jobmaster.worker.heartbeat")

COMMANDS = ("quiet", "resume", "stop")


class Heartbeat(threading.Thread):
    def __init__(
        self,
        ctx: WorkerContext,
        info: Callable[[], dict[str, str | int | float]],
        on_command: Callable[[str], None],
        stop: threading.Event,
    ) -> None:
        super().__init__(name="jobmaster-heartbeat", daemon=True)
        self.ctx = ctx
        self.info = info
        self.on_command = on_command
        self.stop_event = stop
        ttl = ctx.config.heartbeat_ttl
        self.interval = max(0.5, min(5.0, ttl / 3))
        self.orphan_interval = max(1.0, ttl / 2)
        self.started_at = time.time()
        self._next_orphan_scan = 0.0

    def beat(self) -> None:
        """One heartbeat: info with TTL, owner registration, pending commands."""
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
        fields.update(self.info())
        key = keys.heartbeat(ctx.name)
        pipe = ctx.redis.pipeline(transaction=True)
        pipe.sadd(keys.processes, ctx.name)
        pipe.hset(key, mapping=dict(fields))  # type: ignore[arg-type]
        pipe.expire(key, max(1, round(ctx.config.heartbeat_ttl)))
        pipe.lpop(keys.control(ctx.name), 100)  # read and remove, one command
        commands = pipe.execute()[3] or []
        for raw in commands:
            command = raw.decode(errors="replace")
            if command in COMMANDS:
                log.info("remote command: %s", command)
                self.on_command(command)
            else:
                log.warning("ignored unknown remote command %r", command)

    def step(self) -> float:
        self.beat()
        now = time.monotonic()
        if now >= self._next_orphan_scan:
            self._next_orphan_scan = now + self.orphan_interval
            self.ctx.recovery.recover_orphans(self.ctx.name)
        return self.interval

    def run(self) -> None:
        run_periodically("heartbeat", self.step, self.interval, self.stop_event)

    def clear(self) -> None:
        """Remove our heartbeat at a clean stop, so we vanish from ``ps`` at once."""
        self.ctx.redis.delete(self.ctx.keys.heartbeat(self.ctx.name))
        self.ctx.recovery.forget(self.ctx.name)
