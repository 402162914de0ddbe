"""The master's table of children."""

from __future__ import annotations

import os
import signal
import time

import pytest

from jobmaster.config import Config
from jobmaster.pipes import RequestReader
from jobmaster.supervisor import stopping
from jobmaster.supervisor.children import (
    QUIET,
    RECYCLING,
    RETIRING,
    RUNNING,
    STARTING,
    STOPPING,
    Child,
    ChildState,
    ChildTable,
)
from jobmaster.supervisor.stopping import STOP_MARGIN, Stopper

ALL_STATES = (STARTING, RUNNING, QUIET, STOPPING, RETIRING, RECYCLING)


def child(index: int, state: ChildState = STARTING, ready_fd: int | None = None) -> Child:
    return Child(
        index=index,
        pid=1000 + index,
        identity=f"h:{1000 + index}:n",
        started_at=0.0,
        ready_fd=ready_fd,
        state=state,
    )


def test_a_new_child_is_starting_with_no_stop_deadline() -> None:
    new = Child(index=1, pid=42, identity="h:42:n", started_at=5.0)
    assert new.state == STARTING
    assert new.ready_fd is None
    assert new.stop_deadline is None
    assert new.stop_reason == ""


def test_add_pop_len_iter() -> None:
    table = ChildTable()
    assert len(table) == 0
    assert not table
    one, two = child(1), child(2)
    table.add(one)
    table.add(two)
    assert len(table) == 2
    assert list(table) == [one, two]
    assert table.pop(one.pid) is one
    assert len(table) == 1
    assert list(table) == [two]
    assert table.pop(one.pid) is None  # popping twice (reaped already) is harmless
    assert table.pop(999_999) is None  # not ours: the master may reap strangers as PID 1


def test_adding_the_same_pid_replaces_the_entry() -> None:
    table = ChildTable()
    table.add(child(1))
    again = child(1, RUNNING)
    table.add(again)
    assert list(table) == [again]


def test_removing_while_iterating_is_safe() -> None:
    table = ChildTable()
    children = [child(i) for i in range(1, 5)]
    for each in children:
        table.add(each)
    seen = []
    for each in table:  # a snapshot: popping during the loop raises nothing
        seen.append(each)
        table.pop(each.pid)
    assert seen == children
    assert len(table) == 0


def test_adding_while_iterating_is_safe_and_not_seen() -> None:
    table = ChildTable()
    table.add(child(1))
    seen = []
    for each in table:
        seen.append(each)
        table.add(child(2))
    assert seen == [table.by_pid[1001]]
    assert len(table) == 2


def test_in_state() -> None:
    table = ChildTable()
    by_state = {state: child(i, state) for i, state in enumerate(ALL_STATES, start=1)}
    for each in by_state.values():
        table.add(each)
    for state, each in by_state.items():
        assert table.in_state(state) == [each]
    assert table.in_state(RUNNING, QUIET) == [by_state[RUNNING], by_state[QUIET]]
    assert table.in_state() == []


def test_serving_excludes_stopping_and_retiring() -> None:
    table = ChildTable()
    for i, state in enumerate(ALL_STATES, start=1):
        table.add(child(i, state))
    assert sorted(c.state for c in table.serving()) == sorted([STARTING, RUNNING, QUIET])


def test_indexes_are_those_of_serving_children_only() -> None:
    table = ChildTable()
    for i, state in enumerate(ALL_STATES, start=1):
        table.add(child(i, state))
    assert table.indexes() == {1, 2, 3}  # 4 is stopping, 5 retiring: their slots are free


def test_by_ready_fd() -> None:
    table = ChildTable()
    one, two, three = child(1, ready_fd=7), child(2, ready_fd=9), child(3)
    for each in (one, two, three):
        table.add(each)
    assert table.by_ready_fd(7) is one
    assert table.by_ready_fd(9) is two
    assert table.by_ready_fd(8) is None
    two.ready_fd = None  # closed once read
    assert table.by_ready_fd(9) is None


@pytest.mark.parametrize("state", ALL_STATES)
def test_expected_exit_only_for_recycling_and_stopping(state: str) -> None:
    assert child(1, state).expected_exit is (state in (RECYCLING, STOPPING))


