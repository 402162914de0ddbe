"""The master's table of children: who is alive, in which state, since when.

A child's life, and the only transitions between its states (named methods
of ``Child``, so no other module writes a state by hand):

    STARTING --ready--> RUNNING <--quiet/resume--> QUIET
    RUNNING, QUIET --retire (HUP)--> RETIRING (stopped once a replacement is ready)
    any --stop--> STOPPING (asked to go: its exit is expected, no crash)

A slot waiting out its crash-loop backoff has no child at all (backoff.py's
``Respawns``), nor has one whose replacement the memory policy holds back.
"""

from __future__ import annotations

import contextlib
import enum
import os
from collections.abc import Iterator
from dataclasses import dataclass, field

from jobmaster.slots import StartedSlots


class ChildState(str, enum.Enum):
    """A string too: the metrics label a state by its value."""

    STARTING = "starting"  # forked, not yet ready
    RUNNING = "running"
    QUIET = "quiet"  # fetching nothing until resumed
    STOPPING = "stopping"
    RETIRING = "retiring"  # HUP: stops once a replacement is ready

    def __str__(self) -> str:
        return self.value


STARTING, RUNNING, QUIET, STOPPING, RETIRING = ChildState


@dataclass
class Child:
    index: int
    pid: int
    identity: str
    started_at: float  # monotonic
    ready_fd: int | None = None
    requests_fd: int | None = None  # the master's requests to it (pipes.py)
    slots: StartedSlots | None = None  # the jobs its threads run (slots.py)
    state: ChildState = STARTING
    stop_deadline: float | None = None  # monotonic: SIGKILL after this
    stop_reason: str = ""
    ready_at: float | None = None  # monotonic, once it reported ready
    memory_cause: str | None = None  # set when recycled over its memory limit
    # What it did, for a job's dead_reason if it dies of it: "the worker
    # process <event> while running this job".
    memory_event: str = "was recycled over its memory limit"
    # Why it is being replaced (hup, memory, max_jobs, timeout): the reason
    # label of jobmaster_child_restarts_total once it is gone. Empty: a stop.
    restart_reason: str = ""

    @property
    def expected_exit(self) -> bool:
        """True if the master asked this child to go: its death is not a crash."""
        return self.state == STOPPING

    @property
    def serving(self) -> bool:
        """Fetching, or about to: not asked to leave."""
        return self.state in (STARTING, RUNNING, QUIET)

    def ready(self, now: float, quiet: bool) -> bool:
        """It reported ready: serving (quiet if the pool is). False if it was
        not starting (a second ready byte, or one from a child already leaving)."""
        if self.state != STARTING:
            return False
        self.ready_at = now
        self.state = QUIET if quiet else RUNNING
        return True

    def set_quiet(self, quiet: bool) -> None:
        if self.state in (RUNNING, QUIET):
            self.state = QUIET if quiet else RUNNING

    def retire(self, reason: str, restart: str) -> None:
        """HUP: stopped once a new child is ready (Stopper.retire_excess)."""
        self.state = RETIRING
        self.stop_reason = reason
        self.restart_reason = restart

    def stop(self, reason: str, deadline: float) -> None:
        """Asked to go: its exit is no crash; SIGKILL once ``deadline`` (monotonic) passes."""
        self.state = STOPPING
        self.stop_reason = reason
        self.stop_deadline = deadline

    def read_pipe(self) -> bytes:
        """What it wrote on its pipe (pipes.py); b"" once it has closed it."""
        if self.ready_fd is None:
            return b""
        try:
            data = os.read(self.ready_fd, 64)
        except BlockingIOError:
            return b""
        if not data:  # end of file: it is exiting
            os.close(self.ready_fd)
            self.ready_fd = None
        return data

    def close(self) -> None:
        """Once it is reaped: the master's ends of its pipes, and its slots."""
        for fd in (self.ready_fd, self.requests_fd):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.ready_fd = self.requests_fd = None
        if self.slots is not None:
            self.slots.close()
            self.slots = None

    def hurry(self, deadline: float) -> None:
        """Bring its SIGKILL forward to ``deadline``, never back."""
        self.stop_deadline = min(self.stop_deadline or deadline, deadline)


@dataclass
class ChildTable:
    wanted: int = 1  # children the pool should have (processes, then TTIN/TTOU)
    by_pid: dict[int, Child] = field(default_factory=dict)

    def add(self, child: Child) -> None:
        self.by_pid[child.pid] = child

    def pop(self, pid: int) -> Child | None:
        return self.by_pid.pop(pid, None)

    def __iter__(self) -> Iterator[Child]:
        return iter(list(self.by_pid.values()))

    def __len__(self) -> int:
        return len(self.by_pid)

    def in_state(self, *states: ChildState) -> list[Child]:
        return [child for child in self if child.state in states]

    def serving(self) -> list[Child]:
        """Children that are (or will be) fetching: not asked to leave."""
        return [child for child in self if child.serving]

    def ready(self) -> int:
        """How many are up and serving (running or quiet)."""
        return len(self.in_state(RUNNING, QUIET))

    def indexes(self) -> set[int]:
        return {child.index for child in self.serving()}

    def by_ready_fd(self, fd: int) -> Child | None:
        return next((child for child in self if child.ready_fd == fd), None)
