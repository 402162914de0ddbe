"""The orphan scan of a worker process, on a thread of its own.

The heartbeat takes the scan lease (heartbeat.py) and hands the scan here:
a scan of a large ``processes`` set (100,000 forged members) once ran in
the heartbeat's thread for 15 s, long enough for this process's own
heartbeat to lapse and its running jobs to be recovered, and run again, by
another host. Here a scan goes a page at a time (orphans.py) and the
heartbeat beats on beside it. A lease taken while a scan still runs is not
a second scan: the running one goes on to the end of the set.
"""

from __future__ import annotations

import threading

from jobmaster.orphans import recover_orphans
from jobmaster.worker.context import WorkerContext
from jobmaster.worker.loop import run_periodically

IDLE_WAIT = 1.0  # seconds between looks at a request, when none came


class OrphanScanner(threading.Thread):
    def __init__(self, ctx: WorkerContext, stop: threading.Event) -> None:
        super().__init__(name="jobmaster-orphan-scan", daemon=True)
        self.ctx = ctx
        self.stop_event = stop
        self.wanted = threading.Event()

    def request(self) -> None:
        """The heartbeat took the lease: scan (at once, in this thread)."""
        self.wanted.set()

    def step(self) -> float:
        if self.wanted.wait(IDLE_WAIT):
            self.wanted.clear()
            recover_orphans(self.ctx.recovery, self.ctx.name, self.stop_event.is_set)
        return 0.0

    def run(self) -> None:
        run_periodically("orphan scan", self.step, 0.0, self.stop_event)
