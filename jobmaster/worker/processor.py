"""One processor thread: take a job, run it, record its outcome (which acknowledges).

Duties: never die (Redis errors back off in ``take``, job errors become
outcomes, a bug of ours buries the job); run each job only between its
``start`` and ``end`` in the running table (running.py), so its started
slot names it exactly while its code runs; hand its outcome back to be
recorded only while it is still ours, and say when it is done with it.

A processor knows nothing of the manager beyond the verbs of ``Work``
(like Sidekiq's Processor and Manager): what it uses is given to it at
construction, so the two modules do not import each other.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from typing import Protocol

import redis

from jobmaster.worker.executor import Executor
from jobmaster.worker.outcome import Outcome
from jobmaster.worker.running import RunningTable
from jobmaster.worker.unit import Unit

log = logging.getLogger("jobmaster.worker.processor")


class Work(Protocol):
    """What a processor asks of its manager (manager.py)."""

    def take(self) -> Unit | None:
        """A job claimed for this thread, or None after waiting (quiet, nothing
        came, Redis away): the thread asks again."""

    def record(self, unit: Unit, outcome: Outcome) -> None:
        """Record the outcome, if the job is still ours, and run its hook."""

    def finished(self, unit: Unit) -> None:
        """This thread is done with the job (counted, whatever became of it)."""

    def bury(self, unit: Unit, reason: str) -> None:
        """Our own bug hit this job: to the dead set, so it isn't retried forever."""


class Processor(threading.Thread):
    def __init__(
        self,
        index: int,
        work: Work,
        table: RunningTable,
        executor: Executor,
        stopping: threading.Event,
    ) -> None:
        super().__init__(name=f"jobmaster-processor-{index}", daemon=True)
        self.index = index  # this thread's slot in the started slots
        self.work = work
        self.table = table
        self.executor = executor
        self.stopping = stopping

    def run(self) -> None:
        while not self.stopping.is_set():
            unit = self.work.take()
            if unit is not None:
                self.process(unit)

    def process(self, unit: Unit) -> None:
        """Run a claimed job and have it recorded, if it is still ours to record."""
        try:
            if not self.table.start(unit, self.index):
                return  # a stop began while it waited for its turn: pushed back
            try:
                outcome = self.executor.run(unit)
            finally:
                self.table.end(unit, self.index)
            self.work.record(unit, outcome)
        except Exception as error:
            # A bug of ours must neither kill this thread nor leave the job to
            # be requeued (and fail the same way) forever: bury it, keep going.
            log.exception("internal error processing a job; burying it")
            with contextlib.suppress(redis.RedisError):
                self.work.bury(unit, f"internal error: {type(error).__name__}: {error}")
        finally:
            self.work.finished(unit)
