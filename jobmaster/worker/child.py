"""The main thread of a worker process: signals, commands, its master, its title.

Runs in each child the master forks, and alone as ``jobmaster worker``. The
processor threads do the work; this thread only listens and steers:

- TERM/INT or a remote ``stop``: graceful stop (quiet, wait up to
  ``shutdown_timeout``, push back what still runs, exit 0). More TERMs never
  shorten it: the platform's TERM and the master's are one request.
- a second INT (Ctrl-C twice) or QUIT (the master's "now"): stop at once,
  still pushing jobs back.
- TSTP / CONT or remote ``quiet`` / ``resume``; USR1: log every thread's stack.
- HUP, TTIN, TTOU, USR2: nothing (signals.MASTER_ONLY): they reach a child only
  when something signals every process at once, and only the master acts.
- the master's requests on its pipe (pipes.py): ``recycle <reason>``,
  ``push-back`` once recycled, when there is no room to finish its jobs, and
  ``stop <reason>`` before its TERM (the log says whose stop it is).
- the master gone (our parent pid changed): graceful stop, no orphan workers.
"""

from __future__ import annotations

import logging
import os
import queue
import random
import signal
import socket
import sys
import threading
import time
import traceback

from jobmaster import exitcodes, lifecycle
from jobmaster.config import Config
from jobmaster.identity import Identity
from jobmaster.metrics.jobs import Reporter
from jobmaster.pipes import (
    MASTER_STOP,
    MAX_JOBS,
    PUSH_BACK,
    READY,
    RECYCLE,
    STUCK,
    RequestReader,
)
from jobmaster.poison import crash_triage
from jobmaster.proctitle import child_title, set_title
from jobmaster.signals import DUMP, MASTER_ONLY, QUIET, RESUME, STOP, STOP_NOW, SignalQueue
from jobmaster.signals import name as signal_name
from jobmaster.slots import StartedSlots
from jobmaster.worker.manager import Blame
from jobmaster.worker.process import WorkerProcess

log = logging.getLogger("jobmaster.worker.child")

TICK = 0.2  # seconds: how often the main thread looks at signals, commands, master


def serve(
    config: Config,
    signals: SignalQueue,
    identity: Identity | None = None,
    *,
    master_pid: int | None = None,
    ready_fd: int | None = None,
    metrics: socket.socket | None = None,
    quiet: bool = False,
    slots: StartedSlots | None = None,
    requests_fd: int | None = None,
) -> int:
    """Run one worker process until it is stopped; returns the exit code.

    ``ready_fd`` is this child's pipe to the master: ``R`` once it is up (HUP
    and recycling wait for it), ``M`` when it reached max_jobs_per_child.
    ``metrics``: where to report job counts, when the master serves metrics.
    ``quiet``: forked while the pool is quiet. It starts quiet, before its
    threads could fetch: the master's TSTP comes only once it is ready, and
    a job started in between would break the quiet it asked for.
    ``slots``: where this child's threads name the jobs they run, for the
    master to read if it dies (slots.py). ``requests_fd``: the master's
    requests (pipes.py).
    """
    # Only a child can be recycled after N jobs: a lone worker has nobody to
    # start its replacement.
    max_jobs = jittered(config.max_jobs_per_child) if ready_fd is not None else 0
    try:  # the app's own set-up (reopened pools...), before anything can be fetched
        lifecycle.run_child_start()
    except lifecycle.HookFailed:  # logged with its traceback; a crash at start
        return exitcodes.CHILD_START_FAILED
    worker = WorkerProcess(config, identity, slots, max_jobs=max_jobs)
    if quiet:
        worker.manager.quiet()
    worker.start()
    steering = Steering(worker, config, master_pid, ready_fd, requests_fd)
    steering.title("")  # up: no longer "starting", before the master hears we are ready
    steering.tell_master(READY)
    manager = worker.manager
    reporter = None
    if metrics is not None:
        reporter = Reporter(metrics, manager.job_metrics, lambda: manager.busy, config.concurrency)
    while (reason := steering.step(signals.get(timeout=TICK))) is None:
        if reporter is not None:
            reporter.tick(time.monotonic())
    interrupts = 1 if reason == "SIGINT" else 0

    def stop_now() -> bool:
        nonlocal interrupts
        while (more := signals.get(timeout=0)) is not None:
            if more in STOP_NOW:
                return True
            interrupts += more == signal.SIGINT
        return interrupts >= 2

    timeout, recycle_ends = steering.stop_timeout(reason)
    log.info("%s: graceful stop (jobs get %.0fs)", reason, timeout)
    steering.title("stopping")
    blame: Blame | None = None
    cause = steering.memory_cause
    if cause is not None and recycle_ends:
        # Over its memory limit to the end: the jobs still running then are
        # to blame, as exactly as for a crash (poison.py).
        event = "was recycled over its memory limit"
        blame = lambda started: crash_triage(  # noqa: E731
            config.max_crashes, config.crash_queue, cause, event, started
        )
    worker.stop(timeout, stop_now, blame)
    lifecycle.run_child_stop()  # after the last job: every one recorded or pushed back
    if reporter is not None:
        reporter.flush()  # after the last job is recorded: a graceful stop loses no count
    return exitcodes.OK