def test_a_child_changes_state_only_through_its_named_transitions() -> None:
    one = child(1)
    assert one.ready(5.0, quiet=False)
    assert (one.state, one.ready_at) == (RUNNING, 5.0)
    assert not one.ready(6.0, quiet=True)  # a second ready byte changes nothing
    assert (one.state, one.ready_at) == (RUNNING, 5.0)
    one.set_quiet(True)
    assert one.state == QUIET
    one.retire("replaced (HUP)", restart="hup")
    assert (one.state, one.stop_reason, one.restart_reason) == (RETIRING, "replaced (HUP)", "hup")
    one.set_quiet(False)  # a retiring child is not resumed into serving
    assert one.state == RETIRING and not one.serving
    one.stop("pool shrunk (TTOU)", deadline=20.0)
    assert one.state == STOPPING and one.expected_exit and one.stop_deadline == 20.0
    one.hurry(10.0)
    one.hurry(15.0)  # brought forward, never back
    assert one.stop_deadline == 10.0


def test_a_child_that_starts_while_the_pool_is_quiet_is_quiet() -> None:
    one = child(1)
    assert one.ready(1.0, quiet=True)
    assert one.state == QUIET and one.serving


def test_states_are_labelled_by_their_value() -> None:
    """The metrics label each state by its string (jobmaster_children{state=...})."""
    assert [str(state) for state in ChildState] == [
        "starting",
        "running",
        "quiet",
        "stopping",
        "retiring",
        "recycling",
    ]


# -- every signal x every state (SPEC §7) ----------------------------------------
# What the master does to a child in each state, for each of its events: the
# state it ends in, and the signal it is sent (None: none). HUP is the
# master's retire; "recycle" a recycle (max_jobs_per_child, a stuck job, the
# memory policy); "no room" and "memory kill" the container guard's.
EVENTS = ("TERM", "TSTP", "CONT", "HUP", "recycle", "no room", "memory kill", "overdue")
TERM, TSTP, CONT, KILL = signal.SIGTERM, signal.SIGTSTP, signal.SIGCONT, signal.SIGKILL
MATRIX: dict[ChildState, dict[str, tuple[ChildState, int | None]]] = {
    STARTING: {
        "TERM": (STOPPING, TERM),
        "TSTP": (STARTING, TSTP),  # it starts quiet once ready: the pool is
        "CONT": (STARTING, CONT),
        "HUP": (STARTING, None),  # new already
        "recycle": (RECYCLING, None),
        "no room": (STARTING, None),
        "memory kill": (STOPPING, KILL),
        "overdue": (STARTING, None),
    },
    RUNNING: {
        "TERM": (STOPPING, TERM),
        "TSTP": (QUIET, TSTP),
        "CONT": (RUNNING, CONT),
        "HUP": (RETIRING, None),
        "recycle": (RECYCLING, None),
        "no room": (RUNNING, None),
        "memory kill": (STOPPING, KILL),
        "overdue": (RUNNING, None),
    },
    QUIET: {
        "TERM": (STOPPING, TERM),
        "TSTP": (QUIET, TSTP),
        "CONT": (RUNNING, CONT),
        "HUP": (RETIRING, None),
        "recycle": (RECYCLING, None),
        "no room": (QUIET, None),
        "memory kill": (STOPPING, KILL),
        "overdue": (QUIET, None),
    },
    RETIRING: {  # serves until its replacement is ready
        "TERM": (STOPPING, TERM),
        "TSTP": (RETIRING, TSTP),
        "CONT": (RETIRING, CONT),
        "HUP": (RETIRING, None),
        "recycle": (RECYCLING, None),
        "no room": (RETIRING, None),
        "memory kill": (STOPPING, KILL),
        "overdue": (RETIRING, None),
    },
    RECYCLING: {  # recycled over memory: replaced already, finishing its jobs
        "TERM": (STOPPING, TERM),  # hole 1: it was skipped, and outlived shutdown_timeout
        "TSTP": (RECYCLING, None),
        "CONT": (RECYCLING, None),  # hole 2: it was resumed, and fetched again
        "HUP": (RECYCLING, None),
        "recycle": (RECYCLING, None),
        "no room": (RECYCLING, None),  # a request on its pipe, not a signal
        "memory kill": (STOPPING, KILL),
        "overdue": (STOPPING, KILL),
    },
    STOPPING: {
        "TERM": (STOPPING, None),  # more TERMs never shorten its time
        "TSTP": (STOPPING, None),
        "CONT": (STOPPING, None),
        "HUP": (STOPPING, None),
        "recycle": (STOPPING, None),
        "no room": (STOPPING, None),
        "memory kill": (STOPPING, KILL),
        "overdue": (STOPPING, KILL),
    },
}


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    signals: list[tuple[int, int]] = []
    monkeypatch.setattr(stopping.os, "kill", lambda pid, signum: signals.append((pid, signum)))
    return signals


