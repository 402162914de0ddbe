"""Running one worker process in the foreground, with its own signals.

Until the supervisor forks children, ``jobmaster run`` is this: one worker
process whose main thread waits for signals and remote commands. TERM and
INT stop it gracefully (more TERMs never shorten that: Heroku may send two);
a second INT (Ctrl-C twice) stops at once, still pushing jobs back.
"""

from __future__ import annotations

import logging
import queue
import signal

from jobmaster import exitcodes
from jobmaster.config import Config
from jobmaster.embedded import EmbeddedRedis
from jobmaster.signals import QUIET, RESUME, STOP, SignalQueue
from jobmaster.signals import name as signal_name
from jobmaster.worker.process import WorkerProcess

log = logging.getLogger("jobmaster.worker.foreground")

TICK = 0.2  # seconds: how often the main loop looks at signals and commands


def run_foreground(config: Config, embedded: EmbeddedRedis | None = None) -> int:
    signals = SignalQueue()
    signals.install()
    worker = WorkerProcess(config)
    worker.start()
    try:
        while True:
            signum = signals.get(timeout=TICK)
            command = _command(worker)
            if embedded is not None:
                embedded.ensure_running()
            if signum in QUIET or command == "quiet":
                worker.manager.quiet()
            elif signum in RESUME or command == "resume":
                worker.manager.resume()
            elif signum in STOP or command == "stop":
                reason = signal_name(signum) if signum is not None else "remote stop"
                log.info(
                    "%s: graceful stop (shutdown_timeout %.0fs)", reason, config.shutdown_timeout
                )
                break
        interrupts = 1 if signum == signal.SIGINT else 0

        def second_interrupt() -> bool:
            nonlocal interrupts
            while (more := signals.get(timeout=0)) is not None:
                if more == signal.SIGINT:
                    interrupts += 1
            return interrupts >= 2

        worker.stop(config.shutdown_timeout, second_interrupt)
        return exitcodes.OK
    finally:
        signals.restore()


def _command(worker: WorkerProcess) -> str | None:
    try:
        return worker.commands.get_nowait()
    except queue.Empty:
        return None