DUMP_DEBOUNCE = 1.0  # seconds: USR1s closer than this are one request


def jittered(limit: int) -> int:
    """``limit`` +- 10 %, so children started together don't all recycle together."""
    return max(1, round(limit * random.uniform(0.9, 1.1))) if limit else 0


class Steering:
    """One tick of the main thread: act on a signal or command, watch the master."""

    def __init__(
        self,
        worker: WorkerProcess,
        config: Config,
        master_pid: int | None,
        pipe_fd: int | None = None,
        requests_fd: int | None = None,
    ) -> None:
        self.worker = worker
        self.config = config
        self.master_pid = master_pid
        self.pipe_fd = pipe_fd
        self.requests = RequestReader(requests_fd)
        self.index = worker.ctx.identity.index
        self._last_dump = -DUMP_DEBOUNCE
        self._last_title = ""
        # Its processors stop fetching at max_jobs (manager.py); this thread
        # asks the master for a replacement then.
        self.max_jobs = worker.manager.max_jobs
        self.asked_for_replacement = False
        # Set when this child is being recycled: finish running jobs (at most
        # memory_grace), then stop for ``recycle_reason``. ``memory_cause``:
        # the limit it is over (the master's request says which), when the
        # jobs still running at the end are to blame.
        self.recycle_deadline: float | None = None
        self.recycle_reason = ""
        self.memory_cause: str | None = None
        self.no_room = False  # the master said so: push back now, no grace
        self.master_stop = ""  # the master's reason for the TERM it is about to send

    def on_stuck_job(self) -> None:
        """A thread is lost to a job stuck past its timeout: get replaced (a lone
        worker has nobody to replace it, and carries on one thread short)."""
        try:
            jid = self.worker.stuck.get_nowait()
        except queue.Empty:
            return
        if self.pipe_fd is None or self.recycle_deadline is not None:
            return
        self.tell_master(STUCK)
        self.begin_recycle(f"a job (jid {jid}) is stuck past its timeout")

    def begin_recycle(self, reason: str) -> None:
        """Stop fetching; stop once running jobs are done or memory_grace is up."""
        grace = self.config.memory_grace
        log.warning(
            "%s: finishing %d running job(s) within memory_grace (%.0fs), then stopping",
            reason,
            self.worker.manager.busy,
            grace,
        )
        self.recycle_reason = reason
        self.recycle_deadline = time.monotonic() + grace
        self.worker.manager.leave()  # for good: a CONT or a remote resume never undoes it

    def stop_timeout(self, reason: str) -> tuple[float, bool]:
        """Seconds the running jobs get at a stop for ``reason``, and whether the
        recycle's end is what cuts them short (then a memory recycle blames them).

        A TERM during a recycle (SPEC §7): the lesser of the recycle's time left
        and shutdown_timeout, the platform's KILL coming after the latter. No
        room (the master's push-back) or QUIT: none, as waiting could take
        the container over its limit, or was asked not to.
        """
        if reason == "SIGQUIT" or self.no_room:
            return 0.0, self.no_room
        timeout = self.config.shutdown_timeout
        if self.recycle_deadline is None:
            return timeout, False
        if reason == self.recycle_reason:  # its grace is over, or its jobs are done
            return timeout, True
        left = max(0.0, self.recycle_deadline - time.monotonic())
        return (left, True) if left <= timeout else (timeout, False)

    def tell_master(self, message: bytes) -> None:
        if self.pipe_fd is not None:
            try:
                os.write(self.pipe_fd, message)
            except OSError as error:  # the master is gone: the ppid check notices
                log.warning("could not tell the master %r: %s", message, error)

    def step(self, signum: int | None) -> str | None:
        """Handle what arrived; returns why to stop, or None to go on.

        A signal, a remote command and the master's requests that arrive in
        the same tick are each acted on: a remote stop that came with a TSTP
        was dropped when one excluded the other.
        """
        manager = self.worker.manager
        for verb, reason in self.requests.read():
            self.on_request(verb, reason)
        stop = self.on_signal(signum) if signum is not None else None
        if stop == "SIGTERM" and self.master_stop:  # its request came before its TERM
            stop = f"the master's stop ({self.master_stop}), forwarded as SIGTERM"
        command = self._command()
        if command == "quiet":
            manager.quiet()
        elif command == "resume":
            manager.resume()
        elif command == "stop":
            stop = stop or "remote stop"
        if stop is not None:
            return stop
        if self.master_pid is not None and os.getppid() != self.master_pid:
            return f"master (pid {self.master_pid}) is gone"
        self.on_stuck_job()
        if self.max_jobs and not self.asked_for_replacement and manager.completed >= self.max_jobs:
            self.asked_for_replacement = True
            self.tell_master(MAX_JOBS)  # the master forks our replacement at once
            self.begin_recycle(f"reached max_jobs_per_child ({manager.completed} jobs)")
        if self.recycle_deadline is not None and (
            manager.busy == 0 or time.monotonic() >= self.recycle_deadline
        ):
            return self.recycle_reason
        self.title("quiet" if manager.quiet_now else "")
        return None

    def on_signal(self, signum: int) -> str | None:
        """Act on one signal; its name if it asks to stop."""
        manager = self.worker.manager
        if signum in QUIET:
            manager.quiet()
        elif signum in RESUME:
            manager.resume()
        elif signum in DUMP:
            # The master forwards USR1, and a USR1 sent to every process
            # reaches us directly too: one request, one dump.
            now = time.monotonic()
            if now - self._last_dump >= DUMP_DEBOUNCE:
                self._last_dump = now
                dump_threads()
        elif signum in MASTER_ONLY:
            log.info("ignored %s: only the master acts on it", signal_name(signum))
        elif signum in STOP or signum in STOP_NOW:
            return signal_name(signum)
        return None

    def on_request(self, verb: str, reason: str) -> None:
        """A request from the master on our pipe (pipes.py)."""
        if verb == RECYCLE:
            if self.recycle_deadline is None:
                self.memory_cause = reason or "over its memory limit"
                self.begin_recycle(f"recycled by the master: {self.memory_cause}")
        elif verb == MASTER_STOP:
            self.master_stop = reason or "stop"
        elif verb == PUSH_BACK:
            if self.memory_cause is not None and not self.no_room:
                log.warning(
                    "no room to finish %d job(s) (the container uses %s): pushing them back now",
                    self.worker.manager.busy,
                    reason or "too much",
                )
                self.no_room = True
                self.recycle_deadline = time.monotonic()  # the grace is over
        else:
            log.warning("ignored an unknown request from the master: %r", verb)

    def title(self, state: str) -> None:
        manager, config = self.worker.manager, self.config
        if self.index is None:
            title = f"jobmaster worker [{manager.busy}/{config.concurrency} busy] "
            title += ",".join(config.queue_names) + (f" {state}" if state else "")
        else:
            title = child_title(
                self.index, manager.busy, config.concurrency, config.queue_names, state
            )
        if title != self._last_title:
            self._last_title = title
            set_title(title)

    def _command(self) -> str | None:
        try:
            return self.worker.commands.get_nowait()
        except queue.Empty:
            return None


def dump_threads() -> None:
    """USR1: each thread's stack in the log, to see where a stuck job is stuck."""
    frames = sys._current_frames()
    for thread in threading.enumerate():
        frame = frames.get(thread.ident or -1)
        if frame is None:
            continue
        stack = "".join(traceback.format_stack(frame)).rstrip()
        log.warning("traceback of thread %s:\n%s", thread.name, stack)
