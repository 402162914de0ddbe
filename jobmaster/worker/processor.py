"""One processor thread: fetch, run, record the outcome (which acknowledges).

Duties: never die (Redis errors back off, job errors become outcomes); give
back a job fetched after quiet or stop began instead of starting it; move
each job through the running table (running.py): claim, start, end, record
only while it is still ours, finished.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import TYPE_CHECKING, Any

import redis

from jobmaster.scripts import Unlock
from jobmaster.unique import UNTIL_STARTED
from jobmaster.worker.executor import execute
from jobmaster.worker.loop import OUTAGE_BACKOFF
from jobmaster.worker.outcome import record, run_hook

if TYPE_CHECKING:
    from jobmaster.worker.context import WorkerContext
    from jobmaster.worker.fetch import Unit
    from jobmaster.worker.manager import Manager

log = logging.getLogger("jobmaster.worker.processor")

IDLE_WAIT = 60.0  # an idle thread wakes on a notification; this only bounds the wait


def release_until_started(ctx: WorkerContext, payload: dict[str, Any]) -> None:
    """An ``until_started`` unique job frees its lock as it starts (``on_start``
    of ``execute``)."""
    lock = payload.get("unique_digest")
    if payload.get("unique") != UNTIL_STARTED or not isinstance(lock, str):
        return
    try:
        Unlock(lock_key=ctx.keys.unique(lock), jid=str(payload["jid"])).run(ctx.scripts.unlock)
    except redis.RedisError as error:  # it expires on its own (a bounded TTL)
        log.warning("could not release the unique lock of jid=%s: %s", payload["jid"], error)


class Processor(threading.Thread):
    def __init__(self, index: int, manager: Manager) -> None:
        super().__init__(name=f"jobmaster-processor-{index}", daemon=True)
        self.index = index  # this thread's slot in the started slots
        self.manager = manager
        self.ctx = manager.ctx

    def run(self) -> None:
        manager, stopping = self.manager, self.ctx.stopping
        outage = manager.fetch_outage  # one log line per outage, not one per thread
        while not stopping.is_set():
            if not manager.fetching.is_set():
                manager.fetching.wait(0.5)
                continue
            seen = manager.signal.generation
            with manager.fetch_in_flight():
                try:
                    unit = manager.fetcher.fetch()
                    outage.succeeded(time.monotonic())
                except redis.RedisError as error:
                    outage.failed(error, time.monotonic())
                    unit = None
                    failed = True
                else:
                    failed = False
                # Claimed atomically with the quiet/stop state (running.py):
                # else a stop could look at the table between our check and
                # our claim, push the job back, and we would run it anyway.
                if unit is not None and not manager.table.claim(unit):
                    manager.give_back(unit)  # fetched as quiet or stop began
                    continue
            if failed:
                stopping.wait(OUTAGE_BACKOFF)
            elif unit is None:
                manager.signal.wait(seen, manager.fetching, IDLE_WAIT)
            else:
                self.process(unit)

    def starting(self, payload: dict[str, Any]) -> None:
        release_until_started(self.ctx, payload)

    def process(self, unit: Unit) -> None:
        """Run a claimed job and record it, if it is still ours to record."""
        table = self.manager.table
        try:
            if not table.start(unit, self.index):
                return  # a stop began while it waited for its turn: pushed back
            try:
                outcome = execute(unit, self.manager.watchdog, self.starting, self.ctx)
            finally:
                table.end(unit, self.index)
            if table.may_record(unit) and record(self.ctx, unit.raw, outcome):
                self.manager.job_metrics.observe_outcome(outcome, unit.queue)
                run_hook(outcome)  # else it was pushed back, or the watchdog recorded it
        except Exception as error:
            # A bug of ours must neither kill this thread nor leave the job to
            # be requeued (and fail the same way) forever: bury it, keep going.
            log.exception("internal error processing a job; burying it")
            with contextlib.suppress(redis.RedisError):
                self.ctx.recovery.bury(
                    self.ctx.inprogress_key,
                    unit.raw,
                    f"internal error: {type(error).__name__}: {error}",
                    unit.queue,
                )
        finally:
            self.manager.finished(unit)
