"""Asking children to go, and making sure they do: the verbs the master's
loop and its memory policy share.

Every way out has a deadline (children.py's transitions): a child asked
to go (TERM, STOPPING) gets ``shutdown_timeout`` and STOP_MARGIN, one
recycled (RECYCLING: it finishes its jobs within memory_grace) that much
more, then SIGKILL (``overdue``), so a stop is bounded whatever the child
or Redis does (SPEC §8). A TERM reaches a recycling child too, and its
deadline becomes the lesser of the two (SPEC §7). A child that is not
reached (already dead) is left to the reaper. Master-to-child requests
other than signals go through the child's pipe (pipes.py): a platform may
send any signal to every process.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time

from jobmaster.config import Config
from jobmaster.pipes import MASTER_STOP, PUSH_BACK, send_request
from jobmaster.supervisor.children import (
    QUIET,
    RECYCLING,
    RETIRING,
    RUNNING,
    STOPPING,
    Child,
    ChildTable,
)

log = logging.getLogger("jobmaster.supervisor.stopping")

STOP_MARGIN = 5.0  # seconds a stopping child gets beyond shutdown_timeout to push back


class Stopper:
    def __init__(self, config: Config, children: ChildTable) -> None:
        self.config = config
        self.children = children

    def kill(self, child: Child, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):  # already dead: the reaper sees it
            os.kill(child.pid, signum)

    def forward(self, signum: int) -> None:
        for child in self.children:
            self.kill(child, signum)

    def steer(self, quiet: bool) -> None:
        """The pool's quiet (TSTP) or resume (CONT), to the children it steers:
        never to a recycling or stopping child, which must not fetch again."""
        for child in self.children:
            if child.steered:
                self.kill(child, signal.SIGTSTP if quiet else signal.SIGCONT)
            child.set_quiet(quiet)

    def stop(self, child: Child, reason: str) -> None:
        """Ask a child to go (TERM); SIGKILL once ``shutdown_timeout`` and a margin
        have passed (for a recycling child: that, or its recycle's deadline if
        sooner). Once: a second TERM never shortens its time."""
        deadline = time.monotonic() + self.config.shutdown_timeout + STOP_MARGIN
        if child.stop(reason, deadline):
            send_request(child.requests_fd, MASTER_STOP, reason)  # before the TERM it explains
            self.kill(child, signal.SIGTERM)

    def stop_all(self, reason: str) -> None:
        for child in self.children:
            self.stop(child, reason)

    def stop_now(self, reason: str) -> None:
        """QUIT, a second INT: every child pushes its jobs back now."""
        log.warning("%s: stopping children at once (running jobs are pushed back)", reason)
        deadline = time.monotonic() + STOP_MARGIN
        for child in self.children:
            child.hurry(deadline)
            self.kill(child, signal.SIGQUIT)

    def overdue(self) -> None:
        """SIGKILL every leaving child past its deadline, once."""
        now = time.monotonic()
        for child in self.children.in_state(RECYCLING, STOPPING):
            if child.overdue(now):
                log.warning(
                    "child %d (pid %d) did not stop in time: SIGKILL", child.index, child.pid
                )
                child.killed()
                self.kill(child, signal.SIGKILL)

    def recycle(
        self,
        child: Child,
        reason: str,
        kind: str,
        memory_cause: str | None = None,
        note: str = "replacement first",
    ) -> bool:
        """Replace a child (max_jobs_per_child, a job stuck past its timeout, over
        memory): its replacement is forked in this loop pass (it no longer
        counts as serving). It finishes its jobs within memory_grace, then
        stops; SIGKILL only if it outlives that, shutdown_timeout and a
        margin. ``kind`` labels the restart in the metrics; ``memory_cause``:
        the memory limit it is over (memory_policy.py); ``note``: when its
        replacement comes, for the log. False if it was leaving already."""
        grace = self.config.memory_grace + self.config.shutdown_timeout + STOP_MARGIN
        if not child.recycle(reason, kind, time.monotonic() + grace, memory_cause):
            return False
        log.warning("child %d (pid %d) %s: recycling it (%s)", child.index, child.pid, reason, note)
        return True

    def retire_excess(self, wanted: int) -> None:
        """Stop retiring children while ready ones plus retiring ones exceed ``wanted``.

        One rule for HUP, repeated HUPs and TTOU during a rolling restart:
        capacity never drops below ``wanted`` and no old child is left behind.
        """
        retiring = sorted(self.children.in_state(RETIRING), key=lambda c: c.index)
        ready = len(self.children.in_state(RUNNING, QUIET))
        excess = ready + len(retiring) - wanted
        for child in retiring[: max(0, excess)]:
            self.stop(child, child.stop_reason)

    def push_back_now(self, child: Child, usage: str) -> bool:
        """No room for a child recycled over memory to finish its jobs: it pushes
        them back now, and is killed STOP_MARGIN from now if it has not gone.
        Once; False if not told (told already, or its pipe is gone)."""
        if not child.recycled_over_memory or child.pushing_back:
            return False
        if not send_request(child.requests_fd, PUSH_BACK, usage):
            return False
        return child.no_room(time.monotonic() + STOP_MARGIN)

    def kill_over_memory(self, child: Child, cause: str) -> bool:
        """The container's last line: SIGKILL now (its jobs are requeued when it
        is reaped, blamed by ``cause``). False if it was killed already."""
        if not child.killed_over_memory(cause):
            return False
        self.kill(child, signal.SIGKILL)
        return True
