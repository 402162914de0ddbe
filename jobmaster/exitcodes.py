"""Exit codes of the ``jobmaster`` command and its processes: one table.

Reserved codes let the master tell "the app cannot even load" from an
ordinary crash, so a broken deploy halts instead of fork-looping. The
operator's commands use the same table, so a script can tell "no such job"
from "too late to cancel" from "Redis is down" without parsing a line.
``TABLE`` is what the README's exit-code table shows (a test compares them).
"""

from __future__ import annotations

OK = 0
# Redis unreachable (at a master's start, after waiting for it; or at any
# command's first round trip), a confirmation declined, or another failure
# at run time: worth retrying later, unlike 2.
RUNTIME_FAILURE = 1
USAGE = 2  # bad usage, input or config, detected before anything is forked or sent
APP_LOAD_FAILED = 3  # the app modules failed to import (in a child when preload is off)
# The master stopped gracefully because ``jobmaster ctl stop`` (a "stop" in
# its control list) asked: not 0, so ``Restart=on-failure`` brings it back
# unless the unit lists it in ``RestartPreventExitStatus`` (README "Deployment").
REMOTE_STOP = 4
# A child's ``on_child_start`` hook raised (lifecycle.py): a crash at start,
# so the master's crash-loop backoff applies. Only ever a child's code: the
# master goes on forking (slower and slower) until the hook works again.
CHILD_START_FAILED = 5
# What the command names (a jid, a set's entry, a batch, a process, a
# periodic entry) does not exist, or no longer: `status`, `cancel`, `show`...
NOT_FOUND = 6
# Understood, and it exists, but refused as it stands: a cancel of a job that
# already ended, an enqueue of a job that no worker registers (without --force).
REFUSED = 7

TABLE: tuple[tuple[int, str], ...] = (
    (OK, "ok"),
    (RUNTIME_FAILURE, "runtime failure: Redis unreachable, a confirmation declined"),
    (USAGE, "bad usage, input or config (before anything is forked or sent)"),
    (APP_LOAD_FAILED, "the app failed to import"),
    (REMOTE_STOP, "the master stopped gracefully as `jobmaster ctl stop` asked"),
    (CHILD_START_FAILED, "a child's (or lone worker's) `on_child_start` hook failed"),
    (NOT_FOUND, "what it names does not exist: a jid, an entry, a batch, a process"),
    (REFUSED, "refused as things stand: cancel of an ended job, enqueue of an unregistered job"),
)
