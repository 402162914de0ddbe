"""The main thread of a worker process: signals, commands, its master, its title.

Runs in each child the master forks, and alone as ``jobmaster worker``. The
processor threads do the work; this thread only listens and steers:

- TERM/INT or a remote ``stop``: graceful stop (quiet, wait up to
  ``shutdown_timeout``, push back what still runs, exit 0). More TERMs never
  shorten it: the platform's TERM and the master's are one request.
- a second INT (Ctrl-C twice) or QUIT (the master's "now"): stop at once,
  still pushing jobs back.
- TSTP / CONT or remote ``quiet`` / ``resume``; USR1: log every thread's stack.
- the master gone (our parent pid changed): graceful stop, no orphan workers.
"""

from __future__ import annotations

import logging
import os
import queue
import signal
import sys
import threading
import traceback

from jobmaster import exitcodes
from jobmaster.config import Config
from jobmaster.embedded import EmbeddedRedis
from jobmaster.proctitle import child_title, set_title
from jobmaster.signals import DUMP, QUIET, RESUME, STOP, STOP_NOW, SignalQueue
from jobmaster.signals import name as signal_name
from jobmaster.worker.identity import Identity
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
    embedded: EmbeddedRedis | None = None,
) -> int:
    """Run one worker process until it is stopped; returns the exit code."""
    worker = WorkerProcess(config, identity)
    worker.start()
    steering = Steering(worker, config, master_pid, embedded)
    steering.title("")  # up: no longer "starting", before the master hears we are ready
    if ready_fd is not None:
        os.write(ready_fd, b"R")  # tells the master we are up (HUP waits for it)
        os.close(ready_fd)
    while (reason := steering.step(signals.get(timeout=TICK))) is None:
        pass
    interrupts = 1 if reason == "SIGINT" else 0

    def stop_now() -> bool:
        nonlocal interrupts
        while (more := signals.get(timeout=0)) is not None:
            if more in STOP_NOW:
                return True
            interrupts += more == signal.SIGINT
        return interrupts >= 2

    log.info("%s: graceful stop (shutdown_timeout %.0fs)", reason, config.shutdown_timeout)
    steering.title("stopping")
    worker.stop(0 if reason in ("SIGQUIT",) else config.shutdown_timeout, stop_now)
    return exitcodes.OK


class Steering:
    """One tick of the main thread: act on a signal or command, watch the master."""

    def __init__(
        self,
        worker: WorkerProcess,
        config: Config,
        master_pid: int | None,
        embedded: EmbeddedRedis | None,
    ) -> None:
        self.worker = worker
        self.config = config
        self.master_pid = master_pid
        self.embedded = embedded
        self.index = worker.ctx.identity.index
        self._last_title = ""

    def step(self, signum: int | None) -> str | None:
        """Handle what arrived; returns why to stop, or None to go on."""
        command = self._command()
        if self.embedded is not None:
            self.embedded.ensure_running()
        manager = self.worker.manager
        if signum in QUIET or command == "quiet":
            manager.quiet()
        elif signum in RESUME or command == "resume":
            manager.resume()
        elif signum in DUMP:
            dump_threads()
        elif signum in STOP or signum in STOP_NOW:
            return signal_name(signum)
        elif command == "stop":
            return "remote stop"
        if self.master_pid is not None and os.getppid() != self.master_pid:
            return f"master (pid {self.master_pid}) is gone"
        self.title("quiet" if manager.quiet_now else "")
        return None

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
