"""One worker process: the processors and the background duties around them.

This is what each child of the master runs (and, before the supervisor,
what ``jobmaster run`` runs in the foreground). Order matters: the first
heartbeat is written before the first fetch, so this process's in-progress
list always has a registered owner that orphan recovery can find.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import threading
import time
from collections.abc import Callable

import redis

from jobmaster import crypto
from jobmaster.config import Config
from jobmaster.connection import wait_for_redis, when_reachable
from jobmaster.errors import JobTimeout
from jobmaster.identity import Identity
from jobmaster.procmem import measure_mb
from jobmaster.recovery import RecoveryReport
from jobmaster.slots import StartedSlots
from jobmaster.worker.async_runner import LoopLag
from jobmaster.worker.cancels import CancelWatch
from jobmaster.worker.context import WorkerContext
from jobmaster.worker.heartbeat import Heartbeat
from jobmaster.worker.manager import Blame, Manager
from jobmaster.worker.orphan_scan import OrphanScanner
from jobmaster.worker.outcome import Ran, conclude
from jobmaster.worker.poller import ScheduledPoller
from jobmaster.worker.selfcheck import SelfCheck
from jobmaster.worker.watchdog import Armed, Watchdog

log = logging.getLogger("jobmaster.worker.process")


class WorkerProcess:
    def __init__(
        self,
        config: Config,
        identity: Identity | None = None,
        slots: StartedSlots | None = None,
        *,
        max_jobs: int = 0,
    ) -> None:
        """``max_jobs``: stop fetching once this many jobs are done (0: no limit)."""
        crypto.set_keys(config.secret_key)  # opens encrypt=True jobs' arguments
        self.ctx = WorkerContext.create(config, identity)
        self.background_stop = threading.Event()
        self.stuck: queue.SimpleQueue[str] = queue.SimpleQueue()  # jids, for the main thread
        self.watchdog = Watchdog(config.timeout_grace, self.give_up_on, self.background_stop)
        self.cancels = CancelWatch(self.ctx.redis, self.ctx.keys, self.background_stop)
        self.manager = Manager(
            self.ctx, slots, watchdog=self.watchdog, cancels=self.cancels, max_jobs=max_jobs
        )
        self.commands: queue.SimpleQueue[str] = queue.SimpleQueue()
        self.orphans = OrphanScanner(self.ctx, self.background_stop)
        self.heartbeat = Heartbeat(
            self.ctx,
            self.info,
            self.commands.put,
            self.background_stop,
            on_lease=self.orphans.request,
        )
        self.poller = ScheduledPoller(self.ctx, self.background_stop)
        self.selfcheck = SelfCheck(self.ctx, self.manager, self.background_stop)
        runner = self.manager.runner
        self.loop_lag = (
            LoopLag(runner, config.loop_lag_warning, self.background_stop) if runner else None
        )

    def info(self) -> dict[str, str | int | float]:
        """Heartbeat fields: what ``jobmaster ps`` shows of this process. With an
        event loop: its room (``async_concurrency``), and the job blocking it
        now, if one does (``loop_blocked``: empty when none)."""
        metric = self.ctx.config.memory_metric
        fields: dict[str, str | int | float] = {
            "busy": self.manager.busy,
            "quiet": int(self.manager.quiet_now),
            "completed": self.manager.completed,
            "memory_mb": round(measure_mb(os.getpid(), metric) or 0.0, 1),
            "memory_metric": metric,
        }
        if self.loop_lag is not None:
            fields["async_concurrency"] = self.ctx.config.async_concurrency
            blocked = self.loop_lag.blocked
            fields["loop_blocked"] = (
                json.dumps(blocked, separators=(",", ":")) if blocked is not None else ""
            )
        return fields

    def start(self) -> None:
        wait_for_redis(self.ctx.redis, self.ctx.config.redis_url_masked)
        # Registered before the first fetch; a Redis that answered INFO may
        # still be loading its data and refuse this for a moment.
        when_reachable(self.heartbeat.beat, self.ctx.config.redis_url_masked)
        # The cancels asked before this process started (a job requeued after a
        # crash may have been cancelled meanwhile), read before the first fetch.
        when_reachable(self.cancels.catch_up, self.ctx.config.redis_url_masked)
        self.manager.start()
        threads = (
            self.heartbeat,
            self.orphans,
            self.poller,
            self.selfcheck,
            self.watchdog,
            self.cancels,
        )
        for thread in threads:
            thread.start()
        if self.loop_lag is not None:
            self.loop_lag.start()
        self.manager.listener.subscribed.wait(timeout=5.0)
        self.cancels.subscribed.wait(timeout=5.0)  # a cancel from now on is heard at once
        config = self.ctx.config
        loop = ""
        if self.manager.runner is not None:
            kind = self.manager.runner.loop_name
            loop = f" and an event loop ({kind}) for {config.async_concurrency} async jobs"
        log.info(
            "worker %s started: queues %s, %d threads%s",
            self.ctx.name,
            ",".join(config.queues),
            config.concurrency,
            loop,
        )

    def give_up_on(self, armed: Armed) -> None:
        """A job still running ``timeout_grace`` after its timeout (stuck in C code):
        record the attempt as failed (not a crash) and stop waiting for it."""
        job, grace = armed.job, self.ctx.config.timeout_grace
        error = JobTimeout(
            f"still running {grace:g}s after its timeout of {armed.timeout:g}s "
            "(stuck outside Python?): its worker process is recycled"
        )
        # The attempt began at its deadline less its timeout (wall clock).
        started = time.time() - (time.monotonic() - (armed.deadline - armed.timeout))
        outcome = conclude(job, Ran(error), started, time.time())
        log.error("stuck past its timeout: %s", error, extra=job.log_context())
        self.manager.give_up(job.unit, outcome)
        self.stuck.put(outcome.jid)

    def stop(
        self,
        timeout: float,
        interrupted: Callable[[], bool] = lambda: False,
        blame: Blame | None = None,
    ) -> RecoveryReport:
        """Graceful stop: quiet, let jobs run up to ``timeout``, push back the rest."""
        self.manager.quiet()
        log.info("stopping: waiting up to %.0fs for %d job(s)", timeout, self.manager.busy)
        self.manager.wait_idle(time.monotonic() + timeout, interrupted)
        report = self.manager.halt(blame)
        self.background_stop.set()
        self.ctx.core.close()  # its I/O core: no job runs any more
        try:
            self.heartbeat.clear()
        except redis.RedisError as error:
            log.warning("could not remove the heartbeat (%s); it expires by itself", error)
        log.info("stopped: %d job(s) pushed back", len(report.requeued))
        return report
