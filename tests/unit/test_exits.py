"""Wait statuses turned into words: built by hand, no fork.

A death by signal N has the status N (plus 0x80 when it dumped core); an
exit with code C has the status ``C << 8``. Each test first checks the
status with the ``os.W*`` macros, so the encoding itself is verified.
"""

from __future__ import annotations

import os
import signal

import pytest

from jobmaster import exitcodes
from jobmaster.supervisor import exits

CORE_DUMPED = 0x80


def killed_by(signum: int, *, core: bool = False) -> int:
    status = int(signum) | (CORE_DUMPED if core else 0)
    assert os.WIFSIGNALED(status)
    assert not os.WIFEXITED(status)
    assert os.WTERMSIG(status) == signum
    return status


def exited_with(code: int) -> int:
    status = code << 8
    assert os.WIFEXITED(status)
    assert not os.WIFSIGNALED(status)
    assert os.WEXITSTATUS(status) == code
    return status


@pytest.mark.parametrize(
    ("status", "words"),
    [
        (killed_by(signal.SIGKILL), "SIGKILL (out of memory?)"),
        (killed_by(signal.SIGSEGV), "SIGSEGV (a crash in C code?)"),
        (killed_by(signal.SIGSEGV, core=True), "SIGSEGV (a crash in C code?)"),
        (killed_by(signal.SIGBUS), "SIGBUS (a crash in C code?)"),
        (killed_by(signal.SIGABRT, core=True), "SIGABRT (an abort in C code?)"),
        (killed_by(signal.SIGTERM), "SIGTERM"),
        (exited_with(exitcodes.APP_LOAD_FAILED), "exit code 3 (the app failed to import)"),
        (exited_with(exitcodes.USAGE), "exit code 2 (bad config)"),
        (exited_with(1), "exit code 1"),
        (exited_with(0), "exit code 0"),
        (exited_with(255), "exit code 255"),
    ],
)
def test_describe(status: int, words: str) -> None:
    assert exits.describe(status) == words


def test_describe_an_unnamed_signal_by_number() -> None:
    signum = signal.SIGRTMIN + 3  # real-time signals have no name of their own
    assert exits.describe(killed_by(signum)) == f"signal {signum}"


def test_describe_a_stopped_status_raw() -> None:
    status = 0x7F | (signal.SIGSTOP << 8)
    assert os.WIFSTOPPED(status)
    assert exits.describe(status) == f"status {status}"


@pytest.mark.parametrize(
    ("status", "short"),
    [
        (killed_by(signal.SIGKILL), "SIGKILL"),
        (killed_by(signal.SIGSEGV, core=True), "SIGSEGV"),
        (killed_by(signal.SIGTERM), "SIGTERM"),
        (exited_with(1), "exit code 1"),
        (exited_with(exitcodes.APP_LOAD_FAILED), "exit code 3"),
    ],
)
def test_cause_is_short_with_no_hint(status: int, short: str) -> None:
    assert exits.cause(status) == short


def test_cause_of_an_unnamed_signal() -> None:
    signum = signal.SIGRTMIN + 3
    assert exits.cause(killed_by(signum)) == f"signal {signum}"


def test_exit_code_of_an_exit() -> None:
    assert exits.exit_code(exited_with(0)) == 0
    assert exits.exit_code(exited_with(1)) == 1
    assert exits.exit_code(exited_with(exitcodes.APP_LOAD_FAILED)) == exitcodes.APP_LOAD_FAILED


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM, signal.SIGSEGV])
def test_exit_code_is_none_for_a_signal_death(signum: int) -> None:
    assert exits.exit_code(killed_by(signum)) is None
    assert exits.exit_code(killed_by(signum, core=True)) is None
