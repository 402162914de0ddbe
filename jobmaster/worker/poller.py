"""Moving due jobs from the scheduled and retry sets to their queues.

Each due entry moves with one TRANSFER script (removed from the set and
pushed to its queue atomically, or not at all), so two pollers on two hosts
never enqueue it twice. An entry that is not a valid payload is buried in
the dead set with its raw bytes: left in place it would be due forever and
be read on every poll. So is one whose queue's key holds another type (a
forged name in its payload, recovery.py): TRANSFER refuses it whole, where
it once removed it and then failed to push it. One that cannot reach the
dead set either stays due, logged, and a page of nothing but such entries
ends the pass instead of being read again and again.
"""

from __future__ import annotations

import logging
import random
import threading
import time

from jobmaster import payload as wire
from jobmaster.connection import byte_list
from jobmaster.recovery import RecoveryReport, TargetRefused
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

    def enqueue_due(self, zset: str, until: float | None = None) -> int:
        """Move every entry of ``zset`` due now (or scored up to ``until``: the
        test helpers release every one) to its queue; returns how many moved."""
        moved = 0
        while not self.stop_event.is_set():
            now = time.time()
            last = now if until is None else until
            due = byte_list(self.ctx.redis.zrangebyscore(zset, "-inf", last, start=0, num=BATCH))
            ends = [self._move(zset, raw, now) for raw in due]
            moved += ends.count("moved")
            if len(due) < BATCH or ends.count("stayed") == len(due):
                break
        return moved

    def _move(self, zset: str, raw: bytes, now: float) -> str:
        """'moved' to its queue, 'buried' in the dead set, or 'stayed': gone
        already (another poller took it) or it can land nowhere (logged)."""
        recovery = self.ctx.recovery
        try:
            payload = wire.decode(raw)
        except wire.BadPayload as error:
            reason = f"broken entry in {zset.rsplit(':', 1)[-1]} set: {error}"
            return _buried(recovery.bury(zset, raw, reason, None, kind="zset"))  # logs it
        queue = str(payload["queue"])
        payload["enqueued_at"] = now
        try:
            moved = recovery.transfer(
                zset,
                "zset",
                raw,
                payload,
                self.ctx.keys.queue(queue),
                "back",
                queue=queue,
                status="queued",
            )
        except TargetRefused as refused:
            reason = f"could not be requeued: {refused}"
            return _buried(recovery.bury(zset, raw, reason, queue, kind="zset"))
        return "moved" if moved else "stayed"


def _buried(report: RecoveryReport) -> str:
    return "buried" if report.buried else "stayed"
