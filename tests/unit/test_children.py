"""The master's table of children."""

from __future__ import annotations

import pytest

from jobmaster.supervisor.children import (
    QUIET,
    RETIRING,
    RUNNING,
    STARTING,
    STOPPING,
    Child,
    ChildState,
    ChildTable,
)

ALL_STATES = (STARTING, RUNNING, QUIET, STOPPING, RETIRING)


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
def test_expected_exit_only_for_stopping(state: str) -> None:
    assert child(1, state).expected_exit is (state == STOPPING)


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
    ]
