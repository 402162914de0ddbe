"""Asking children to go, and making sure they do: the verbs the master's
loop and its memory policy share.

Every way out ends in STOPPING with a deadline (``Child.stop``): a child
asked to go (TERM) or recycled (it finishes its jobs within memory_grace)
gets ``shutdown_timeout`` and STOP_MARGIN more, then SIGKILL
(``overdue``), so a stop is bounded whatever the child or Redis does
(SPEC §8). A child that is not reached (already dead) is left to the
reaper. Master-to-child requests other than signals go through the
child's pipe (pipes.py): a platform may send any signal to every process.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time

from jobmaster.config import Config
from jobmaster.pipes import MASTER_STOP, PUSH_BACK, send_request
from jobmaster.supervisor.children import QUIET, RETIRING, RUNNING, STOPPING, Child, ChildTable

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

    def expect(self, child: Child, reason: str, grace: float = 0.0) -> None:
        """The child is on its way out: its exit is no crash, and it gets SIGKILL
        once ``grace + shutdown_timeout`` and a margin have passed."""
        timeout = grace + self.config.shutdown_timeout + STOP_MARGIN
        child.stop(reason, time.monotonic() + timeout)

    def stop(self, child: Child, reason: str) -> None:
        """Ask a child to go (TERM); SIGKILL once ``shutdown_timeout`` and a margin
        have passed. Once: a second TERM never shortens its time."""
        if child.state == STOPPING:
            return
        self.expect(child, reason)
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
        """SIGKILL every stopping child past its deadline, once."""
        now = time.monotonic()
        for child in self.children.in_state(STOPPING):
            if child.stop_deadline is not None and now > child.stop_deadline:
                log.warning(
                    "child %d (pid %d) did not stop in time: SIGKILL", child.index, child.pid
                )
                child.stop_deadline = None
                self.kill(child, signal.SIGKILL)

    def recycle(self, child: Child, reason: str, kind: str) -> None:
        """Replace a child without blame (max_jobs_per_child, a job stuck past its
        timeout): its replacement is forked in this loop pass (it no longer
        counts as serving). It has quieted itself already and stops once idle
        (or after memory_grace); TERM only if it outlives that. ``kind``
        labels the restart in the metrics. Over memory: memory_policy.py."""
        if not child.serving:
            return
        child.restart_reason = kind
        log.warning(
            "child %d (pid %d) %s: recycling it (replacement first)", child.index, child.pid, reason
        )
        self.expect(child, reason, self.config.memory_grace)

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
        """No room for a recycled child to finish its jobs: it pushes them back now,
        and is killed STOP_MARGIN from now if it has not gone. False: its pipe
        is gone (it is leaving anyway)."""
        if not send_request(child.requests_fd, PUSH_BACK, usage):
            return False
        child.hurry(time.monotonic() + STOP_MARGIN)
        return True
