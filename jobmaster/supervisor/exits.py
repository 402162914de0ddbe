"""Turning a wait status into words an operator can act on."""

from __future__ import annotations

import os
import signal

from jobmaster import exitcodes

HINTS = {
    signal.SIGKILL: "out of memory?",
    signal.SIGSEGV: "a crash in C code?",
    signal.SIGBUS: "a crash in C code?",
    signal.SIGABRT: "an abort in C code?",
}
CODE_NAMES = {
    exitcodes.APP_LOAD_FAILED: "the app failed to import",
    exitcodes.USAGE: "bad config",
    exitcodes.CHILD_START_FAILED: "an on_child_start hook failed",
}


def describe(status: int) -> str:
    """``SIGKILL (out of memory?)``, ``exit code 3 (the app failed to import)``..."""
    if os.WIFSIGNALED(status):
        signum = os.WTERMSIG(status)
        try:
            name = signal.Signals(signum).name
        except ValueError:
            name = f"signal {signum}"
        hint = HINTS.get(signum)  # type: ignore[call-overload]
        return f"{name} ({hint})" if hint else name
    if os.WIFEXITED(status):
        code = os.WEXITSTATUS(status)
        meaning = CODE_NAMES.get(code)
        return f"exit code {code}" + (f" ({meaning})" if meaning else "")
    return f"status {status}"


def cause(status: int) -> str:
    """The short cause recorded on a crashed job: ``SIGKILL`` or ``exit code 1``."""
    if os.WIFSIGNALED(status):
        try:
            return signal.Signals(os.WTERMSIG(status)).name
        except ValueError:
            return f"signal {os.WTERMSIG(status)}"
    if os.WIFEXITED(status):
        return f"exit code {os.WEXITSTATUS(status)}"
    return f"status {status}"


def exit_code(status: int) -> int | None:
    """The exit code of a normal exit, else None."""
    return os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