def in_state(state: ChildState, stopper: Stopper, requests_fd: int) -> Child:
    """A child brought to ``state`` through the transitions themselves."""
    one = child(1)
    one.requests_fd = requests_fd
    if state != STARTING:
        one.ready(1.0, quiet=state == QUIET)
    if state == RETIRING:
        one.retire("replaced (HUP)", restart="hup")
    elif state == RECYCLING:
        stopper.recycle(one, "uses 300 MB", "memory", "over max_child_mb 200 (uss)")
    elif state == STOPPING:
        stopper.stop(one, "SIGTERM")
    assert one.state == state
    return one


def apply(event: str, one: Child, stopper: Stopper) -> None:
    """The event, as the master applies it (master.py's handlers, memory_policy.py)."""
    if event == "TERM":
        stopper.stop(one, "SIGTERM")
    elif event in ("TSTP", "CONT"):
        stopper.steer(quiet=event == "TSTP")
    elif event == "HUP":
        one.retire("replaced (HUP)", restart="hup")
    elif event == "recycle":
        stopper.recycle(one, "reached max_jobs_per_child (1)", "max_jobs")
    elif event == "no room":
        stopper.push_back_now(one, "590 MB of 600 MB (98%)")
    elif event == "memory kill":
        stopper.kill_over_memory(one, "container memory at 590 of 600 MB")
    elif event == "overdue":
        if one.stop_deadline is not None:
            one.stop_deadline = time.monotonic() - 1.0
        stopper.overdue()


@pytest.mark.parametrize("event", EVENTS)
@pytest.mark.parametrize("state", ALL_STATES)
def test_every_signal_in_every_state(
    state: ChildState, event: str, sent: list[tuple[int, int]]
) -> None:
    """The state machine (SPEC §7), whole: each of the master's events in each
    state ends in one state, with at most one signal."""
    config = Config()
    config.shutdown_timeout, config.memory_grace = 3.0, 30.0
    table = ChildTable()
    stopper = Stopper(config, table)
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    try:
        one = in_state(state, stopper, write_end)
        table.add(one)
        sent.clear()
        RequestReader(read_end).read()
        apply(event, one, stopper)
        expected_state, expected_signal = MATRIX[state][event]
        assert one.state == expected_state
        assert [signum for _, signum in sent] == (
            [expected_signal] if expected_signal is not None else []
        )
        requests = [verb for verb, _ in RequestReader(read_end).read()]
        if (state, event) == (RECYCLING, "no room"):
            assert requests == ["push-back"]
        elif event == "TERM" and expected_signal == TERM:
            assert requests == ["stop"]  # the master's stop, said before the TERM it explains
        else:
            assert requests == []
        # Whatever happened, a leaving child never serves again.
        if state in (RETIRING, RECYCLING, STOPPING):
            assert not one.serving
        if state in (RECYCLING, STOPPING):
            assert not one.steered and one.expected_exit
    finally:
        os.close(read_end)
        os.close(write_end)


def test_a_term_gives_a_recycling_child_the_lesser_of_its_two_deadlines(
    sent: list[tuple[int, int]],
) -> None:
    """Hole 1: 1.5 s into a recycle with memory_grace 30, a TERM leaves it
    shutdown_timeout (3 s) and the margin, not the recycle's 38 s."""
    config = Config()
    config.shutdown_timeout, config.memory_grace = 3.0, 30.0
    stopper = Stopper(config, ChildTable())
    long_grace = child(1, RUNNING)
    stopper.recycle(long_grace, "reached max_jobs_per_child (1)", "max_jobs")
    stopper.stop(long_grace, "SIGTERM")
    assert long_grace.stop_deadline is not None
    assert long_grace.stop_deadline <= time.monotonic() + 3.0 + STOP_MARGIN
    assert sent == [(long_grace.pid, signal.SIGTERM)]
    assert long_grace.restart_reason == "max_jobs"  # it was still replaced for its recycle

    short_grace = child(2, RUNNING)
    stopper.recycle(short_grace, "uses 300 MB", "memory", "over max_child_mb 200 (uss)")
    assert short_grace.stop_deadline is not None
    short_grace.stop_deadline = time.monotonic() + 1.0  # its recycle ends sooner
    stopper.stop(short_grace, "SIGTERM")
    assert short_grace.stop_deadline <= time.monotonic() + 1.0
    assert short_grace.memory_cause == "over max_child_mb 200 (uss)"  # still blamed if killed
