"""Lifecycle hooks (jobmaster/lifecycle.py): registration, order, what a failure does."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

import jobmaster
from jobmaster import exitcodes, lifecycle
from jobmaster.supervisor import exits


@pytest.fixture(autouse=True)
def _no_hooks_left_behind() -> Iterator[None]:
    """Each test registers its own hooks; the process's own are put back after."""
    saved = {kind: list(hooks) for kind, hooks in lifecycle._HOOKS.items()}
    for hooks in lifecycle._HOOKS.values():
        hooks.clear()
    yield
    for kind, hooks in saved.items():
        lifecycle._HOOKS[kind][:] = hooks


def test_hooks_of_a_kind_run_in_registration_order_and_twice_registered_once() -> None:
    calls: list[str] = []

    @jobmaster.on_child_start
    def first() -> None:
        calls.append("first")

    @jobmaster.on_child_start
    def second() -> None:
        calls.append("second")

    jobmaster.on_child_start(first)  # a module imported twice
    lifecycle.run_child_start()
    assert calls == ["first", "second"]
    assert first() is None  # the decorator returns the function itself


def test_kinds_are_kept_apart() -> None:
    calls: list[str] = []
    jobmaster.on_master_start(lambda: calls.append("master"))
    jobmaster.on_child_start(lambda: calls.append("child start"))
    jobmaster.on_child_stop(lambda: calls.append("child stop"))
    lifecycle.run_master_start()
    assert calls == ["master"]
    lifecycle.run_child_stop()
    assert calls == ["master", "child stop"]


def test_a_child_start_hook_that_raises_stops_the_start_with_its_traceback_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls: list[str] = []

    @jobmaster.on_child_start
    def broken() -> None:
        raise ConnectionError("database is restarting")

    jobmaster.on_child_start(lambda: calls.append("after"))
    with (
        caplog.at_level(logging.ERROR, logger="jobmaster.lifecycle"),
        pytest.raises(lifecycle.HookFailed, match="database is restarting") as failed,
    ):
        lifecycle.run_child_start()
    assert calls == []  # a half set-up child runs nothing more
    assert "broken" in str(failed.value)
    [record] = caplog.records
    assert "on_child_start hook" in record.getMessage() and "broken" in record.getMessage()
    assert record.exc_info is not None  # the traceback


def test_a_master_start_hook_that_raises_is_a_runtime_failure_not_an_import_failure() -> None:
    """Not an AppImportError: in a child that one halts the master for good."""
    from jobmaster.app import AppImportError

    jobmaster.on_master_start(lambda: 1 / 0)
    with pytest.raises(lifecycle.HookFailed) as failed:
        lifecycle.run_master_start()
    assert not isinstance(failed.value, AppImportError)
    assert isinstance(failed.value, jobmaster.JobmasterError)


def test_child_stop_hooks_all_run_even_after_one_raised(caplog: pytest.LogCaptureFixture) -> None:
    calls: list[str] = []
    jobmaster.on_child_stop(lambda: calls.append("one"))

    @jobmaster.on_child_stop
    def broken() -> None:
        raise RuntimeError("flush failed")

    jobmaster.on_child_stop(lambda: calls.append("three"))
    with caplog.at_level(logging.ERROR, logger="jobmaster.lifecycle"):
        assert lifecycle.run_child_stop() == 1
    assert calls == ["one", "three"]
    assert "flush failed" in caplog.text


def test_only_functions_can_be_hooks() -> None:
    with pytest.raises(TypeError, match="on_child_start"):
        jobmaster.on_child_start("reconnect")  # type: ignore[arg-type]


def test_the_start_hook_exit_code_reads_as_what_it_is() -> None:
    status = exitcodes.CHILD_START_FAILED << 8  # a wait status: exited with that code
    assert exits.describe(status) == (
        f"exit code {exitcodes.CHILD_START_FAILED} (an on_child_start hook failed)"
    )
    assert exitcodes.CHILD_START_FAILED not in (
        exitcodes.OK,
        exitcodes.RUNTIME_FAILURE,
        exitcodes.USAGE,
        exitcodes.APP_LOAD_FAILED,
        exitcodes.REMOTE_STOP,
    )
