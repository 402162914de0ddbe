"""Forking one child and setting its process up.

The worker object is built after fork (fresh Redis connections, threads);
what must happen in the instant between fork and the child's own signal
handlers happens with signals blocked, so a child never runs the master's
handlers. The child gets its own process group: the master decides what
reaches it (a terminal's Ctrl-C reaches the master, which forwards TERM),
and when it dies the master can kill the subprocesses its jobs left behind.
The master forks while its Redis thread runs: supervisor/duties.py says why
that is safe.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import random
import re
import secrets
import signal
import socket
import sys
import threading
import warnings
from collections.abc import Iterable
from dataclasses import dataclass

from jobmaster import exitcodes
from jobmaster.app import AppImportError, load_app
from jobmaster.config import Config
from jobmaster.identity import Identity
from jobmaster.log import handlers_held, set_process_fields
from jobmaster.proctitle import child_title, set_title
from jobmaster.signals import CHILD_SIGNALS, MASTER_SIGNALS, SignalQueue, blocked, reset_in_child
from jobmaster.slots import StartedSlots
from jobmaster.supervisor.children import Child

# The child's entry point, the one import of worker/ here. Imported by the
# master, before any fork, so that every child shares the worker's modules
# with it (copy-on-write) instead of importing them anew: about 40 ms of each
# start (a replacement after a crash) and memory in every child. They start
# no thread and open no connection at import: the worker object is built
# after fork.
from jobmaster.worker.child import serve

log = logging.getLogger("jobmaster.supervisor.spawn")

# Python 3.12+ warns at every fork of a process that runs more than one
# thread. The master forks beside its Redis thread on purpose: duties.py says
# why no child can inherit a lock that thread holds, and
# tests/process/test_fork_stress.py forks hundreds of times beside it, under
# every Python .ci/run tests. Ignored only for this module's os.fork (the
# warning names its caller's module), so that PYTHONWARNINGS=error or -W
# error cannot stop the master from forking, and anyone else's fork still warns.
warnings.filterwarnings(
    "ignore",
    message=r"This process \(pid=\d+\) is multi-threaded, use of fork\(\) may lead to deadlocks",
    category=DeprecationWarning,
    module=re.escape(__name__),
)


@dataclass(frozen=True)
class Forked:
    pid: int
    identity: str
    ready_fd: int  # read end: the child writes one byte once it is up (pipes.py)
    requests_fd: int  # write end: the master's requests to the child (pipes.py)
    slots: StartedSlots  # which jobs the child's threads run (slots.py)

    def child(self, index: int, now: float, quiet: bool = False) -> Child:
        """Its row in the master's table, forked at ``now`` (monotonic), quiet
        if the pool was."""
        return Child(
            index,
            self.pid,
            self.identity,
            now,
            self.ready_fd,
            self.requests_fd,
            self.slots,
            started_quiet=quiet,
        )


def fork_child(
    config: Config,
    index: int,
    close_in_child: Iterable[int] = (),
    metrics: socket.socket | None = None,
    quiet: bool = False,
) -> Forked:
    """Fork a child that runs one worker process; returns its pid, identity, ready pipe.

    ``metrics`` is the socket the child reports its job counts on (see
    jobmaster.metrics), when the master serves them. ``quiet``: the pool is
    quiet, so the child starts quiet (it fetches nothing until CONT).
    """
    nonce = secrets.token_hex(4)
    master_pid = os.getpid()
    read_fd, write_fd = os.pipe()
    requests_read, requests_write = os.pipe()
    # A slot per job thread, then one per async job of its event loop (used
    # only by an app with async jobs: the master may not have imported it).
    slots = StartedSlots(config.concurrency + config.async_concurrency)
    # Objects the master made (the preloaded app) move to a generation the
    # garbage collector never scans: else a collection in a child writes to
    # each of them and copies their pages, undoing what preload shares. The
    # garbage of the moment goes first: frozen, it would be kept in every
    # child for good.
    gc.collect()
    gc.freeze()
    with blocked(MASTER_SIGNALS) as previous:
        try:
            # The master's Redis thread logs too: no line half written at fork.
            with handlers_held():
                pid = os.fork()
        except OSError:
            for fd in (read_fd, write_fd, requests_read, requests_write):
                os.close(fd)
            slots.close()
            raise
        if pid == 0:  # the child: never returns (nor leaves this block)
            os.close(read_fd)
            os.close(requests_write)
            for fd in close_in_child:
                _close_quietly(fd)
            pipes = (write_fd, requests_read)
            _child_main(config, index, nonce, master_pid, pipes, previous, slots, metrics, quiet)
    os.close(write_fd)
    os.close(requests_read)
    os.set_blocking(read_fd, False)
    os.set_blocking(requests_write, False)  # a request never blocks the master's loop
    with contextlib.suppress(OSError):  # the child does it too: whichever runs first
        os.setpgid(pid, pid)
    identity = Identity(pid=pid, nonce=nonce, master_pid=master_pid, index=index)
    return Forked(
        pid=pid,
        identity=str(identity),
        ready_fd=read_fd,
        requests_fd=requests_write,
        slots=slots,
    )


def _child_main(
    config: Config,
    index: int,
    nonce: str,
    master_pid: int,
    pipes: tuple[int, int],
    mask: set[int | signal.Signals],
    slots: StartedSlots,
    metrics: socket.socket | None = None,
    quiet: bool = False,
) -> None:
    code = exitcodes.RUNTIME_FAILURE
    try:
        os.setpgid(0, 0)
        signals = take_signals(mask)
        random.seed()  # else every child draws the same queue orders and jitter
        set_process_fields(child=index)
        set_title(child_title(index, 0, config.concurrency, config.queue_names, "starting"))
        if not config.preload:
            load_app(config)

        identity = Identity(nonce=nonce, master_pid=master_pid, index=index)
        code = serve(
            config,
            signals,
            identity,
            master_pid=master_pid,
            ready_fd=pipes[0],
            metrics=metrics,
            quiet=quiet,
            slots=slots,
            requests_fd=pipes[1],
        )
    except AppImportError as error:
        log.error("%s", error)
        code = exitcodes.APP_LOAD_FAILED
    except BaseException:
        log.exception("child %d failed", index)
        code = exitcodes.RUNTIME_FAILURE
    finally:
        # os._exit: no atexit handlers, no finalizers that belong to the master
        # (its embedded Redis, its connections).
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):  # nothing left to report to
                stream.flush()
        os._exit(code)


def take_signals(mask: set[int | signal.Signals]) -> SignalQueue:
    """In a child just forked (the master's signals blocked): the child's own
    handlers in place of the master's, then ``mask`` back; a signal the master
    sent meanwhile was pending, and reaches the child's queue now.

    Installed over the master's handlers, never reset to SIG_DFL first: a
    SIG_DFL over a pending SIGCONT (whose default is to do nothing to a
    running process) discards it (POSIX; Linux does), blocked or not. A child
    forked while the pool was quiet lost the CONT sent before its handlers
    were in, and stayed quiet for good. Only what a child does not catch
    (SIGCHLD: job code's) goes back to its default.
    """
    signals = SignalQueue(CHILD_SIGNALS)
    signals.install()
    reset_in_child(MASTER_SIGNALS - CHILD_SIGNALS)
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    return signals


def _close_quietly(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)


def warn_about_threads() -> None:
    """Say so when the preloaded app started threads: a fork copies only the
    thread that forks, so a child has none of them (a metrics exporter, a
    pool's reaper, an SDK's sender silently do nothing there), and a lock one
    of them held at fork stays held in the child for good."""
    others = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
    if others:
        log.warning(
            "the app started %d thread(s) before fork (%s): children do not have them; "
            "start them after fork instead (or set preload = false)",
            len(others),
            ", ".join(sorted(others)),
        )
