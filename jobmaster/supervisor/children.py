"""The master's table of children: who is alive, in which state, since when.

States: ``starting`` (forked, not yet ready), ``running``, ``quiet``,
``stopping`` (asked to stop; its exit is expected), and, for HUP,
``retiring`` (to be stopped once a replacement is ready).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from jobmaster.slots import StartedSlots

STARTING, RUNNING, QUIET, STOPPING, RETIRING = (
    "starting",
    "running",
    "quiet",
    "stopping",
    "retiring",
)


@dataclass
class Child:
    index: int
    pid: int
    identity: str
    started_at: float  # monotonic
    ready_fd: int | None = None
    requests_fd: int | None = None  # the master's requests to it (pipes.py)
    slots: StartedSlots | None = None  # the jobs its threads run (slots.py)
    state: str = STARTING
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


@dataclass
class ChildTable:
    by_pid: dict[int, Child] = field(default_factory=dict)

    def add(self, child: Child) -> None:
        self.by_pid[child.pid] = child

    def pop(self, pid: int) -> Child | None:
        return self.by_pid.pop(pid, None)

    def __iter__(self) -> Iterator[Child]:
        return iter(list(self.by_pid.values()))

    def __len__(self) -> int:
        return len(self.by_pid)

    def in_state(self, *states: str) -> list[Child]:
        return [child for child in self if child.state in states]

    def serving(self) -> list[Child]:
        """Children that are (or will be) fetching: not asked to leave."""
        return self.in_state(STARTING, RUNNING, QUIET)

    def indexes(self) -> set[int]:
        return {child.index for child in self.serving()}

    def by_ready_fd(self, fd: int) -> Child | None:
        return next((child for child in self if child.ready_fd == fd), None)
