"""The master's table of children: who is alive, in which state, since when.

A child's life, and the only transitions between its states (named methods
of ``Child``, so no other module writes a state or a field of one by hand):

    STARTING --ready--> RUNNING <--quiet/resume--> QUIET
    RUNNING, QUIET --retire (HUP)--> RETIRING (stopped once a replacement is ready)
    STARTING, RUNNING, QUIET, RETIRING --recycle--> RECYCLING
        (max_jobs_per_child, a stuck job, over memory, the container guard:
        replaced at once, it finishes its jobs within its grace, then goes)
    RECYCLING --no_room--> RECYCLING (over memory, no room left: goes now)
    any but STOPPING --stop (TERM)--> STOPPING (asked to go: its exit is
        expected, no crash; a recycling child keeps the lesser of its two deadlines)
    any --killed (its deadline passed, or the memory kill)--> STOPPING, no deadline

What each signal of the master means to each state, in one place (the
master's handlers apply these and nothing else):

- TERM/INT: ``stop``: every state but STOPPING is asked to go, a recycling
  one included: on a platform only PID 1 gets the TERM, and the platform's
  KILL comes after shutdown_timeout, not after the recycle's grace.
- TSTP/CONT: ``set_quiet``, and the signal is forwarded only to children
  that are ``steered`` (a recycling or stopping child never fetches again,
  whatever it is sent).
- HUP: ``retire`` running and quiet children (starting ones are new
  already; leaving ones are being replaced).
- the memory guard: ``recycle`` serving ones; ``no_room`` recycled ones;
  ``killed_over_memory`` any live one.

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
    STOPPING = "stopping"  # asked to go (TERM), or killed
    RETIRING = "retiring"  # HUP: stops once a replacement is ready
    RECYCLING = "recycling"  # replaced already: finishes its jobs, then goes

    def __str__(self) -> str:
        return self.value


STARTING, RUNNING, QUIET, STOPPING, RETIRING, RECYCLING = ChildState
MEMORY_RECYCLE_EVENT = "was recycled over its memory limit"
MEMORY_KILL_EVENT = "was killed over the container's memory limit"


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
    memory_cause: str | None = None  # set when recycled or killed over memory
    # What it did, for a job's dead_reason if it dies of it: "the worker
    # process <event> while running this job".
    memory_event: str = MEMORY_RECYCLE_EVENT
    # Why it is being replaced (hup, memory, max_jobs, timeout): the reason
    # label of jobmaster_child_restarts_total once it is gone. Empty: a stop.
    restart_reason: str = ""
    pushing_back: bool = False  # told there is no room to finish its jobs
    started_quiet: bool = False  # forked while the pool was quiet: it starts quiet

    @property
    def expected_exit(self) -> bool:
        """True if the master asked this child to go: its death is not a crash."""
        return self.state in (RECYCLING, STOPPING)

    @property
    def serving(self) -> bool:
        """Fetching, or about to: not asked to leave."""
        return self.state in (STARTING, RUNNING, QUIET)

    @property
    def steered(self) -> bool:
        """Takes the pool's quiet and resume (TSTP, CONT): not on its way out
        for good. A retiring child serves until its replacement is ready."""
        return self.state in (STARTING, RUNNING, QUIET, RETIRING)

    @property
    def killed_by_memory(self) -> bool:
        """SIGKILLed by the container's last line: replaced with the crash
        backoff, so that memory kills never loop."""
        return self.memory_event == MEMORY_KILL_EVENT

    @property
    def recycled_over_memory(self) -> bool:
        """Recycled (not yet asked to stop) over memory: ``no_room`` applies."""
        return self.state == RECYCLING and self.memory_cause is not None

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

    def retire(self, reason: str, restart: str) -> bool:
        """HUP: stopped once a new child is ready (Stopper.retire_excess)."""
        if self.state not in (RUNNING, QUIET):
            return False
        self.state = RETIRING
        self.stop_reason = reason
        self.restart_reason = restart
        return True

    def recycle(
        self, reason: str, restart: str, deadline: float, memory_cause: str | None = None
    ) -> bool:
        """Replaced at once; it finishes its jobs and goes, SIGKILLed once
        ``deadline`` (monotonic) passes. ``memory_cause``: the limit it is
        over, when the jobs it still runs at the end are to blame. False if
        it is leaving already (a recycle never extends a stop)."""
        if self.state not in (STARTING, RUNNING, QUIET, RETIRING):
            return False
        self.state = RECYCLING
        self.stop_reason = reason
        self.restart_reason = restart
        self.stop_deadline = deadline
        self.memory_cause = memory_cause
        return True

    def no_room(self, deadline: float) -> bool:
        """Recycled over memory with no room left to finish its jobs: it pushes
        them back now, and is killed at ``deadline`` if not gone. Once."""
        if not self.recycled_over_memory or self.pushing_back:
            return False
        self.pushing_back = True
        self.hurry(deadline)
        return True

    def stop(self, reason: str, deadline: float) -> bool:
        """Asked to go (TERM): its exit is no crash; SIGKILL once ``deadline``
        (monotonic) passes. A recycling child keeps the lesser of its
        recycle's deadline and this one. False if it was stopping already:
        a second TERM never shortens (nor lengthens) its time."""
        if self.state == STOPPING:
            return False
        if self.state != RECYCLING:
            self.stop_reason = reason
            self.stop_deadline = deadline
        else:
            self.hurry(deadline)
        self.state = STOPPING
        return True

    def killed(self) -> None:
        """SIGKILLed by the master (its deadline passed): no second SIGKILL."""
        self.state = STOPPING
        self.stop_deadline = None

    def killed_over_memory(self, cause: str) -> bool:
        """The container's last line: SIGKILLed now; the jobs it was running
        are blamed as for a crash (``cause`` says why). False if killed already."""
        if self.state == STOPPING and self.stop_deadline is None:
            return False
        self.memory_cause = cause
        self.memory_event = MEMORY_KILL_EVENT
        self.restart_reason = "memory"
        self.stop_reason = "memory kill"
        self.killed()
        return True

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

    def overdue(self, now: float) -> bool:
        """Leaving, and past its deadline: to be SIGKILLed (``killed``)."""
        return self.stop_deadline is not None and now > self.stop_deadline


@dataclass
class ChildTable:
    wanted: int = 1  # children the pool should have (processes, then TTIN/TTOU)
    by_pid: dict[int, Child] = field(default_factory=dict)

    def add(self, child: Child) -> None:
        self.by_pid[child.pid] = child

    def pop(self, pid: int) -> Child | None:
        return self.by_pid.pop(pid, None)

    def get(self, pid: int) -> Child | None:
        return self.by_pid.get(pid)

    def pids(self) -> set[int]:
        return set(self.by_pid)

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
