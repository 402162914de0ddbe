"""Moving due jobs from the scheduled and retry sets to their queues.

Each due entry moves with one TRANSFER script (removed from the set and
pushed to its queue atomically, or not at all), so two pollers on two hosts
never enqueue it twice. An entry that is not a valid payload is buried in
the dead set with its raw bytes: left in place it would be due forever and
be read on every poll.
"""

from __future__ import annotations

import logging
import random
import threading
import time

from jobmaster import payload as wire
from jobmaster.connection import byte_list
from jobmaster.worker.context import WorkerContext
from jobmaster.worker.loop import run_periodically

log = logging.getLogger("jobmaster.worker.poller")

BATCH = 100


class ScheduledPoller(threading.Thread):
    def __init__(self, ctx: WorkerContext, stop: threading.Event) -> None:
        super().__init__(name="jobmaster-poller", daemon=True)
        self.ctx = ctx
        self.stop_event = stop

    def run(self) -> None:
        run_periodically("scheduled poller", self.step, self.interval(), self.stop_event)

    def interval(self) -> float:
        # Jitter keeps the pollers of many processes from polling in lockstep.
        return self.ctx.config.poll_interval * random.uniform(0.5, 1.5)

    def step(self) -> float:
        for zset in (self.ctx.keys.scheduled, self.ctx.keys.retry):
            self.enqueue_due(zset)
        return self.interval()

    def enqueue_due(self, zset: str) -> int:
        """Move every entry of ``zset`` due now to its queue; returns how many moved."""
        moved = 0
        while not self.stop_event.is_set():
            now = time.time()
            due = byte_list(self.ctx.redis.zrangebyscore(zset, "-inf", now, start=0, num=BATCH))
            for raw in due:
                moved += self._move(zset, raw, now)
            if len(due) < BATCH:
                break
        return moved

    def _move(self, zset: str, raw: bytes, now: float) -> int:
        try:
            payload = wire.decode(raw)
        except wire.BadPayload as error:
            reason = f"broken entry in {zset.rsplit(':', 1)[-1]} set: {error}"
            self.ctx.recovery.bury(zset, raw, reason, None, kind="zset")  # logs it
            return 0
        queue = str(payload["queue"])
        payload["enqueued_at"] = now
        moved = self.ctx.recovery.transfer(
            zset,
            "zset",
            raw,
            payload,
            self.ctx.keys.queue(queue),
            "back",
            queue=queue,
            status="queued",
        )
        return int(moved)
