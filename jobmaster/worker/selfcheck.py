"""Finding entries of our own in-progress list that no thread is running.

That happens when a job's outcome could not be recorded (Redis away for
longer than the outcome's retries): the job ran, but it is still listed.
Waiting for a restart to requeue it could take days; this check requeues it
within a minute. An entry must be unclaimed in two checks in a row, because
a fetch that just returned may not have reached the running table yet.
Entries are counted, not only named: of two entries of the same bytes (a
producer that retried its LPUSH), one may be claimed and the other not.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter

from jobmaster.connection import byte_list
from jobmaster.worker.context import WorkerContext
from jobmaster.worker.loop import run_periodically
from jobmaster.worker.manager import Manager

log = logging.getLogger("jobmaster.worker.selfcheck")

CHECK_INTERVAL = 20.0  # seconds: two checks in a row stay under a minute


class SelfCheck(threading.Thread):
    def __init__(
        self,
        ctx: WorkerContext,
        manager: Manager,
        stop: threading.Event,
        interval: float = CHECK_INTERVAL,
    ) -> None:
        super().__init__(name="jobmaster-selfcheck", daemon=True)
        self.ctx = ctx
        self.manager = manager
        self.stop_event = stop
        self.interval = interval
        self.suspects: Counter[bytes] = Counter()  # unclaimed copies at the last check

    def run(self) -> None:
        # Nothing can be unclaimed at start: the first check is one interval in.
        run_periodically(
            "self-check", self.step, self.interval, self.stop_event, first_wait=self.interval
        )

    def step(self) -> float:
        listed = Counter(byte_list(self.ctx.redis.lrange(self.ctx.inprogress_key, 0, -1)))
        running = self.manager.running()  # read after the list: see the module docstring
        unclaimed = listed - running
        confirmed = unclaimed & self.suspects  # unclaimed in both checks
        self.suspects = unclaimed - confirmed
        if confirmed and not self.ctx.stopping.is_set():
            report = self.ctx.recovery.requeue(self.ctx.inprogress_key, confirmed.elements())
            log.warning(
                "requeued %d in-progress job(s) that no thread was running: %s",
                len(report.requeued),
                ", ".join(report.requeued),
            )
        return self.interval
